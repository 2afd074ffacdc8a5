// RUN: partita-opt %s -split-input-file --partita-propagate-sharding --partita-partition | FileCheck %s

// A mixture of experts split by experts over tp: each device holds 2 of
// the 4 experts, computes the slots routed to them (its ids shifted by
// its block's first expert, the others' ids -1, which select no expert),
// and one all-reduce sums the tokens' parts.

// CHECK-LABEL: func.func @experts
// CHECK: %[[P:.*]] = dist.axis_index on @mesh axes [tp] : tensor<i64>
// CHECK: %[[TWO:.*]] = nn.constant dense<2> : tensor<i64>
// CHECK: %[[FIRST:.*]] = nn.mul %[[P]], %[[TWO]]
// CHECK: %[[SHIFTED:.*]] = nn.sub %arg1, %[[FIRST]]
// CHECK: %[[NONE:.*]] = nn.constant dense<-1> : tensor<i64>
// CHECK: %[[IDS:.*]] = nn.where %{{.*}}, %[[SHIFTED]], %[[NONE]]
// CHECK: %[[Y:.*]] = nn.moe silu %arg0, %[[IDS]], %arg2 experts(%{{.*}}, %{{.*}}) : (tensor<6x8xf32>, tensor<6x2xi64>, tensor<6x2xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>) -> tensor<6x8xf32>
// CHECK: dist.all_reduce sum %[[Y]] on @mesh axes [tp]
module {
  dist.mesh @mesh [tp = 2]
  func.func @experts(%x: tensor<6x8xf32>, %ids: tensor<6x2xi64>, %w: tensor<6x2xf32>, %fc1: tensor<4x16x8xf32>, %fc2: tensor<4x8x16xf32>) -> tensor<6x8xf32> {
    %a = dist.annotate %fc1 sharding<@mesh, [{tp}, {}, {}]> : tensor<4x16x8xf32>
    %b = dist.annotate %fc2 sharding<@mesh, [{tp}, {}, {}]> : tensor<4x8x16xf32>
    %y = nn.moe silu %x, %ids, %w experts(%a, %b) : (tensor<6x8xf32>, tensor<6x2xi64>, tensor<6x2xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
    return %y : tensor<6x8xf32>
  }
}

// -----

// Split by each expert's features (an unfused activation): each device
// computes its features of every routed expert, and the partial sums of
// fc2's contraction are all-reduced; the ids stay global.

// CHECK-LABEL: func.func @features
// CHECK-NOT: dist.axis_index
// CHECK: %[[Y:.*]] = nn.moe relu %arg0, %arg1, %arg2 experts(%{{.*}}, %{{.*}}) : (tensor<6x8xf32>, tensor<6x2xi64>, tensor<6x2xf32>, tensor<4x8x8xf32>, tensor<4x8x8xf32>) -> tensor<6x8xf32>
// CHECK: dist.all_reduce sum %[[Y]] on @mesh axes [tp]
module {
  dist.mesh @mesh [tp = 2]
  func.func @features(%x: tensor<6x8xf32>, %ids: tensor<6x2xi64>, %w: tensor<6x2xf32>, %fc1: tensor<4x16x8xf32>, %fc2: tensor<4x8x16xf32>) -> tensor<6x8xf32> {
    %a = dist.annotate %fc1 sharding<@mesh, [{}, {tp}, {}]> : tensor<4x16x8xf32>
    %y = nn.moe relu %x, %ids, %w experts(%a, %fc2) : (tensor<6x8xf32>, tensor<6x2xi64>, tensor<6x2xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
    return %y : tensor<6x8xf32>
  }
}

// -----

// Tokens and experts split over the same axis (ep as a data-parallel axis
// outside the experts): one row per (token, chosen expert) travels to the
// device holding the expert, with the expert's index there counted from 1
// (a row the dispatch pads with zeros names none); each device runs its 2
// experts on the rows it receives, one expert each with weight 1, and the
// outputs come back to be weighted and summed per token. Dropless: a
// device may receive every row of the group (2 devices × 3 tokens × 2).

// CHECK-LABEL: func.func @dispatch
// CHECK: %[[DEV:.*]] = nn.div %arg1, %{{.*}} : (tensor<3x2xi64>, tensor<i64>) -> tensor<3x2xi64>
// CHECK: %[[DEST2:.*]] = nn.where %{{.*}}, %[[DEV]], %{{.*}}
// CHECK: %[[DEST:.*]] = nn.reshape %[[DEST2]] : tensor<3x2xi64> -> tensor<6xi64>
// CHECK: %[[ROWS:.*]] = nn.reshape %{{.*}} : tensor<3x2x8xf32> -> tensor<6x8xf32>
// CHECK: %[[R:.*]], %[[C:.*]] = dist.dispatch %[[ROWS]] to %[[DEST]] on @mesh axes [ep] {{.*}} : tensor<6x8xf32>, tensor<6xi64> -> tensor<12x8xf32>, tensor<2xi64>
// CHECK: %[[RID:.*]], %{{.*}} = dist.dispatch %{{.*}} to %[[DEST]] on @mesh axes [ep] {{.*}} : tensor<6xi64>, tensor<6xi64> -> tensor<12xi64>, tensor<2xi64>
// CHECK: %[[ONES:.*]] = nn.constant dense<1.000000e+00> : tensor<12x1xf32>
// CHECK: %[[Y:.*]] = nn.moe silu %[[R]], %{{.*}}, %[[ONES]] experts(%{{.*}}, %{{.*}}) : (tensor<12x8xf32>, tensor<12x1xi64>, tensor<12x1xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>) -> tensor<12x8xf32>
// CHECK: %[[BACK:.*]] = dist.dispatch_return %[[Y]] from %[[C]] to %[[DEST]] on @mesh axes [ep] {{.*}} -> tensor<6x8xf32>
// CHECK: %[[B3:.*]] = nn.reshape %[[BACK]] : tensor<6x8xf32> -> tensor<3x2x8xf32>
// CHECK: %[[WEIGHTED:.*]] = nn.mul %[[B3]], %{{.*}} : (tensor<3x2x8xf32>, tensor<3x2x1xf32>) -> tensor<3x2x8xf32>
// CHECK: %[[OUT:.*]] = nn.reduce sum %[[WEIGHTED]] axes = [1] : tensor<3x2x8xf32> -> tensor<3x8xf32>
// CHECK: return %[[OUT]] : tensor<3x8xf32>
module {
  dist.mesh @mesh [ep = 2]
  func.func @dispatch(%x: tensor<6x8xf32>, %ids: tensor<6x2xi64>, %w: tensor<6x2xf32>, %fc1: tensor<4x16x8xf32>, %fc2: tensor<4x8x16xf32>) -> tensor<6x8xf32> {
    %x1 = dist.annotate %x sharding<@mesh, [{ep}, {}]> : tensor<6x8xf32>
    %i1 = dist.annotate %ids sharding<@mesh, [{ep}, {}]> : tensor<6x2xi64>
    %w1 = dist.annotate %w sharding<@mesh, [{ep}, {}]> : tensor<6x2xf32>
    %a = dist.annotate %fc1 sharding<@mesh, [{ep}, {}, {}]> {dist.priority = 2 : i64} : tensor<4x16x8xf32>
    %b = dist.annotate %fc2 sharding<@mesh, [{ep}, {}, {}]> {dist.priority = 2 : i64} : tensor<4x8x16xf32>
    %y = nn.moe silu %x1, %i1, %w1 experts(%a, %b) : (tensor<6x8xf32>, tensor<6x2xi64>, tensor<6x2xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
    %r = dist.annotate %y sharding<@mesh, [{ep}, {}]> : tensor<6x8xf32>
    return %r : tensor<6x8xf32>
  }
}

// -----

// int4 experts (QMoE's import): the batched nn.dequantize splits on its
// batch dimension with the experts, so each device holds and dequantizes
// only its experts' packed bytes and scales.

// CHECK-LABEL: func.func @packed_experts
// CHECK: nn.dequantize %{{.*}}, %{{.*}} {bits = 4 : i64, block_size = 16 : i64} : (tensor<2x16x1x8xi8>, tensor<2x16x1xf32>) -> tensor<2x16x16xf32>
// CHECK: nn.transpose %{{.*}} permutation = [0, 2, 1] : tensor<2x16x16xf32> -> tensor<2x16x16xf32>
// CHECK: nn.moe silu %{{.*}} : (tensor<6x16xf32>, tensor<6x2xi64>, tensor<6x2xf32>, tensor<2x16x16xf32>, tensor<2x16x16xf32>) -> tensor<6x16xf32>
// CHECK: dist.all_reduce sum
module {
  dist.mesh @mesh [ep = 2]
  func.func @packed_experts(%x: tensor<6x16xf32>, %ids: tensor<6x2xi64>, %w: tensor<6x2xf32>, %q: tensor<4x16x1x8xi8>, %s: tensor<4x16x1xf32>, %fc2: tensor<4x16x16xf32>) -> tensor<6x16xf32> {
    %d = nn.dequantize %q, %s {bits = 4 : i64, block_size = 16 : i64} : (tensor<4x16x1x8xi8>, tensor<4x16x1xf32>) -> tensor<4x16x16xf32>
    %t = nn.transpose %d permutation = [0, 2, 1] : tensor<4x16x16xf32> -> tensor<4x16x16xf32>
    %a = dist.annotate %t sharding<@mesh, [{ep}, {}, {}]> : tensor<4x16x16xf32>
    %b = dist.annotate %fc2 sharding<@mesh, [{ep}, {}, {}]> : tensor<4x16x16xf32>
    %y = nn.moe silu %x, %ids, %w experts(%a, %b) : (tensor<6x16xf32>, tensor<6x2xi64>, tensor<6x2xf32>, tensor<4x16x16xf32>, tensor<4x16x16xf32>) -> tensor<6x16xf32>
    return %y : tensor<6x16xf32>
  }
}
