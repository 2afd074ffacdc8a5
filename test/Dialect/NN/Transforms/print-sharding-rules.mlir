// RUN: partita-opt %s --partita-print-sharding-rules -split-input-file -verify-diagnostics

// The rules of a transformer block's characteristic ops. Every op's rule is
// checked in unittests/Dialect/ShardingRuleTest.cpp; this pins the pass.

func.func @mlp(%x: tensor<2x8x16xf32>, %w1: tensor<16x64xf32>, %w2: tensor<64x16xf32>) -> tensor<2x8x16xf32> {
  // expected-remark @+1 {{nn.matmul: ([i, j, l], [l, k]) -> ([i, j, k]) {i=2, j=8, k=64, l=16 reduction}}}
  %h = nn.matmul %x, %w1 : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  // expected-remark @+1 {{nn.gelu: ([i, j, k]) -> ([i, j, k]) {i=2, j=8, k=64}}}
  %g = nn.gelu %h : tensor<2x8x64xf32>
  // expected-remark @+1 {{nn.matmul: ([i, j, l], [l, k]) -> ([i, j, k]) {i=2, j=8, k=16, l=64 reduction}}}
  %y = nn.matmul %g, %w2 : (tensor<2x8x64xf32>, tensor<64x16xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// Splitting hidden into heads keeps the heads factor (j) shared with the
// attention's kv-head factor once the reshape and transpose are followed.
func.func @heads(%x: tensor<2x8x64xf32>) -> tensor<2x4x8x16xf32> {
  // expected-remark @+1 {{nn.reshape: ([i, j, kl]) -> ([i, j, k, l]) {i=2, j=8, k=4, l=16}}}
  %r = nn.reshape %x : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
  // expected-remark @+1 {{nn.transpose: ([i, k, j, l]) -> ([i, j, k, l]) {i=2, j=4, k=8, l=16}}}
  %t = nn.transpose %r permutation = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  // expected-remark @+1 {{nn.attention: ([i, j, k, m], [i, j, l, m], [i, j, l, n]) -> ([i, j, k, n]) {i=2, j=4, k=8, l=8 kv_sequence, m=16 opaque, n=16}}}
  %a = nn.attention %t, %t, %t {causal} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %a : tensor<2x4x8x16xf32>
}

// -----

// A mixture of experts: tokens (i) parallel, the experts (k) and an
// unfused activation's features (n) lookups (partial sums from whole
// inputs), the output's hidden size
// (m) parallel; a fused swiglu's halves keep the features whole (n: the
// gate/up pair, major, and o opaque).
func.func @moe(%x: tensor<4x8xf32>, %ids: tensor<4x2xi64>, %w: tensor<4x2xf32>, %fc1: tensor<6x16x8xf32>, %fused: tensor<6x32x8xf32>, %fc2: tensor<6x8x16xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  // expected-remark @+1 {{nn.moe: ([i, l], [i, j], [i, j], [k, n, l], [k, m, n]) -> ([i, m]) {i=4, j=2 opaque, k=6 lookup, l=8 opaque, m=8, n=16 lookup}}}
  %0 = nn.moe silu %x, %ids, %w experts(%fc1, %fc2) : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<6x16x8xf32>, tensor<6x8x16xf32>) -> tensor<4x8xf32>
  // expected-remark @+1 {{nn.moe: ([i, l], [i, j], [i, j], [k, no, l], [k, m, o]) -> ([i, m]) {i=4, j=2 opaque, k=6 lookup, l=8 opaque, m=8, n=2 opaque, o=16 opaque}}}
  %1 = nn.moe swiglu %x, %ids, %w experts(%fused, %fc2) : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<6x32x8xf32>, tensor<6x8x16xf32>) -> tensor<4x8xf32>
  return %0, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

