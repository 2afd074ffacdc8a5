// RUN: partita-opt %s --partita-partition | FileCheck %s

// The partitioner on shardings propagation recorded (a data-parallel
// gradient's, issue 35): the matmul's contraction is split over dp, so
// its result is a partial sum with no split dimension. The reduce over
// the batch and the reshape are linear in it and its only readers, so the
// partial sum passes through them and is reduced once, where the result
// needs it whole: a reduce-scatter of the 32 sums, not an all-reduce of
// the 2x16x32 products. It is reduced exactly once (it once was twice,
// doubling the gradient).

// CHECK-LABEL: func.func @partial_operand_read_whole
// CHECK: %[[M:.*]] = nn.matmul
// CHECK-NOT: dist.all_reduce
// CHECK: %[[S:.*]] = nn.reduce sum %[[M]]
// CHECK-NOT: dist.all_reduce
// CHECK: %[[V:.*]] = nn.reshape %[[S]]
// CHECK: %[[R:.*]] = dist.reduce_scatter sum %[[V]] on @mesh axes [dp] scatter_dim 0
// CHECK-SAME: tensor<32xf32> -> tensor<16xf32>
// CHECK-NOT: dist.all_reduce
// CHECK: return %[[R]]
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
