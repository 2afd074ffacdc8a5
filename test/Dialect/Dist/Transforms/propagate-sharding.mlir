// RUN: partita-opt %s -split-input-file --partita-propagate-sharding | FileCheck %s

// A split of the hidden dimension reaches the heads through a reshape and a
// transpose (and back, in the second function).
dist.mesh @mesh [dp = 2, tp = 2]
// CHECK-LABEL: func.func @heads
// CHECK-SAME: (%{{.*}}: tensor<2x8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}, {tp}]>})
// CHECK-SAME: -> (tensor<2x4x8x4xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {tp}, {}, {}]>})
// CHECK: nn.reshape {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{}, {}, {tp}, {}]>]}
// CHECK: nn.transpose {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{}, {tp}, {}, {}]>]}
func.func @heads(%x: tensor<2x8x16xf32>) -> tensor<2x4x8x4xf32> {
  %a = dist.annotate %x sharding<@mesh, [{}, {}, {tp}]> : tensor<2x8x16xf32>
  %r = nn.reshape %a : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  %t = nn.transpose %r permutation = [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  return %t : tensor<2x4x8x4xf32>
}

// CHECK-LABEL: func.func @heads_back
// CHECK-SAME: (%{{.*}}: tensor<2x4x8x4xf32> {dist.sharding = #dist.sharding<@mesh, [{dp}, {tp}, {}, {}]>})
// CHECK: nn.transpose {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{dp}, {}, {tp}, {}]>]}
// CHECK: nn.reshape {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{dp}, {}, {tp}]>]}
func.func @heads_back(%x: tensor<2x4x8x4xf32>) -> tensor<2x8x16xf32> {
  %t = nn.transpose %x permutation = [0, 2, 1, 3] : tensor<2x4x8x4xf32> -> tensor<2x8x4x4xf32>
  %r = nn.reshape %t : tensor<2x8x4x4xf32> -> tensor<2x8x16xf32>
  %a = dist.annotate %r sharding<@mesh, [{dp}, {}, {tp}]> : tensor<2x8x16xf32>
  return %a : tensor<2x8x16xf32>
}

// -----

// A split contraction leaves a partial sum; a matmul's output features
// reach its weight backward.
dist.mesh @mesh [tp = 2]
// CHECK-LABEL: func.func @row_then_column
// CHECK: %[[H:.*]] = nn.matmul {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{}, {tp}]>]}
// CHECK: nn.relu %[[H]] {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{}, {tp}]>]}
// CHECK: nn.matmul {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{}, {}], partial = [tp]>]}
func.func @row_then_column(%x: tensor<4x8xf32>, %w1: tensor<8x16xf32>, %w2: tensor<16x8xf32>) -> tensor<4x8xf32> {
  %a = dist.annotate %w2 sharding<@mesh, [{tp}, {}]> : tensor<16x8xf32>
  %h = nn.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %g = nn.relu %h : tensor<4x16xf32>
  %y = nn.matmul %g, %a : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Priorities: what a person wrote beats what a strategy put in; equal
// priorities that disagree keep their common prefix.
dist.mesh @mesh [dp = 2, tp = 2]
// CHECK-LABEL: func.func @priorities
// CHECK-SAME: %{{.*}}: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{tp}, {}]>}
// CHECK-SAME: %{{.*}}: tensor<8x8xf32> {dist.sharding = #dist.sharding<@mesh, [{dp}, {}]>}
// CHECK: nn.relu {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{tp}, {}]>]}
// CHECK: nn.neg {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{dp}, {}]>]}
func.func @priorities(%x: tensor<8x8xf32>, %y: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %s = dist.annotate %x sharding<@mesh, [{dp}, {}]> {dist.strategy} : tensor<8x8xf32>
  %u = dist.annotate %x sharding<@mesh, [{tp}, {}]> : tensor<8x8xf32>
  %r = nn.relu %x : tensor<8x8xf32>
  %s1 = dist.annotate %y sharding<@mesh, [{dp, tp}, {}]> {dist.strategy} : tensor<8x8xf32>
  %s2 = dist.annotate %y sharding<@mesh, [{dp}, {}]> {dist.strategy} : tensor<8x8xf32>
  %n = nn.neg %y : tensor<8x8xf32>
  return %r, %n : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// A softmax axis stays whole; other dimensions pass through. A norm's
// normalized axis stays split (a distributed norm: its statistics are
// all-reduced). A value no annotation reaches is replicated.
dist.mesh @mesh [dp = 2, tp = 2]
// CHECK-LABEL: func.func @normalized
// CHECK: nn.softmax {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{dp}, {}]>]}
// CHECK: nn.rms_norm {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{dp}, {tp}]>]}
// CHECK: nn.exp {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{}, {}]>]}
func.func @normalized(%x: tensor<8x8xf32>, %z: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) {
  %a = dist.annotate %x sharding<@mesh, [{dp}, {tp}]> : tensor<8x8xf32>
  %s = nn.softmax %a axis = 1 : tensor<8x8xf32>
  %r = nn.rms_norm %a axis = 1 epsilon = 1.0e-06 : tensor<8x8xf32>
  %e = nn.exp %z : tensor<8x8xf32>
  return %s, %r, %e : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// A vocab-split embedding table makes the lookup a partial sum.
dist.mesh @mesh [tp = 2]
// CHECK-LABEL: func.func @vocab
// CHECK: nn.embedding {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{}, {}, {}], partial = [tp]>]}
func.func @vocab(%ids: tensor<2x4xi64>, %table: tensor<32x8xf32>) -> tensor<2x4x8xf32> {
  %t = dist.annotate %table sharding<@mesh, [{tp}, {}]> : tensor<32x8xf32>
  %e = nn.embedding %t, %ids : (tensor<32x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  return %e : tensor<2x4x8xf32>
}

// -----

// A sequence split that a reshape merges with the batch ([2, 16] into
// [32], as the embedding's gradient flattens the tokens) cannot be shown
// on the merged dimension, whose major factor is whole. The reshape
// proposes nothing there: before, it proposed "whole" at the split's
// priority, which undid the split of the residual stream everywhere
// (sp training ran replicated).
dist.mesh @mesh [sp = 2]
// CHECK-LABEL: func.func @merged_sequence
// CHECK: nn.add {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{}, {sp}, {}]>]}
// CHECK: nn.reshape {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{}, {}]>]}
// CHECK: nn.matmul {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{}, {}]>]}
// CHECK: nn.mul {{.*}}{dist.shardings = [#dist.sharding<@mesh, [{}, {sp}, {}]>]}
func.func @merged_sequence(%x: tensor<2x16x8xf32>, %y: tensor<2x16x8xf32>, %w: tensor<8x4xf32>) -> (tensor<32x4xf32>, tensor<2x16x8xf32>) {
  %s = nn.add %x, %y : (tensor<2x16x8xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  %r = nn.reshape %s : tensor<2x16x8xf32> -> tensor<32x8xf32>
  %m = nn.matmul %r, %w : (tensor<32x8xf32>, tensor<8x4xf32>) -> tensor<32x4xf32>
  %a = dist.annotate %s sharding<@mesh, [{}, {sp}, {}]> {dist.priority = 2 : i64} : tensor<2x16x8xf32>
  %n = nn.mul %a, %a : (tensor<2x16x8xf32>, tensor<2x16x8xf32>) -> tensor<2x16x8xf32>
  return %m, %n : tensor<32x4xf32>, tensor<2x16x8xf32>
}
