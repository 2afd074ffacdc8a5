// RUN: partita-opt %s --partita-raise -split-input-file | FileCheck %s

// GPT-2: fused qkv projection split into heads, k transposed straight to
// [b, h, d, s], division by sqrt(d), the constant causal bool mask applied
// with where(mask, scores, finfo.min), softmax, and the heads merged back.
// CHECK-LABEL: func.func @gpt2
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x64xf32>, %[[W:.*]]: tensor<64x192xf32>, %[[B:.*]]: tensor<192xf32>)
func.func @gpt2(%x: tensor<2x8x64xf32>, %w: tensor<64x192xf32>, %b: tensor<192xf32>) -> tensor<2x8x64xf32> {
  // CHECK: %[[QKV:.*]] = nn.matmul %[[X]], %[[W]] bias %[[B]]
  // CHECK: %[[HEADS:.*]]:3 = nn.split %[[QKV]]
  // CHECK-DAG: %[[QR:.*]] = nn.reshape %[[HEADS]]#0
  // CHECK-DAG: %[[Q:.*]] = nn.transpose %[[QR]] permutation = [0, 2, 1, 3]
  // CHECK-DAG: %[[KR:.*]] = nn.reshape %[[HEADS]]#1
  // CHECK-DAG: %[[K:.*]] = nn.transpose %[[KR]] permutation = [0, 2, 1, 3]
  // CHECK-DAG: %[[VR:.*]] = nn.reshape %[[HEADS]]#2
  // CHECK-DAG: %[[V:.*]] = nn.transpose %[[VR]] permutation = [0, 2, 1, 3]
  // CHECK-NOT: nn.softmax
  // CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] {causal} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  // CHECK: nn.transpose %[[O]] permutation = [0, 2, 1, 3]
  %qkv0 = nn.matmul %x, %w : (tensor<2x8x64xf32>, tensor<64x192xf32>) -> tensor<2x8x192xf32>
  %qkv = nn.add %qkv0, %b : (tensor<2x8x192xf32>, tensor<192xf32>) -> tensor<2x8x192xf32>
  %q, %k, %v = nn.split %qkv axis = 2 : tensor<2x8x192xf32> -> tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<2x8x64xf32>
  %q4 = nn.reshape %q : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
  %qt = nn.transpose %q4 permutation = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %k4 = nn.reshape %k : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
  %kt = nn.transpose %k4 permutation = [0, 2, 3, 1] : tensor<2x8x4x16xf32> -> tensor<2x4x16x8xf32>
  %v4 = nn.reshape %v : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
  %vt = nn.transpose %v4 permutation = [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %s = nn.matmul %qt, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %c = nn.constant dense<4.0> : tensor<f32>
  %sd = nn.div %s, %c : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %mask = nn.constant dense<[[[[true, false, false, false, false, false, false, false], [true, true, false, false, false, false, false, false], [true, true, true, false, false, false, false, false], [true, true, true, true, false, false, false, false], [true, true, true, true, true, false, false, false], [true, true, true, true, true, true, false, false], [true, true, true, true, true, true, true, false], [true, true, true, true, true, true, true, true]]]]> : tensor<1x1x8x8xi1>
  %min = nn.constant dense<-3.40282347E+38> : tensor<f32>
  %sm = nn.where %mask, %sd, %min : (tensor<1x1x8x8xi1>, tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %vt : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %ot = nn.transpose %o permutation = [0, 2, 1, 3] : tensor<2x4x8x16xf32> -> tensor<2x8x4x16xf32>
  %or = nn.reshape %ot : tensor<2x8x4x16xf32> -> tensor<2x8x64xf32>
  return %or : tensor<2x8x64xf32>
}

// -----

// Llama: 8 query heads over 2 key/value heads repeated by repeat_kv
// (unsqueeze, expand, reshape), k^T as transpose(k, [0, 1, 3, 2]), scores
// multiplied by 1/sqrt(d), and the additive causal mask with finfo.min.
// CHECK-LABEL: func.func @llama
// CHECK-SAME: (%[[Q:.*]]: tensor<1x8x8x16xf32>, %[[K:.*]]: tensor<1x2x8x16xf32>, %[[V:.*]]: tensor<1x2x8x16xf32>)
func.func @llama(%q: tensor<1x8x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>) -> tensor<1x8x8x16xf32> {
  // CHECK-NOT: nn.softmax
  // CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] {causal} : (tensor<1x8x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x8x8x16xf32>
  // CHECK-NEXT: return %[[O]]
  %k5 = nn.reshape %k : tensor<1x2x8x16xf32> -> tensor<1x2x1x8x16xf32>
  %kb = nn.broadcast_to %k5 : tensor<1x2x1x8x16xf32> -> tensor<1x2x4x8x16xf32>
  %kr = nn.reshape %kb : tensor<1x2x4x8x16xf32> -> tensor<1x8x8x16xf32>
  %v5 = nn.reshape %v : tensor<1x2x8x16xf32> -> tensor<1x2x1x8x16xf32>
  %vb = nn.broadcast_to %v5 : tensor<1x2x1x8x16xf32> -> tensor<1x2x4x8x16xf32>
  %vr = nn.reshape %vb : tensor<1x2x4x8x16xf32> -> tensor<1x8x8x16xf32>
  %kt = nn.transpose %kr permutation = [0, 1, 3, 2] : tensor<1x8x8x16xf32> -> tensor<1x8x16x8xf32>
  %s = nn.matmul %q, %kt : (tensor<1x8x8x16xf32>, tensor<1x8x16x8xf32>) -> tensor<1x8x8x8xf32>
  %c = nn.constant dense<0.25> : tensor<f32>
  %ss = nn.mul %s, %c : (tensor<1x8x8x8xf32>, tensor<f32>) -> tensor<1x8x8x8xf32>
  %mask = nn.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x8x8xf32>
  %sm = nn.add %ss, %mask : (tensor<1x8x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<1x8x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<1x8x8x8xf32>
  %o = nn.matmul %p, %vr : (tensor<1x8x8x8xf32>, tensor<1x8x8x16xf32>) -> tensor<1x8x8x16xf32>
  return %o : tensor<1x8x8x16xf32>
}

// -----

// BERT: a padding mask computed from the attention_mask input, [b, 1, 1, s],
// added after the scaling; the scale is the default 1/sqrt(d).
// CHECK-LABEL: func.func @bert
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x4x8x16xf32>, %[[V:.*]]: tensor<2x4x8x16xf32>, %[[M:.*]]: tensor<2x1x1x8xf32>)
func.func @bert(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %m: tensor<2x1x1x8xf32>) -> tensor<2x4x8x16xf32> {
  // CHECK-NOT: nn.softmax
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x1x1x8xf32>) -> tensor<2x4x8x16xf32>
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %c = nn.constant dense<4.0> : tensor<f32>
  %sd = nn.div %s, %c : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %sm = nn.add %sd, %m : (tensor<2x4x8x8xf32>, tensor<2x1x1x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// Causal plus padding: the constant causal where, then the padding mask
// added. The causal part becomes the attribute, the padding the operand.
// No scaling at all is scale 1.
// CHECK-LABEL: func.func @causal_and_padding
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x4x8x16xf32>, %[[V:.*]]: tensor<2x4x8x16xf32>, %[[M:.*]]: tensor<2x1x1x8xf32>)
func.func @causal_and_padding(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %m: tensor<2x1x1x8xf32>) -> tensor<2x4x8x16xf32> {
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] {causal, scale = 1.000000e+00 : f32}
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %mask = nn.constant dense<[[[[true, false, false, false, false, false, false, false], [true, true, false, false, false, false, false, false], [true, true, true, false, false, false, false, false], [true, true, true, true, false, false, false, false], [true, true, true, true, true, false, false, false], [true, true, true, true, true, true, false, false], [true, true, true, true, true, true, true, false], [true, true, true, true, true, true, true, true]]]]> : tensor<1x1x8x8xi1>
  %min = nn.constant dense<-1.0e4> : tensor<f32>
  %sc = nn.where %mask, %s, %min : (tensor<1x1x8x8xi1>, tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %sm = nn.add %m, %sc : (tensor<2x1x1x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// A boolean padding mask through where: the mask operand stays boolean. The
// scale 1/8 is not the default 1/sqrt(16).
// CHECK-LABEL: func.func @bool_padding
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8x16xf32>, %[[K:.*]]: tensor<2x4x8x16xf32>, %[[V:.*]]: tensor<2x4x8x16xf32>, %[[M:.*]]: tensor<2x1x1x8xi1>)
func.func @bool_padding(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %m: tensor<2x1x1x8xi1>) -> tensor<2x4x8x16xf32> {
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] {scale = 1.250000e-01 : f32} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x1x1x8xi1>)
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %c = nn.constant dense<0.125> : tensor<f32>
  %ss = nn.mul %c, %s : (tensor<f32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %sm = nn.where %m, %ss, %ninf : (tensor<2x1x1x8xi1>, tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// masked_fill(mask, -inf) exports as where(mask, -inf, scores): true marks
// what is masked out. Here the mask is a dense_resource blob holding the
// strict upper triangle, which is causal.
// CHECK-LABEL: func.func @masked_fill_resource
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x2x4x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
func.func @masked_fill_resource(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 1.000000e+00 : f32}
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %mask = nn.constant dense_resource<upper> : tensor<4x4xi1>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %sm = nn.where %mask, %ninf, %s : (tensor<4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %sm axis = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

{-#
  dialect_resources: {
    builtin: {
      upper: "0x0100000000010101000001010000000100000000"
    }
  }
#-}

// -----

// A non-constant boolean mask through masked_fill is negated.
// CHECK-LABEL: func.func @masked_fill_input
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x2x4x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>, %[[M:.*]]: tensor<1x1x1x4xi1>)
func.func @masked_fill_input(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %m: tensor<1x1x1x4xi1>) -> tensor<1x2x4x8xf32> {
  // CHECK: %[[KEEP:.*]] = nn.not %[[M]]
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] mask %[[KEEP]]
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %ninf = nn.constant dense<0xFF800000> : tensor<f32>
  %sm = nn.where %m, %ninf, %s : (tensor<1x1x1x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = nn.softmax %sm axis = 3 : tensor<1x2x4x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// GPT-2 with a KV cache: the causal buffer, a 16x16 dense_resource blob,
// sliced to the rows of the 4 new queries over 8 keys.
// CHECK-LABEL: func.func @sliced_causal_buffer
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x2x8x8xf32>, %[[V:.*]]: tensor<1x2x8x8xf32>)
func.func @sliced_causal_buffer(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>) -> tensor<1x2x4x8xf32> {
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] {causal} :
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x8x8xf32> -> tensor<1x2x8x8xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x4x8xf32>
  %c = nn.constant dense<2.82842708> : tensor<f32>
  %sd = nn.div %s, %c : (tensor<1x2x4x8xf32>, tensor<f32>) -> tensor<1x2x4x8xf32>
  %buffer = nn.constant dense_resource<causal_buffer> : tensor<1x1x16x16xi1>
  %mask = nn.slice %buffer start = [0, 0, 4, 0] limit = [1, 1, 8, 8] stride = [1, 1, 1, 1] : tensor<1x1x16x16xi1> -> tensor<1x1x4x8xi1>
  %min = nn.constant dense<-3.40282347E+38> : tensor<f32>
  %sm = nn.where %mask, %sd, %min : (tensor<1x1x4x8xi1>, tensor<1x2x4x8xf32>, tensor<f32>) -> tensor<1x2x4x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<1x2x4x8xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x4x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

{-#
  dialect_resources: {
    builtin: {
      causal_buffer: "0x0100000001000000000000000000000000000000010100000000000000000000000000000101010000000000000000000000000001010101000000000000000000000000010101010100000000000000000000000101010101010000000000000000000001010101010101000000000000000000010101010101010100000000000000000101010101010101010000000000000001010101010101010101000000000000010101010101010101010100000000000101010101010101010101010000000001010101010101010101010101000000010101010101010101010101010100000101010101010101010101010101010001010101010101010101010101010101"
    }
  }
#-}

// -----

// Two new queries over four cached keys: the causal mask is aligned at the
// last position (query i keeps keys j <= i + 2).
// CHECK-LABEL: func.func @kv_cache_causal
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x2x16xf32>, %[[K:.*]]: tensor<1x2x4x16xf32>, %[[V:.*]]: tensor<1x2x4x16xf32>)
func.func @kv_cache_causal(%q: tensor<1x2x2x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>) -> tensor<1x2x2x16xf32> {
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] {causal} :
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x16xf32> -> tensor<1x2x16x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x2x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x2x4xf32>
  %c = nn.constant dense<4.0> : tensor<1xf32>
  %sd = nn.div %s, %c : (tensor<1x2x2x4xf32>, tensor<1xf32>) -> tensor<1x2x2x4xf32>
  %mask = nn.constant dense<[[0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]> : tensor<2x4xf32>
  %sm = nn.add %sd, %mask : (tensor<1x2x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x2x4xf32>
  %p = nn.softmax %sm axis = 3 : tensor<1x2x2x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x2x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x2x16xf32>
  return %o : tensor<1x2x2x16xf32>
}

// -----

// The same shapes with the triangle aligned at the first position: that is
// not nn.attention's causal, so the constant becomes the mask operand.
// CHECK-LABEL: func.func @not_causal
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x2x16xf32>, %[[K:.*]]: tensor<1x2x4x16xf32>, %[[V:.*]]: tensor<1x2x4x16xf32>)
func.func @not_causal(%q: tensor<1x2x2x16xf32>, %k: tensor<1x2x4x16xf32>, %v: tensor<1x2x4x16xf32>) -> tensor<1x2x2x16xf32> {
  // CHECK: %[[M:.*]] = nn.constant
  // CHECK-NOT: causal
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] :
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x16xf32> -> tensor<1x2x16x4xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x2x16xf32>, tensor<1x2x16x4xf32>) -> tensor<1x2x2x4xf32>
  %c = nn.constant dense<4.0> : tensor<1xf32>
  %sd = nn.div %s, %c : (tensor<1x2x2x4xf32>, tensor<1xf32>) -> tensor<1x2x2x4xf32>
  %mask = nn.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000]]> : tensor<2x4xf32>
  %sm = nn.add %sd, %mask : (tensor<1x2x2x4xf32>, tensor<2x4xf32>) -> tensor<1x2x2x4xf32>
  %p = nn.softmax %sm axis = 3 : tensor<1x2x2x4xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x2x4xf32>, tensor<1x2x4x16xf32>) -> tensor<1x2x2x16xf32>
  return %o : tensor<1x2x2x16xf32>
}

// -----

// q and k each scaled by d^-1/4 (the default scale in total), and a batch-1
// padding mask [1, 1, 1, s] added right after the product, where it may
// first become the product's bias epilogue.
// CHECK-LABEL: func.func @split_scale_mask_as_bias
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x8x16xf32>, %[[K:.*]]: tensor<1x4x8x16xf32>, %[[V:.*]]: tensor<1x4x8x16xf32>, %[[M:.*]]: tensor<1x1x1x8xf32>)
func.func @split_scale_mask_as_bias(%q: tensor<1x4x8x16xf32>, %k: tensor<1x4x8x16xf32>, %v: tensor<1x4x8x16xf32>, %m: tensor<1x1x1x8xf32>) -> tensor<1x4x8x16xf32> {
  // CHECK-NOT: nn.softmax
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] mask %{{.*}} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<{{.*}}xf32>) -> tensor<1x4x8x16xf32>
  %c = nn.constant dense<0.5> : tensor<f32>
  %qs = nn.mul %q, %c : (tensor<1x4x8x16xf32>, tensor<f32>) -> tensor<1x4x8x16xf32>
  %ks = nn.mul %k, %c : (tensor<1x4x8x16xf32>, tensor<f32>) -> tensor<1x4x8x16xf32>
  %kt = nn.transpose %ks permutation = [0, 1, 3, 2] : tensor<1x4x8x16xf32> -> tensor<1x4x16x8xf32>
  %s = nn.matmul %qs, %kt : (tensor<1x4x8x16xf32>, tensor<1x4x16x8xf32>) -> tensor<1x4x8x8xf32>
  %sm = nn.add %s, %m : (tensor<1x4x8x8xf32>, tensor<1x1x1x8xf32>) -> tensor<1x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<1x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<1x4x8x8xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

// -----

// The mask already folded into the product as its bias epilogue, with no
// scaling after it: the bias is the mask.
// CHECK-LABEL: func.func @mask_in_bias
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x8x16xf32>, %[[K:.*]]: tensor<1x4x8x16xf32>, %[[V:.*]]: tensor<1x4x8x16xf32>, %[[M:.*]]: tensor<8xf32>)
func.func @mask_in_bias(%q: tensor<1x4x8x16xf32>, %k: tensor<1x4x8x16xf32>, %v: tensor<1x4x8x16xf32>, %m: tensor<8xf32>) -> tensor<1x4x8x16xf32> {
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] {scale = 1.000000e+00 : f32}
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x4x8x16xf32> -> tensor<1x4x16x8xf32>
  %s = nn.matmul %q, %kt bias %m : (tensor<1x4x8x16xf32>, tensor<1x4x16x8xf32>, tensor<8xf32>) -> tensor<1x4x8x8xf32>
  %p = nn.softmax %s axis = 3 : tensor<1x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<1x4x8x8xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

// -----

// Both a boolean and a float mask that are not causal: nn.attention takes
// one kind, so the block stays.
// CHECK-LABEL: func.func @mixed_masks
func.func @mixed_masks(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %b: tensor<2x1x1x8xi1>, %m: tensor<2x1x1x8xf32>) -> tensor<2x4x8x16xf32> {
  // CHECK-NOT: nn.attention
  // CHECK: nn.softmax
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %min = nn.constant dense<-1.0e9> : tensor<f32>
  %sw = nn.where %b, %s, %min : (tensor<2x1x1x8xi1>, tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %sm = nn.add %sw, %m : (tensor<2x4x8x8xf32>, tensor<2x1x1x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// fp16 with the softmax computed in f32, as HF does.
// CHECK-LABEL: func.func @f16_softmax_in_f32
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf16>, %[[K:.*]]: tensor<1x2x4x8xf16>, %[[V:.*]]: tensor<1x2x4x8xf16>)
func.func @f16_softmax_in_f32(%q: tensor<1x2x4x8xf16>, %k: tensor<1x2x4x8xf16>, %v: tensor<1x2x4x8xf16>) -> tensor<1x2x4x8xf16> {
  // CHECK-NOT: nn.cast
  // CHECK: nn.attention %[[Q]], %[[K]], %[[V]] {scale = 1.000000e+00 : f32}
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<1x2x4x8xf16> -> tensor<1x2x8x4xf16>
  %s = nn.matmul %q, %kt : (tensor<1x2x4x8xf16>, tensor<1x2x8x4xf16>) -> tensor<1x2x4x4xf16>
  %s32 = nn.cast %s : tensor<1x2x4x4xf16> -> tensor<1x2x4x4xf32>
  %p32 = nn.softmax %s32 axis = 3 : tensor<1x2x4x4xf32>
  %p = nn.cast %p32 : tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf16>
  %o = nn.matmul %p, %v : (tensor<1x2x4x4xf16>, tensor<1x2x4x8xf16>) -> tensor<1x2x4x8xf16>
  return %o : tensor<1x2x4x8xf16>
}

// -----

// Softmax over the query axis: not attention.
// CHECK-LABEL: func.func @softmax_not_last_axis
func.func @softmax_not_last_axis(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32> {
  // CHECK-NOT: nn.attention
  // CHECK: nn.softmax
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %s axis = 2 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// The probabilities are also returned (output_attentions): raising would
// keep the softmax alive, so the block stays.
// CHECK-LABEL: func.func @probs_used_twice
func.func @probs_used_twice(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x8xf32>) {
  // CHECK-NOT: nn.attention
  // CHECK: nn.softmax
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %s axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o, %p : tensor<2x4x8x16xf32>, tensor<2x4x8x8xf32>
}

// -----

// A scale applied after the mask would scale the mask too: left alone.
// CHECK-LABEL: func.func @scale_after_mask
func.func @scale_after_mask(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %m: tensor<2x1x1x8xf32>) -> tensor<2x4x8x16xf32> {
  // CHECK-NOT: nn.attention
  // CHECK: nn.softmax
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %sm = nn.add %s, %m : (tensor<2x4x8x8xf32>, tensor<2x1x1x8xf32>) -> tensor<2x4x8x8xf32>
  %c = nn.constant dense<4.0> : tensor<f32>
  %sd = nn.div %sm, %c : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %sd axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// A where whose fill is not a large negative constant is no mask.
// CHECK-LABEL: func.func @where_small_fill
func.func @where_small_fill(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %m: tensor<2x1x1x8xi1>) -> tensor<2x4x8x16xf32> {
  // CHECK-NOT: nn.attention
  // CHECK: nn.softmax
  %kt = nn.transpose %k permutation = [0, 1, 3, 2] : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %fill = nn.constant dense<-1.0> : tensor<f32>
  %sm = nn.where %m, %s, %fill : (tensor<2x1x1x8xi1>, tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %sm axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// Gemma2: the scaled scores capped as 5 * tanh(s / 5) before the mask:
// nn.attention's softcap.
// CHECK-LABEL: func.func @gemma2_softcap
// CHECK-NOT: nn.softmax
// CHECK-NOT: nn.tanh
// CHECK: nn.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} {scale = 3.000000e-01 : f32, softcap = 5.000000e+00 : f32}
func.func @gemma2_softcap(%q: tensor<2x4x8x16xf32>, %kt: tensor<2x4x16x8xf32>, %v: tensor<2x4x8x16xf32>, %m: tensor<2x1x8x8xf32>) -> tensor<2x4x8x16xf32> {
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %c = nn.constant dense<0.3> : tensor<f32>
  %scaled = nn.mul %s, %c : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %cap = nn.constant dense<5.0> : tensor<f32>
  %d = nn.div %scaled, %cap : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %t = nn.tanh %d : tensor<2x4x8x8xf32>
  %capped = nn.mul %t, %cap : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %masked = nn.add %capped, %m : (tensor<2x4x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %masked axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// A mask inside the cap would be capped too: not raised.
// CHECK-LABEL: func.func @mask_inside_softcap
// CHECK: nn.softmax
// CHECK-NOT: nn.attention
func.func @mask_inside_softcap(%q: tensor<2x4x8x16xf32>, %kt: tensor<2x4x16x8xf32>, %v: tensor<2x4x8x16xf32>, %m: tensor<2x1x8x8xf32>) -> tensor<2x4x8x16xf32> {
  %s = nn.matmul %q, %kt : (tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x8x8xf32>
  %masked = nn.add %s, %m : (tensor<2x4x8x8xf32>, tensor<2x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %cap = nn.constant dense<5.0> : tensor<f32>
  %d = nn.div %masked, %cap : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %t = nn.tanh %d : tensor<2x4x8x8xf32>
  %capped = nn.mul %t, %cap : (tensor<2x4x8x8xf32>, tensor<f32>) -> tensor<2x4x8x8xf32>
  %p = nn.softmax %capped axis = 3 : tensor<2x4x8x8xf32>
  %o = nn.matmul %p, %v : (tensor<2x4x8x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}

// -----

// A sliding window (Mistral's): the constant keeps key j for query i where
// 0 <= i - j < 3; it becomes `causal` with `window = 3`, the padding the
// mask operand.
// CHECK-LABEL: func.func @sliding_window
// CHECK: nn.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} {causal, window = 3 : i64} : (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x1x1x6xi1>)
func.func @sliding_window(%q: tensor<1x2x6x4xf32>, %kt: tensor<1x2x4x6xf32>, %v: tensor<1x2x6x4xf32>, %pad: tensor<1x1x1x6xi1>) -> tensor<1x2x6x4xf32> {
  %s = nn.matmul %q, %kt : (tensor<1x2x6x4xf32>, tensor<1x2x4x6xf32>) -> tensor<1x2x6x6xf32>
  %c = nn.constant dense<2.0> : tensor<f32>
  %d = nn.div %s, %c : (tensor<1x2x6x6xf32>, tensor<f32>) -> tensor<1x2x6x6xf32>
  %w = nn.constant dense<[[true, false, false, false, false, false], [true, true, false, false, false, false], [true, true, true, false, false, false], [false, true, true, true, false, false], [false, false, true, true, true, false], [false, false, false, true, true, true]]> : tensor<6x6xi1>
  %keep = nn.and %pad, %w : (tensor<1x1x1x6xi1>, tensor<6x6xi1>) -> tensor<1x1x6x6xi1>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %inf = nn.constant dense<0xFF800000> : tensor<f32>
  %m = nn.where %keep, %zero, %inf : (tensor<1x1x6x6xi1>, tensor<f32>, tensor<f32>) -> tensor<1x1x6x6xf32>
  %a = nn.add %d, %m : (tensor<1x2x6x6xf32>, tensor<1x1x6x6xf32>) -> tensor<1x2x6x6xf32>
  %p = nn.softmax %a axis = 3 : tensor<1x2x6x6xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x6x6xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x6x4xf32>
  return %o : tensor<1x2x6x4xf32>
}

// -----

// The same window added as finfo.min (Gemma2's eager export) stays the
// mask: a row whose window is all padding averages every value there,
// which only the mask reproduces.
// CHECK-LABEL: func.func @window_of_finfo_min
// CHECK: nn.attention {{.*}} mask %{{.*}} : (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<6x6xf32>)
func.func @window_of_finfo_min(%q: tensor<1x2x6x4xf32>, %kt: tensor<1x2x4x6xf32>, %v: tensor<1x2x6x4xf32>) -> tensor<1x2x6x4xf32> {
  %s = nn.matmul %q, %kt : (tensor<1x2x6x4xf32>, tensor<1x2x4x6xf32>) -> tensor<1x2x6x6xf32>
  %c = nn.constant dense<2.0> : tensor<f32>
  %d = nn.div %s, %c : (tensor<1x2x6x6xf32>, tensor<f32>) -> tensor<1x2x6x6xf32>
  %m = nn.constant dense<[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [-3.40282347E+38, 0.0, 0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [-3.40282347E+38, -3.40282347E+38, 0.0, 0.0, 0.0, -3.40282347E+38], [-3.40282347E+38, -3.40282347E+38, -3.40282347E+38, 0.0, 0.0, 0.0]]> : tensor<6x6xf32>
  %a = nn.add %d, %m : (tensor<1x2x6x6xf32>, tensor<6x6xf32>) -> tensor<1x2x6x6xf32>
  %p = nn.softmax %a axis = 3 : tensor<1x2x6x6xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x6x6xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x6x4xf32>
  return %o : tensor<1x2x6x4xf32>
}

// -----

// ONNX's Attention (the dynamo exporter at opset 23) imported with
// `and(padding, window)` as its mask: the window's pattern becomes the
// attributes, the padding stays the mask.
// CHECK-LABEL: func.func @imported_window
// CHECK: nn.attention %arg0, %arg1, %arg2 mask %arg3 {causal, scale = 5.000000e-01 : f32, window = 3 : i64}
func.func @imported_window(%q: tensor<1x2x6x4xf32>, %k: tensor<1x2x6x4xf32>, %v: tensor<1x2x6x4xf32>, %pad: tensor<1x1x1x6xi1>) -> tensor<1x2x6x4xf32> {
  %w = nn.constant dense<[[true, false, false, false, false, false], [true, true, false, false, false, false], [true, true, true, false, false, false], [false, true, true, true, false, false], [false, false, true, true, true, false], [false, false, false, true, true, true]]> : tensor<6x6xi1>
  %keep = nn.and %pad, %w : (tensor<1x1x1x6xi1>, tensor<6x6xi1>) -> tensor<1x1x6x6xi1>
  %o = nn.attention %q, %k, %v mask %keep {scale = 0.5 : f32} : (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x1x6x6xi1>) -> tensor<1x2x6x4xf32>
  return %o : tensor<1x2x6x4xf32>
}
