//===- NNBase.td - nn dialect, base classes and enums ------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_NN_IR_NNBASE_TD
#define PARTITA_DIALECT_NN_IR_NNBASE_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "partita/Dialect/NN/IR/NNInterfaces.td"

def NN_Dialect : Dialect {
  let name = "nn";
  let cppNamespace = "::mlir::partita::nn";
  let summary = "Tensor compute at transformer granularity";
  let description = [{
    The `nn` dialect holds a model as the ONNX front end imports and raises
    it: value-semantic tensor ops on static shapes, at the granularity a
    transformer is described in (`nn.layer_norm`, `nn.attention`,
    `nn.matmul` with a bias epilogue) rather than the loops that compute
    them.

    ```
    model.onnx ──import──▶ nn (raw) ──raise──▶ nn (transformer level)
                                                  │ + dist.mesh, #dist.sharding
                                                  ▼
                                   propagate ─▶ partition ─▶ local nn + dist
                                                  │
                                                  ▼
                                       exec program ─▶ host / CUDA
    ```

    Every op implements `ShardingRuleOpInterface`: an einsum-like mapping of
    each operand and result dimension to *factors*. Sharding propagation
    and partitioning are written once against factors and never against
    individual ops; the ops whose shards combine in a way no factor says
    (attention run as a ring, a constant that stays global, attention's
    backward, whose operands are not terms of its sums) build their local
    form through the interface's `partition` hook. A factor is:

    - `parallel`: each shard computes its part independently;
    - `reduction`: each shard computes a partial result that a collective
      combines (sum, max or min);
    - `normalization`: the axis a softmax or norm computes statistics over;
      a shard needs the statistics of the whole axis;
    - `kv_sequence`: the key/value sequence of attention; shards combine
      with an online-softmax merge (ring attention);
    - `lookup`: the rows an embedding or gather indexes, or a mixture of
      experts' experts; a shard computes from the rows it holds and the
      whole of the other operands, and the results are summed;
    - `opaque`: the op cannot be computed on a shard of this factor.

    A dimension maps to several factors (major to minor) when a reshape
    merges or splits it, so `[b, s, h*d] -> [b, s, h, d]` keeps a split of
    `h`. A dimension of size 1 maps to none.

    All shapes are static. Element types are `f32`, `f16`, `bf16` for
    compute, `i1`, `i8`, `i32`, `i64` for masks, indices and shapes.
  }];
  let hasConstantMaterializer = 1;
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerOps();
    void registerAttributes();

    /// partita-kv-cache's marks on a function's arguments and results: a KV
    /// cache the runtime keeps on its rank between runs (an argument and
    /// the result that returns it written), and the cache slot argument.
    static constexpr ::llvm::StringLiteral kKvCacheAttrName =
        "partita.kv_cache";
    static constexpr ::llvm::StringLiteral kCachePositionAttrName =
        "partita.cache_position";
    /// On a serving function: its rows hold their tokens from slot 0, the
    /// padding after them (onnxruntime's GroupQueryAttention reads a row's
    /// keys up to its length), so generation pads prompts on the right.
    static constexpr ::llvm::StringLiteral kRightPaddedAttrName =
        "partita.right_padded";

    /// Training's marks (partita-differentiate, docs/training.md): an
    /// argument that is a trainable parameter (the value: its ONNX
    /// initializer name), the result that is the loss, and each gradient
    /// result the pass appends (the value: its parameter's name).
    static constexpr ::llvm::StringLiteral kParameterAttrName =
        "partita.parameter";
    static constexpr ::llvm::StringLiteral kLossAttrName = "partita.loss";
    static constexpr ::llvm::StringLiteral kGradientAttrName =
        "partita.gradient";
    /// On a forward op: the indices of its results the backward reads
    /// (the values a training step keeps from its forward for its
    /// backward); on the function, their bytes in all.
    static constexpr ::llvm::StringLiteral kSavedAttrName = "partita.saved";
    static constexpr ::llvm::StringLiteral kSavedBytesAttrName =
        "partita.saved_bytes";
    /// On the function: the classes a cross-entropy loss's labels index.
    static constexpr ::llvm::StringLiteral kLossClassesAttrName =
        "partita.loss_classes";
    /// The training step's state (partita-optimizer): an argument that is
    /// a parameter's optimizer state (the value: `NAME/exp_avg`, ...), a
    /// result that is the updated value of the argument of its name, and
    /// a parameter's value before the first step (the initializer; the
    /// artifact stores each rank's block).
    static constexpr ::llvm::StringLiteral kOptimizerStateAttrName =
        "partita.optimizer_state";
    static constexpr ::llvm::StringLiteral kUpdateAttrName =
        "partita.update";
    static constexpr ::llvm::StringLiteral kInitialValueAttrName =
        "partita.initial_value";
    /// On a parameter (and its optimizer state) that the step holds in
    /// another shape of the same elements, in the same order: the shape of
    /// its ONNX initializer, which checkpoints and gradients are given in
    /// (partita-split-fused-parameters).
    static constexpr ::llvm::StringLiteral kParameterShapeAttrName =
        "partita.parameter_shape";
    /// On an op partita-expand-moe writes to read a mixture of experts'
    /// stacked weight or bias: its operand 0 is that tensor, dimension 0
    /// its experts, which an ep axis splits (a training step's dense
    /// mixture).
    static constexpr ::llvm::StringLiteral kExpertsAttrName =
        "partita.experts";
  }];
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

def NN_Float : AnyTypeOf<[F32, F16, BF16]>;
def NN_Int : AnyTypeOf<[I1, I8, I32, I64]>;
def NN_Index : AnyTypeOf<[I32, I64]>;

def NN_Tensor : StaticShapeTensorOf<[F32, F16, BF16, I1, I8, I32, I64]>;
def NN_FloatTensor : StaticShapeTensorOf<[F32, F16, BF16]>;
def NN_BoolTensor : StaticShapeTensorOf<[I1]>;
def NN_IndexTensor : StaticShapeTensorOf<[I32, I64]>;
def NN_IntOrBoolTensor : StaticShapeTensorOf<[I1, I8, I32, I64]>;

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def NN_ReduceKindAttr : I32EnumAttr<"ReduceKind", "reduction kind", [
    I32EnumAttrCase<"Sum", 0, "sum">,
    I32EnumAttrCase<"Mean", 1, "mean">,
    I32EnumAttrCase<"Max", 2, "max">,
    I32EnumAttrCase<"Min", 3, "min">
  ]> {
  let cppNamespace = "::mlir::partita::nn";
}

def NN_CompareDirectionAttr : I32EnumAttr<"CompareDirection",
    "comparison predicate", [
    I32EnumAttrCase<"EQ", 0, "eq">,
    I32EnumAttrCase<"NE", 1, "ne">,
    I32EnumAttrCase<"LT", 2, "lt">,
    I32EnumAttrCase<"LE", 3, "le">,
    I32EnumAttrCase<"GT", 4, "gt">,
    I32EnumAttrCase<"GE", 5, "ge">
  ]> {
  let cppNamespace = "::mlir::partita::nn";
}

def NN_GeluApproximationAttr : I32EnumAttr<"GeluApproximation",
    "GELU approximation", [
    I32EnumAttrCase<"None", 0, "none">,
    I32EnumAttrCase<"Tanh", 1, "tanh">
  ]> {
  let cppNamespace = "::mlir::partita::nn";
}

def NN_MoeActivationAttr : I32EnumAttr<"MoeActivation",
    "activation of a mixture of experts' expert MLP", [
    I32EnumAttrCase<"Relu", 0, "relu">,
    I32EnumAttrCase<"Gelu", 1, "gelu">,
    I32EnumAttrCase<"GeluTanh", 2, "gelu_tanh">,
    I32EnumAttrCase<"Silu", 3, "silu">,
    I32EnumAttrCase<"Identity", 4, "identity">,
    I32EnumAttrCase<"Swiglu", 5, "swiglu">
  ]> {
  let cppNamespace = "::mlir::partita::nn";
}

//===----------------------------------------------------------------------===//
// Traits
//===----------------------------------------------------------------------===//

// Each result element depends only on the operand elements at its index,
// operands broadcast numpy-style (which MLIR's `Elementwise` forbids). Exactly
// the ops OpVocabulary.def lists as elementwise carry it; a unit test checks.
def NN_Elementwise : NativeOpTrait<"ElementwiseOpTrait"> {
  let cppNamespace = "::mlir::partita::nn";
}

//===----------------------------------------------------------------------===//
// Base op class
//===----------------------------------------------------------------------===//

// `ruleMethods` names the optional methods of the sharding-rule interface
// that the op overrides (its own `partition` hook, `getOrderedFactors`).
class NN_Op<string mnemonic, list<Trait> traits = [],
            list<string> ruleMethods = []>
    : Op<NN_Dialect, mnemonic, !listconcat(traits, [
        Pure,
        DeclareOpInterfaceMethods<NN_ShardingRuleOpInterface, ruleMethods>])>;

#endif // PARTITA_DIALECT_NN_IR_NNBASE_TD
