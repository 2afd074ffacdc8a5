// RUN: partita-opt %s --partita-partition | FileCheck %s

// The partitioner on shardings propagation recorded (a data-parallel
// gradient's, issue 35): the matmul's contraction is split over dp, so
// its result is a partial sum with no split dimension, and the reduce
// over the batch that propagation recorded as partial over dp reads its
// operand reduced, whole. The reduce then computes the whole sum: its
// users must not reduce it again (they did, doubling the gradient).

// CHECK-LABEL: func.func @partial_operand_read_whole
// CHECK: %[[M:.*]] = nn.matmul
// CHECK: %[[R:.*]] = dist.all_reduce sum %[[M]]
// CHECK: %[[S:.*]] = nn.reduce sum %[[R]]
// CHECK-NOT: dist.all_reduce
// CHECK: %[[V:.*]] = nn.reshape %[[S]]
// CHECK: dist.all_slice %[[V]]
// CHECK-NOT: dist.all_reduce
// CHECK: return
module {
  dist.mesh @mesh [dp = 2]
  func.func @partial_operand_read_whole(
      %g: tensor<2x16x128xf32> {dist.sharding = #dist.sharding<@mesh, [{dp}, {}, {}]>},
      %w: tensor<128x32xf32> {dist.sharding = #dist.sharding<@mesh, [{dp}, {}]>})
      -> (tensor<32xf32> {dist.sharding = #dist.sharding<@mesh, [{dp}]>}) {
    %m = nn.matmul %g, %w {dist.shardings = [#dist.sharding<@mesh, [{}, {}, {}], partial = [dp]>]} : (tensor<2x16x128xf32>, tensor<128x32xf32>) -> tensor<2x16x32xf32>
    %s = nn.reduce sum %m axes = [0, 1] keepdims {dist.shardings = [#dist.sharding<@mesh, [{}, {}, {}], partial = [dp]>]} : tensor<2x16x32xf32> -> tensor<1x1x32xf32>
    %r = nn.reshape %s {dist.shardings = [#dist.sharding<@mesh, [{}]>]} : tensor<1x1x32xf32> -> tensor<32xf32>
    %a = dist.annotate %r sharding<@mesh, [{dp}]> : tensor<32xf32>
    return %a : tensor<32xf32>
  }
}
