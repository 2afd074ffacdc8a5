// RUN: partita-opt %s --split-input-file --partita-annotate="mesh=sp=2 sp-mode=ring" --partita-propagate-sharding --partita-partition | FileCheck %s

// Ring attention's zigzag layout permutes the sequence of the inputs on
// entry. It is kept only where the program computes the same on the
// permuted rows: here every op treats the sequence position by position,
// and the position constant, split over sp, is laid out in the ring's order.
// CHECK: module attributes {dist.sequence_order = #dist.sequence_order<axis = "sp", order = [0, 1, 6, 7, 2, 3, 4, 5]>, dist.sequence_parallel = #dist.sequence_parallel<{{.*}}zigzag = true{{.*}}>}
// CHECK-LABEL: func.func @kept
// CHECK: %[[ORDER:.*]] = nn.constant {dist.sequence_order} dense<[0, 1, 6, 7, 2, 3, 4, 5]>
// CHECK: nn.gather %arg0, %{{.*}} axis = 1
// CHECK: nn.constant dense<{{\[\[\[}}0.000000e+00], [1.000000e+00], [6.000000e+00], [7.000000e+00], [2.000000e+00], [3.000000e+00], [4.000000e+00], [5.000000e+00]]]> : tensor<1x8x1xf32>
// CHECK: nn.attention_partial
func.func @kept(%ids: tensor<1x8xi64>) -> tensor<1x8x16xf32> {
  %table = nn.constant dense<0.5> : tensor<32x16xf32>
  %pos = nn.constant dense<[[[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0]]]> : tensor<1x8x1xf32>
  %e = nn.embedding %table, %ids : (tensor<32x16xf32>, tensor<1x8xi64>) -> tensor<1x8x16xf32>
  %x = nn.add %e, %pos : (tensor<1x8x16xf32>, tensor<1x8x1xf32>) -> tensor<1x8x16xf32>
  %n = nn.layer_norm %x axis = 2 epsilon = 1.0E-5 : tensor<1x8x16xf32>
  %r = nn.reshape %n : tensor<1x8x16xf32> -> tensor<1x8x4x4xf32>
  %t = nn.transpose %r permutation = [0, 2, 1, 3] : tensor<1x8x4x4xf32> -> tensor<1x4x8x4xf32>
  %a = nn.attention %t, %t, %t {causal} : (tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>) -> tensor<1x4x8x4xf32>
  %b = nn.transpose %a permutation = [0, 2, 1, 3] : tensor<1x4x8x4xf32> -> tensor<1x8x4x4xf32>
  %c = nn.reshape %b : tensor<1x8x4x4xf32> -> tensor<1x8x16xf32>
  %y = nn.add %x, %c : (tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
  return %y : tensor<1x8x16xf32>
}

// -----

// Position ids counted along the sequence (cumsum of the mask, as HF's
// dynamic exports compute them) would count the permuted rows: the layout
// stays contiguous, no input is permuted, and a remark says why.
// CHECK: module attributes {dist.remarks = ["--sp-mode ring keeps the sequence contiguous instead of zigzag, which balances causal work across ranks: nn.cumsum reads the sequence in order (opaque factor)"], dist.sequence_parallel = #dist.sequence_parallel<mode = ring, axis = "sp", ranks = 2, causal = true, zigzag = false, imbalance = 1.4444444444444444 : f64, contiguous_imbalance = 1.4444444444444444 : f64>}
// CHECK-LABEL: func.func @cumsum_positions
// CHECK-NOT: dist.sequence_order
// CHECK: nn.cumsum %arg1 axis = 1
// CHECK: nn.attention_partial
// CHECK-NOT: dist.sequence_order
func.func @cumsum_positions(%ids: tensor<1x8xi64>, %mask: tensor<1x8xi64>) -> tensor<1x8x16xf32> {
  %table = nn.constant dense<0.5> : tensor<32x16xf32>
  %positions = nn.constant dense<[[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0]]> : tensor<8x1xf32>
  %e = nn.embedding %table, %ids : (tensor<32x16xf32>, tensor<1x8xi64>) -> tensor<1x8x16xf32>
  %p = nn.cumsum %mask axis = 1 : tensor<1x8xi64>
  %pe = nn.embedding %positions, %p : (tensor<8x1xf32>, tensor<1x8xi64>) -> tensor<1x8x1xf32>
  %x = nn.add %e, %pe : (tensor<1x8x16xf32>, tensor<1x8x1xf32>) -> tensor<1x8x16xf32>
  %n = nn.layer_norm %x axis = 2 epsilon = 1.0E-5 : tensor<1x8x16xf32>
  %r = nn.reshape %n : tensor<1x8x16xf32> -> tensor<1x8x4x4xf32>
  %t = nn.transpose %r permutation = [0, 2, 1, 3] : tensor<1x8x4x4xf32> -> tensor<1x4x8x4xf32>
  %a = nn.attention %t, %t, %t {causal} : (tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>) -> tensor<1x4x8x4xf32>
  %b = nn.transpose %a permutation = [0, 2, 1, 3] : tensor<1x4x8x4xf32> -> tensor<1x8x4x4xf32>
  %c = nn.reshape %b : tensor<1x8x4x4xf32> -> tensor<1x8x16xf32>
  %y = nn.add %x, %c : (tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
  return %y : tensor<1x8x16xf32>
}

// -----

// Torch 2's legacy GPT-2 export: the padding mask is flattened with the
// batch and gathered back with constant indices, so sharding propagation
// leaves the whole model replicated, and a replicated position embedding
// and causal attention over the whole sequence would meet permuted rows.
// The layout stays contiguous.
// CHECK: module attributes {dist.remarks = ["--sp-mode ring keeps the sequence contiguous instead of zigzag, which balances causal work across ranks: nn.gather merges the sequence into another dimension"], dist.sequence_parallel = #dist.sequence_parallel<{{.*}}zigzag = false{{.*}}>}
// CHECK-LABEL: func.func @flattened_mask
// CHECK-NOT: dist.sequence_order
func.func @flattened_mask(%ids: tensor<2x8xi64>, %mask: tensor<2x8xi64>) -> tensor<2x8x16xf32> {
  %table = nn.constant dense<0.5> : tensor<32x16xf32>
  %pos = nn.constant dense<[[[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0]]]> : tensor<1x8x1xf32>
  %flat = nn.constant dense<[[[[0, 1, 2, 3, 4, 5, 6, 7]]], [[[8, 9, 10, 11, 12, 13, 14, 15]]]]> : tensor<2x1x1x8xi64>
  %e = nn.embedding %table, %ids : (tensor<32x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %x = nn.add %e, %pos : (tensor<2x8x16xf32>, tensor<1x8x1xf32>) -> tensor<2x8x16xf32>
  %mb = nn.cast %mask : tensor<2x8xi64> -> tensor<2x8xi1>
  %m1 = nn.reshape %mb : tensor<2x8xi1> -> tensor<16x1xi1>
  %m2 = nn.gather %m1, %flat axis = 0 : (tensor<16x1xi1>, tensor<2x1x1x8xi64>) -> tensor<2x1x1x8x1xi1>
  %m = nn.reshape %m2 : tensor<2x1x1x8x1xi1> -> tensor<2x1x1x8xi1>
  %n = nn.layer_norm %x axis = 2 epsilon = 1.0E-5 : tensor<2x8x16xf32>
  %r = nn.reshape %n : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  %t = nn.transpose %r permutation = [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  %a = nn.attention %t, %t, %t mask %m {causal} : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x1x1x8xi1>) -> tensor<2x4x8x4xf32>
  %b = nn.transpose %a permutation = [0, 2, 1, 3] : tensor<2x4x8x4xf32> -> tensor<2x8x4x4xf32>
  %c = nn.reshape %b : tensor<2x8x4x4xf32> -> tensor<2x8x16xf32>
  %y = nn.add %x, %c : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}
