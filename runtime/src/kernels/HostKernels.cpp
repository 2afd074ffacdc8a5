//===- HostKernels.cpp - dispatch of exec-program kernels -----------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// runHostKernel looks the op up in OpVocabulary.def (operand and result
// counts) and in hostKernel (the function that runs it), resolves and checks
// the buffers, and runs the kernel and then its epilogue. Elementwise kernels
// run their epilogue in the same pass over memory; matmul applies it to each
// output block as soon as the block is computed; other kernels write their
// result and the epilogue then runs over it in place, in parallel chunks.
//
//===----------------------------------------------------------------------===//

#include "KernelSupport.h"

#include "partita/runtime/OpVocabulary.h"

#include <algorithm>
#include <unordered_map>

namespace partita::runtime {

using namespace kernels;

//===----------------------------------------------------------------------===//
// Attributes and checks
//===----------------------------------------------------------------------===//

namespace kernels {

Status Attributes::missing(const char *name, const char *kind) const {
  auto it = map.find(name);
  if (it == map.end())
    return Status::error(op + ": missing attribute '" + name + "'");
  return Status::error(op + ": attribute '" + name + "' is not " + kind);
}

Status Attributes::getInt(const char *name, int64_t &value) const {
  auto it = map.find(name);
  if (it == map.end() || it->second.value_case() != program::Attribute::kI)
    return missing(name, "an integer");
  value = it->second.i();
  return Status::ok();
}

Status Attributes::getFloat(const char *name, double &value) const {
  auto it = map.find(name);
  if (it != map.end() && it->second.value_case() == program::Attribute::kF) {
    value = it->second.f();
    return Status::ok();
  }
  if (it != map.end() && it->second.value_case() == program::Attribute::kI) {
    value = static_cast<double>(it->second.i());
    return Status::ok();
  }
  return missing(name, "a number");
}

Status Attributes::getBool(const char *name, bool &value,
                           bool absentValue) const {
  auto it = map.find(name);
  if (it == map.end()) {
    value = absentValue;
    return Status::ok();
  }
  if (it->second.value_case() != program::Attribute::kB)
    return missing(name, "a bool");
  value = it->second.b();
  return Status::ok();
}

Status Attributes::getString(const char *name, std::string &value) const {
  auto it = map.find(name);
  if (it == map.end() || it->second.value_case() != program::Attribute::kS)
    return missing(name, "a string");
  value = it->second.s();
  return Status::ok();
}

Status Attributes::getInts(const char *name,
                           std::vector<int64_t> &values) const {
  auto it = map.find(name);
  if (it == map.end() || it->second.value_case() != program::Attribute::kInts)
    return missing(name, "a list of integers");
  const auto &ints = it->second.ints().values();
  values.assign(ints.begin(), ints.end());
  return Status::ok();
}

Status KernelContext::expectShape(const Tensor &tensor,
                                  const std::vector<int64_t> &shape,
                                  const std::string &what) const {
  if (tensor.shape == shape)
    return Status::ok();
  return error(what + " has shape " + shapeString(tensor.shape) +
               ", expected " + shapeString(shape));
}

Status KernelContext::expectDType(const Tensor &tensor, DType dtype,
                                  const std::string &what) const {
  if (tensor.dtype == dtype)
    return Status::ok();
  return error(what + " has element type " + dtypeName(tensor.dtype) +
               ", expected " + dtypeName(dtype));
}

Status KernelContext::expectFloat(const Tensor &tensor,
                                  const std::string &what) const {
  if (isFloatDType(tensor.dtype))
    return Status::ok();
  return error(what + " has element type " + dtypeName(tensor.dtype) +
               ", expected f32, f16 or bf16");
}

Status normalizeAxis(const KernelContext &ctx, int64_t &axis, int64_t rank,
                     const char *what) {
  int64_t original = axis;
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    return ctx.error(std::string(what) + " " + std::to_string(original) +
                     " is out of range for rank " + std::to_string(rank));
  return Status::ok();
}

std::vector<int64_t> contiguousStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

bool BroadcastMap::build(const std::vector<int64_t> &from,
                         const std::vector<int64_t> &to) {
  dims.clear();
  strides.clear();
  identity = from == to;
  if (from.size() > to.size())
    return false;
  if (identity)
    return true;
  size_t lead = to.size() - from.size();
  std::vector<int64_t> fromStrides = contiguousStrides(from);
  for (size_t d = 0; d < to.size(); ++d) {
    int64_t size = d < lead ? 1 : from[d - lead];
    if (size != to[d] && size != 1)
      return false;
    if (to[d] == 1)
      continue; // Size-1 result dims move nothing.
    int64_t stride = size == 1 ? 0 : fromStrides[d - lead];
    // Merge with the previous dim when the pair walks memory as one.
    if (!dims.empty() && strides.back() == stride * to[d]) {
      dims.back() *= to[d];
      strides.back() = stride;
      continue;
    }
    dims.push_back(to[d]);
    strides.push_back(stride);
  }
  return dims.size() <= kMaxRank;
}

} // namespace kernels

//===----------------------------------------------------------------------===//
// The op table
//===----------------------------------------------------------------------===//

namespace {

using KernelFn = Status (*)(KernelContext &);

/// The host kernel of `op`: every elementwise op runs as a chain
/// (Elementwise.cpp), the others by name. Null where the host has none.
KernelFn hostKernel(const OpInfo &op) {
  if (op.isElementwise())
    return runElementwise;
  static const std::unordered_map<std::string_view, KernelFn> kernels = {
      {"reduce", runReduce},
      {"cumsum", runCumsum},
      {"softmax", runSoftmax},
      {"log_softmax", runLogSoftmax},
      {"layer_norm", runLayerNorm},
      {"rms_norm", runRmsNorm},
      {"matmul", runMatmul},
      {"dequantize", runDequantize},
      {"quantized_matmul", runQuantizedMatmul},
      {"attention", runAttention},
      {"attention_partial", runAttentionPartial},
      {"attention_grad", runAttentionGrad},
      {"rope", runRope},
      {"moe", runMoe},
      {"embedding", runEmbedding},
      {"gather", runGather},
      {"transpose", runTranspose},
      {"broadcast_to", runBroadcastTo},
      {"slice", runSlice},
      {"concat", runConcat},
      {"split", runSplit},
      {"copy", runCopy},
      {"kv_cache_write", runKvCacheWrite}};
  auto it = kernels.find(op.name);
  return it == kernels.end() ? nullptr : it->second;
}

struct HostOp {
  const OpInfo *info;
  KernelFn run;
};

/// The ops of OpVocabulary.def, each with its host kernel.
const std::unordered_map<std::string_view, HostOp> &opTable() {
  static const std::unordered_map<std::string_view, HostOp> table = [] {
    std::unordered_map<std::string_view, HostOp> t;
    for (const OpInfo &op : kOps)
      if (KernelFn run = hostKernel(op))
        t[op.name] = {&op, run};
    return t;
  }();
  return table;
}

/// Resolves `id` and checks that the view is usable.
Status resolve(const KernelContext &ctx, const BufferResolver &buffers,
               int32_t id, const std::string &what, Tensor &tensor) {
  tensor = buffers(id);
  if (dtypeSize(tensor.dtype) == 0)
    return ctx.error(what + " (buffer " + std::to_string(id) +
                     ") has no element type");
  if (tensor.shape.size() > kMaxRank)
    return ctx.error(what + " has rank " + std::to_string(tensor.shape.size()) +
                     ", above " + std::to_string(kMaxRank));
  for (int64_t d : tensor.shape)
    if (d < 0)
      return ctx.error(what + " has a negative dimension " +
                       shapeString(tensor.shape));
  if (!tensor.data && tensor.numElements() != 0)
    return ctx.error(what + " (buffer " + std::to_string(id) +
                     ") is not bound to memory");
  return Status::ok();
}

} // namespace

Status runHostKernel(const program::Kernel &kernel,
                     const BufferResolver &buffers, ThreadPool &pool) {
  const auto &table = opTable();
  auto it = table.find(kernel.op());
  if (it == table.end())
    return Status::error("unknown kernel op '" + kernel.op() + "'");
  const OpInfo &info = *it->second.info;
  KernelFn run = it->second.run;
  KernelContext ctx{kernel, {},   {},
                    {},     pool, Attributes(kernel.attributes(), kernel.op())};

  int numOperands = kernel.operands_size();
  if (numOperands < info.minOperands ||
      (info.maxOperands >= 0 && numOperands > info.maxOperands))
    return ctx.error("expected " +
                     countRange(info.minOperands, info.maxOperands) +
                     " operands, got " + std::to_string(numOperands));
  int numResults = kernel.results_size();
  if (numResults < info.minResults ||
      (info.maxResults >= 0 && numResults > info.maxResults))
    return ctx.error("expected " +
                     countRange(info.minResults, info.maxResults) +
                     " results, got " + std::to_string(numResults));

  ctx.operands.resize(numOperands);
  for (int i = 0; i < numOperands; ++i)
    PARTITA_RETURN_IF_ERROR(resolve(ctx, buffers, kernel.operands(i),
                                    "operand " + std::to_string(i),
                                    ctx.operands[i]));
  ctx.results.resize(numResults);
  for (int i = 0; i < numResults; ++i)
    PARTITA_RETURN_IF_ERROR(resolve(ctx, buffers, kernel.results(i),
                                    "result " + std::to_string(i),
                                    ctx.results[i]));

  ctx.epilogueOperands.resize(kernel.epilogue_size());
  for (int i = 0; i < kernel.epilogue_size(); ++i) {
    int32_t id = kernel.epilogue(i).operand();
    if (id >= 0)
      PARTITA_RETURN_IF_ERROR(resolve(ctx, buffers, id,
                                      "the operand of epilogue step " +
                                          std::to_string(i) + " (" +
                                          kernel.epilogue(i).op() + ")",
                                      ctx.epilogueOperands[i]));
  }

  if (info.isElementwise() || kernel.epilogue_size() == 0)
    return run(ctx);

  // The kernel computes its own result type; when a cast or compare in the
  // epilogue changes it, that intermediate lives in scratch memory.
  Tensor dest = ctx.results[0];
  DType natural =
      epilogueChangesType(kernel) ? naturalResultType(ctx) : dest.dtype;
  std::vector<char> scratch;
  if (natural != dest.dtype) {
    if (dtypeSize(natural) == 0)
      return ctx.error("cannot tell the element type before the epilogue");
    scratch.resize(static_cast<size_t>(dest.numElements()) *
                   dtypeSize(natural));
    ctx.results[0].dtype = natural;
    ctx.results[0].data = scratch.data();
  }
  ctx.mayFuseEpilogue = natural == dest.dtype;
  PARTITA_RETURN_IF_ERROR(run(ctx));
  if (ctx.epilogueDone)
    return Status::ok();
  return runEpilogue(ctx, ctx.results[0], dest);
}

} // namespace partita::runtime
