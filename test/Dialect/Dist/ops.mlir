// RUN: partita-opt -split-input-file %s | partita-opt -split-input-file | FileCheck %s

// Axes in any order, size 1 allowed; a quoted name prints bare.
// CHECK-LABEL: dist.mesh @mesh [dp = 2, tp = 4, pp = 1, sp = 1]
dist.mesh @mesh [dp = 2, tp = 4, pp = 1, "sp" = 1]
// CHECK-LABEL: dist.mesh @single [x = 1]
dist.mesh @single [x = 1]
// Roles print only where they are not the default of the name.
// CHECK-LABEL: dist.mesh @named [data = 2 : dp, model = 4 : tp, x = 2, tp = 1 : none, pp = 2]
dist.mesh @named [data = 2 : dp, model = 4 : tp, x = 2 : none, tp = 1 : none, pp = 2 : pp]

// -----

dist.mesh @mesh [dp = 2, tp = 4, sp = 2]

// CHECK-LABEL: func.func @annotate
// CHECK-SAME: %[[X:.*]]: tensor<8x16x64xf32>
func.func @annotate(%x: tensor<8x16x64xf32>) -> tensor<8x16x64xf32> {
  // CHECK: dist.annotate %[[X]] sharding<@mesh, [{dp}, {}, {tp, sp}]> : tensor<8x16x64xf32>
  %0 = dist.annotate %x sharding<@mesh, [{dp}, {}, {tp, sp}]> : tensor<8x16x64xf32>
  return %0 : tensor<8x16x64xf32>
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]

// CHECK-LABEL: func.func @annotate_partial
func.func @annotate_partial(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // CHECK: sharding<@mesh, [{}, {dp}], partial = [tp]>
  %0 = dist.annotate %x sharding<@mesh, [{}, {dp}], partial = [tp]> : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

dist.mesh @mesh [dp = 2]

// A rank-0 value has no dimension entries.
// CHECK-LABEL: func.func @annotate_scalar
func.func @annotate_scalar(%x: tensor<f32>) -> tensor<f32> {
  // CHECK: sharding<@mesh, []> : tensor<f32>
  %0 = dist.annotate %x sharding<@mesh, []> : tensor<f32>
  return %0 : tensor<f32>
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]

// The attribute on its own, as passes attach it to function arguments.
// CHECK-LABEL: func.func @sharding_attr
// CHECK-SAME: {dist.sharding = #dist.sharding<@mesh, [{dp}, {tp}]>}
func.func @sharding_attr(%x: tensor<8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{dp}, {tp}]>}) {
  return
}

// -----

dist.mesh @mesh [tp = 4]

// CHECK-LABEL: func.func @reshard
// CHECK-SAME: %[[X:.*]]: tensor<8x16xf32>
func.func @reshard(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // CHECK: %[[P:.*]] = dist.annotate %[[X]]
  %0 = dist.annotate %x sharding<@mesh, [{}, {}], partial = [tp]> : tensor<8x16xf32>
  // CHECK: dist.reshard %[[P]] to sharding<@mesh, [{}, {tp}]> : tensor<8x16xf32>
  %1 = dist.reshard %0 to sharding<@mesh, [{}, {tp}]> : tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]

// CHECK-LABEL: func.func @all_reduce
// CHECK-SAME: %[[X:.*]]: tensor<8x16xf32>
func.func @all_reduce(%x: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) {
  // CHECK: dist.all_reduce sum %[[X]] on @mesh axes [tp] : tensor<8x16xf32>
  %0 = dist.all_reduce sum %x on @mesh axes [tp] : tensor<8x16xf32>
  // CHECK: dist.all_reduce max %[[X]] on @mesh axes [dp, tp] : tensor<8x16xf32>
  %1 = dist.all_reduce max %x on @mesh axes [dp, tp] : tensor<8x16xf32>
  // CHECK: dist.all_reduce min %[[X]] on @mesh axes [tp, dp] : tensor<8x16xf32>
  %2 = dist.all_reduce min %x on @mesh axes [tp, dp] : tensor<8x16xf32>
  return %0, %1, %2 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

dist.mesh @mesh [tp = 4, sp = 2]

// CHECK-LABEL: func.func @all_gather
// CHECK-SAME: %[[X:.*]]: tensor<2x32x512xf32>
func.func @all_gather(%x: tensor<2x32x512xf32>) -> tensor<2x256x512xf32> {
  // CHECK: dist.all_gather %[[X]] on @mesh axes [tp, sp] gather_dim 1 : tensor<2x32x512xf32> -> tensor<2x256x512xf32>
  %0 = dist.all_gather %x on @mesh axes [tp, sp] gather_dim 1 : tensor<2x32x512xf32> -> tensor<2x256x512xf32>
  return %0 : tensor<2x256x512xf32>
}

// -----

dist.mesh @mesh [tp = 4]

// CHECK-LABEL: func.func @reduce_scatter
// CHECK-SAME: %[[X:.*]]: tensor<2x128x512xbf16>
func.func @reduce_scatter(%x: tensor<2x128x512xbf16>) -> tensor<2x32x512xbf16> {
  // CHECK: dist.reduce_scatter sum %[[X]] on @mesh axes [tp] scatter_dim 1 : tensor<2x128x512xbf16> -> tensor<2x32x512xbf16>
  %0 = dist.reduce_scatter sum %x on @mesh axes [tp] scatter_dim 1 : tensor<2x128x512xbf16> -> tensor<2x32x512xbf16>
  return %0 : tensor<2x32x512xbf16>
}

// -----

dist.mesh @mesh [sp = 4]

// CHECK-LABEL: func.func @dispatch
// CHECK-SAME: %[[X:.*]]: tensor<8x64xf32>, %[[D:.*]]: tensor<8xi64>
func.func @dispatch(%x: tensor<8x64xf32>, %d: tensor<8xi64>) -> tensor<8x64xf32> {
  // CHECK: %[[R:.*]], %[[C:.*]] = dist.dispatch %[[X]] to %[[D]] on @mesh axes [sp] : tensor<8x64xf32>, tensor<8xi64> -> tensor<32x64xf32>, tensor<4xi64>
  %r, %c = dist.dispatch %x to %d on @mesh axes [sp] : tensor<8x64xf32>, tensor<8xi64> -> tensor<32x64xf32>, tensor<4xi64>
  // CHECK: dist.dispatch_return %[[R]] from %[[C]] to %[[D]] on @mesh axes [sp] : tensor<32x64xf32>, tensor<4xi64>, tensor<8xi64> -> tensor<8x64xf32>
  %b = dist.dispatch_return %r from %c to %d on @mesh axes [sp] : tensor<32x64xf32>, tensor<4xi64>, tensor<8xi64> -> tensor<8x64xf32>
  return %b : tensor<8x64xf32>
}

// CHECK-LABEL: func.func @all_to_all
// CHECK-SAME: %[[X:.*]]: tensor<2x32x16x64xf32>
func.func @all_to_all(%x: tensor<2x32x16x64xf32>) -> (tensor<2x128x4x64xf32>, tensor<2x32x16x64xf32>) {
  // CHECK: dist.all_to_all %[[X]] on @mesh axes [sp] split_dim 2 concat_dim 1 : tensor<2x32x16x64xf32> -> tensor<2x128x4x64xf32>
  %0 = dist.all_to_all %x on @mesh axes [sp] split_dim 2 concat_dim 1 : tensor<2x32x16x64xf32> -> tensor<2x128x4x64xf32>
  // Splitting and concatenating the same dimension keeps the shape.
  // CHECK: dist.all_to_all %[[X]] on @mesh axes [sp] split_dim 3 concat_dim 3 : tensor<2x32x16x64xf32> -> tensor<2x32x16x64xf32>
  %1 = dist.all_to_all %x on @mesh axes [sp] split_dim 3 concat_dim 3 : tensor<2x32x16x64xf32> -> tensor<2x32x16x64xf32>
  return %0, %1 : tensor<2x128x4x64xf32>, tensor<2x32x16x64xf32>
}

// -----

dist.mesh @mesh [sp = 4]

// CHECK-LABEL: func.func @collective_permute
// CHECK-SAME: %[[X:.*]]: tensor<2x32xf32>
func.func @collective_permute(%x: tensor<2x32xf32>) -> (tensor<2x32xf32>, tensor<2x32xf32>) {
  // CHECK: dist.collective_permute %[[X]] on @mesh axes [sp] shift 1 : tensor<2x32xf32>
  %0 = dist.collective_permute %x on @mesh axes [sp] shift 1 : tensor<2x32xf32>
  // CHECK: dist.collective_permute %[[X]] on @mesh axes [sp] shift -1 : tensor<2x32xf32>
  %1 = dist.collective_permute %x on @mesh axes [sp] shift -1 : tensor<2x32xf32>
  return %0, %1 : tensor<2x32xf32>, tensor<2x32xf32>
}

// -----

dist.mesh @mesh [dp = 1, tp = 4]

// Groups of size 1 are legal (and fold; see canonicalize.mlir).
// CHECK-LABEL: func.func @group_of_one
// CHECK-SAME: %[[X:.*]]: tensor<8x16xf32>
func.func @group_of_one(%x: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  // CHECK: dist.all_gather %[[X]] on @mesh axes [dp] gather_dim 0 : tensor<8x16xf32> -> tensor<8x16xf32>
  %0 = dist.all_gather %x on @mesh axes [dp] gather_dim 0 : tensor<8x16xf32> -> tensor<8x16xf32>
  // CHECK: dist.all_reduce sum %[[X]] on @mesh axes [dp] : tensor<8x16xf32>
  %1 = dist.all_reduce sum %x on @mesh axes [dp] : tensor<8x16xf32>
  return %0, %1 : tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

dist.mesh @mesh [tp = 4, sp = 2]

// CHECK-LABEL: func.func @async_collectives
// CHECK-SAME: %[[X:.*]]: tensor<8x16xf32>
func.func @async_collectives(%x: tensor<8x16xf32>) {
  // CHECK: %[[T0:.*]] = dist.all_reduce_start sum %[[X]] on @mesh axes [tp] : tensor<8x16xf32> -> !dist.token<tensor<8x16xf32>>
  // CHECK: dist.wait %[[T0]] : !dist.token<tensor<8x16xf32>>
  %t0 = dist.all_reduce_start sum %x on @mesh axes [tp] : tensor<8x16xf32> -> !dist.token<tensor<8x16xf32>>
  %0 = dist.wait %t0 : !dist.token<tensor<8x16xf32>>
  // CHECK: %[[T1:.*]] = dist.all_gather_start %[[X]] on @mesh axes [tp] gather_dim 0 : tensor<8x16xf32> -> !dist.token<tensor<32x16xf32>>
  // CHECK: dist.wait %[[T1]] : !dist.token<tensor<32x16xf32>>
  %t1 = dist.all_gather_start %x on @mesh axes [tp] gather_dim 0 : tensor<8x16xf32> -> !dist.token<tensor<32x16xf32>>
  %1 = dist.wait %t1 : !dist.token<tensor<32x16xf32>>
  // CHECK: %[[T2:.*]] = dist.reduce_scatter_start max %[[X]] on @mesh axes [sp] scatter_dim 1 : tensor<8x16xf32> -> !dist.token<tensor<8x8xf32>>
  // CHECK: dist.wait %[[T2]] : !dist.token<tensor<8x8xf32>>
  %t2 = dist.reduce_scatter_start max %x on @mesh axes [sp] scatter_dim 1 : tensor<8x16xf32> -> !dist.token<tensor<8x8xf32>>
  %2 = dist.wait %t2 : !dist.token<tensor<8x8xf32>>
  // CHECK: %[[T3:.*]] = dist.all_to_all_start %[[X]] on @mesh axes [tp] split_dim 1 concat_dim 0 : tensor<8x16xf32> -> !dist.token<tensor<32x4xf32>>
  // CHECK: dist.wait %[[T3]] : !dist.token<tensor<32x4xf32>>
  %t3 = dist.all_to_all_start %x on @mesh axes [tp] split_dim 1 concat_dim 0 : tensor<8x16xf32> -> !dist.token<tensor<32x4xf32>>
  %3 = dist.wait %t3 : !dist.token<tensor<32x4xf32>>
  // CHECK: %[[T4:.*]] = dist.collective_permute_start %[[X]] on @mesh axes [sp, tp] shift 3 : tensor<8x16xf32> -> !dist.token<tensor<8x16xf32>>
  // CHECK: dist.wait %[[T4]] : !dist.token<tensor<8x16xf32>>
  %t4 = dist.collective_permute_start %x on @mesh axes [sp, tp] shift 3 : tensor<8x16xf32> -> !dist.token<tensor<8x16xf32>>
  %4 = dist.wait %t4 : !dist.token<tensor<8x16xf32>>
  return
}

// -----

dist.mesh @mesh [tp = 2]

// Independent work between a start and its wait is what overlaps.
// CHECK-LABEL: func.func @overlap
func.func @overlap(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK: %[[T:.*]] = dist.all_reduce_start
  // CHECK: %[[Y:.*]] = dist.all_reduce sum
  // CHECK: %[[X:.*]] = dist.wait %[[T]]
  // CHECK: return %[[X]], %[[Y]]
  %t = dist.all_reduce_start sum %x on @mesh axes [tp] : tensor<4xf32> -> !dist.token<tensor<4xf32>>
  %0 = dist.all_reduce sum %y on @mesh axes [tp] : tensor<4xf32>
  %1 = dist.wait %t : !dist.token<tensor<4xf32>>
  return %1, %0 : tensor<4xf32>, tensor<4xf32>
}

// -----

dist.mesh @mesh [pp = 2, tp = 2]

// CHECK-LABEL: func.func @send_recv
// CHECK-SAME: %[[X:.*]]: tensor<2x128xf32>
func.func @send_recv(%x: tensor<2x128xf32>) -> tensor<2x128xf32> {
  // CHECK: dist.send %[[X]] on @mesh axis pp to 1 tag 0 : tensor<2x128xf32>
  dist.send %x on @mesh axis pp to 1 tag 0 : tensor<2x128xf32>
  // CHECK: %[[R:.*]] = dist.recv on @mesh axis pp from 0 tag 0 : tensor<2x128xf32>
  %0 = dist.recv on @mesh axis pp from 0 tag 0 : tensor<2x128xf32>
  // CHECK: return %[[R]]
  return %0 : tensor<2x128xf32>
}

// -----

dist.mesh @mesh [pp = 4]

// CHECK-LABEL: func.func @async_send_recv
// CHECK-SAME: %[[X:.*]]: tensor<2x128xf32>
func.func @async_send_recv(%x: tensor<2x128xf32>) -> tensor<2x128xf32> {
  // CHECK: %[[S:.*]] = dist.send_start %[[X]] on @mesh axis pp to 3 tag 7 : tensor<2x128xf32> -> !dist.token<none>
  %s = dist.send_start %x on @mesh axis pp to 3 tag 7 : tensor<2x128xf32> -> !dist.token<none>
  // CHECK: %[[R:.*]] = dist.recv_start on @mesh axis pp from 2 tag 7 : !dist.token<tensor<2x128xf32>>
  %r = dist.recv_start on @mesh axis pp from 2 tag 7 : !dist.token<tensor<2x128xf32>>
  // CHECK: dist.wait %[[S]] : !dist.token<none>
  dist.wait %s : !dist.token<none>
  // CHECK: %[[V:.*]] = dist.wait %[[R]] : !dist.token<tensor<2x128xf32>>
  %0 = dist.wait %r : !dist.token<tensor<2x128xf32>>
  // CHECK: return %[[V]]
  return %0 : tensor<2x128xf32>
}

// -----

dist.mesh @mesh [pp = 2, tp = 2]

// CHECK-LABEL: func.func @stages
// CHECK-SAME: %[[X:.*]]: tensor<2x128xf32>
func.func @stages(%x: tensor<2x128xf32>) -> tensor<2x128xf32> {
  // CHECK: dist.stage 0 on @mesh axis pp {
  // CHECK-NEXT: dist.send %[[X]] on @mesh axis pp to 1 tag 0
  // CHECK-NEXT: dist.yield
  dist.stage 0 on @mesh axis pp {
    dist.send %x on @mesh axis pp to 1 tag 0 : tensor<2x128xf32>
    dist.yield
  }
  // CHECK: %[[OUT:.*]] = dist.stage 1 on @mesh axis pp -> (tensor<2x128xf32>) {
  // CHECK: %[[H:.*]] = dist.recv on @mesh axis pp from 0 tag 0
  // CHECK: %[[Y:.*]] = dist.all_reduce sum %[[H]]
  // CHECK: dist.yield %[[Y]] : tensor<2x128xf32>
  %0 = dist.stage 1 on @mesh axis pp -> (tensor<2x128xf32>) {
    %h = dist.recv on @mesh axis pp from 0 tag 0 : tensor<2x128xf32>
    %y = dist.all_reduce sum %h on @mesh axes [tp] : tensor<2x128xf32>
    dist.yield %y : tensor<2x128xf32>
  }
  // CHECK: return %[[OUT]]
  return %0 : tensor<2x128xf32>
}

// -----

// The token type on its own, with both kinds of payload.
// CHECK-LABEL: func.func private @tokens
// CHECK-SAME: !dist.token<tensor<4x8xf32>>, !dist.token<none>
func.func private @tokens(!dist.token<tensor<4x8xf32>>, !dist.token<none>)

// -----

dist.mesh @mesh [dp = 2, tp = 4]

// CHECK-LABEL: func.func @all_slice_and_axis_index
// CHECK-SAME: %[[W:.*]]: tensor<64x256xf32>
func.func @all_slice_and_axis_index(%w: tensor<64x256xf32>) -> (tensor<64x32xf32>, tensor<i64>) {
  // CHECK: dist.all_slice %[[W]] on @mesh axes [dp, tp] slice_dim 1 : tensor<64x256xf32> -> tensor<64x32xf32>
  %0 = dist.all_slice %w on @mesh axes [dp, tp] slice_dim 1 : tensor<64x256xf32> -> tensor<64x32xf32>
  // CHECK: dist.axis_index on @mesh axes [tp] : tensor<i64>
  %1 = dist.axis_index on @mesh axes [tp] : tensor<i64>
  return %0, %1 : tensor<64x32xf32>, tensor<i64>
}
