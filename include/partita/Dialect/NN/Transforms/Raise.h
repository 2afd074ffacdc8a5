//===- Raise.h - raise decomposed subgraphs to nn ops -----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The ONNX importer translates op for op, so the normalizations, activations
// and attention blocks an exporter decomposed arrive as chains of elementwise
// ops. These patterns recognize those chains and replace them with the
// transformer-level op. Each group can be used on its own; `partita-raise`
// runs them all.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_NN_TRANSFORMS_RAISE_H
#define PARTITA_DIALECT_NN_TRANSFORMS_RAISE_H

namespace mlir {
class RewritePatternSet;
} // namespace mlir

namespace mlir::partita::nn {

/// `(x - mean(x)) / sqrt(var(x) + eps)` to `nn.layer_norm`, then folds a
/// following `* gamma` and `+ beta` into its scale and bias.
void populateRaiseLayerNormPatterns(RewritePatternSet &patterns);

/// `x * rsqrt(mean(x^2) + eps)` to `nn.rms_norm`, then folds a following
/// `* weight` into its scale.
void populateRaiseRmsNormPatterns(RewritePatternSet &patterns);

/// The erf and tanh forms of GELU to `nn.gelu`.
void populateRaiseGeluPatterns(RewritePatternSet &patterns);

/// `x * sigmoid(x)` to `nn.silu`.
void populateRaiseSiluPatterns(RewritePatternSet &patterns);

/// `softmax(scale * q k^T + mask) v` to `nn.attention`, recognizing causal
/// masks and repeated key/value heads.
void populateRaiseAttentionPatterns(RewritePatternSet &patterns);

/// `x * cos + rotate_half(x) * sin` (HF's rotary embedding) to `nn.rope`
/// where cos and sin have equal halves, and a partial one's
/// `concat(rope(x[..., :r]), x[..., r:])` to one `nn.rope` of `x`.
void populateRaiseRopePatterns(RewritePatternSet &patterns);

/// `matmul(a, w) + b` with a vector `b` to `nn.matmul ... bias b`.
void populateRaiseMatmulBiasPatterns(RewritePatternSet &patterns);

/// transformers' batched experts (each slot's expert weights gathered and
/// multiplied, weighted and summed over the slots) to `nn.moe`.
void populateRaiseMoePatterns(RewritePatternSet &patterns);

/// All of the above.
void populateRaisePatterns(RewritePatternSet &patterns);

} // namespace mlir::partita::nn

#endif // PARTITA_DIALECT_NN_TRANSFORMS_RAISE_H
