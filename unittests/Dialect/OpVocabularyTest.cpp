//===- OpVocabularyTest.cpp - OpVocabulary.def against the nn ops ---------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The kernel table (runtime/include/partita/runtime/OpVocabulary.def) and the
// nn dialect's ODS describe the same ops: every nn op but the two that become
// buffers is a kernel of the table, the `Elementwise` trait marks exactly the
// table's elementwise ops, and ODS accepts no element type the kernels lack.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/OpVocabulary.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/StringSet.h"

#include "gtest/gtest.h"

using namespace mlir;
using namespace mlir::partita;
namespace runtime = ::partita::runtime;
using runtime::lookupOp;
using runtime::OpInfo;

namespace {

class OpVocabularyTest : public ::testing::Test {
protected:
  OpVocabularyTest() {
    context.loadDialect<nn::NNDialect, func::FuncDialect>();
  }

  SmallVector<RegisteredOperationName> nnOps() {
    SmallVector<RegisteredOperationName> ops;
    for (RegisteredOperationName name : context.getRegisteredOperations())
      if (name.getDialectNamespace() == nn::NNDialect::getDialectNamespace())
        ops.push_back(name);
    return ops;
  }

  /// Whether `nn.<op>` on operands of `elementType` parses and verifies.
  bool verifies(const OpInfo &op, StringRef elementType) {
    std::string type = ("tensor<4x" + elementType + ">").str();
    std::string operands = op.minOperands == 1 ? "%x" : "%x, %x";
    std::string operandTypes = op.minOperands == 1 ? type : type + ", " + type;
    std::string text = "func.func @f(%x: " + type + ") {\n  %r = \"nn." +
                       std::string(op.name) + "\"(" + operands + ") : (" +
                       operandTypes + ") -> " + type + "\n  return\n}\n";
    ScopedDiagnosticHandler quiet(&context,
                                  [](Diagnostic &) { return success(); });
    return static_cast<bool>(parseSourceString<ModuleOp>(text, &context));
  }

  MLIRContext context;
};

// nn.constant and nn.reshape become buffers (a weight or constant, a view),
// never kernels.
bool becomesBuffer(StringRef op) { return op == "constant" || op == "reshape"; }

TEST_F(OpVocabularyTest, EveryNNOpIsAKernelOfTheTable) {
  for (RegisteredOperationName name : nnOps()) {
    StringRef op = name.stripDialect();
    const OpInfo *info = lookupOp(op);
    if (becomesBuffer(op)) {
      EXPECT_EQ(info, nullptr) << op.str();
      continue;
    }
    ASSERT_NE(info, nullptr) << "nn." << op.str() << " is not in the table";
    EXPECT_EQ(info->isElementwise(), name.hasTrait<nn::ElementwiseOpTrait>())
        << "nn." << op.str()
        << ": the Elementwise trait and the table disagree";
  }
}

TEST_F(OpVocabularyTest, EveryTableOpIsAnNNOp) {
  for (const OpInfo &op : runtime::kOps) {
    // The lowering's own copies into output buffers.
    if (op.name == "copy")
      continue;
    std::string name = "nn." + std::string(op.name);
    EXPECT_TRUE(RegisteredOperationName::lookup(name, &context)) << name;
  }
}

TEST_F(OpVocabularyTest, AttributesNameTableOps) {
  for (const runtime::OpAttrInfo &attr : runtime::kOpAttrs)
    EXPECT_NE(lookupOp(attr.op), nullptr) << attr.name;
}

TEST_F(OpVocabularyTest, OdsAcceptsOnlyTypesTheKernelsCompute) {
  int checked = 0;
  for (const OpInfo &op : runtime::kOps) {
    if (!op.isElementwise() || op.types == runtime::OpTypes::Any)
      continue;
    ASSERT_TRUE(op.kind == runtime::OpKind::Unary ||
                op.kind == runtime::OpKind::Binary);
    bool floats = op.types == runtime::OpTypes::Float;
    EXPECT_TRUE(verifies(op, floats ? "f32" : "i1")) << op.name;
    EXPECT_FALSE(verifies(op, floats ? "i32" : "f32")) << op.name;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST_F(OpVocabularyTest, EpilogueFusibleOps) {
  // What the exec lowering fuses: elementwise steps that keep the element
  // type; compare and cast change it, where cannot be a step.
  llvm::StringSet<> fusible;
  for (RegisteredOperationName name : nnOps()) {
    OperationState state(UnknownLoc::get(&context), name);
    Operation *op = Operation::create(state);
    if (nn::isEpilogueFusible(op))
      fusible.insert(name.stripDialect());
    op->destroy();
  }
  llvm::StringSet<> expected;
  for (const char *op :
       {"add",     "sub",   "mul",        "div",  "pow", "max", "min",
        "and",     "or",    "xor",        "neg",  "abs", "exp", "log",
        "sqrt",    "rsqrt", "reciprocal", "tanh", "erf", "sin", "cos",
        "sigmoid", "relu",  "silu",       "not",  "gelu"})
    expected.insert(op);
  EXPECT_EQ(fusible.size(), expected.size());
  for (const auto &op : expected)
    EXPECT_TRUE(fusible.contains(op.getKey())) << op.getKey().str();
}

} // namespace
