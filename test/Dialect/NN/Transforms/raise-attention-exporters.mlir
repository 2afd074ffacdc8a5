// RUN: partita-opt %s --partita-raise -split-input-file | FileCheck %s --enable-var-scope

// The attention blocks torch 2 exporters write (legacy and dynamo), each
// with its near misses. See raise-attention.mlir for the torch 1.13 forms.

// torch's scaled_dot_product_attention, legacy exporter (Llama with 2 key
// heads repeated to 4): q and k^T each scaled by sqrt(1/sqrt(d)) = 0.5, the
// boolean attn_mask added as where(m, 0, -inf), softmax, then the NaN guard
// where(isnan(p), 0, p) (IsNaN imports as compare ne p, p). The guard goes;
// the mask becomes boolean again.
// CHECK-LABEL: func.func @sdpa_legacy
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x8x16xf32>, %[[K:.*]]: tensor<1x2x8x16xf32>, %[[V:.*]]: tensor<1x2x8x16xf32>, %[[M:.*]]: tensor<1x1x8x8xi1>)
func.func @sdpa_legacy(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>, %m: tensor<1x1x8x8xi1>) -> tensor<1x4x8x16xf32> {
  // CHECK-NOT: nn.compare
  // CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x1x8x8xi1>) -> tensor<1x4x8x16xf32>
  // CHECK-NEXT: return %[[O]]
  %k5 = nn.reshape %k : tensor<1x2x8x16xf32> -> tensor<1x2x1x8x16xf32>
  %kb = nn.broadcast_to %k5 : tensor<1x2x1x8x16xf32> -> tensor<1x2x2x8x16xf32>
  %kr = nn.reshape %kb : tensor<1x2x2x8x16xf32> -> tensor<1x4x8x16xf32>
  %v5 = nn.reshape %v : tensor<1x2x8x16xf32> -> tensor<1x2x1x8x16xf32>
  %vb = nn.broadcast_to %v5 : tensor<1x2x1x8x16xf32> -> tensor<1x2x2x8x16xf32>
  %vr = nn.reshape %vb : tensor<1x2x2x8x16xf32> -> tensor<1x4x8x16xf32>
  %c = nn.constant dense<0.5> : tensor<f32>
  %qs = nn.mul %q, %c : (tensor<1x4x8x16xf32>, tensor<f32>) -> tensor<1x4x8x16xf32>
  %kt = nn.transpose %kr permutation = [0, 1, 3, 2] : tensor<1x4x8x16xf32> -> tensor<1x4x16x8xf32>
  %kts = nn.mul %kt, %c : (tensor<1x4x16x8xf32>, tensor<f32>) -> tensor<1x4x16x8xf32>
  %s = nn.matmul %qs, %kts : (tensor<1x4x8x16xf32>, tensor<1x4x16x8xf32>) -> tensor<1x4x8x8xf32>
  %zero = nn.constant dense<0.0> : tensor<1xf32>
  %ninf = nn.constant dense<0xFF800000> : tensor<1xf32>
  %bias = nn.where %m, %zero, %ninf : (tensor<1x1x8x8xi1>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x1x8x8xf32>
  %sm = nn.add %s, %bias : (tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<1x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<1x4x8x8xf32>
  %nan = nn.compare ne, %p, %p : (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xi1>
  %pg = nn.where %nan, %zero, %p : (tensor<1x4x8x8xi1>, tensor<1xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %o = nn.matmul %pg, %vr : (tensor<1x4x8x8xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

// -----

// HF's sdpa mask for a decoder: and(padding [b, 1, 1, s], causal [1, 1, s,
// s]) applied as where(m, 0, -inf). The constant causal term becomes
// `causal`, the padding term stays the (boolean, [b, 1, 1, s]) mask. The
// NaN guard written as not(compare eq p, p) is the same guard.
// CHECK-LABEL: func.func @sdpa_causal_and_padding
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x4x16xf32>, %[[K:.*]]: tensor<2x4x4x16xf32>, %[[V:.*]]: tensor<2x4x4x16xf32>, %[[PAD:.*]]: tensor<2x1x1x4xi1>)
func.func @sdpa_causal_and_padding(%q: tensor<2x4x4x16xf32>, %k: tensor<2x4x4x16xf32>, %v: tensor<2x4x4x16xf32>, %pad: tensor<2x1x1x4xi1>) -> tensor<2x4x4x16xf32> {
  // CHECK-NOT: nn.not
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] mask %[[PAD]] {causal} : (tensor<2x4x4x16xf32>, tensor<2x4x4x16xf32>, tensor<2x4x4x16xf32>, tensor<2x1x1x4xi1>)
  %causal = nn.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %both = nn.and %pad, %causal : (tensor<2x1x1x4xi1>, tensor<1x1x4x4xi1>) -> tensor<2x1x4x4xi1>
  %zero = nn.constant dense<0.0> : tensor<1xf32>
  %ninf = nn.constant dense<0xFF800000> : tensor<1xf32>
  %bias = nn.where %both, %zero, %ninf : (tensor<2x1x4x4xi1>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x1x4x4xf32>
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<2x4x4x16xf32> -> tensor<2x4x16x4xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x4x16xf32>, tensor<2x4x16x4xf32>) -> tensor<2x4x4x4xf32>
  %c = nn.constant dense<0.25> : tensor<f32>
  %ss = nn.mul %s, %c : (tensor<2x4x4x4xf32>, tensor<f32>) -> tensor<2x4x4x4xf32>
  %sm = nn.add %ss, %bias : (tensor<2x4x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x4x4x4xf32>
  %p = nn.softmax %sm axis = 3 : tensor<2x4x4x4xf32>
  %eq = nn.compare eq, %p, %p : (tensor<2x4x4x4xf32>, tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xi1>
  %nan = nn.not %eq : tensor<2x4x4x4xi1>
  %pg = nn.where %nan, %zero, %p : (tensor<2x4x4x4xi1>, tensor<1xf32>, tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %o = nn.matmul %pg, %v : (tensor<2x4x4x4xf32>, tensor<2x4x4x16xf32>) -> tensor<2x4x4x16xf32>
  return %o : tensor<2x4x4x16xf32>
}

// -----

// The dynamo exporter (Llama, 2 key heads repeated to 4): repeat_kv merged
// straight to [b * h, s, d], transposed there and split back to
// [b, h, d, s]; the combined mask is a per-query float [b, 1, sq, skv]
// with finfo.min. The transpose is lifted, the heads un-repeated, and the
// float mask (a finite fill: not boolean) kept with its shape.
// CHECK-LABEL: func.func @sdpa_dynamo
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x2x8x16xf32>, %[[V:.*]]: tensor<2x2x8x16xf32>, %[[M:.*]]: tensor<2x1x8x8xi1>)
func.func @sdpa_dynamo(%q: tensor<2x4x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x8x16xf32>, %m: tensor<2x1x8x8xi1>) -> tensor<2x4x8x16xf32> {
  // CHECK: %[[W:.*]] = nn.where %[[M]]
  // CHECK-NOT: nn.softmax
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] mask %[[W]] : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x16xf32>
  %c = nn.constant dense<0.5> : tensor<f32>
  %qs = nn.mul %q, %c : (tensor<2x4x8x16xf32>, tensor<f32>) -> tensor<2x4x8x16xf32>
  %k5 = nn.reshape %k : tensor<2x2x8x16xf32> -> tensor<2x2x1x8x16xf32>
  %kb = nn.broadcast_to %k5 : tensor<2x2x1x8x16xf32> -> tensor<2x2x2x8x16xf32>
  %k3 = nn.reshape %kb : tensor<2x2x2x8x16xf32> -> tensor<8x8x16xf32>
  %k3t = nn.transpose %k3 permutation = [0, 2, 1] : tensor<8x8x16xf32> -> tensor<8x16x8xf32>
  %kt = nn.reshape %k3t : tensor<8x16x8xf32> -> tensor<2x4x16x8xf32>
  %kts = nn.mul %kt, %c : (tensor<2x4x16x8xf32>, tensor<f32>) -> tensor<2x4x16x8xf32>
  %v5 = nn.reshape %v : tensor<2x2x8x16xf32> -> tensor<2x2x1x8x16xf32>
  %vb = nn.broadcast_to %v5 : tensor<2x2x1x8x16xf32> -> tensor<2x2x2x8x16xf32>
  %vr = nn.reshape %vb : tensor<2x2x2x8x16xf32> -> tensor<2x4x8x16xf32>
  %s = nn.matmul %qs, %kts : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %min = nn.constant dense<-3.40282347E+38> : tensor<f32>
  %bias = nn.where %m, %zero, %min : (tensor<2x1x8x8xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x8x8xf32>
  %sm = nn.add %s, %bias : (tensor<2x4x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<2x4x8x8xf32>
  %nan = nn.compare ne, %p, %p : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xi1>
  %pg = nn.where %nan, %zero, %p : (tensor<2x4x8x8xi1>, tensor<f32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %o = nn.matmul %pg, %vr : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// A merged transpose that moves the merged dimension is no batched
// transpose: it is not lifted (the attention reads its key through it).
// CHECK-LABEL: func.func @merged_transpose_moves_batch
func.func @merged_transpose_moves_batch(%q: tensor<2x4x8x8xf32>, %k: tensor<2x4x8x8xf32>, %v: tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32> {
  // CHECK: nn.transpose %{{.*}} permutation = [1, 0, 2] : tensor<8x8x8xf32>
  %k3 = nn.reshape %k : tensor<2x4x8x8xf32> -> tensor<8x8x8xf32>
  %k3t = nn.transpose %k3 permutation = [1, 0, 2] : tensor<8x8x8xf32> -> tensor<8x8x8xf32>
  %kt = nn.reshape %k3t : tensor<8x8x8xf32> -> tensor<2x4x8x8xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %s axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  return %o : tensor<2x4x8x8xf32>
}

// -----

// The NaN guard replaces NaN with 1, not 0: that is no guard nn.attention
// reproduces, so the block stays.
// CHECK-LABEL: func.func @nan_guard_other_fill
func.func @nan_guard_other_fill(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  // CHECK-NOT: nn.attention
  // CHECK: nn.softmax
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %s axis = 3 : tensor<1x2x4x4xf32>
  %nan = nn.compare ne, %p, %p : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xi1>
  %one = nn.constant dense<1.0> : tensor<f32>
  %pg = nn.where %nan, %one, %p : (tensor<1x2x4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = nn.matmul %pg, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// where(p != t, 0, p) against another tensor t is a mask on the
// probabilities, not a NaN guard.
// CHECK-LABEL: func.func @nan_guard_other_operand
func.func @nan_guard_other_operand(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %t: tensor<1x2x4x4xf32>) -> tensor<1x2x4x8xf32> {
  // CHECK-NOT: nn.attention
  // CHECK: nn.softmax
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %s axis = 3 : tensor<1x2x4x4xf32>
  %ne = nn.compare ne, %p, %t : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xi1>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %pg = nn.where %ne, %zero, %p : (tensor<1x2x4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = nn.matmul %pg, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// The NaN test is also returned: the softmax must stay for it.
// CHECK-LABEL: func.func @nan_guard_used_twice
func.func @nan_guard_used_twice(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x4xi1>) {
  // CHECK-NOT: nn.attention
  // CHECK: nn.softmax
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %s axis = 3 : tensor<1x2x4x4xf32>
  %nan = nn.compare ne, %p, %p : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xi1>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %pg = nn.where %nan, %zero, %p : (tensor<1x2x4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %o = nn.matmul %pg, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o, %nan : tensor<1x2x4x8xf32>, tensor<1x2x4x4xi1>
}

// -----

// Masks of every shape that broadcasts to [b, h, sq, skv], added: a
// per-head bias [1, h, sq, skv] and a padding mask [b, 1, 1, skv]. They sum
// into one float operand of their broadcast shape.
// CHECK-LABEL: func.func @bias_and_padding
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x4x8x16xf32>, %[[V:.*]]: tensor<2x4x8x16xf32>, %[[BIAS:.*]]: tensor<1x4x8x8xf32>, %[[PAD:.*]]: tensor<2x1x1x8xf32>)
func.func @bias_and_padding(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %bias: tensor<1x4x8x8xf32>, %pad: tensor<2x1x1x8xf32>) -> tensor<2x4x8x16xf32> {
  // CHECK: %[[MASK:.*]] = nn.add %[[BIAS]], %[[PAD]] : (tensor<1x4x8x8xf32>, tensor<2x1x1x8xf32>) -> tensor<2x4x8x8xf32>
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] mask %[[MASK]] :
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %c = nn.constant dense<4.0> : tensor<f32>
  %sd = nn.div %s, %c : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %sb = nn.add %sd, %bias : (tensor<2x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %sm = nn.add %sb, %pad : (tensor<2x4x8x8xf32>, tensor<2x1x1x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// masked_fill(m, finfo.min) with a per-query boolean mask [b, 1, sq, skv]:
// where(m, min, s), true where masked. The operand is not m.
// CHECK-LABEL: func.func @masked_fill_per_query
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x4x8x16xf32>, %[[V:.*]]: tensor<2x4x8x16xf32>, %[[M:.*]]: tensor<2x1x8x8xi1>)
func.func @masked_fill_per_query(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %m: tensor<2x1x8x8xi1>) -> tensor<2x4x8x16xf32> {
  // CHECK: %[[KEEP:.*]] = nn.not %[[M]] : tensor<2x1x8x8xi1>
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] mask %[[KEEP]] :
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %c = nn.constant dense<4.0> : tensor<f32>
  %sd = nn.div %s, %c : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %min = nn.constant dense<-3.40282347E+38> : tensor<f32>
  %sm = nn.where %m, %min, %sd : (tensor<2x1x8x8xi1>, tensor<f32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// An additive where(m, 0, -1e9) is not where(m, 0, -inf): a query whose
// keys are all masked averages the values, so it stays a float mask.
// CHECK-LABEL: func.func @finite_fill_stays_float
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x4x8x16xf32>, %[[V:.*]]: tensor<2x4x8x16xf32>, %[[M:.*]]: tensor<2x1x1x8xi1>)
func.func @finite_fill_stays_float(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %m: tensor<2x1x1x8xi1>) -> tensor<2x4x8x16xf32> {
  // CHECK: %[[W:.*]] = nn.where %[[M]]
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] mask %[[W]] : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x1x1x8xf32>)
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %c = nn.constant dense<4.0> : tensor<f32>
  %sd = nn.div %s, %c : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %big = nn.constant dense<-1.0e9> : tensor<f32>
  %bias = nn.where %m, %zero, %big : (tensor<2x1x1x8xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x1x8xf32>
  %sm = nn.add %sd, %bias : (tensor<2x4x8x8xf32>, tensor<2x1x1x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// torch.nn.MultiheadAttention, legacy export with need_weights (the
// default): the heads live merged with the batch, [b * h, s, d], taken
// from the input projection [s, b, h * d]; q scaled by 1/sqrt(d), the
// product and the mask (attn_mask [s, s] plus key_padding_mask expanded to
// [b * h, 1, s]) each multiplied by 1 (baddbmm's alpha and beta). It raises
// on [b, h, s, d], read off the projection's reshape, and is merged back.
// CHECK-LABEL: func.func @multihead_attention
// CHECK-SAME: (%[[QP:.*]]: tensor<8x2x32xf32>, %[[KP:.*]]: tensor<8x2x32xf32>, %[[VP:.*]]: tensor<8x2x32xf32>, %[[AM:.*]]: tensor<8x8xf32>, %[[KPM:.*]]: tensor<2x8xf32>)
func.func @multihead_attention(%qp: tensor<8x2x32xf32>, %kp: tensor<8x2x32xf32>, %vp: tensor<8x2x32xf32>, %am: tensor<8x8xf32>, %kpm: tensor<2x8xf32>) -> tensor<8x8x8xf32> {
  // CHECK: %[[MASK:.*]] = nn.add %{{.*}} : (tensor<1x8x8xf32>, tensor<8x1x8xf32>) -> tensor<8x8x8xf32>
  // CHECK-DAG: %[[Q4:.*]] = nn.reshape %{{.*}} : tensor<8x8x8xf32> -> tensor<2x4x8x8xf32>
  // CHECK-DAG: %[[K4:.*]] = nn.reshape %{{.*}} : tensor<8x8x8xf32> -> tensor<2x4x8x8xf32>
  // CHECK-DAG: %[[V4:.*]] = nn.reshape %{{.*}} : tensor<8x8x8xf32> -> tensor<2x4x8x8xf32>
  // CHECK-DAG: %[[M4:.*]] = nn.reshape %[[MASK]] : tensor<8x8x8xf32> -> tensor<2x4x8x8xf32>
  // CHECK: %[[O:.*]] = nn.attention %[[Q4]], %[[K4]], %[[V4]] mask %[[M4]] : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  // CHECK: %[[O3:.*]] = nn.reshape %[[O]] : tensor<2x4x8x8xf32> -> tensor<8x8x8xf32>
  // CHECK: return %[[O3]]
  %qr = nn.reshape %qp : tensor<8x2x32xf32> -> tensor<8x8x8xf32>
  %q = nn.transpose %qr permutation = [1, 0, 2] : tensor<8x8x8xf32> -> tensor<8x8x8xf32>
  %kr = nn.reshape %kp : tensor<8x2x32xf32> -> tensor<8x8x8xf32>
  %kt = nn.transpose %kr permutation = [1, 2, 0] : tensor<8x8x8xf32> -> tensor<8x8x8xf32>
  %vr = nn.reshape %vp : tensor<8x2x32xf32> -> tensor<8x8x8xf32>
  %v = nn.transpose %vr permutation = [1, 0, 2] : tensor<8x8x8xf32> -> tensor<8x8x8xf32>
  %am3 = nn.reshape %am : tensor<8x8xf32> -> tensor<1x8x8xf32>
  %kpm4 = nn.reshape %kpm : tensor<2x8xf32> -> tensor<2x1x1x8xf32>
  %kpmb = nn.broadcast_to %kpm4 : tensor<2x1x1x8xf32> -> tensor<2x4x1x8xf32>
  %kpm3 = nn.reshape %kpmb : tensor<2x4x1x8xf32> -> tensor<8x1x8xf32>
  %mask = nn.add %am3, %kpm3 : (tensor<1x8x8xf32>, tensor<8x1x8xf32>) -> tensor<8x8x8xf32>
  %c = nn.constant dense<0.353553385> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %qs = nn.mul %q, %c : (tensor<8x8x8xf32>, tensor<f32>) -> tensor<8x8x8xf32>
  %s = nn.matmul %qs, %kt : (tensor<8x8x8xf32>, tensor<8x8x8xf32>) -> tensor<8x8x8xf32>
  %sa = nn.mul %s, %one : (tensor<8x8x8xf32>, tensor<f32>) -> tensor<8x8x8xf32>
  %mb = nn.mul %mask, %one : (tensor<8x8x8xf32>, tensor<f32>) -> tensor<8x8x8xf32>
  %sm = nn.add %sa, %mb : (tensor<8x8x8xf32>, tensor<8x8x8xf32>) -> tensor<8x8x8xf32>
  %p = nn.softmax %sm axis = 2 : tensor<8x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<8x8x8xf32>, tensor<8x8x8xf32>) -> tensor<8x8x8xf32>
  return %o : tensor<8x8x8xf32>
}

// -----

// Rank-3 attention whose merged dimension has no visible origin: one batch
// of 6 heads. A mask broadcasting on that dimension keeps its shape.
// CHECK-LABEL: func.func @rank3_unknown_heads
// CHECK-SAME: (%[[Q:.*]]: tensor<6x4x8xf32>, %[[K:.*]]: tensor<6x4x8xf32>, %[[V:.*]]: tensor<6x4x8xf32>, %[[M:.*]]: tensor<1x4x4xi1>)
func.func @rank3_unknown_heads(%q: tensor<6x4x8xf32>, %k: tensor<6x4x8xf32>, %v: tensor<6x4x8xf32>, %m: tensor<1x4x4xi1>) -> tensor<6x4x8xf32> {
  // CHECK-DAG: %[[Q4:.*]] = nn.reshape %[[Q]] : tensor<6x4x8xf32> -> tensor<1x6x4x8xf32>
  // CHECK-DAG: %[[K4:.*]] = nn.reshape %[[K]] : tensor<6x4x8xf32> -> tensor<1x6x4x8xf32>
  // CHECK-DAG: %[[V4:.*]] = nn.reshape %[[V]] : tensor<6x4x8xf32> -> tensor<1x6x4x8xf32>
  // CHECK: nn.attention %[[Q4]], %[[K4]], %[[V4]] mask %[[M]] {scale = 1.000000e+00 : f32} : (tensor<1x6x4x8xf32>, tensor<1x6x4x8xf32>, tensor<1x6x4x8xf32>, tensor<1x4x4xi1>) -> tensor<1x6x4x8xf32>
  %kt = nn.transpose %k permutation = [0, 2, 1] : tensor<6x4x8xf32> -> tensor<6x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<6x4x8xf32>, tensor<6x8x4xf32>) -> tensor<6x4x4xf32>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %sm = nn.where %m, %s, %ninf : (tensor<1x4x4xi1>, tensor<6x4x4xf32>, tensor<f32>) -> tensor<6x4x4xf32>
  %p = nn.softmax %sm axis = 2 : tensor<6x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<6x4x4xf32>, tensor<6x4x8xf32>) -> tensor<6x4x8xf32>
  return %o : tensor<6x4x8xf32>
}

// -----

// Rank 3 with values shared by every head ([1, s, d] broadcast by the
// matmul): nn.attention does not broadcast its batch, so the block stays.
// CHECK-LABEL: func.func @rank3_broadcast_values
func.func @rank3_broadcast_values(%q: tensor<6x4x8xf32>, %k: tensor<6x4x8xf32>, %v: tensor<1x4x8xf32>) -> tensor<6x4x8xf32> {
  // CHECK-NOT: nn.attention
  // CHECK: nn.softmax
  %kt = nn.transpose %k permutation = [0, 2, 1] : tensor<6x4x8xf32> -> tensor<6x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<6x4x8xf32>, tensor<6x8x4xf32>) -> tensor<6x4x4xf32>
  %p = nn.softmax %s axis = 2 : tensor<6x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<6x4x4xf32>, tensor<1x4x8xf32>) -> tensor<6x4x8xf32>
  return %o : tensor<6x4x8xf32>
}

// -----

// T5: no scaling (q and k^T multiplied by 1), keys transposed straight from
// [b, s, h, d], and the relative position bias [1, h, sq, skv] combined
// with the padding mask as where(padding, bias, finfo.min), added. Scale 1,
// and the where is the mask.
// CHECK-LABEL: func.func @t5_relative_bias
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x8x4x16xf32>, %[[V:.*]]: tensor<2x4x8x16xf32>, %[[BIAS:.*]]: tensor<1x4x8x8xf32>, %[[PAD:.*]]: tensor<2x1x1x8xi1>)
func.func @t5_relative_bias(%q: tensor<2x4x8x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x4x8x16xf32>, %bias: tensor<1x4x8x8xf32>, %pad: tensor<2x1x1x8xi1>) -> tensor<2x4x8x16xf32> {
  // CHECK: %[[W:.*]] = nn.where %[[PAD]], %[[BIAS]]
  // CHECK: %[[KT:.*]] = nn.transpose %[[K]] permutation = [0, 2, 1, 3]
  // CHECK: nn.attention %[[Q]], %[[KT]], %[[V]] mask %[[W]] {scale = 1.000000e+00 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x8xf32>)
  %one = nn.constant dense<1.0> : tensor<f32>
  %qs = nn.mul %q, %one : (tensor<2x4x8x16xf32>, tensor<f32>) -> tensor<2x4x8x16xf32>
  %kt = nn.transpose %k permutation = [0, 2, 3, 1] : tensor<2x8x4x16xf32> -> tensor<2x4x16x8xf32>
  %kts = nn.mul %kt, %one : (tensor<2x4x16x8xf32>, tensor<f32>) -> tensor<2x4x16x8xf32>
  %s = nn.matmul %qs, %kts : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %min = nn.constant dense<-3.40282347E+38> : tensor<f32>
  %mask = nn.where %pad, %bias, %min : (tensor<2x1x1x8xi1>, tensor<1x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %sm = nn.add %s, %mask : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// T5's bias computed from constants folds to a constant [1, h, sq, skv]
// that is no causal pattern: it is the mask operand as it is.
// CHECK-LABEL: func.func @t5_constant_bias
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x2x16xf32>, %[[K:.*]]: tensor<1x2x2x16xf32>, %[[V:.*]]: tensor<1x2x2x16xf32>)
func.func @t5_constant_bias(%q: tensor<1x2x2x16xf32>, %k: tensor<1x2x2x16xf32>, %v: tensor<1x2x2x16xf32>) -> tensor<1x2x2x16xf32> {
  // CHECK: %[[BIAS:.*]] = nn.constant dense<{{.*}}> : tensor<1x2x2x2xf32>
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] mask %[[BIAS]] {scale = 1.000000e+00 : f32}
  %bias = nn.constant dense<[[[[0.5, -0.25], [0.125, 1.0]], [[-1.0, 0.0], [0.75, 0.25]]]]> : tensor<1x2x2x2xf32>
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x2x16xf32> -> tensor<1x2x16x2xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x2x16xf32>, tensor<1x2x16x2xf32>) -> tensor<1x2x2x2xf32>
  %sm = nn.add %s, %bias : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x2xf32>
  %p = nn.softmax %sm axis = 3 : tensor<1x2x2x2xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x2x2xf32>, tensor<1x2x2x16xf32>) -> tensor<1x2x2x16xf32>
  return %o : tensor<1x2x2x16xf32>
}

// -----

// A per-head factor [1, h, 1, 1] on the scores (no scalar) is no scale
// nn.attention has: the block stays.
// CHECK-LABEL: func.func @per_head_scale
func.func @per_head_scale(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %bias: tensor<1x4x8x8xf32>, %h: tensor<1x4x1x1xf32>) -> tensor<2x4x8x16xf32> {
  // CHECK-NOT: nn.attention
  // CHECK: nn.softmax
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %sh = nn.mul %s, %h : (tensor<2x4x8x8xf32>, tensor<1x4x1x1xf32>) -> tensor<2x4x8x8xf32>
  %sm = nn.add %sh, %bias : (tensor<2x4x8x8xf32>, tensor<1x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// BLOOM: baddbmm(alibi, q, kT) on heads merged into the batch ([b * h, s,
// d]), split to [b, h, s, s] for the mask and the softmax, merged again for
// the values. The merged parts are lifted to rank 4 and the ALiBi bias
// [b * h, 1, s] becomes a per-head term of the float mask.
// CHECK-LABEL: func.func @bloom_alibi
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x4x8x16xf32>, %[[V:.*]]: tensor<2x4x8x16xf32>, %[[ALIBI:.*]]: tensor<8x1x8xf32>, %[[M:.*]]: tensor<2x1x8x8xf32>)
// CHECK-NOT: nn.softmax
// CHECK: %[[A:.*]] = nn.reshape %{{.*}} : tensor<8x1x8xf32> -> tensor<2x4x1x8xf32>
// CHECK: %[[MASK:.*]] = nn.add %[[A]], %[[M]] : (tensor<2x4x1x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32>
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] mask %[[MASK]] {scale = 3.000000e-01 : f32}
// CHECK: nn.reshape %[[O]] : tensor<2x4x8x16xf32> -> tensor<8x8x16xf32>
func.func @bloom_alibi(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %alibi: tensor<8x1x8xf32>, %m: tensor<2x1x8x8xf32>) -> tensor<8x8x16xf32> {
  %q3 = nn.reshape %q : tensor<2x4x8x16xf32> -> tensor<8x8x16xf32>
  %k3 = nn.reshape %k : tensor<2x4x8x16xf32> -> tensor<8x8x16xf32>
  %kt = nn.transpose %k3 permutation = [0, 2, 1] : tensor<8x8x16xf32> -> tensor<8x16x8xf32>
  %s = nn.matmul %q3, %kt : (tensor<8x8x16xf32>, tensor<8x16x8xf32>) -> tensor<8x8x8xf32>
  %c = nn.constant dense<0.3> : tensor<f32>
  %scaled = nn.mul %s, %c : (tensor<8x8x8xf32>, tensor<f32>) -> tensor<8x8x8xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %beta = nn.mul %alibi, %one : (tensor<8x1x8xf32>, tensor<f32>) -> tensor<8x1x8xf32>
  %biased = nn.add %scaled, %beta : (tensor<8x8x8xf32>, tensor<8x1x8xf32>) -> tensor<8x8x8xf32>
  %s4 = nn.reshape %biased : tensor<8x8x8xf32> -> tensor<2x4x8x8xf32>
  %masked = nn.add %s4, %m : (tensor<2x4x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %masked axis = 3 : tensor<2x4x8x8xf32>
  %p3 = nn.reshape %p : tensor<2x4x8x8xf32> -> tensor<8x8x8xf32>
  %v3 = nn.reshape %v : tensor<2x4x8x16xf32> -> tensor<8x8x16xf32>
  %o = nn.matmul %p3, %v3 : (tensor<8x8x8xf32>, tensor<8x8x16xf32>) -> tensor<8x8x16xf32>
  return %o : tensor<8x8x16xf32>
}
