// RUN: partita-opt %s --partita-propagate-sharding | FileCheck %s
// RUN: partita-opt %s --partita-propagate-sharding --partita-partition | FileCheck %s --check-prefix=LOCAL

// nn.cumsum's rule: the scanned dimension is opaque (every element depends
// on all before it along the axis), so a split of it stops there and the
// partition gathers the operand; any other dimension passes through.
dist.mesh @mesh [tp = 2]

// CHECK-LABEL: func.func @along_the_split
// CHECK: nn.cumsum {{.*}}axis = 1 {dist.shardings = [#dist.sharding<@mesh, [{}, {}]>]}
// LOCAL-LABEL: func.func @along_the_split
// LOCAL: %[[FULL:.*]] = dist.all_gather %{{.*}} on @mesh axes [tp] gather_dim 1 {{.*}}: tensor<4x4xf32> -> tensor<4x8xf32>
// LOCAL: nn.cumsum %[[FULL]] axis = 1 : tensor<4x8xf32>
func.func @along_the_split(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = dist.annotate %x sharding<@mesh, [{}, {tp}]> : tensor<4x8xf32>
  %c = nn.cumsum %a axis = 1 : tensor<4x8xf32>
  return %c : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @across_the_split
// CHECK: nn.cumsum {{.*}}axis = 0 reverse {dist.shardings = [#dist.sharding<@mesh, [{}, {tp}]>]}
// LOCAL-LABEL: func.func @across_the_split
// LOCAL-NOT: dist.all_gather
// LOCAL: nn.cumsum %{{.*}} axis = 0 reverse : tensor<4x4xf32>
func.func @across_the_split(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %a = dist.annotate %x sharding<@mesh, [{}, {tp}]> : tensor<4x8xf32>
  %c = nn.cumsum %a axis = 0 reverse : tensor<4x8xf32>
  return %c : tensor<4x8xf32>
}
