// RUN: partita-opt %s --partita-raise -split-input-file | FileCheck %s --enable-var-scope

// Llama's rotary embedding with the tables folded to constants (a static
// export): x * cos + rotate_half(x) * sin, rotate_half(x) = concat(-x2, x1),
// cos and sin [1, 1, s, d] with equal halves. nn.rope takes their first
// halves, [1, s, d/2].
// CHECK-LABEL: func.func @constant_tables
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x2x4xf32>)
func.func @constant_tables(%x: tensor<2x4x2x4xf32>) -> tensor<2x4x2x4xf32> {
  // CHECK-DAG: %[[COS:.*]] = nn.constant dense<{{\[\[\[}}1.000000e+00, 1.000000e+00], [5.000000e-01, 2.500000e-01]]]> : tensor<1x2x2xf32>
  // CHECK-DAG: %[[SIN:.*]] = nn.constant dense<{{\[\[\[}}0.000000e+00, 0.000000e+00], [7.500000e-01, 1.250000e-01]]]> : tensor<1x2x2xf32>
  // CHECK: %[[Y:.*]] = nn.rope %[[X]], %[[COS]], %[[SIN]] : (tensor<2x4x2x4xf32>, tensor<1x2x2xf32>, tensor<1x2x2xf32>) -> tensor<2x4x2x4xf32>
  // CHECK-NEXT: return %[[Y]]
  %cos = nn.constant dense<[[[[1.0, 1.0, 1.0, 1.0], [0.5, 0.25, 0.5, 0.25]]]]> : tensor<1x1x2x4xf32>
  %sin = nn.constant dense<[[[[0.0, 0.0, 0.0, 0.0], [0.75, 0.125, 0.75, 0.125]]]]> : tensor<1x1x2x4xf32>
  %xc = nn.mul %x, %cos : (tensor<2x4x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<2x4x2x4xf32>
  %x1 = nn.slice %x start = [0, 0, 0, 0] limit = [2, 4, 2, 2] stride = [1, 1, 1, 1] : tensor<2x4x2x4xf32> -> tensor<2x4x2x2xf32>
  %x2 = nn.slice %x start = [0, 0, 0, 2] limit = [2, 4, 2, 4] stride = [1, 1, 1, 1] : tensor<2x4x2x4xf32> -> tensor<2x4x2x2xf32>
  %n2 = nn.neg %x2 : tensor<2x4x2x2xf32>
  %rot = nn.concat %n2, %x1 axis = 3 : (tensor<2x4x2x2xf32>, tensor<2x4x2x2xf32>) -> tensor<2x4x2x4xf32>
  %rs = nn.mul %rot, %sin : (tensor<2x4x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<2x4x2x4xf32>
  %y = nn.add %xc, %rs : (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> tensor<2x4x2x4xf32>
  return %y : tensor<2x4x2x4xf32>
}

// -----

// Tables computed from a position input: the rows of constant caches
// gathered at position_ids (cos_cached[position_ids], as nn.embedding or
// nn.gather), unsqueezed on the
// heads and scaled by attention_scaling; rotate_half's negation written as
// a product by -1. Each batch row has its own positions: [b, s, d/2].
// CHECK-LABEL: func.func @gathered_positions
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x2x4xf32>, %[[POS:.*]]: tensor<2x2xi64>)
func.func @gathered_positions(%x: tensor<2x4x2x4xf32>, %pos: tensor<2x2xi64>) -> tensor<2x4x2x4xf32> {
  // CHECK-NOT: nn.concat
  // CHECK: nn.rope %[[X]], %{{.*}}, %{{.*}} : (tensor<2x4x2x4xf32>, tensor<2x2x2xf32>, tensor<2x2x2xf32>) -> tensor<2x4x2x4xf32>
  %cc = nn.constant dense<[[1.0, 0.5, 1.0, 0.5], [0.25, 0.125, 0.25, 0.125], [0.0, 1.0, 0.0, 1.0]]> : tensor<3x4xf32>
  %sc = nn.constant dense<[[0.0, 0.5, 0.0, 0.5], [0.75, 0.625, 0.75, 0.625], [1.0, 0.0, 1.0, 0.0]]> : tensor<3x4xf32>
  %scale = nn.constant dense<0.5> : tensor<f32>
  %minus = nn.constant dense<-1.0> : tensor<f32>
  %cg = nn.embedding %cc, %pos : (tensor<3x4xf32>, tensor<2x2xi64>) -> tensor<2x2x4xf32>
  %c4 = nn.reshape %cg : tensor<2x2x4xf32> -> tensor<2x1x2x4xf32>
  %cos = nn.mul %c4, %scale : (tensor<2x1x2x4xf32>, tensor<f32>) -> tensor<2x1x2x4xf32>
  %sg = nn.gather %sc, %pos axis = 0 : (tensor<3x4xf32>, tensor<2x2xi64>) -> tensor<2x2x4xf32>
  %s4 = nn.reshape %sg : tensor<2x2x4xf32> -> tensor<2x1x2x4xf32>
  %sin = nn.mul %s4, %scale : (tensor<2x1x2x4xf32>, tensor<f32>) -> tensor<2x1x2x4xf32>
  %xc = nn.mul %cos, %x : (tensor<2x1x2x4xf32>, tensor<2x4x2x4xf32>) -> tensor<2x4x2x4xf32>
  %x1 = nn.slice %x start = [0, 0, 0, 0] limit = [2, 4, 2, 2] stride = [1, 1, 1, 1] : tensor<2x4x2x4xf32> -> tensor<2x4x2x2xf32>
  %x2 = nn.slice %x start = [0, 0, 0, 2] limit = [2, 4, 2, 4] stride = [1, 1, 1, 1] : tensor<2x4x2x4xf32> -> tensor<2x4x2x2xf32>
  %n2 = nn.mul %x2, %minus : (tensor<2x4x2x2xf32>, tensor<f32>) -> tensor<2x4x2x2xf32>
  %rot = nn.concat %n2, %x1 axis = 3 : (tensor<2x4x2x2xf32>, tensor<2x4x2x2xf32>) -> tensor<2x4x2x4xf32>
  %rs = nn.mul %sin, %rot : (tensor<2x1x2x4xf32>, tensor<2x4x2x4xf32>) -> tensor<2x4x2x4xf32>
  %y = nn.add %rs, %xc : (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) -> tensor<2x4x2x4xf32>
  return %y : tensor<2x4x2x4xf32>
}

// -----

// HF's rotary module: emb = concat(freqs, freqs) of the positions times the
// inverse frequencies, then an elementwise function of one operand (Cos and
// Sin in the export; nn.exp and nn.tanh stand in for them here, any such
// op keeps the halves equal). The table halves are slices of the tables.
// CHECK-LABEL: func.func @concatenated_frequencies
// CHECK-SAME: (%[[X:.*]]: tensor<1x4x2x4xf32>, %[[F:.*]]: tensor<1x2x2xf32>)
func.func @concatenated_frequencies(%x: tensor<1x4x2x4xf32>, %f: tensor<1x2x2xf32>) -> tensor<1x4x2x4xf32> {
  // CHECK: %[[EMB:.*]] = nn.concat %[[F]], %[[F]] axis = 2
  // CHECK-DAG: %[[C:.*]] = nn.exp %[[EMB]]
  // CHECK-DAG: %[[S:.*]] = nn.tanh %[[EMB]]
  // CHECK-DAG: %[[CH:.*]] = nn.slice %[[C]] start = [0, 0, 0] limit = [1, 2, 2]
  // CHECK-DAG: %[[SH:.*]] = nn.slice %[[S]] start = [0, 0, 0] limit = [1, 2, 2]
  // CHECK: nn.rope %[[X]], %[[CH]], %[[SH]] : (tensor<1x4x2x4xf32>, tensor<1x2x2xf32>, tensor<1x2x2xf32>) -> tensor<1x4x2x4xf32>
  %emb = nn.concat %f, %f axis = 2 : (tensor<1x2x2xf32>, tensor<1x2x2xf32>) -> tensor<1x2x4xf32>
  %cos = nn.exp %emb : tensor<1x2x4xf32>
  %sin = nn.tanh %emb : tensor<1x2x4xf32>
  %xc = nn.mul %x, %cos : (tensor<1x4x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x4x2x4xf32>
  %x1 = nn.slice %x start = [0, 0, 0, 0] limit = [1, 4, 2, 2] stride = [1, 1, 1, 1] : tensor<1x4x2x4xf32> -> tensor<1x4x2x2xf32>
  %x2 = nn.slice %x start = [0, 0, 0, 2] limit = [1, 4, 2, 4] stride = [1, 1, 1, 1] : tensor<1x4x2x4xf32> -> tensor<1x4x2x2xf32>
  %n2 = nn.neg %x2 : tensor<1x4x2x2xf32>
  %rot = nn.concat %n2, %x1 axis = 3 : (tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>) -> tensor<1x4x2x4xf32>
  %rs = nn.mul %rot, %sin : (tensor<1x4x2x4xf32>, tensor<1x2x4xf32>) -> tensor<1x4x2x4xf32>
  %y = nn.add %xc, %rs : (tensor<1x4x2x4xf32>, tensor<1x4x2x4xf32>) -> tensor<1x4x2x4xf32>
  return %y : tensor<1x4x2x4xf32>
}

// -----

// Partial rotary embedding (Phi, GPT-NeoX): the first 4 of 8 features
// rotate, the others pass through; one nn.rope of the whole head.
// CHECK-LABEL: func.func @partial_rotary
// CHECK-SAME: (%[[X:.*]]: tensor<1x2x2x8xf32>)
func.func @partial_rotary(%x: tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32> {
  // CHECK-NOT: nn.concat
  // CHECK: %[[Y:.*]] = nn.rope %[[X]], %{{.*}}, %{{.*}} : (tensor<1x2x2x8xf32>, tensor<1x2x2xf32>, tensor<1x2x2xf32>) -> tensor<1x2x2x8xf32>
  // CHECK-NEXT: return %[[Y]]
  %cos = nn.constant dense<[[[[1.0, 0.5, 1.0, 0.5], [0.25, 0.0, 0.25, 0.0]]]]> : tensor<1x1x2x4xf32>
  %sin = nn.constant dense<[[[[0.0, 0.5, 0.0, 0.5], [0.75, 1.0, 0.75, 1.0]]]]> : tensor<1x1x2x4xf32>
  %xr = nn.slice %x start = [0, 0, 0, 0] limit = [1, 2, 2, 4] stride = [1, 1, 1, 1] : tensor<1x2x2x8xf32> -> tensor<1x2x2x4xf32>
  %xp = nn.slice %x start = [0, 0, 0, 4] limit = [1, 2, 2, 8] stride = [1, 1, 1, 1] : tensor<1x2x2x8xf32> -> tensor<1x2x2x4xf32>
  %xc = nn.mul %xr, %cos : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %x1 = nn.slice %xr start = [0, 0, 0, 0] limit = [1, 2, 2, 2] stride = [1, 1, 1, 1] : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %x2 = nn.slice %xr start = [0, 0, 0, 2] limit = [1, 2, 2, 4] stride = [1, 1, 1, 1] : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %n2 = nn.neg %x2 : tensor<1x2x2x2xf32>
  %rot = nn.concat %n2, %x1 axis = 3 : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x4xf32>
  %rs = nn.mul %rot, %sin : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %yr = nn.add %xc, %rs : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %y = nn.concat %yr, %xp axis = 3 : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  return %y : tensor<1x2x2x8xf32>
}

// -----

// The pass-through features first: that is no nn.rope layout, so only the
// rotary part is raised.
// CHECK-LABEL: func.func @partial_rotary_last
// CHECK-SAME: (%[[X:.*]]: tensor<1x2x2x8xf32>)
func.func @partial_rotary_last(%x: tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32> {
  // CHECK: %[[R:.*]] = nn.rope %{{.*}} : (tensor<1x2x2x4xf32>, tensor<1x2x2xf32>, tensor<1x2x2xf32>) -> tensor<1x2x2x4xf32>
  // CHECK: nn.concat %{{.*}}, %[[R]] axis = 3
  %cos = nn.constant dense<[[[[1.0, 0.5, 1.0, 0.5], [0.25, 0.0, 0.25, 0.0]]]]> : tensor<1x1x2x4xf32>
  %sin = nn.constant dense<[[[[0.0, 0.5, 0.0, 0.5], [0.75, 1.0, 0.75, 1.0]]]]> : tensor<1x1x2x4xf32>
  %xr = nn.slice %x start = [0, 0, 0, 4] limit = [1, 2, 2, 8] stride = [1, 1, 1, 1] : tensor<1x2x2x8xf32> -> tensor<1x2x2x4xf32>
  %xp = nn.slice %x start = [0, 0, 0, 0] limit = [1, 2, 2, 4] stride = [1, 1, 1, 1] : tensor<1x2x2x8xf32> -> tensor<1x2x2x4xf32>
  %xc = nn.mul %xr, %cos : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %x1 = nn.slice %xr start = [0, 0, 0, 0] limit = [1, 2, 2, 2] stride = [1, 1, 1, 1] : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %x2 = nn.slice %xr start = [0, 0, 0, 2] limit = [1, 2, 2, 4] stride = [1, 1, 1, 1] : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %n2 = nn.neg %x2 : tensor<1x2x2x2xf32>
  %rot = nn.concat %n2, %x1 axis = 3 : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x4xf32>
  %rs = nn.mul %rot, %sin : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %yr = nn.add %xc, %rs : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  %y = nn.concat %xp, %yr axis = 3 : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  return %y : tensor<1x2x2x8xf32>
}

// -----

// A cos table whose halves differ rotates the two halves by different
// angles, which nn.rope cannot: nothing is raised.
// CHECK-LABEL: func.func @unequal_halves
func.func @unequal_halves(%x: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  // CHECK-NOT: nn.rope
  // CHECK: nn.concat
  %cos = nn.constant dense<[[[[1.0, 0.5, 1.0, 0.5], [0.25, 0.0, 0.25, 0.5]]]]> : tensor<1x1x2x4xf32>
  %sin = nn.constant dense<[[[[0.0, 0.5, 0.0, 0.5], [0.75, 1.0, 0.75, 1.0]]]]> : tensor<1x1x2x4xf32>
  %xc = nn.mul %x, %cos : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %x1 = nn.slice %x start = [0, 0, 0, 0] limit = [1, 2, 2, 2] stride = [1, 1, 1, 1] : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %x2 = nn.slice %x start = [0, 0, 0, 2] limit = [1, 2, 2, 4] stride = [1, 1, 1, 1] : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %n2 = nn.neg %x2 : tensor<1x2x2x2xf32>
  %rot = nn.concat %n2, %x1 axis = 3 : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x4xf32>
  %rs = nn.mul %rot, %sin : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %y = nn.add %xc, %rs : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  return %y : tensor<1x2x2x4xf32>
}

// -----

// Tables from function arguments: nothing says their halves are equal.
// CHECK-LABEL: func.func @unknown_tables
func.func @unknown_tables(%x: tensor<1x2x2x4xf32>, %cos: tensor<1x1x2x4xf32>, %sin: tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32> {
  // CHECK-NOT: nn.rope
  // CHECK: nn.concat
  %xc = nn.mul %x, %cos : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %x1 = nn.slice %x start = [0, 0, 0, 0] limit = [1, 2, 2, 2] stride = [1, 1, 1, 1] : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %x2 = nn.slice %x start = [0, 0, 0, 2] limit = [1, 2, 2, 4] stride = [1, 1, 1, 1] : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %n2 = nn.neg %x2 : tensor<1x2x2x2xf32>
  %rot = nn.concat %n2, %x1 axis = 3 : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x4xf32>
  %rs = nn.mul %rot, %sin : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %y = nn.add %xc, %rs : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  return %y : tensor<1x2x2x4xf32>
}

// -----

// concat(-x1, x2) rotates the other way (and keeps x2's sign): not
// rotate_half, nothing is raised.
// CHECK-LABEL: func.func @wrong_rotation
func.func @wrong_rotation(%x: tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32> {
  // CHECK-NOT: nn.rope
  // CHECK: nn.concat
  %cos = nn.constant dense<[[[[1.0, 0.5, 1.0, 0.5], [0.25, 0.0, 0.25, 0.0]]]]> : tensor<1x1x2x4xf32>
  %sin = nn.constant dense<[[[[0.0, 0.5, 0.0, 0.5], [0.75, 1.0, 0.75, 1.0]]]]> : tensor<1x1x2x4xf32>
  %xc = nn.mul %x, %cos : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %x1 = nn.slice %x start = [0, 0, 0, 0] limit = [1, 2, 2, 2] stride = [1, 1, 1, 1] : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %x2 = nn.slice %x start = [0, 0, 0, 2] limit = [1, 2, 2, 4] stride = [1, 1, 1, 1] : tensor<1x2x2x4xf32> -> tensor<1x2x2x2xf32>
  %n1 = nn.neg %x1 : tensor<1x2x2x2xf32>
  %rot = nn.concat %n1, %x2 axis = 3 : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x4xf32>
  %rs = nn.mul %rot, %sin : (tensor<1x2x2x4xf32>, tensor<1x1x2x4xf32>) -> tensor<1x2x2x4xf32>
  %y = nn.add %xc, %rs : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x4xf32>
  return %y : tensor<1x2x2x4xf32>
}
