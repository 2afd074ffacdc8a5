//===- Support.cpp - buffers, offsets and epilogue chains -----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The pieces every emitter shares. The epilogue chain follows the host's
// (runtime/src/kernels/Elementwise.cpp) step for step: the same type rules,
// the same cast targets, and rounding to the step's type after each step.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

#include "partita/runtime/OpVocabulary.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace partita::target::cuda {

//===----------------------------------------------------------------------===//
// Types and buffers
//===----------------------------------------------------------------------===//

int64_t BufferView::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

bool isFloat(DType dtype) {
  return dtype == program::F32 || dtype == program::F16 ||
         dtype == program::BF16;
}

bool isInteger(DType dtype) {
  return dtype == program::I64 || dtype == program::I32 ||
         dtype == program::I8 || dtype == program::BOOL;
}

const char *cudaType(DType dtype) {
  switch (dtype) {
  case program::F32:
    return "float";
  case program::F16:
    return "__half";
  case program::BF16:
    return "__nv_bfloat16";
  case program::I64:
    return "long long";
  case program::I32:
    return "int";
  case program::I8:
    return "signed char";
  case program::BOOL:
    return "unsigned char";
  default:
    return "void";
  }
}

std::string shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string Signature::addInput(const BufferView &buffer,
                                const std::string &name) {
  params.push_back(std::string("const ") + cudaType(buffer.dtype) + " *" +
                   name);
  ids.push_back(buffer.id);
  return name;
}

std::string Signature::addOutput(const BufferView &buffer,
                                 const std::string &name) {
  params.push_back(std::string(cudaType(buffer.dtype)) + " *" + name);
  ids.push_back(buffer.id);
  return name;
}

std::string Signature::parameters() const { return llvm::join(params, ", "); }

//===----------------------------------------------------------------------===//
// KernelContext
//===----------------------------------------------------------------------===//

llvm::Error KernelContext::error(const llvm::Twine &message) const {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 (op() + " at " +
                                  (location.empty() ? "<unknown>" : location) +
                                  ": " + message)
                                     .str());
}

llvm::Expected<BufferView> KernelContext::buffer(int32_t id) const {
  if (id < 0 || id >= program.buffers_size())
    return error("buffer " + llvm::Twine(id) + " does not exist");
  const program::Buffer &b = program.buffers(id);
  BufferView view;
  view.id = id;
  view.dtype = b.type().dtype();
  view.shape.assign(b.type().shape().begin(), b.type().shape().end());
  if (dtypeSize(view.dtype) == 0)
    return error("buffer " + llvm::Twine(id) + " has no element type");
  // A view has its root's address plus its offsets: follow the aliases.
  const program::Buffer *root = &b;
  uint64_t offset = 0;
  for (int hops = 0; root->kind() == program::Buffer::ALIAS; ++hops) {
    if (hops > program.buffers_size() || root->alias_of() < 0 ||
        root->alias_of() >= program.buffers_size())
      return error("buffer " + llvm::Twine(id) + " aliases nothing");
    offset += root->alias_offset();
    root = &program.buffers(root->alias_of());
  }
  if (root->kind() == program::Buffer::ACTIVATION)
    offset += root->arena_offset();
  view.aligned16 = offset % 16 == 0;
  return view;
}

llvm::Expected<BufferView> KernelContext::operand(int index) const {
  if (index >= kernel.operands_size())
    return error("missing operand " + llvm::Twine(index));
  return buffer(kernel.operands(index));
}

llvm::Expected<BufferView> KernelContext::result(int index) const {
  if (index >= kernel.results_size())
    return error("missing result " + llvm::Twine(index));
  return buffer(kernel.results(index));
}

llvm::Error KernelContext::expectCounts(int operands, int results) const {
  if (kernel.operands_size() != operands || kernel.results_size() != results)
    return error(llvm::formatv("expected {0} operands and {1} results, got {2} "
                               "and {3}",
                               operands, results, kernel.operands_size(),
                               kernel.results_size()));
  return llvm::Error::success();
}

llvm::Expected<int64_t> KernelContext::getInt(llvm::StringRef name) const {
  auto it = kernel.attributes().find(name.str());
  if (it == kernel.attributes().end() ||
      it->second.value_case() != program::Attribute::kI)
    return error("missing integer attribute '" + name + "'");
  return it->second.i();
}

llvm::Expected<double> KernelContext::getFloat(llvm::StringRef name) const {
  auto it = kernel.attributes().find(name.str());
  if (it != kernel.attributes().end()) {
    if (it->second.value_case() == program::Attribute::kF)
      return it->second.f();
    if (it->second.value_case() == program::Attribute::kI)
      return static_cast<double>(it->second.i());
  }
  return error("missing float attribute '" + name + "'");
}

llvm::Expected<bool> KernelContext::getBool(llvm::StringRef name) const {
  auto it = kernel.attributes().find(name.str());
  if (it == kernel.attributes().end())
    return false;
  if (it->second.value_case() != program::Attribute::kB)
    return error("attribute '" + name + "' is not a bool");
  return it->second.b();
}

llvm::Expected<std::string>
KernelContext::getString(llvm::StringRef name, llvm::StringRef absent) const {
  auto it = kernel.attributes().find(name.str());
  if (it == kernel.attributes().end()) {
    if (!absent.empty())
      return absent.str();
    return error("missing string attribute '" + name + "'");
  }
  if (it->second.value_case() != program::Attribute::kS)
    return error("attribute '" + name + "' is not a string");
  return it->second.s();
}

llvm::Expected<std::vector<int64_t>>
KernelContext::getInts(llvm::StringRef name) const {
  auto it = kernel.attributes().find(name.str());
  if (it == kernel.attributes().end() ||
      it->second.value_case() != program::Attribute::kInts)
    return error("missing ints attribute '" + name + "'");
  return std::vector<int64_t>(it->second.ints().values().begin(),
                              it->second.ints().values().end());
}

static std::string stepSummary(const program::ElementwiseStep &step) {
  std::string s = step.op();
  auto it = step.attributes().find(step.op() == "gelu" ? "approximation"
                                                       : "direction");
  if (it != step.attributes().end() &&
      it->second.value_case() == program::Attribute::kS)
    s += "(" + it->second.s() + ")";
  return s;
}

std::string KernelContext::summary() const {
  std::string s = op();
  if (op() == "gelu" || op() == "compare") {
    auto it = kernel.attributes().find(op() == "gelu" ? "approximation"
                                                      : "direction");
    if (it != kernel.attributes().end() &&
        it->second.value_case() == program::Attribute::kS)
      s += "(" + it->second.s() + ")";
  }
  if (kernel.epilogue_size() == 0)
    return s;
  s += " epilogue: ";
  for (int i = 0; i < kernel.epilogue_size(); ++i)
    s += (i ? ", " : "") + stepSummary(kernel.epilogue(i));
  return s;
}

std::optional<double> KernelContext::constantScalar(int32_t id) const {
  if (id < 0 || id >= program.buffers_size())
    return std::nullopt;
  const program::Buffer &b = program.buffers(id);
  if (b.kind() != program::Buffer::CONSTANT)
    return std::nullopt;
  int64_t n = 1;
  for (int64_t d : b.type().shape())
    n *= d;
  size_t size = dtypeSize(b.type().dtype());
  if (n != 1 || size == 0 || b.data().size() != size)
    return std::nullopt;
  const char *p = b.data().data();
  switch (b.type().dtype()) {
  case program::F32: {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case program::I64: {
    int64_t v;
    std::memcpy(&v, p, 8);
    return static_cast<double>(v);
  }
  case program::I32: {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  default:
    return std::nullopt; // f16/bf16 exponents: pow stays a pow.
  }
}

//===----------------------------------------------------------------------===//
// Offsets
//===----------------------------------------------------------------------===//

std::string literal(int64_t value) {
  if (value >= 0 && value < (int64_t(1) << 31))
    return std::to_string(value);
  return std::to_string(value) + "LL";
}

std::string floatLiteral(double value) {
  float f = static_cast<float>(value);
  if (std::isinf(f))
    return f > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  if (std::isnan(f))
    return "__int_as_float(0x7fc00000)";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.9ef", static_cast<double>(f));
  return buffer;
}

std::string indexType(int64_t count) {
  return count < (int64_t(1) << 31) ? "unsigned" : "unsigned long long";
}

llvm::SmallVector<int64_t, 6> contiguousStrides(llvm::ArrayRef<int64_t> shape) {
  llvm::SmallVector<int64_t, 6> strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    strides[d - 1] = strides[d] * shape[d];
  return strides;
}

std::string stridedOffset(llvm::ArrayRef<int64_t> shape,
                          llvm::ArrayRef<int64_t> strides,
                          const std::string &index) {
  // Merge dims that walk memory as one (or repeat alike), dropping size-1
  // dims, innermost first.
  struct Group {
    int64_t size, stride;
  };
  llvm::SmallVector<Group> groups; // Innermost first.
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1)
      continue;
    if (!groups.empty() &&
        groups.back().stride * groups.back().size == strides[d] &&
        (strides[d] != 0 || groups.back().stride == 0)) {
      groups.back().size *= shape[d];
      continue;
    }
    groups.push_back({shape[d], strides[d]});
  }
  std::string expr;
  int terms = 0;
  int64_t inner = 1;
  for (size_t g = 0; g < groups.size(); ++g) {
    const Group &group = groups[g];
    bool outermost = g + 1 == groups.size();
    if (group.stride != 0) {
      std::string term = index;
      if (inner != 1)
        term = "(" + term + " / " + literal(inner) + ")";
      if (!outermost)
        term = "(" + term + " % " + literal(group.size) + ")";
      if (group.stride != 1)
        term = term + " * " + literal(group.stride);
      expr = expr.empty() ? term : term + " + " + expr;
      ++terms;
    }
    inner *= group.size;
  }
  return expr.empty() ? "0" : terms == 1 ? expr : "(" + expr + ")";
}

std::string broadcastOffset(llvm::ArrayRef<int64_t> from,
                            llvm::ArrayRef<int64_t> to,
                            const std::string &index) {
  llvm::SmallVector<int64_t, 6> fromStrides = contiguousStrides(from);
  llvm::SmallVector<int64_t, 6> strides(to.size(), 0);
  size_t lead = to.size() - from.size();
  for (size_t d = lead; d < to.size(); ++d)
    strides[d] = from[d - lead] == 1 ? 0 : fromStrides[d - lead];
  return stridedOffset(to, strides, index);
}

static bool broadcasts(llvm::ArrayRef<int64_t> from,
                       llvm::ArrayRef<int64_t> to) {
  return runtime::broadcastsTo(from.data(), from.size(), to.data(), to.size());
}

//===----------------------------------------------------------------------===//
// Elementwise chains
//===----------------------------------------------------------------------===//

bool isElementwiseOp(llvm::StringRef op) {
  const runtime::OpInfo *info = runtime::lookupOp(op);
  return info && (info->isElementwise() || info->kind == runtime::OpKind::Copy);
}

static bool isBinaryOp(llvm::StringRef op) {
  const runtime::OpInfo *info = runtime::lookupOp(op);
  return info && info->kind == runtime::OpKind::Binary;
}

llvm::Expected<std::vector<ChainStep>> epilogueSteps(const KernelContext &ctx,
                                                     Signature &sig) {
  std::vector<ChainStep> steps;
  const program::Kernel &kernel = ctx.getKernel();
  for (int i = 0; i < kernel.epilogue_size(); ++i) {
    const program::ElementwiseStep &step = kernel.epilogue(i);
    ChainStep chain;
    chain.op = step.op();
    chain.attributes = &step.attributes();
    chain.operandFirst = step.operand_first();
    if (step.operand() >= 0) {
      auto view = ctx.buffer(step.operand());
      if (!view)
        return view.takeError();
      chain.operand = *view;
      chain.operandName = sig.addInput(*view, "e" + std::to_string(i));
    }
    steps.push_back(std::move(chain));
  }
  return steps;
}

namespace {

/// Emits a chain into `out`: the state is the current element type.
class ChainEmitter {
public:
  ChainEmitter(const KernelContext &ctx, const BufferView &result,
               const std::string &index, const std::string &indent,
               std::string &out, const ChainIO &io)
      : ctx(ctx), result(result), index(index), indent(indent), out(out),
        io(io) {}

  llvm::Error emit(llvm::ArrayRef<ChainStep> steps, DType start);

private:
  void line(const std::string &text) { out += indent + text + "\n"; }
  std::string load(const BufferView &view, const std::string &name) {
    auto it = io.operandValues.find(name);
    if (it != io.operandValues.end())
      return it->second;
    return std::string(isFloat(view.dtype) ? "pt::ldf(" : "pt::ldi(") + name +
           " + " + broadcastOffset(view.shape, result.shape, index) + ")";
  }
  llvm::Error needOperand(const ChainStep &step, DType current);
  llvm::Expected<DType> castTarget(llvm::ArrayRef<ChainStep> steps, size_t at);
  llvm::Expected<std::string> stepString(const ChainStep &step,
                                         llvm::StringRef name) const;
  llvm::Expected<bool> stepBool(const ChainStep &step,
                                llvm::StringRef name) const;

  const KernelContext &ctx;
  const BufferView &result;
  std::string index, indent;
  std::string &out;
  const ChainIO &io;
};

} // namespace

llvm::Expected<std::string>
ChainEmitter::stepString(const ChainStep &step, llvm::StringRef name) const {
  if (!step.attributes)
    return "";
  auto it = step.attributes->find(name.str());
  if (it == step.attributes->end())
    return "";
  if (it->second.value_case() != program::Attribute::kS)
    return ctx.error("step '" + step.op + "': attribute '" + name +
                     "' is not a string");
  return it->second.s();
}

llvm::Expected<bool> ChainEmitter::stepBool(const ChainStep &step,
                                            llvm::StringRef name) const {
  if (!step.attributes)
    return false;
  auto it = step.attributes->find(name.str());
  if (it == step.attributes->end())
    return false;
  if (it->second.value_case() != program::Attribute::kB)
    return ctx.error("step '" + step.op + "': attribute '" + name +
                     "' is not a bool");
  return it->second.b();
}

llvm::Error ChainEmitter::needOperand(const ChainStep &step, DType current) {
  if (!step.operand)
    return ctx.error("step '" + step.op + "' needs an operand");
  if (isFloat(step.operand->dtype) != isFloat(current))
    return ctx.error("step '" + step.op + "' mixes " + dtypeName(current) +
                     " with an operand of " + dtypeName(step.operand->dtype));
  if (!broadcasts(step.operand->shape, result.shape))
    return ctx.error("the operand of step '" + step.op + "' has shape " +
                     shapeString(step.operand->shape) +
                     ", which does not broadcast to " +
                     shapeString(result.shape));
  return llvm::Error::success();
}

// The host's rule: what the next step with an operand needs, or the result
// buffer's type when no later cast or compare changes the type again.
llvm::Expected<DType> ChainEmitter::castTarget(llvm::ArrayRef<ChainStep> steps,
                                               size_t at) {
  for (size_t k = at + 1; k < steps.size(); ++k) {
    const runtime::OpInfo *info = runtime::lookupOp(steps[k].op);
    if (info && info->kind == runtime::OpKind::Cast)
      break;
    if (info && info->stepTakesOperand() && steps[k].operand)
      return steps[k].operand->dtype;
  }
  for (size_t k = at + 1; k < steps.size(); ++k) {
    const runtime::OpInfo *info = runtime::lookupOp(steps[k].op);
    if (info && info->changesElementType())
      return ctx.error("cannot tell the target type of the cast in step " +
                       llvm::Twine(at));
  }
  return result.dtype;
}

llvm::Error ChainEmitter::emit(llvm::ArrayRef<ChainStep> steps, DType start) {
  DType current = start;
  for (size_t at = 0; at < steps.size(); ++at) {
    const ChainStep &step = steps[at];
    const std::string &op = step.op;
    bool fl = isFloat(current);
    DType outType = current;
    auto unsupported = [&]() {
      return ctx.error("step '" + op + "' does not apply to " +
                       dtypeName(current));
    };
    const runtime::OpInfo *info = runtime::lookupOp(op);
    if (info && !(fl ? info->computesOnFloats() : info->computesOnIntegers()))
      return unsupported();
    if (isBinaryOp(op)) {
      if (auto err = needOperand(step, current))
        return err;
      std::string t = load(*step.operand, step.operandName);
      std::string v = fl ? "f" : "n";
      std::string a = step.operandFirst ? t : v, b = step.operandFirst ? v : t;
      std::string expr;
      if (fl) {
        if (op == "add")
          expr = a + " + " + b;
        else if (op == "sub")
          expr = a + " - " + b;
        else if (op == "mul")
          expr = a + " * " + b;
        else if (op == "div")
          expr = a + " / " + b;
        else if (op == "max")
          expr = "pt::fmax_nan(" + a + ", " + b + ")";
        else if (op == "min")
          expr = "pt::fmin_nan(" + a + ", " + b + ")";
        else if (op == "pow") {
          // x^2 and x^3 are products, as on the host.
          std::optional<double> e = ctx.constantScalar(step.operand->id);
          if (!step.operandFirst && e && (*e == 2.0 || *e == 3.0))
            expr = *e == 2.0 ? "f * f" : "f * f * f";
          else
            expr = "powf(" + a + ", " + b + ")";
        } else
          return unsupported();
        line("f = " + expr + ";");
      } else {
        static const std::pair<const char *, const char *> calls[] = {
            {"add", "pt::iadd"}, {"sub", "pt::isub"}, {"mul", "pt::imul"},
            {"div", "pt::idiv"}, {"pow", "pt::ipow"}, {"max", "pt::imax"},
            {"min", "pt::imin"}};
        for (auto [name, call] : calls)
          if (op == name)
            expr = std::string(call) + "(" + a + ", " + b + ")";
        if (op == "and")
          expr = a + " & " + b;
        else if (op == "or")
          expr = a + " | " + b;
        else if (op == "xor")
          expr = a + " ^ " + b;
        line("n = " + expr + ";");
      }
    } else if (op == "compare") {
      auto direction = stepString(step, "direction");
      if (!direction)
        return direction.takeError();
      static const std::pair<const char *, const char *> ops[] = {
          {"eq", "=="}, {"ne", "!="}, {"lt", "<"},
          {"le", "<="}, {"gt", ">"},  {"ge", ">="}};
      const char *cmp = nullptr;
      for (auto [name, c] : ops)
        if (*direction == name)
          cmp = c;
      if (!cmp)
        return ctx.error("unknown compare direction '" + *direction + "'");
      if (auto err = needOperand(step, current))
        return err;
      std::string t = load(*step.operand, step.operandName);
      std::string v = fl ? "f" : "n";
      std::string a = step.operandFirst ? t : v, b = step.operandFirst ? v : t;
      line("n = (" + a + " " + cmp + " " + b + ") ? 1 : 0;");
      outType = program::BOOL;
    } else if (op == "cast") {
      auto target = castTarget(steps, at);
      if (!target)
        return target.takeError();
      outType = *target;
      if (fl && outType == program::BOOL)
        line("n = f != 0.0f;");
      else if (fl && isInteger(outType))
        line("n = pt::f2i(f);");
      else if (!fl && isFloat(outType))
        line("f = (float)n;");
      auto saturate = stepBool(step, "saturate");
      if (!saturate)
        return saturate.takeError();
      if (*saturate && (!fl || !isFloat(outType)))
        return ctx.error("a saturating cast converts a float to a float, not " +
                         dtypeName(current) + " to " + dtypeName(outType));
      // Finite values beyond the target's range keep their sign at its
      // largest value; infinities and NaN stay (the host's saturateLoop).
      if (*saturate && outType != program::F32)
        line(std::string("f = pt::saturate(f, ") +
             (outType == program::F16 ? "65504.0f" : "3.38953139e38f") + ");");
    } else if (op == "where") {
      // The where kernel's own step: the value holds on_true.
      if (!step.operand || step.operand->dtype != program::BOOL)
        return ctx.error("the condition must be bool");
      if (!step.onFalse || isFloat(step.onFalse->dtype) != fl)
        return ctx.error("on_true and on_false must have the same kind of "
                         "element type");
      if (!broadcasts(step.operand->shape, result.shape) ||
          !broadcasts(step.onFalse->shape, result.shape))
        return ctx.error("the operands do not broadcast to the result " +
                         shapeString(result.shape));
      std::string v = fl ? "f" : "n";
      line(v + " = " + load(*step.operand, step.operandName) + " ? " + v +
           " : " + load(*step.onFalse, step.onFalseName) + ";");
    } else if (op == "copy") {
      // The copy kernel's own step: nothing to compute.
    } else {
      std::string name = op;
      if (op == "gelu") {
        auto approximation = stepString(step, "approximation");
        if (!approximation)
          return approximation.takeError();
        if (approximation->empty() || *approximation == "none")
          name = "gelu_erf";
        else if (*approximation == "tanh")
          name = "gelu_tanh";
        else
          return ctx.error("unknown gelu approximation '" + *approximation +
                           "'");
      }
      static const std::pair<const char *, const char *> floatOps[] = {
          {"neg", "-f"},
          {"abs", "fabsf(f)"},
          {"exp", "expf(f)"},
          {"log", "logf(f)"},
          {"sqrt", "sqrtf(f)"},
          {"rsqrt", "pt::rsqrt_exact(f)"},
          {"reciprocal", "1.0f / f"},
          {"tanh", "tanhf(f)"},
          {"erf", "erff(f)"},
          // Accurate over the whole range (no --use_fast_math): rotary
          // angles reach thousands of radians.
          {"sin", "sinf(f)"},
          {"cos", "cosf(f)"},
          {"sigmoid", "pt::sigmoid(f)"},
          {"relu", "pt::relu(f)"},
          {"silu", "pt::silu(f)"},
          {"gelu_erf", "pt::gelu_erf(f)"},
          {"gelu_tanh", "pt::gelu_tanh(f)"}};
      static const std::pair<const char *, const char *> intOps[] = {
          {"neg", "pt::isub(0, n)"},
          {"abs", "n < 0 ? pt::isub(0, n) : n"},
          {"relu", "n < 0 ? 0 : n"}};
      std::string expr;
      if (fl) {
        for (auto [opName, e] : floatOps)
          if (name == opName)
            expr = e;
      } else if (name == "not") {
        // Logical on bool, bitwise on integers.
        expr = current == program::BOOL ? "n == 0" : "~n";
      } else {
        for (auto [opName, e] : intOps)
          if (name == opName)
            expr = e;
      }
      if (expr.empty())
        return isElementwiseOp(op)
                   ? unsupported()
                   : ctx.error("'" + op + "' is not an elementwise op");
      line(std::string(fl ? "f" : "n") + " = " + expr + ";");
    }
    switch (outType) {
    case program::F16:
      line("f = pt::round_f16(f);");
      break;
    case program::BF16:
      line("f = pt::round_bf16(f);");
      break;
    case program::I32:
      line("n = pt::wrap_i32(n);");
      break;
    case program::I8:
      line("n = pt::wrap_i8(n);");
      break;
    case program::BOOL:
      line("n = pt::wrap_bool(n);");
      break;
    default:
      break;
    }
    current = outType;
  }
  if (current != result.dtype)
    return ctx.error("the computation yields " + dtypeName(current) +
                     " but the result buffer holds " + dtypeName(result.dtype));
  return llvm::Error::success();
}

llvm::Error emitChain(const KernelContext &ctx, llvm::ArrayRef<ChainStep> steps,
                      DType start, const BufferView &result,
                      const std::string &resultName, const std::string &index,
                      const std::string &indent, std::string &out,
                      const ChainIO &io) {
  ChainEmitter emitter(ctx, result, index, indent, out, io);
  if (auto err = emitter.emit(steps, start))
    return err;
  if (!io.store.empty()) {
    out += indent + io.store + "\n";
    return llvm::Error::success();
  }
  out += indent + (isFloat(result.dtype)
                       ? "pt::stf(" + resultName + " + " + index + ", f);\n"
                       : "pt::sti(" + resultName + " + " + index + ", n);\n");
  return llvm::Error::success();
}

llvm::Expected<std::string> emitFloatSink(const KernelContext &ctx,
                                          const BufferView &result,
                                          Signature &sig, std::string &init) {
  // What the kernel computes: operand 0's type, or a dequantized weight's,
  // its scales'.
  auto natural = ctx.operand(ctx.op() == "dequantize" ? 1 : 0);
  if (!natural)
    return natural.takeError();
  DType start = natural->dtype;
  std::string resultName = sig.addOutput(result, "r0");
  if (ctx.getKernel().epilogue_size() == 0) {
    if (start != result.dtype)
      return ctx.error("the result holds " + dtypeName(result.dtype) +
                       ", the kernel computes " + dtypeName(start));
    init = std::string("pt::StoreSink<") + cudaType(result.dtype) + ">{" +
           resultName + "}";
    return std::string();
  }
  std::vector<std::string> members = {std::string(cudaType(result.dtype)) +
                                      " *" + resultName};
  std::vector<std::string> names = {resultName};
  auto steps = epilogueSteps(ctx, sig);
  if (!steps)
    return steps.takeError();
  for (const ChainStep &step : *steps)
    if (step.operand) {
      members.push_back(std::string("const ") + cudaType(step.operand->dtype) +
                        " *" + step.operandName);
      names.push_back(step.operandName);
    }
  std::string index = result.numElements() < (int64_t(1) << 31)
                          ? "(unsigned)i"
                          : "(unsigned long long)i";
  std::string body;
  std::string round;
  if (start == program::F16)
    round = "pt::round_f16(v)";
  else if (start == program::BF16)
    round = "pt::round_bf16(v)";
  else
    round = "v";
  if (auto err = emitChain(ctx, *steps, start, result, resultName, index,
                           "    ", body))
    return std::move(err);
  std::string s;
  s += "struct @NAME@_sink {\n";
  for (const std::string &m : members)
    s += "  " + m + ";\n";
  s += "  __device__ __forceinline__ void operator()(pt::u64 i, float v) "
       "const {\n";
  s += "    [[maybe_unused]] float f = " + round + ";\n";
  s += "    [[maybe_unused]] long long n = 0;\n";
  s += body;
  s += "  }\n";
  s += "  template <int V>\n";
  s += "  __device__ __forceinline__ void vec(pt::u64 i, const float (&v)[V]) "
       "const {\n";
  s += "#pragma unroll\n";
  s += "    for (int k = 0; k < V; ++k)\n";
  s += "      (*this)(i + k, v[k]);\n";
  s += "  }\n";
  s += "};\n";
  init = "@NAME@_sink{" + llvm::join(names, ", ") + "}";
  return s;
}

} // namespace partita::target::cuda
