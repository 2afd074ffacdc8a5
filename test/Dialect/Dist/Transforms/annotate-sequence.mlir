// RUN: partita-opt %s --partita-annotate="mesh=tp=2 sp-mode=megatron" | FileCheck %s --check-prefix=MEGATRON
// RUN: partita-opt %s --partita-annotate="mesh=sp=2 sp-mode=ulysses" | FileCheck %s --check-prefix=ULYSSES
// RUN: partita-opt %s --partita-annotate="mesh=sp=2 sp-mode=ring" | FileCheck %s --check-prefix=RING

// The residual stream entering each norm is split on the sequence, at the
// activation priority 2 (below the weights' 1).
// MEGATRON: module attributes {dist.sequence_parallel = #dist.sequence_parallel<mode = megatron, axis = "tp", ranks = 2>}
// MEGATRON: %[[X:.*]] = dist.annotate %arg0 sharding<@mesh, [{}, {tp}, {}]> {dist.priority = 2 : i64, dist.strategy}
// MEGATRON: nn.layer_norm %[[X]]

// Ulysses: inputs split on the sequence; reshards to heads around attention.
// ULYSSES: %[[IN:.*]] = dist.annotate %arg0 sharding<@mesh, [{}, {sp}, {}]> {dist.priority = 3 : i64, dist.strategy}
// ULYSSES-COUNT-3: dist.reshard %{{.*}} to sharding<@mesh, [{}, {sp}, {}, {}]>
// ULYSSES: %[[A:.*]] = nn.attention
// ULYSSES: dist.reshard %[[A]] to sharding<@mesh, [{}, {}, {sp}, {}]>

// Ring: attention marked for the decomposition; causal attention gets the
// zigzag layout (4 chunks of 2 on 2 ranks) and the input is permuted into
// it on entry, the output put back on exit.
// RING: module attributes {dist.sequence_order = #dist.sequence_order<axis = "sp", order = [0, 1, 6, 7, 2, 3, 4, 5]>, dist.sequence_parallel = #dist.sequence_parallel<mode = ring, axis = "sp", ranks = 2, causal = true, zigzag = true, imbalance = 1.000000e+00 : f64, contiguous_imbalance = 1.4444444444444444 : f64>}
// RING: %[[ORDER:.*]] = nn.constant {dist.sequence_order} dense<[0, 1, 6, 7, 2, 3, 4, 5]> : tensor<8xi64>
// RING: nn.gather %arg0, %[[ORDER]] axis = 1
// RING: nn.attention {{.*}} {causal, dist.ring = "sp"}
// RING: %[[WHOLE:.*]] = dist.annotate %{{.*}} sharding<@mesh, [{}, {}, {}]> {dist.strategy}
// RING: %[[BACK:.*]] = nn.constant {dist.sequence_order} dense<[0, 1, 4, 5, 6, 7, 2, 3]> : tensor<8xi64>
// RING: nn.gather %[[WHOLE]], %[[BACK]] axis = 1
func.func @block(%x: tensor<1x8x16xf32>) -> tensor<1x8x16xf32> {
  %n = nn.layer_norm %x axis = 2 epsilon = 1.0E-5 : tensor<1x8x16xf32>
  %r = nn.reshape %n : tensor<1x8x16xf32> -> tensor<1x8x4x4xf32>
  %t = nn.transpose %r permutation = [0, 2, 1, 3] : tensor<1x8x4x4xf32> -> tensor<1x4x8x4xf32>
  %a = nn.attention %t, %t, %t {causal} : (tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>) -> tensor<1x4x8x4xf32>
  %b = nn.transpose %a permutation = [0, 2, 1, 3] : tensor<1x4x8x4xf32> -> tensor<1x8x4x4xf32>
  %c = nn.reshape %b : tensor<1x8x4x4xf32> -> tensor<1x8x16xf32>
  %y = nn.add %x, %c : (tensor<1x8x16xf32>, tensor<1x8x16xf32>) -> tensor<1x8x16xf32>
  return %y : tensor<1x8x16xf32>
}
