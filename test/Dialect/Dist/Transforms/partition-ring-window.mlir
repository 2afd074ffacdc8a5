// RUN: partita-opt %s --partita-annotate="mesh=sp=4 sp-mode=ring" --partita-propagate-sharding --partita-partition | FileCheck %s

// Ring attention with a sliding window of 2 over 8 positions in blocks of
// 2: a contiguous layout balances as well as zigzag, and after the block
// of the previous rank every block visiting a rank lies behind all its
// rows' windows. The ring takes two steps and one rotation of the keys,
// values and positions, not four and three; each step keeps the window.
// CHECK: module attributes {dist.sequence_parallel = #dist.sequence_parallel<mode = ring, axis = "sp", ranks = 4, causal = true, zigzag = false, imbalance = 1.0666666666666667 : f64, contiguous_imbalance = 1.0666666666666667 : f64>}
// CHECK-LABEL: func.func @window
// CHECK: nn.attention_partial {{.*}} positions({{.*}}) {scale = 5.000000e-01 : f32, window = 2 : i64}
// CHECK-COUNT-3: dist.collective_permute {{.*}} "nn.attention: ring attention step 1"
// CHECK: nn.attention_partial {{.*}} positions({{.*}}) {scale = 5.000000e-01 : f32, window = 2 : i64}
// CHECK-NOT: dist.collective_permute
// CHECK-NOT: nn.attention_partial
// CHECK: return
func.func @window(%x: tensor<1x8x16xf32>) -> tensor<1x8x16xf32> {
  %n = nn.layer_norm %x axis = 2 epsilon = 1.0E-5 : tensor<1x8x16xf32>
  %r = nn.reshape %n : tensor<1x8x16xf32> -> tensor<1x8x4x4xf32>
  %t = nn.transpose %r permutation = [0, 2, 1, 3] : tensor<1x8x4x4xf32> -> tensor<1x4x8x4xf32>
  %a = nn.attention %t, %t, %t {causal, window = 2 : i64} : (tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>) -> tensor<1x4x8x4xf32>
  %b = nn.transpose %a permutation = [0, 2, 1, 3] : tensor<1x4x8x4xf32> -> tensor<1x8x4x4xf32>
  %c = nn.reshape %b : tensor<1x8x4x4xf32> -> tensor<1x8x16xf32>
  %y = nn.add %x, %c : (tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
  return %y : tensor<1x8x16xf32>
}
