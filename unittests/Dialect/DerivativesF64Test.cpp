//===- DerivativesF64Test.cpp - vjp rules against fp64 differences --------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Checks each vector-Jacobian product of NNDerivatives.cpp in fp64. Each
// case of DerivativeCases.cpp (loss sum(y * u), u a random cotangent) and
// its partita-differentiate'd form are evaluated in double by a reference
// interpreter (NNInterpreter.h: plain loops, not the runtime's kernels),
// and the gradient must match the central difference
// (L(p + h v) - L(p - h v)) / 2h, h = 1e-5, within 1e-6 relative (+1e-9,
// and 2^-23 of the gradient's size for the f32 constants the rules build):
// along three random directions v, and coordinate by coordinate for every
// parameter of at most 256 elements (a rule wrong in one coordinate can
// cancel along a random direction). DerivativesTest's
// InterpreterAgreesWithTheRuntime holds the interpreter to the kernels.
//
// The cases are held to the op vocabulary (OpVocabulary.def) by reading
// their IR, not a list: every op of the table with a rule must be
// differentiated by a case, with every combination of its Bool and String
// attributes and of whether an optional Float one is given, every class of
// its Int and Ints attributes (an axis first, in the middle and last; a
// reduction over one axis, some and all; ...), and a cotangent through
// each float operand. An op without a rule must be listed in kWithoutRule,
// with why. So an op or an attribute added to the table fails here until a
// case checks its rule.
//
//===----------------------------------------------------------------------===//

#include "DerivativeCases.h"
#include "NNInterpreter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "partita/Dialect/NN/Transforms/Passes.h"
#include "partita/Target/ExecProgram/ExecProgram.h"
#include "partita/runtime/OpVocabulary.h"
#include "llvm/ADT/DenseSet.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::test;
namespace runtime = ::partita::runtime;
namespace program = ::partita::program;

namespace {

/// The central difference's step, and the agreement asked of it: in
/// double, truncation (h^2) and rounding (1e-16 / h) both stay far below.
constexpr double kStep = 1e-5;
constexpr double kRelative = 1e-6, kAbsolute = 1e-9;
/// The constants a rule builds (a mean's 1/n, erf's 2/sqrt(pi)) are f32,
/// as the IR is, so each term of a gradient carries up to 2^-24 of itself:
/// where terms cancel (to 1e-3 of their size in `reductions`) that is
/// more than kRelative of the result. The tolerance grants 2^-23 of the
/// gradient's size (for a coordinate, the parameter's largest element; for
/// a direction, sum |g_i v_i|); a wrong rule is off by the size itself.
constexpr double kConstantRounding = 0x1p-23;
/// Parameters up to this many elements are checked coordinate by
/// coordinate as well.
constexpr int64_t kCoordinateLimit = 256;

/// The largest disagreements of the run, reported at its end.
struct Worst {
  double relative = 0, absolute = 0, ofTolerance = 0;
  std::string relativeWhere, absoluteWhere, ofToleranceWhere;
  int64_t comparisons = 0;
};
Worst worst;

struct WorstReport : testing::Environment {
  void TearDown() override {
    if (worst.comparisons)
      std::printf(
          "fp64 derivatives: %lld comparisons; worst relative error %.3g "
          "(%s), worst absolute error where below 1e-3 %.3g (%s), closest "
          "to the tolerance %.3g of it (%s)\n",
          static_cast<long long>(worst.comparisons), worst.relative,
          worst.relativeWhere.c_str(), worst.absolute,
          worst.absoluteWhere.c_str(), worst.ofTolerance,
          worst.ofToleranceWhere.c_str());
  }
};
[[maybe_unused]] testing::Environment *const report =
    testing::AddGlobalTestEnvironment(new WorstReport);

/// Whether the analytic and numeric derivatives agree, for a gradient of
/// size `magnitude`; records how well.
bool agree(double analytic, double numeric, double magnitude,
           const std::string &where) {
  double error = std::fabs(analytic - numeric);
  double scale = std::max(std::fabs(analytic), std::fabs(numeric));
  double tolerance =
      kRelative * scale + kConstantRounding * magnitude + kAbsolute;
  ++worst.comparisons;
  if (scale >= 1e-3 && error / scale > worst.relative) {
    worst.relative = error / scale;
    worst.relativeWhere = where;
  }
  if (scale < 1e-3 && error > worst.absolute) {
    worst.absolute = error;
    worst.absoluteWhere = where;
  }
  if (error / tolerance > worst.ofTolerance) {
    worst.ofTolerance = error / tolerance;
    worst.ofToleranceWhere = where;
  }
  return error <= tolerance;
}

testing::AssertionResult evaluate(func::FuncOp func,
                                  const std::vector<DoubleTensor> &inputs,
                                  std::vector<DoubleTensor> &outputs) {
  llvm::Expected<std::vector<DoubleTensor>> results =
      interpretInDouble(func, inputs);
  if (!results)
    return testing::AssertionFailure() << llvm::toString(results.takeError());
  outputs = std::move(*results);
  return testing::AssertionSuccess();
}

/// Runs partita-differentiate on `module`.
LogicalResult differentiate(MLIRContext &context, ModuleOp module) {
  PassManager pm(&context, ModuleOp::getOperationName());
  pm.nest<func::FuncOp>().addPass(createDifferentiatePass());
  return pm.run(module);
}

class DerivativesF64 : public testing::TestWithParam<Case> {};

TEST_P(DerivativesF64, MatchCentralDifferences) {
  const Case &c = GetParam();
  AllDialectsContext context;
  std::string text = functionText(c);
  OwningOpRef<ModuleOp> forward = parseSourceString<ModuleOp>(text, &context);
  ASSERT_TRUE(forward) << text;
  OwningOpRef<ModuleOp> backward = forward->clone();
  ASSERT_TRUE(succeeded(differentiate(context, *backward))) << text;
  auto f = forward->lookupSymbol<func::FuncOp>("main");
  auto g = backward->lookupSymbol<func::FuncOp>("main");

  std::mt19937 rng(std::hash<std::string>()(c.name) & 0xffffffff);
  std::vector<DoubleTensor> inputs;
  std::vector<size_t> parameters;
  for (const Arg &a : c.args) {
    DoubleTensor t;
    t.shape = shapeOf(a.type);
    std::uniform_real_distribution<double> dist(a.low, a.high);
    t.values.resize(countOf(t.shape));
    for (double &v : t.values)
      v = dist(rng);
    if (a.parameter)
      parameters.push_back(inputs.size());
    inputs.push_back(std::move(t));
  }
  std::normal_distribution<double> normal;
  DoubleTensor u;
  u.shape = shapeOf(c.resultType);
  u.values.resize(countOf(u.shape));
  for (double &v : u.values)
    v = normal(rng);
  inputs.push_back(std::move(u));

  std::vector<DoubleTensor> gradients;
  ASSERT_TRUE(evaluate(g, inputs, gradients));
  ASSERT_EQ(gradients.size(), 1 + parameters.size());
  // A loss that does not depend on the parameters checks nothing. (One
  // parameter's gradient may be zero where its paths cancel, (a + b) - b:
  // that still checks the rules, which would not cancel were one wrong.)
  EXPECT_TRUE(llvm::any_of(llvm::drop_begin(gradients), [](const auto &g) {
    return llvm::any_of(g.values, [](double x) { return std::fabs(x) > 1e-6; });
  })) << "the gradient is zero";

  auto lossAt = [&](const std::vector<std::vector<double>> &step) {
    std::vector<DoubleTensor> moved = inputs;
    for (size_t k = 0; k < parameters.size(); ++k)
      for (size_t i = 0; i < step[k].size(); ++i)
        moved[parameters[k]].values[i] += step[k][i];
    std::vector<DoubleTensor> loss;
    EXPECT_TRUE(evaluate(f, moved, loss));
    return loss.empty() ? NAN : loss[0].values[0];
  };
  // (L(p + h v) - L(p - h v)) / 2h.
  auto difference = [&](const std::vector<std::vector<double>> &v) {
    std::vector<std::vector<double>> plus = v, minus = v;
    for (size_t k = 0; k < v.size(); ++k)
      for (size_t i = 0; i < v[k].size(); ++i) {
        plus[k][i] = kStep * v[k][i];
        minus[k][i] = -kStep * v[k][i];
      }
    return (lossAt(plus) - lossAt(minus)) / (2 * kStep);
  };

  for (int direction = 0; direction < 3; ++direction) {
    std::vector<std::vector<double>> v(parameters.size());
    double analytic = 0, magnitude = 0;
    for (size_t k = 0; k < parameters.size(); ++k) {
      v[k].resize(inputs[parameters[k]].values.size());
      for (size_t i = 0; i < v[k].size(); ++i) {
        v[k][i] = normal(rng);
        analytic += gradients[1 + k].values[i] * v[k][i];
        magnitude += std::fabs(gradients[1 + k].values[i] * v[k][i]);
      }
    }
    double numeric = difference(v);
    std::string where = c.name + ", direction " + std::to_string(direction);
    EXPECT_TRUE(agree(analytic, numeric, magnitude, where))
        << where << ": <g, v> = " << analytic << ", the difference " << numeric;
  }

  for (size_t k = 0; k < parameters.size(); ++k) {
    size_t count = inputs[parameters[k]].values.size();
    if (static_cast<int64_t>(count) > kCoordinateLimit)
      continue;
    double magnitude = 0;
    for (double x : gradients[1 + k].values)
      magnitude = std::max(magnitude, std::fabs(x));
    std::vector<std::vector<double>> e(parameters.size());
    for (size_t j = 0; j < parameters.size(); ++j)
      e[j].assign(inputs[parameters[j]].values.size(), 0.0);
    for (size_t i = 0; i < count; ++i) {
      e[k][i] = 1;
      double analytic = gradients[1 + k].values[i], numeric = difference(e);
      e[k][i] = 0;
      std::string where = c.name + ", d/d" + c.args[parameters[k]].name + "[" +
                          std::to_string(i) + "]";
      EXPECT_TRUE(agree(analytic, numeric, magnitude, where))
          << where << ": the gradient " << analytic << ", the difference "
          << numeric;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, DerivativesF64, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case> &info) {
                           return info.param.name;
                         });

//===----------------------------------------------------------------------===//
// The cases against the op vocabulary
//===----------------------------------------------------------------------===//

/// The table's ops that have no vector-Jacobian product, and why none is
/// needed. Each must really lack one, and be in the table.
struct WithoutRule {
  const char *op, *why;
};
const WithoutRule kWithoutRule[] = {
    {"and", "logic on bools: no float derivative"},
    {"or", "logic on bools: no float derivative"},
    {"xor", "logic on bools: no float derivative"},
    {"not", "logic on bools: no float derivative"},
    {"compare", "yields bools: no float derivative"},
    {"copy", "not an nn op: the lowering's copies into output buffers"},
    {"attention_partial",
     "ring attention's blocks: made by partitioning, after differentiation"},
    {"attention_grad", "attention's backward: made by differentiation"},
    {"kv_cache_write", "serving only (--max-seq): never in a training step"},
    {"dequantize", "packed int4/int8 weights: --train refuses MatMulNBits"},
    {"quantized_matmul",
     "a matmul by packed weights: made by the exec pipeline, after "
     "differentiation"},
    {"moe", "a training step writes it densely first (partita-expand-moe), "
            "whose ops have rules; its sparse form's VJP is issue 37's"},
};

/// The float operands a rule gives no cotangent (partita-differentiate
/// refuses them where they depend on a parameter), by operand index.
struct NoCotangent {
  const char *op;
  unsigned operand;
  const char *why;
};
const NoCotangent kNoCotangent[] = {
    {"rope", 1, "the cos table: gathered at positions, from constants"},
    {"rope", 2, "the sin table: gathered at positions, from constants"},
    {"attention", 3, "the mask"},
};

/// Classes of the table's attributes that no case can exercise because
/// partita-differentiate refuses them, with a function it must refuse:
/// when a rule comes, the refusal test fails, and a case takes its place.
struct Refused {
  const char *op, *attr, *attrClass, *why, *example;
};
// None today (the strided slice was, until its rule came); kept so that a
// refusal added later is listed here rather than dropped from coverage.
const std::vector<Refused> kRefused = {};

bool isRefused(StringRef op, StringRef attr, StringRef attrClass) {
  return llvm::any_of(kRefused, [&](const Refused &r) {
    return op == r.op && attr == r.attr && attrClass == r.attrClass;
  });
}

/// The values of the nn enum behind a String attribute of the table.
std::vector<std::string> enumValues(StringRef op, StringRef attr) {
  std::vector<std::string> values;
  if (op == "reduce" && attr == "kind")
    for (uint32_t i = 0; i <= nn::getMaxEnumValForReduceKind(); ++i)
      values.push_back(
          nn::stringifyReduceKind(*nn::symbolizeReduceKind(i)).str());
  if (op == "gelu" && attr == "approximation")
    for (uint32_t i = 0; i <= nn::getMaxEnumValForGeluApproximation(); ++i)
      values.push_back(
          nn::stringifyGeluApproximation(*nn::symbolizeGeluApproximation(i))
              .str());
  if (op == "compare" && attr == "direction")
    for (uint32_t i = 0; i <= nn::getMaxEnumValForCompareDirection(); ++i)
      values.push_back(
          nn::stringifyCompareDirection(*nn::symbolizeCompareDirection(i))
              .str());
  return values;
}

/// Whether the classes of `attr` are crossed with the op's other crossed
/// attributes (a Bool, a String, an optional Float), rather than each
/// exercised once (an axis, a list).
bool isCrossed(const runtime::OpAttrInfo &attr) {
  return attr.type == runtime::OpAttrType::Bool ||
         attr.type == runtime::OpAttrType::String ||
         (attr.type == runtime::OpAttrType::Float && !attr.required);
}

/// The classes of a table attribute the cases must exercise: a Bool's
/// values, a String's (its nn enum's), whether an optional Float is given,
/// where an axis lies, what an Ints attribute does. Empty where the test
/// knows of none (an attribute it was not taught).
std::vector<std::string> classesOf(const runtime::OpAttrInfo &attr) {
  StringRef name = attr.name;
  switch (attr.type) {
  case runtime::OpAttrType::Bool:
    return {"false", "true"};
  case runtime::OpAttrType::String:
    return enumValues(attr.op, name);
  case runtime::OpAttrType::Float:
    if (attr.required)
      return {"given"};
    return {"given", "absent"};
  case runtime::OpAttrType::Int:
    if (name == "axis")
      return {"first", "middle", "last"};
    // An optional Int (attention's window): given or not.
    if (!attr.required)
      return {"given", "absent"};
    return {};
  case runtime::OpAttrType::Ints:
    if (name == "axes")
      return {"one", "some", "all"};
    if (name == "permutation")
      return {"involution", "cycle"};
    if (name == "start")
      return {"zero", "offset"};
    if (name == "limit")
      return {"end", "short"};
    if (name == "stride")
      return {"unit", "strided"};
    return {};
  }
  return {};
}

/// The class of `attr` on `op`, whose kernel is given `kernel`, or an
/// error.
FailureOr<std::string>
classOn(Operation *op, const runtime::OpAttrInfo &attr,
        const google::protobuf::Map<std::string, program::Attribute> &kernel,
        std::string &error) {
  StringRef name = attr.name;
  auto it = kernel.find(attr.name);
  const program::Attribute *value = it == kernel.end() ? nullptr : &it->second;
  // An optional Bool the translation leaves out is false; an optional
  // Float is read from the nn op below; an optional Int is given or not.
  bool optional = !attr.required && (attr.type == runtime::OpAttrType::Bool ||
                                     attr.type == runtime::OpAttrType::Float ||
                                     attr.type == runtime::OpAttrType::Int);
  if (!value && !optional) {
    error = "the translation gives it no " + name.str();
    return failure();
  }
  auto rank = [&] {
    return cast<RankedTensorType>(op->getOperand(0).getType()).getRank();
  };
  switch (attr.type) {
  case runtime::OpAttrType::Bool:
    return std::string(value && value->b() ? "true" : "false");
  case runtime::OpAttrType::String:
    return value->s();
  case runtime::OpAttrType::Float: {
    if (attr.required)
      return std::string("given");
    // The translation gives the value in effect; whether the nn op was
    // given one is its own (optional) attribute.
    if (!llvm::is_contained(op->getName().getAttributeNames(), name)) {
      error = "the nn op has no attribute " + name.str() +
              " to tell whether it is given";
      return failure();
    }
    return std::string(op->getAttr(name) ? "given" : "absent");
  }
  case runtime::OpAttrType::Int: {
    if (!attr.required)
      return std::string(value ? "given" : "absent");
    int64_t axis = value->i();
    if (axis == rank() - 1)
      return std::string("last");
    return std::string(axis == 0 ? "first" : "middle");
  }
  case runtime::OpAttrType::Ints: {
    auto values = value->ints().values();
    std::vector<int64_t> list(values.begin(), values.end());
    if (name == "axes") {
      if (static_cast<int64_t>(list.size()) == rank())
        return std::string("all");
      return std::string(list.size() == 1 ? "one" : "some");
    }
    if (name == "permutation") {
      std::vector<int64_t> inverse(list.size());
      for (size_t i = 0; i < list.size(); ++i)
        inverse[list[i]] = static_cast<int64_t>(i);
      return std::string(inverse == list ? "involution" : "cycle");
    }
    if (name == "start")
      return std::string(llvm::all_of(list, [](int64_t x) { return x == 0; })
                             ? "zero"
                             : "offset");
    if (name == "limit") {
      ArrayRef<int64_t> shape =
          cast<RankedTensorType>(op->getOperand(0).getType()).getShape();
      return std::string(ArrayRef<int64_t>(list) == shape ? "end" : "short");
    }
    if (name == "stride")
      return std::string(llvm::all_of(list, [](int64_t x) { return x == 1; })
                             ? "unit"
                             : "strided");
    break;
  }
  }
  error = "no classes for " + name.str();
  return failure();
}

/// What the cases differentiate, read from their IR.
struct Coverage {
  /// Per op (without "nn."): how many instances the pass differentiates.
  std::map<std::string, int> instances;
  /// Per op: the combinations of its crossed attributes' classes seen, and
  /// the class of each other attribute seen.
  std::map<std::string, std::set<std::string>> combinations;
  std::map<std::pair<std::string, std::string>, std::set<std::string>> classes;
  /// Per op: the operands that were float somewhere, and that took a
  /// cotangent somewhere.
  std::map<std::string, std::set<unsigned>> floatOperands, activeOperands;
  /// What could not be read (an attribute without classes).
  std::vector<std::string> errors;
};

bool isFloatTensor(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return type && isa<FloatType>(type.getElementType());
}

/// Adds `func`'s ops whose rule partita-differentiate calls: those with an
/// active result (getActiveValues, the pass's own analysis). An op without
/// operands (nn.constant) counts where it is.
void scan(func::FuncOp func, Coverage &coverage) {
  Block &body = func.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  SmallVector<Value> parameters;
  for (BlockArgument arg : body.getArguments())
    if (func.getArgAttr(arg.getArgNumber(), nn::NNDialect::kParameterAttrName))
      parameters.push_back(arg);
  llvm::DenseSet<Value> activeValues;
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (func.getResultAttr(i, nn::NNDialect::kLossAttrName))
      activeValues = getActiveValues(body, parameters, ret.getOperand(i));
  auto active = [&](Value v) { return activeValues.contains(v); };

  for (Operation &op : body.without_terminator()) {
    if (op.getNumOperands() && llvm::none_of(op.getResults(), active))
      continue;
    std::string name = op.getName().stripDialect().str();
    ++coverage.instances[name];
    for (auto [index, operand] : llvm::enumerate(op.getOperands())) {
      if (isFloatTensor(operand))
        coverage.floatOperands[name].insert(index);
      if (active(operand))
        coverage.activeOperands[name].insert(index);
    }
    google::protobuf::Map<std::string, program::Attribute> kernel;
    setKernelAttributes(&op, kernel);
    std::string combination;
    for (const runtime::OpAttrInfo &attr : runtime::kOpAttrs) {
      if (attr.op != name)
        continue;
      std::string error;
      FailureOr<std::string> attrClass = classOn(&op, attr, kernel, error);
      if (failed(attrClass)) {
        coverage.errors.push_back("nn." + name + " " + attr.name + ": " +
                                  error);
        continue;
      }
      if (isCrossed(attr))
        combination += (combination.empty() ? "" : ", ") +
                       std::string(attr.name) + "=" + *attrClass;
      else
        coverage.classes[{name, attr.name}].insert(*attrClass);
    }
    coverage.combinations[name].insert(combination);
  }
}

/// Every combination of the crossed attributes of table op `op`, as
/// scan() writes them; fails naming an attribute without classes.
FailureOr<std::vector<std::string>> combinationsOf(const std::string &op,
                                                   std::string &error) {
  std::vector<std::string> all = {""};
  for (const runtime::OpAttrInfo &attr : runtime::kOpAttrs) {
    if (attr.op != op || !isCrossed(attr))
      continue;
    std::vector<std::string> attrClasses = classesOf(attr);
    if (attrClasses.empty()) {
      error = std::string(attr.name) + " has no classes the test knows";
      return failure();
    }
    std::vector<std::string> crossed;
    for (const std::string &prefix : all)
      for (const std::string &attrClass : attrClasses)
        if (!isRefused(op, attr.name, attrClass))
          crossed.push_back(prefix + (prefix.empty() ? "" : ", ") + attr.name +
                            "=" + attrClass);
    all = std::move(crossed);
  }
  return all;
}

TEST(DerivativesF64, VocabularyIsCovered) {
  AllDialectsContext context;
  Coverage coverage;
  for (const Case &c : cases()) {
    OwningOpRef<ModuleOp> module =
        parseSourceString<ModuleOp>(functionText(c), &context);
    ASSERT_TRUE(module) << c.name;
    scan(module->lookupSymbol<func::FuncOp>("main"), coverage);
  }
  for (const std::string &error : coverage.errors)
    ADD_FAILURE() << error;

  int checkedOps = 0, checkedCombinations = 0, checkedClasses = 0;
  for (const runtime::OpInfo &info : runtime::kOps) {
    std::string op(info.name), name = "nn." + op;
    std::optional<RegisteredOperationName> registered =
        RegisteredOperationName::lookup(name, &context);
    bool hasRule =
        registered && registered->hasInterface<nn::DifferentiableOpInterface>();
    bool listed = llvm::any_of(
        kWithoutRule, [&](const WithoutRule &w) { return op == w.op; });
    if (!hasRule) {
      EXPECT_TRUE(listed) << name
                          << " has no vector-Jacobian product: list it in "
                             "kWithoutRule with why it needs none, or give "
                             "it a rule and a case";
      continue;
    }
    EXPECT_FALSE(listed) << name << " has a rule: take it off kWithoutRule";
    ++checkedOps;
    if (!coverage.instances.count(op)) {
      ADD_FAILURE() << "no case differentiates " << name;
      continue;
    }

    std::string error;
    FailureOr<std::vector<std::string>> combinations =
        combinationsOf(op, error);
    if (failed(combinations)) {
      ADD_FAILURE() << name << ": " << error;
    } else {
      for (const std::string &combination : *combinations) {
        ++checkedCombinations;
        EXPECT_TRUE(coverage.combinations[op].count(combination))
            << "no case differentiates " << name << " with " << combination;
      }
    }
    for (const runtime::OpAttrInfo &attr : runtime::kOpAttrs) {
      if (attr.op != op || isCrossed(attr))
        continue;
      std::vector<std::string> attrClasses = classesOf(attr);
      EXPECT_FALSE(attrClasses.empty())
          << name << " " << attr.name << ": no classes the test knows";
      for (const std::string &attrClass : attrClasses) {
        if (isRefused(op, attr.name, attrClass))
          continue;
        ++checkedClasses;
        EXPECT_TRUE(
            coverage.classes[std::make_pair(op, std::string(attr.name))].count(
                attrClass))
            << "no case differentiates " << name << " with " << attr.name << " "
            << attrClass;
      }
    }
    for (unsigned operand : coverage.floatOperands[op]) {
      bool exempt = llvm::any_of(kNoCotangent, [&](const NoCotangent &n) {
        return op == n.op && operand == n.operand;
      });
      if (!exempt) {
        EXPECT_TRUE(coverage.activeOperands[op].count(operand))
            << "no case gives a cotangent to " << name << "'s operand #"
            << operand;
      }
    }
  }
  std::printf("the cases differentiate %d table ops with rules, in %d "
              "attribute combinations and %d other attribute classes\n",
              checkedOps, checkedCombinations, checkedClasses);

  // The list cannot go stale: each op it names is in the table and has no
  // rule (the loop above fails an op that has one).
  for (const WithoutRule &w : kWithoutRule)
    EXPECT_NE(runtime::lookupOp(w.op), nullptr)
        << w.op << " is listed in kWithoutRule but not in the table";
  for (const NoCotangent &n : kNoCotangent)
    EXPECT_TRUE(coverage.floatOperands[n.op].count(n.operand))
        << "kNoCotangent names nn." << n.op << "'s operand #" << n.operand
        << ", which no case has as a float";

  // Rules of ops outside the table (those that become buffers).
  for (RegisteredOperationName name : context.getRegisteredOperations()) {
    if (name.getDialectNamespace() != nn::NNDialect::getDialectNamespace() ||
        !name.hasInterface<nn::DifferentiableOpInterface>() ||
        runtime::lookupOp(name.stripDialect()))
      continue;
    EXPECT_TRUE(coverage.instances.count(name.stripDialect().str()))
        << "no case differentiates " << name.getStringRef().str();
  }
}

/// Each class kept from VocabularyIsCovered is refused by the pass.
TEST(DerivativesF64, RefusedClassesAreRefused) {
  AllDialectsContext context;
  for (const Refused &r : kRefused) {
    OwningOpRef<ModuleOp> module =
        parseSourceString<ModuleOp>(r.example, &context);
    ASSERT_TRUE(module) << r.example;
    std::string diagnostics;
    ScopedDiagnosticHandler capture(&context, [&](Diagnostic &d) {
      diagnostics += d.str() + "\n";
      return success();
    });
    EXPECT_TRUE(failed(differentiate(context, *module)))
        << "partita-differentiate now differentiates nn." << r.op << " with "
        << r.attr << " " << r.attrClass << " (" << r.why
        << "): take it off kRefused and give it a case";
    EXPECT_NE(diagnostics.find("cannot be differentiated"), std::string::npos)
        << diagnostics;
  }
}

} // namespace
