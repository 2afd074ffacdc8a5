// RUN: partita-opt %s --partita-propagate-sharding --partita-partition | FileCheck %s

// A max over a split dimension (the row maximum of a vocabulary split over
// tp, as the cross-entropy loss takes it): each device reduces its block,
// and one all-reduce max combines them; the logits are not gathered.

// CHECK-LABEL: func.func @split_max
// CHECK-NOT: dist.all_gather
// CHECK: %[[M:.*]] = nn.reduce max %{{.*}} axes = [1] keepdims : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK: dist.all_reduce max %[[M]] on @mesh axes [tp] {dist.reason = "nn.reduce: its max over a split dimension"} : tensor<4x1xf32>
// CHECK-NOT: dist.all_gather
module {
  dist.mesh @mesh [tp = 2]
  func.func @split_max(%x: tensor<4x16xf32>) -> tensor<4x1xf32> {
    %xa = dist.annotate %x sharding<@mesh, [{}, {tp}]> : tensor<4x16xf32>
    %m = nn.reduce max %xa axes = [1] keepdims : tensor<4x16xf32> -> tensor<4x1xf32>
    return %m : tensor<4x1xf32>
  }
}
