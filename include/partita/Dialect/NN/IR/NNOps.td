//===- NNOps.td - nn dialect ops ---------------------------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_NN_IR_NNOPS_TD
#define PARTITA_DIALECT_NN_IR_NNOPS_TD

include "partita/Dialect/NN/IR/NNBase.td"
include "partita/Dialect/NN/IR/NNAttrs.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

//===----------------------------------------------------------------------===//
// Constants
//===----------------------------------------------------------------------===//

def NN_ConstantOp : NN_Op<"constant", [ConstantLike], ["partition"]> {
  let summary = "tensor constant (weights and shape values)";
  let description = [{
    A tensor whose value is known at compile time. Weights are stored as
    `dense_resource` blobs, which keep the bytes out of the IR text and can
    be memory-mapped; small shape-like values may be inline `dense`.

    ```mlir
    %w = nn.constant dense_resource<layer0.wq> : tensor<768x768xf32>
    %shape = nn.constant dense<[2, 128, 12, 64]> : tensor<4xi64>
    ```

    **Constraints**

    1. `constant_c1`: the value's type is the result type.
    2. `constant_c2`: an inline `dense` value that is not a splat holds at
       most 1024 elements; larger values are `dense_resource` blobs.
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs NN_Tensor:$result);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let hasFolder = 1;
  let builders = [
    OpBuilder<(ins "::mlir::ElementsAttr":$value), [{
      build($_builder, $_state, ::llvm::cast<::mlir::TensorType>(value.getType()), value);
    }]>
  ];
  let extraClassDeclaration = [{
    /// The largest inline non-splat `dense` value a constant may hold.
    static constexpr int64_t kMaxInlineElements = 1024;
  }];
}

//===----------------------------------------------------------------------===//
// Elementwise binary ops (numpy broadcasting)
//===----------------------------------------------------------------------===//

class NN_BroadcastingOp<string mnemonic, list<Trait> traits = [],
                        bit checksElementTypes = 1>
    : NN_Op<mnemonic, !listconcat(traits, [NN_Elementwise])> {
  let hasVerifier = 1;
  code constraintsDoc = !if(checksElementTypes, [{

    Operands broadcast as in numpy: shapes are aligned at their last
    dimension and each pair of dimensions is equal or one of them is 1.

    **Constraints**

    1. `}] # mnemonic # [{_c1`: the operands have the same element type.
    2. `}] # mnemonic # [{_c2`: the operand shapes broadcast together.
    3. `}] # mnemonic # [{_c3`: the result type is the broadcast shape with
       the result element type.
  }], [{

    Operands broadcast as in numpy: shapes are aligned at their last
    dimension and each pair of dimensions is equal or one of them is 1.

    **Constraints**

    1. `}] # mnemonic # [{_c1`: the operand shapes broadcast together.
    2. `}] # mnemonic # [{_c2`: the result type is the broadcast shape.
  }]);
}

class NN_ElementwiseBinaryOp<string mnemonic, Type operandType,
                             string formula, list<Trait> traits = [],
                             bit checksElementTypes = 1>
    : NN_BroadcastingOp<mnemonic, traits, checksElementTypes> {
  let summary = "elementwise " # formula;
  let description = "Computes `" # formula # "` elementwise." # constraintsDoc # [{
    ```mlir
    %r = nn.}] # mnemonic # [{ %a, %b : (tensor<2x8x768xf32>, tensor<768xf32>) -> tensor<2x8x768xf32>
    ```
  }];
  let arguments = (ins operandType:$lhs, operandType:$rhs);
  let results = (outs operandType:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Value":$lhs, "::mlir::Value":$rhs), [{
      build($_builder, $_state,
            inferBroadcastResultType({lhs.getType(), rhs.getType()},
                                     ::mlir::getElementTypeOrSelf(lhs.getType())),
            lhs, rhs);
    }]>
  ];
}

def NN_NumericTensor : StaticShapeTensorOf<[F32, F16, BF16, I8, I32, I64]>;

def NN_AddOp : NN_ElementwiseBinaryOp<"add", NN_NumericTensor, "lhs + rhs",
                                      [Commutative]> {
  let hasFolder = 1;
}
def NN_SubOp : NN_ElementwiseBinaryOp<"sub", NN_NumericTensor, "lhs - rhs"> {
  let hasFolder = 1;
}
def NN_MulOp : NN_ElementwiseBinaryOp<"mul", NN_NumericTensor, "lhs * rhs",
                                      [Commutative]> {
  let hasFolder = 1;
}
def NN_DivOp : NN_ElementwiseBinaryOp<"div", NN_NumericTensor,
                                      "lhs / rhs (integers round toward zero)"> {
  let hasFolder = 1;
}
def NN_PowOp : NN_ElementwiseBinaryOp<"pow", NN_FloatTensor, "lhs ^ rhs">;
def NN_MaxOp : NN_ElementwiseBinaryOp<"max", NN_NumericTensor, "max(lhs, rhs)",
                                      [Commutative]> {
  let hasFolder = 1;
}
def NN_MinOp : NN_ElementwiseBinaryOp<"min", NN_NumericTensor, "min(lhs, rhs)",
                                      [Commutative]> {
  let hasFolder = 1;
}
def NN_AndOp : NN_ElementwiseBinaryOp<"and", NN_BoolTensor, "lhs and rhs",
                                      [Commutative],
                                      /*checksElementTypes=*/0> {
  let hasFolder = 1;
}
def NN_OrOp : NN_ElementwiseBinaryOp<"or", NN_BoolTensor, "lhs or rhs",
                                     [Commutative],
                                      /*checksElementTypes=*/0> {
  let hasFolder = 1;
}
def NN_XorOp : NN_ElementwiseBinaryOp<"xor", NN_BoolTensor, "lhs xor rhs",
                                      [Commutative],
                                      /*checksElementTypes=*/0> {
  let hasFolder = 1;
}

def NN_CompareOp : NN_BroadcastingOp<"compare"> {
  let summary = "elementwise comparison";
  let description = [{
    Compares elementwise with the given predicate and yields `i1`.
  }] # constraintsDoc # [{
    ```mlir
    %m = nn.compare lt, %a, %b : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi1>
    ```
  }];
  let arguments = (ins NN_CompareDirectionAttr:$direction, NN_Tensor:$lhs,
                       NN_Tensor:$rhs);
  let results = (outs NN_BoolTensor:$result);
  let assemblyFormat = [{
    $direction `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)
  }];
  let hasFolder = 1;
}

def NN_WhereOp : NN_BroadcastingOp<"where"> {
  let summary = "elementwise select";
  let description = [{
    Yields `on_true` where `condition` holds and `on_false` elsewhere. The
    three operands broadcast together; constraint 1 concerns `on_true` and
    `on_false`.
  }] # constraintsDoc # [{
    ```mlir
    %r = nn.where %mask, %scores, %neg_inf : (tensor<1x1x8x8xi1>, tensor<2x12x8x8xf32>, tensor<f32>) -> tensor<2x12x8x8xf32>
    ```
  }];
  let arguments = (ins NN_BoolTensor:$condition, NN_Tensor:$on_true,
                       NN_Tensor:$on_false);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = [{
    $condition `,` $on_true `,` $on_false attr-dict `:` functional-type(operands, results)
  }];
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise unary ops
//===----------------------------------------------------------------------===//

class NN_ElementwiseUnaryOp<string mnemonic, Type tensorType, string formula,
                            list<Trait> traits = []>
    : NN_Op<mnemonic, !listconcat(traits, [SameOperandsAndResultType,
                                           NN_Elementwise])> {
  let summary = "elementwise " # formula;
  let description = "Computes `" # formula # "` elementwise." # [{

    ```mlir
    %r = nn.}] # mnemonic # [{ %x : tensor<2x8x768xf32>
    ```
  }];
  let arguments = (ins tensorType:$input);
  let results = (outs tensorType:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def NN_NegOp : NN_ElementwiseUnaryOp<"neg", NN_NumericTensor, "-x"> {
  let hasFolder = 1;
}
def NN_AbsOp : NN_ElementwiseUnaryOp<"abs", NN_NumericTensor, "|x|">;
def NN_ExpOp : NN_ElementwiseUnaryOp<"exp", NN_FloatTensor, "e^x">;
def NN_LogOp : NN_ElementwiseUnaryOp<"log", NN_FloatTensor, "ln(x)">;
def NN_SqrtOp : NN_ElementwiseUnaryOp<"sqrt", NN_FloatTensor, "sqrt(x)">;
def NN_RsqrtOp : NN_ElementwiseUnaryOp<"rsqrt", NN_FloatTensor, "1 / sqrt(x)">;
def NN_ReciprocalOp : NN_ElementwiseUnaryOp<"reciprocal", NN_FloatTensor,
                                            "1 / x">;
def NN_TanhOp : NN_ElementwiseUnaryOp<"tanh", NN_FloatTensor, "tanh(x)">;
def NN_ErfOp : NN_ElementwiseUnaryOp<"erf", NN_FloatTensor, "erf(x)">;
// Rotary tables computed from position inputs: arguments reach thousands of
// radians, so every backend computes these with full range reduction.
def NN_SinOp : NN_ElementwiseUnaryOp<"sin", NN_FloatTensor, "sin(x)"> {
  let hasFolder = 1;
}
def NN_CosOp : NN_ElementwiseUnaryOp<"cos", NN_FloatTensor, "cos(x)"> {
  let hasFolder = 1;
}
def NN_SigmoidOp : NN_ElementwiseUnaryOp<"sigmoid", NN_FloatTensor,
                                         "1 / (1 + e^-x)">;
def NN_ReluOp : NN_ElementwiseUnaryOp<"relu", NN_NumericTensor, "max(x, 0)">;
def NN_SiluOp : NN_ElementwiseUnaryOp<"silu", NN_FloatTensor, "x * sigmoid(x)">;
def NN_NotOp : NN_ElementwiseUnaryOp<"not", NN_BoolTensor, "not x"> {
  let hasFolder = 1;
}

def NN_GeluOp : NN_Op<"gelu", [SameOperandsAndResultType, NN_Elementwise]> {
  let summary = "elementwise GELU";
  let description = [{
    Gaussian error linear unit, `x * Phi(x)`. With `approximation = none`
    (the default) `Phi` is computed with `erf`; with `tanh` it is
    `0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`.

    ```mlir
    %r = nn.gelu %x approximation = tanh : tensor<2x8x3072xf32>
    ```
  }];
  let arguments = (ins NN_FloatTensor:$input,
                       DefaultValuedAttr<NN_GeluApproximationAttr,
                         "::mlir::partita::nn::GeluApproximation::None">:$approximation);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input (`approximation` `=` $approximation^)? attr-dict `:` type($result)
  }];
}

def NN_CastOp : NN_Op<"cast", [NN_Elementwise]> {
  let summary = "elementwise element-type conversion";
  let description = [{
    Converts each element to the result element type. Float to integer
    rounds toward zero; to `i1` yields `x != 0`. Float to float rounds to
    nearest, ties to even; a finite value beyond the result's range becomes
    an infinity, as ONNX's Cast does, or with `saturate` the largest finite
    value of its sign (infinities and NaN stay). partita-convert-float casts
    a model's f32 inputs to 16 bits with `saturate`, as it rounds constants.

    ```mlir
    %r = nn.cast %mask : tensor<2x8xi64> -> tensor<2x8xf32>
    %h = nn.cast %x {saturate} : tensor<2x8xf32> -> tensor<2x8xf16>
    ```

    **Constraints**

    1. `cast_c1`: the result has the shape of the input.
    2. `cast_c2`: `saturate` converts a float to a float.
  }];
  let arguments = (ins NN_Tensor:$input, UnitAttr:$saturate);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Reductions and normalizations
//===----------------------------------------------------------------------===//

def NN_ReduceOp : NN_Op<"reduce"> {
  let summary = "reduction over axes";
  let description = [{
    Reduces the input over `axes` with `sum`, `mean`, `max` or `min`. With
    `keepdims` the reduced dimensions stay with size 1.

    ```mlir
    %m = nn.reduce mean %x axes = [2] keepdims : tensor<2x8x768xf32> -> tensor<2x8x1xf32>
    ```

    **Constraints**

    1. `reduce_c1`: `axes` is non-empty, strictly increasing and within
       `[0, rank)`.
    2. `reduce_c2`: the result has the input's element type and the input
       shape with the reduced dimensions removed (or 1 with `keepdims`).
  }];
  let arguments = (ins NN_ReduceKindAttr:$kind, NN_NumericTensor:$input,
                       DenseI64ArrayAttr:$axes, UnitAttr:$keepdims);
  let results = (outs NN_NumericTensor:$result);
  let assemblyFormat = [{
    $kind $input `axes` `=` $axes (`keepdims` $keepdims^)? attr-dict `:`
    type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

class NN_SoftmaxLikeOp<string mnemonic, string formula>
    : NN_Op<mnemonic, [SameOperandsAndResultType]> {
  let summary = formula # " along one axis";
  let description = "Computes `" # formula # "` along `axis`." # [{

    ```mlir
    %p = nn.}] # mnemonic # [{ %scores axis = 3 : tensor<2x12x8x8xf32>
    ```

    **Constraints**

    1. `}] # mnemonic # [{_c1`: `axis` is within `[0, rank)`.
  }];
  let arguments = (ins NN_FloatTensor:$input, I64Attr:$axis);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = "$input `axis` `=` $axis attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def NN_SoftmaxOp : NN_SoftmaxLikeOp<"softmax", "exp(x) / sum(exp(x))">;
def NN_LogSoftmaxOp : NN_SoftmaxLikeOp<"log_softmax", "x - log(sum(exp(x)))">;

def NN_ScanTensor : StaticShapeTensorOf<[F32, F16, BF16, I32, I64]>;

def NN_CumsumOp : NN_Op<"cumsum", [SameOperandsAndResultType]> {
  let summary = "cumulative sum along one axis";
  let description = [{
    Running sums along `axis`, as ONNX `CumSum`: element `i` of the result
    is the sum of input elements `0..i` along the axis. With `exclusive`
    the element itself is left out (the first sum is 0); with `reverse` the
    sums run from the end of the axis. Integers sum exactly (wrapping on
    overflow); floats accumulate in fp32 in axis order. Position ids of
    padded batches are written `attention_mask.cumsum(-1) - 1`.

    ```mlir
    %p = nn.cumsum %mask axis = 1 : tensor<2x128xi64>
    %q = nn.cumsum %x axis = 0 exclusive reverse : tensor<8x4xf32>
    ```

    **Constraints**

    1. `cumsum_c1`: `axis` is within `[0, rank)`.
  }];
  let arguments = (ins NN_ScanTensor:$input, I64Attr:$axis,
                       UnitAttr:$exclusive, UnitAttr:$reverse);
  let results = (outs NN_ScanTensor:$result);
  let assemblyFormat = [{
    $input `axis` `=` $axis (`exclusive` $exclusive^)? (`reverse` $reverse^)?
    attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def NN_LayerNormOp : NN_Op<"layer_norm", [
    AttrSizedOperandSegments, AllTypesMatch<["input", "result"]>]> {
  let summary = "layer normalization";
  let description = [{
    Normalizes over the dimensions `[axis, rank)`:
    `(x - mean) / sqrt(var + epsilon) * scale + bias`, with the population
    variance. `scale` and `bias` are optional and have the shape of the
    normalized dimensions.

    ```mlir
    %y = nn.layer_norm %x scale(%g : tensor<768xf32>) bias(%b : tensor<768xf32>) axis = 2 epsilon = 1.0e-05 : tensor<2x8x768xf32>
    ```

    **Constraints**

    1. `layer_norm_c1`: `axis` is within `[0, rank)`.
    2. `layer_norm_c2`: `scale` and `bias` have the shape of the normalized
       dimensions, `input.shape[axis:]`.
    3. `layer_norm_c3`: `scale` and `bias` have the input's element type.
    4. `layer_norm_c4`: `epsilon` is positive.
  }];
  let arguments = (ins NN_FloatTensor:$input,
                       Optional<NN_FloatTensor>:$scale,
                       Optional<NN_FloatTensor>:$bias,
                       I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input (`scale` `(` $scale^ `:` type($scale) `)`)?
    (`bias` `(` $bias^ `:` type($bias) `)`)?
    `axis` `=` $axis `epsilon` `=` $epsilon attr-dict `:` type($result)
  }];
  let hasVerifier = 1;  let hasCanonicalizer = 1;
}

def NN_RmsNormOp : NN_Op<"rms_norm", [AllTypesMatch<["input", "result"]>]> {
  let summary = "root-mean-square normalization";
  let description = [{
    Normalizes over the dimensions `[axis, rank)`:
    `x / sqrt(mean(x^2) + epsilon) * scale`. `scale` is optional and has the
    shape of the normalized dimensions.

    ```mlir
    %y = nn.rms_norm %x scale(%g : tensor<512xf32>) axis = 2 epsilon = 1.0e-06 : tensor<2x8x512xf32>
    ```

    **Constraints**

    1. `rms_norm_c1`: `axis` is within `[0, rank)`.
    2. `rms_norm_c2`: `scale` has the shape of the normalized dimensions,
       `input.shape[axis:]`.
    3. `rms_norm_c3`: `scale` has the input's element type.
    4. `rms_norm_c4`: `epsilon` is positive.
  }];
  let arguments = (ins NN_FloatTensor:$input,
                       Optional<NN_FloatTensor>:$scale,
                       I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input (`scale` `(` $scale^ `:` type($scale) `)`)?
    `axis` `=` $axis `epsilon` `=` $epsilon attr-dict `:` type($result)
  }];
  let hasVerifier = 1;  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

def NN_MatmulOp : NN_Op<"matmul"> {
  let summary = "batched matrix product with an optional bias epilogue";
  let description = [{
    `result[..., m, n] = sum_k lhs[..., m, k] * rhs[..., k, n] + bias[n]`.
    The batch dimensions (all but the last two) broadcast as in numpy, so a
    weight `[k, n]` multiplies every matrix of a `[b, s, k]` activation.
    Accumulation is in fp32 whatever the storage type.

    When the contracted dimension is split, each shard's product is a
    partial sum; the bias must then be added once, after the reduction, not
    by every shard. The partitioner separates the epilogue in that case.

    ```mlir
    %y = nn.matmul %x, %w bias %b : (tensor<2x8x768xf32>, tensor<768x3072xf32>, tensor<3072xf32>) -> tensor<2x8x3072xf32>
    ```

    **Constraints**

    1. `matmul_c1`: `lhs` and `rhs` have rank 2 or more.
    2. `matmul_c2`: the contracted sizes agree: `lhs.shape[-1] == rhs.shape[-2]`.
    3. `matmul_c3`: the batch dimensions broadcast together.
    4. `matmul_c4`: `bias` has rank 1 and size `rhs.shape[-1]`.
    5. `matmul_c5`: all operands have the same element type.
    6. `matmul_c6`: the result shape is `broadcast(batch) + [m, n]` with the
       operands' element type.
  }];
  let arguments = (ins NN_FloatTensor:$lhs, NN_FloatTensor:$rhs,
                       Optional<NN_FloatTensor>:$bias);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs (`bias` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_DequantizeOp : NN_Op<"dequantize"> {
  let summary = "a weight of packed integers, dequantized block by block";
  let description = [{
    The `[k, n]` float weight that onnxruntime's `MatMulNBits` multiplies
    by, from the packed form it stores (docs/frontend.md, "int4 weights"):
    `result[i, j] = (q(j, i) - z(j, i / block_size)) * scales[j, i / block_size]`.
    `packed` is `[n, blocks, block_size * bits / 8]` bytes (i8 holding
    unsigned values): the `bits`-bit integers `q(j, i)` of column `j`, block
    after block, the low bits of each byte first. `scales` is
    `[n, blocks]`. `zero_points`, when given, packs the unsigned zero point
    of each block the same way, `[n, ceil(blocks * bits / 8)]`; without it
    every zero point is `2^(bits - 1)` (symmetric quantization). `k` may
    leave the last block short.

    Leading dimensions `[B...]` of `packed`, `scales` and `zero_points`
    (stacked experts: onnxruntime's `QMoE`) are batch dimensions: the
    result is `[B..., k, n]`, each `[k, n]` slice dequantized from its own
    packed weight.

    The weight is meant to be read where a matmul multiplies by it: the
    exec pipeline fuses an unbatched one into the matmul
    (`quantized_matmul`), so the float weight never exists in memory.
    Batch dimensions, column blocks (`n`) and whole blocks of rows split; a
    block never does.

    ```mlir
    %w = nn.dequantize %q, %s {bits = 4 : i64, block_size = 32 : i64} : (tensor<128x2x16xi8>, tensor<128x2xf32>) -> tensor<64x128xf32>
    ```

    **Constraints**

    1. `dequantize_c1`: `bits` is 4 or 8 and `block_size` is a power of two
       of at least 16.
    2. `dequantize_c2`: `packed` is i8
       `[B..., n, blocks, block_size * bits / 8]`.
    3. `dequantize_c3`: `scales` is `[B..., n, blocks]` of the result's
       element type.
    4. `dequantize_c4`: `zero_points`, when given, is i8
       `[B..., n, ceil(blocks * bits / 8)]`.
    5. `dequantize_c5`: the result is `[B..., k, n]` with
       `ceil(k / block_size) == blocks`.
  }];
  let arguments = (ins NN_IntOrBoolTensor:$packed, NN_FloatTensor:$scales,
                       Optional<NN_IntOrBoolTensor>:$zero_points,
                       I64Attr:$bits, I64Attr:$block_size);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $packed `,` $scales (`zero_points` $zero_points^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_QuantizedMatmulOp : NN_Op<"quantized_matmul",
                                  [AttrSizedOperandSegments]> {
  let summary = "a matmul by a packed weight, dequantized inside the kernel";
  let description = [{
    `matmul(lhs, dequantize(packed, scales, zero_points), bias)`, computed
    without building the float weight: what the exec pipeline makes of an
    `nn.matmul` whose weight is an `nn.dequantize` read by nothing else
    (`partita-fuse-dequantize`), after partitioning, so that a rank holds
    only its packed bytes. The operands and attributes are
    `nn.dequantize`'s and `nn.matmul`'s; the weight is `[k, n]` with `k` the
    last dimension of `lhs`. Accumulation is in fp32.

    ```mlir
    %y = nn.quantized_matmul %x, %q, %s {bits = 4 : i64, block_size = 32 : i64} : (tensor<2x6x64xf32>, tensor<128x2x16xi8>, tensor<128x2xf32>) -> tensor<2x6x128xf32>
    ```

    **Constraints**

    1. `quantized_matmul_c1`: `lhs` has rank 2 or more; the result is
       `lhs`'s shape with the last dimension `n`, of `lhs`'s element type.
    2. `quantized_matmul_c2`: `packed`, `scales`, `zero_points` and the
       attributes describe a `[k, n]` weight as `nn.dequantize`'s
       constraints say, with `scales` of `lhs`'s element type.
    3. `quantized_matmul_c3`: `bias`, when given, is `[n]` of `lhs`'s
       element type.
  }];
  let arguments = (ins NN_FloatTensor:$lhs, NN_IntOrBoolTensor:$packed,
                       NN_FloatTensor:$scales,
                       Optional<NN_IntOrBoolTensor>:$zero_points,
                       Optional<NN_FloatTensor>:$bias,
                       I64Attr:$bits, I64Attr:$block_size);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $packed `,` $scales (`zero_points` $zero_points^)?
    (`bias` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_AttentionOp
    : NN_Op<"attention", [], ["partition", "getOrderedFactors"]> {
  let summary = "scaled dot-product attention with grouped key/value heads";
  let description = [{
    `softmax(q k^T * scale + mask) v` per batch and head, with
    `q: [b, hq, sq, d]`, `k: [b, hkv, skv, d]`, `v: [b, hkv, skv, dv]` and
    result `[b, hq, sq, dv]`. Query head `h` reads key/value head
    `h / (hq / hkv)` (grouped-query attention; `hkv == hq` is multi-head).

    `scale` defaults to `1 / sqrt(d)`. With `softcap` c (Gemma2's, Grok's),
    the scaled scores are capped first: `c * tanh(q k^T * scale / c)`. With
    `causal`, query `i` attends to keys `j <= i + (skv - sq)` (aligned at
    the last position, as with a key/value cache); with `window` w as well,
    only to the last w of them, `i + (skv - sq) - j < w` (a sliding window:
    Mistral's, Gemma2's local layers). The optional `mask`
    broadcasts to `[b, hq, sq, skv]`: an `i1` mask keeps the positions where
    it is true; a float mask is added to the (capped) scores.

    ```mlir
    %o = nn.attention %q, %k, %v mask %m {causal, scale = 1.250000e-01 : f32} : (tensor<2x12x8x64xf32>, tensor<2x4x8x64xf32>, tensor<2x4x8x64xf32>, tensor<2x1x1x8xi1>) -> tensor<2x12x8x64xf32>
    ```

    **Constraints**

    1. `attention_c1`: `q`, `k` and `v` have rank 4.
    2. `attention_c2`: `q`, `k` and `v` have the same batch size.
    3. `attention_c3`: `k` and `v` have the same number of heads, which
       divides the number of query heads.
    4. `attention_c4`: `q` and `k` have the same head size.
    5. `attention_c5`: `k` and `v` have the same sequence length.
    6. `attention_c6`: `mask` has rank at most 4 and broadcasts to
       `[b, hq, sq, skv]`.
    7. `attention_c7`: `mask` is `i1` or has the element type of `q`.
    8. `attention_c8`: `q`, `k` and `v` have the same element type.
    9. `attention_c9`: the result type is `[b, hq, sq, dv]` with the element
       type of `q`.
    10. `attention_c10`: `scale` and `softcap`, when given, are positive.
    11. `attention_c11`: `window`, when given, is positive and comes with
        `causal`.
  }];
  let arguments = (ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                       NN_FloatTensor:$value, Optional<NN_Tensor>:$mask,
                       UnitAttr:$causal, OptionalAttr<F32Attr>:$scale,
                       OptionalAttr<F32Attr>:$softcap,
                       OptionalAttr<I64Attr>:$window);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`mask` $mask^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The scale applied to the scores: the attribute or 1/sqrt(head size).
    double getEffectiveScale();
  }];
}

def NN_AttentionPartialOp : NN_Op<"attention_partial",
                                  [AttrSizedOperandSegments]> {
  let summary = "attention over one block of keys, with its softmax statistics";
  let description = [{
    The attention of `q` over one block of keys and values, as ring
    attention computes it: the result is `softmax(q k^T * scale + mask) v`
    normalized within the block, `row_max[b, h, i]` the largest of row
    `i`'s scores over the block and `row_sum[b, h, i]` the sum of
    `exp(score - row_max)` over them. Blocks combine exactly: with
    `m = max(m1, m2)` and `w = exp(row_max - m) * row_sum`, the output over
    both is `(o1 w1 + o2 w2) / (w1 + w2)`, its maximum `m` and its sum
    `w1 + w2`. A row that sees no key gets zeros, `row_max = -inf` and
    `row_sum = 0`.

    The maximum and the sum are kept apart, not as one log-sum-exp
    `max + log(sum)`: an additive mask of -10000 or of the float minimum
    gives a fully masked row scores of that size, where a float's spacing
    (2^-10 at 10^4, 2^104 at 3.4e38) would round the log of the sum away,
    and with it the weight of the block.

    Shapes, grouped heads, `scale`, `softcap` and `mask` are as for
    `nn.attention`.
    With `positions(%qpos, %kpos)` (the global positions of the query rows
    and of the keys, as ring attention's blocks are not aligned), query
    `i` attends only to keys `j` with `kpos[j] <= qpos[i]`: causal attention
    on any order of the sequence; with `window` w as well, only to those
    with `qpos[i] - kpos[j] < w`.

    ```mlir
    %o, %max, %sum = nn.attention_partial %q, %k, %v positions(%qp, %kp) : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<8xi64>, tensor<8xi64>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>)
    ```

    **Constraints**

    1. `attention_partial_c1`: `q`, `k` and `v` have rank 4.
    2. `attention_partial_c2`: `q`, `k` and `v` have the same batch size.
    3. `attention_partial_c3`: `k` and `v` have the same number of heads,
       which divides the number of query heads.
    4. `attention_partial_c4`: `q` and `k` have the same head size.
    5. `attention_partial_c5`: `k` and `v` have the same sequence length.
    6. `attention_partial_c6`: `mask` has rank at most 4 and broadcasts to
       `[b, hq, sq, skv]`.
    7. `attention_partial_c7`: `mask` is `i1` or has the element type of
       `q`.
    8. `attention_partial_c8`: `q`, `k` and `v` have the same element type.
    9. `attention_partial_c9`: the result type is `[b, hq, sq, dv]` with the
       element type of `q`.
    10. `attention_partial_c10`: `scale` and `softcap`, when given, are
        positive.
    11. `attention_partial_c11`: the positions are `i64` vectors of lengths
        `sq` and `skv`.
    12. `attention_partial_c12`: `row_max` and `row_sum` are `[b, hq, sq]`
        of `f32`.
    13. `attention_partial_c13`: `window`, when given, is positive and comes
        with the positions.
  }];
  let arguments = (ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                       NN_FloatTensor:$value, Optional<NN_Tensor>:$mask,
                       Optional<NN_IndexTensor>:$query_positions,
                       Optional<NN_IndexTensor>:$key_positions,
                       OptionalAttr<F32Attr>:$scale,
                       OptionalAttr<F32Attr>:$softcap,
                       OptionalAttr<I64Attr>:$window);
  let results = (outs NN_FloatTensor:$result, NN_FloatTensor:$row_max,
                      NN_FloatTensor:$row_sum);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`mask` $mask^)?
    (`positions` `(` $query_positions^ `,` $key_positions `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The scale applied to the scores: the attribute or 1/sqrt(head size).
    double getEffectiveScale();
  }];
}

def NN_AttentionGradOp
    : NN_Op<"attention_grad", [], ["partition"]> {
  let summary = "the vector-Jacobian product of nn.attention";
  let description = [{
    The cotangents of `nn.attention`'s query, key and value, given its
    operands, its result `out` and the result's cotangent `dout`: the
    flash-attention backward. With `P = softmax(q k^T * scale + mask)` per
    batch and query head, `D_i = sum(dout_i * out_i)`, `dP = dout v^T` and
    `dS = P * (dP - D)`:

    - `dq = scale * dS k`,
    - `dk = scale * dS^T q`, summed over the query heads of each key/value
      head (grouped-query attention),
    - `dv = P^T dout`, likewise summed.

    With `softcap` c, `P` is the softmax of the capped scores
    `c * tanh(x / c)`, `x = q k^T * scale`, and `dS` is multiplied by their
    slope `1 - tanh(x / c)^2` before the products with `k` and `q`.

    `P` is recomputed from `q` and `k` a block of query rows at a time (its
    row maxima and sums recomputed too): no `[sq, skv]` tensor is kept. A
    row that sees no key (every key masked out, or a causal row before the
    first key) has `P = 0`, as `nn.attention` gives it zeros: it adds
    nothing to any cotangent, and its `dq` row is zero. The mask takes no
    cotangent. `causal`, `window`, `scale`, `softcap`, the mask and the
    grouped heads are as for `nn.attention`, whose operands these are.

    ```mlir
    %dq, %dk, %dv = nn.attention_grad %q, %k, %v mask %m out %o dout %g {causal} : (tensor<2x8x16x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32>, tensor<2x1x1x16xi1>, tensor<2x8x16x64xf32>, tensor<2x8x16x64xf32>) -> (tensor<2x8x16x64xf32>, tensor<2x2x16x64xf32>, tensor<2x2x16x64xf32>)
    ```

    **Constraints**

    1. `attention_grad_c1`: `q`, `k` and `v` have rank 4.
    2. `attention_grad_c2`: `q`, `k` and `v` have the same batch size.
    3. `attention_grad_c3`: `k` and `v` have the same number of heads, which
       divides the number of query heads.
    4. `attention_grad_c4`: `q` and `k` have the same head size.
    5. `attention_grad_c5`: `k` and `v` have the same sequence length.
    6. `attention_grad_c6`: `mask` has rank at most 4 and broadcasts to
       `[b, hq, sq, skv]`.
    7. `attention_grad_c7`: `mask` is `i1` or has the element type of `q`.
    8. `attention_grad_c8`: `q`, `k` and `v` have the same element type.
    9. `attention_grad_c9`: `out` and `dout` have type `[b, hq, sq, dv]`
       with the element type of `q`.
    10. `attention_grad_c10`: `scale` and `softcap`, when given, are
        positive.
    11. `attention_grad_c11`: `dq`, `dk` and `dv` have the types of `q`, `k`
        and `v`.
    12. `attention_grad_c12`: `window`, when given, is positive and comes
        with `causal`.
  }];
  let arguments = (ins NN_FloatTensor:$query, NN_FloatTensor:$key,
                       NN_FloatTensor:$value, Optional<NN_Tensor>:$mask,
                       NN_FloatTensor:$out, NN_FloatTensor:$dout,
                       UnitAttr:$causal, OptionalAttr<F32Attr>:$scale,
                       OptionalAttr<F32Attr>:$softcap,
                       OptionalAttr<I64Attr>:$window);
  let results = (outs NN_FloatTensor:$dq, NN_FloatTensor:$dk,
                      NN_FloatTensor:$dv);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`mask` $mask^)? `out` $out `dout` $dout
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The scale applied to the scores: the attribute or 1/sqrt(head size).
    double getEffectiveScale();
  }];
}

def NN_RopeOp : NN_Op<"rope", [AllTypesMatch<["input", "result"]>]> {
  let summary = "rotary position embedding";
  let description = [{
    Rotates pairs of features of each head by position-dependent angles:
    with `r = 2 * cos.shape[2]` rotary features, `x: [b, h, s, d]` and
    `cos`, `sin: [b or 1, s, r/2]` (already gathered at each token's
    position),

    - split halves (default): `x1 = x[..., :r/2]`, `x2 = x[..., r/2:r]`,
      `y1 = x1 cos - x2 sin`, `y2 = x2 cos + x1 sin`;
    - `interleaved`: the pairs are `(x[..., 2i], x[..., 2i+1])`;

    and features `r..d` pass through unchanged.

    ```mlir
    %y = nn.rope %q, %cos, %sin : (tensor<2x8x16x64xf32>, tensor<1x16x32xf32>, tensor<1x16x32xf32>) -> tensor<2x8x16x64xf32>
    ```

    **Constraints**

    1. `rope_c1`: `input` has rank 4.
    2. `rope_c2`: `cos` and `sin` have the same type, rank 3, the input's
       element type, and the shape `[b or 1, s, r/2]`.
    3. `rope_c3`: the rotary features fit in the head: `r <= d`.
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_FloatTensor:$cos,
                       NN_FloatTensor:$sin, UnitAttr:$interleaved);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $cos `,` $sin attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_MoeOp : NN_Op<"moe", [AttrSizedOperandSegments], ["partition"]> {
  let summary = "a mixture of experts: dispatch, expert MLPs, combine";
  let description = [{
    Each token's hidden state goes to the `k` experts its router chose,
    each of those experts' MLP computes it, and the token's result is their
    outputs weighted by its routing weights:

    `result[t] = sum_j routing_weights[t, j] * expert(expert_ids[t, j], input[t])`

    where `expert(e, x) = fc2[e] act(fc1[e] x + fc1_bias[e]) + fc2_bias[e]`
    (weights stored `[E, out, in]`, as transformers and onnxruntime store
    them), and `act` is `activation`:

    - `relu`, `gelu` (erf), `gelu_tanh`, `silu`, `identity`: applied to
      `fc1`'s output `[F]`;
    - `swiglu`: a gate `g` and an up projection `u` of `F` features each:
      `fc1`'s first and second halves (`[E, 2F, H]`), its pairs
      `(2i, 2i + 1)` with `interleaved`, or `fc1` and `fc3` (`[E, F, H]`);
      then with `limit`, `g = min(g, limit)` and
      `u = clamp(u, -limit, limit)`;
      `act = g * sigmoid(alpha * g) * (u + beta)` (transformers' `silu(g) * u`
      is `alpha = 1, beta = 0`; gpt-oss's is `alpha = 1.702, beta = 1,
      limit = 7`).

    Only the routed experts are computed: the work is `k/E` of computing
    every expert for every token. An id outside `[0, E)` selects no expert
    (its slot adds nothing): the router's top k never writes one, and a
    rank that holds a block of the experts is given the others' ids that
    way (the expert dimension `E` is a lookup factor: each block of
    experts computes its part of every token's sum). Accumulation is in
    fp32 whatever the storage type.

    ```mlir
    %y = nn.moe swiglu %x, %ids, %w experts(%fc1, %fc2) : (tensor<32x64xf32>, tensor<32x2xi64>, tensor<32x2xf32>, tensor<8x256x64xf32>, tensor<8x64x128xf32>) -> tensor<32x64xf32>
    ```

    **Constraints**

    1. `moe_c1`: `input` is `[T, H]`; `expert_ids` and `routing_weights`
       are `[T, k]` with `k >= 1`, `routing_weights` and the result of
       `input`'s type.
    2. `moe_c2`: `fc1` is `[E, F1, H]` and `fc2` `[E, H, F]`, of `input`'s
       element type, with `F1 = 2F` for `swiglu` without `fc3`, else
       `F1 = F`.
    3. `moe_c3`: `fc3` (`[E, F, H]`) only with `swiglu`; `interleaved` only
       with `swiglu` without `fc3`; `alpha`, `beta` and `limit` (positive)
       only with `swiglu`.
    4. `moe_c4`: the biases, when given, are `fc1_bias [E, F1]`,
       `fc2_bias [E, H]` and `fc3_bias [E, F]` (with `fc3`), of `input`'s
       element type.
  }];
  let arguments = (ins NN_FloatTensor:$input, NN_IndexTensor:$expert_ids,
                       NN_FloatTensor:$routing_weights, NN_FloatTensor:$fc1,
                       NN_FloatTensor:$fc2, Optional<NN_FloatTensor>:$fc3,
                       Optional<NN_FloatTensor>:$fc1_bias,
                       Optional<NN_FloatTensor>:$fc2_bias,
                       Optional<NN_FloatTensor>:$fc3_bias,
                       NN_MoeActivationAttr:$activation, UnitAttr:$interleaved,
                       OptionalAttr<F32Attr>:$alpha,
                       OptionalAttr<F32Attr>:$beta,
                       OptionalAttr<F32Attr>:$limit);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $activation $input `,` $expert_ids `,` $routing_weights
    `experts` `(` $fc1 `,` $fc2 (`,` $fc3^)? `)`
    (`fc1_bias` $fc1_bias^)? (`fc2_bias` $fc2_bias^)? (`fc3_bias` $fc3_bias^)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The number of experts `E` and the features `F` of one expert's
    /// activation.
    int64_t getNumExperts() { return getFc1().getType().getDimSize(0); }
    int64_t getFfnSize() { return getFc2().getType().getDimSize(2); }
    /// The experts each token reaches.
    int64_t getTopK() { return getExpertIds().getType().getDimSize(1); }
    /// The flops of the routed experts' products (fc1, fc3 where given,
    /// fc2): 2 * T * k * H * (F1 + F + F3).
    double getProductFlops() {
      double slots = getExpertIds().getType().getNumElements();
      double hidden = getInput().getType().getDimSize(1);
      double rows = getFc1().getType().getDimSize(1) + getFfnSize() +
                    (getFc3() ? getFfnSize() : 0);
      return 2.0 * slots * hidden * rows;
    }
    /// Whether `fc1` holds the gate and up projections of a swiglu.
    bool hasFusedGate() {
      return getActivation() == MoeActivation::Swiglu && !getFc3();
    }
  }];
}

//===----------------------------------------------------------------------===//
// Lookups
//===----------------------------------------------------------------------===//

def NN_EmbeddingOp : NN_Op<"embedding"> {
  let summary = "row gather from an embedding table";
  let description = [{
    `result[i..., e] = table[indices[i...], e]`. Indices outside
    `[0, rows)` are undefined behaviour at run time.

    ```mlir
    %h = nn.embedding %wte, %ids : (tensor<50257x768xf32>, tensor<2x8xi64>) -> tensor<2x8x768xf32>
    ```

    **Constraints**

    1. `embedding_c1`: `table` has rank 2.
    2. `embedding_c2`: the result type is `indices.shape + [table.shape[1]]`
       with the table's element type.
  }];
  let arguments = (ins NN_FloatTensor:$table, NN_IndexTensor:$indices);
  let results = (outs NN_FloatTensor:$result);
  let assemblyFormat = [{
    $table `,` $indices attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_GatherOp : NN_Op<"gather"> {
  let summary = "gather along one axis (ONNX Gather)";
  let description = [{
    `result = data[:axis] ++ indices ++ data[axis+1:]` indexed as ONNX
    `Gather`: negative indices count from the end.

    ```mlir
    %d = nn.gather %shape, %idx axis = 0 : (tensor<4xi64>, tensor<i64>) -> tensor<i64>
    ```

    **Constraints**

    1. `gather_c1`: `axis` is within `[0, rank(data))`.
    2. `gather_c2`: the result type is
       `data.shape[:axis] + indices.shape + data.shape[axis+1:]` with the
       data's element type.
  }];
  let arguments = (ins NN_Tensor:$data, NN_IndexTensor:$indices, I64Attr:$axis);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = [{
    $data `,` $indices `axis` `=` $axis attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def NN_ReshapeOp : NN_Op<"reshape"> {
  let summary = "reinterpret the shape, keeping row-major element order";
  let description = [{
    ```mlir
    %h = nn.reshape %x : tensor<2x8x768xf32> -> tensor<2x8x12x64xf32>
    ```

    **Constraints**

    1. `reshape_c1`: input and result have the same element type and the
       same number of elements.
  }];
  let arguments = (ins NN_Tensor:$input);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def NN_TransposeOp : NN_Op<"transpose"> {
  let summary = "permute dimensions";
  let description = [{
    `result.shape[i] = input.shape[permutation[i]]`.

    ```mlir
    %t = nn.transpose %x permutation = [0, 2, 1, 3] : tensor<2x8x12x64xf32> -> tensor<2x12x8x64xf32>
    ```

    **Constraints**

    1. `transpose_c1`: `permutation` is a permutation of `[0, rank)`.
    2. `transpose_c2`: the result type is the input type with its shape
       permuted.
  }];
  let arguments = (ins NN_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = [{
    $input `permutation` `=` $permutation attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def NN_BroadcastToOp : NN_Op<"broadcast_to"> {
  let summary = "broadcast to a larger shape (numpy rules)";
  let description = [{
    The input's dimensions align with the result's last dimensions; each is
    1 (repeated) or equal.

    ```mlir
    %e = nn.broadcast_to %m : tensor<1x1x8x8xi1> -> tensor<2x12x8x8xi1>
    ```

    **Constraints**

    1. `broadcast_to_c1`: the result rank is at least the input rank and the
       element types are the same.
    2. `broadcast_to_c2`: each input dimension is 1 or equals the aligned
       result dimension.
  }];
  let arguments = (ins NN_Tensor:$input);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def NN_SliceOp : NN_Op<"slice"> {
  let summary = "strided slice with static bounds";
  let description = [{
    Takes `input[start:limit:stride]` along every dimension.

    ```mlir
    %q = nn.slice %qkv start = [0, 0, 0] limit = [2, 8, 768] stride = [1, 1, 1] : tensor<2x8x2304xf32> -> tensor<2x8x768xf32>
    ```

    **Constraints**

    1. `slice_c1`: `start`, `limit` and `stride` each have one entry per
       dimension.
    2. `slice_c2`: `0 <= start <= limit <= size` in every dimension.
    3. `slice_c3`: every stride is at least 1.
    4. `slice_c4`: the result has the input's element type and the shape
       `ceil((limit - start) / stride)`.
  }];
  let arguments = (ins NN_Tensor:$input, DenseI64ArrayAttr:$start,
                       DenseI64ArrayAttr:$limit, DenseI64ArrayAttr:$stride);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = [{
    $input `start` `=` $start `limit` `=` $limit `stride` `=` $stride attr-dict
    `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def NN_ConcatOp : NN_Op<"concat"> {
  let summary = "concatenate along one axis";
  let description = [{
    ```mlir
    %s = nn.concat %a, %b axis = 0 : (tensor<2xi64>, tensor<2xi64>) -> tensor<4xi64>
    ```

    **Constraints**

    1. `concat_c1`: there is at least one operand.
    2. `concat_c2`: `axis` is within `[0, rank)`.
    3. `concat_c3`: all operands have the same element type, rank, and size
       in every dimension but `axis`.
    4. `concat_c4`: the result type is the operand type with the `axis`
       sizes summed.
  }];
  let arguments = (ins Variadic<NN_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = [{
    $inputs `axis` `=` $axis attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def NN_KvCacheWriteOp : NN_Op<"kv_cache_write"> {
  let summary = "write new keys or values into a preallocated KV cache";
  let description = [{
    The cache with `update` written at slots `[p, p + s)` along `axis`,
    where `s` is the update's size along `axis` and `p` is `position[0]`
    for every row, or, with one position per row of the batch (dimension
    0, `axis` being another), `position[r]` for row `r`: what `--max-seq`
    makes of a decoder's `concat(past, new)`, and of onnxruntime's
    GroupQueryAttention, whose rows write at their own lengths. The cache is
    a function argument the runtime keeps between runs (`partita.kv_cache`)
    and binds to the result as well, so the kernel writes the slots in
    place. A write outside the cache is a run-time error of the kernel.

    ```mlir
    %c = nn.kv_cache_write %cache, %k, %pos axis = 2 : (tensor<1x12x256x64xf32>, tensor<1x12x1x64xf32>, tensor<1xi64>) -> tensor<1x12x256x64xf32>
    ```

    **Constraints**

    1. `kv_cache_write_c1`: `axis` is within `[0, rank)`.
    2. `kv_cache_write_c2`: `update` has the cache's element type and rank
       and its size in every dimension but `axis`, where it is at most the
       cache's.
    3. `kv_cache_write_c3`: `position` is i64 `[1]`, or `[batch]` where
       `batch` is the cache's dimension 0 and `axis` is not 0.
    4. `kv_cache_write_c4`: the result type is the cache's.
  }];
  let arguments = (ins NN_Tensor:$cache, NN_Tensor:$update,
                       NN_IndexTensor:$position, I64Attr:$axis);
  let results = (outs NN_Tensor:$result);
  let assemblyFormat = [{
    $cache `,` $update `,` $position `axis` `=` $axis attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def NN_SplitOp : NN_Op<"split"> {
  let summary = "split along one axis into consecutive pieces";
  let description = [{
    The pieces' sizes along `axis` are those of the results.

    ```mlir
    %q, %k, %v = nn.split %qkv axis = 2 : tensor<2x8x2304xf32> -> tensor<2x8x768xf32>, tensor<2x8x768xf32>, tensor<2x8x768xf32>
    ```

    **Constraints**

    1. `split_c1`: there is at least one result.
    2. `split_c2`: `axis` is within `[0, rank)`.
    3. `split_c3`: every result has the input's element type, rank and size
       in every dimension but `axis`.
    4. `split_c4`: the results' sizes along `axis` sum to the input's.
  }];
  let arguments = (ins NN_Tensor:$input, I64Attr:$axis);
  let results = (outs Variadic<NN_Tensor>:$results);
  let assemblyFormat = [{
    $input `axis` `=` $axis attr-dict `:` type($input) `->` type($results)
  }];
  let hasVerifier = 1;
}

#endif // PARTITA_DIALECT_NN_IR_NNOPS_TD
