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
