// RUN: partita-opt %s -canonicalize -split-input-file | FileCheck %s

dist.mesh @mesh [dp = 1, tp = 4]

// Every collective over a group of one device is an identity.
// CHECK-LABEL: func.func @group_of_one
// CHECK-SAME: %[[X:.*]]: tensor<8x16xf32>
func.func @group_of_one(%x: tensor<8x16xf32>)
    -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>) {
  // CHECK-NOT: dist.
  // CHECK: return %[[X]], %[[X]], %[[X]], %[[X]], %[[X]], %[[X]]
  %0 = dist.all_reduce sum %x on @mesh axes [dp] : tensor<8x16xf32>
  %1 = dist.all_gather %x on @mesh axes [dp] gather_dim 0 : tensor<8x16xf32> -> tensor<8x16xf32>
  %2 = dist.reduce_scatter sum %x on @mesh axes [dp] scatter_dim 1 : tensor<8x16xf32> -> tensor<8x16xf32>
  %3 = dist.all_to_all %x on @mesh axes [dp] split_dim 1 concat_dim 0 : tensor<8x16xf32> -> tensor<8x16xf32>
  %4 = dist.collective_permute %x on @mesh axes [dp] shift 1 : tensor<8x16xf32>
  %5 = dist.all_slice %x on @mesh axes [dp] slice_dim 1 : tensor<8x16xf32> -> tensor<8x16xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

dist.mesh @mesh [dp = 1, tp = 4]

// A group of several devices moves data; nothing folds.
// CHECK-LABEL: func.func @group_of_four
func.func @group_of_four(%x: tensor<8x16xf32>)
    -> (tensor<8x16xf32>, tensor<32x16xf32>, tensor<8x16xf32>) {
  // CHECK: dist.all_reduce
  // CHECK: dist.all_gather
  // CHECK: dist.all_reduce
  %0 = dist.all_reduce sum %x on @mesh axes [tp] : tensor<8x16xf32>
  %1 = dist.all_gather %x on @mesh axes [tp, dp] gather_dim 0 : tensor<8x16xf32> -> tensor<32x16xf32>
  %2 = dist.all_reduce sum %x on @mesh axes [dp, tp] : tensor<8x16xf32>
  return %0, %1, %2 : tensor<8x16xf32>, tensor<32x16xf32>, tensor<8x16xf32>
}

// -----

dist.mesh @mesh [sp = 4]

// A rotation by a multiple of the ring length moves nothing.
// CHECK-LABEL: func.func @permute_full_turn
// CHECK-SAME: %[[X:.*]]: tensor<4xf32>
func.func @permute_full_turn(%x: tensor<4xf32>)
    -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  // CHECK: %[[P:.*]] = dist.collective_permute %[[X]] on @mesh axes [sp] shift 5
  // CHECK-NOT: dist.collective_permute
  // CHECK: return %[[X]], %[[X]], %[[X]], %[[P]]
  %0 = dist.collective_permute %x on @mesh axes [sp] shift 0 : tensor<4xf32>
  %1 = dist.collective_permute %x on @mesh axes [sp] shift 4 : tensor<4xf32>
  %2 = dist.collective_permute %x on @mesh axes [sp] shift -8 : tensor<4xf32>
  %3 = dist.collective_permute %x on @mesh axes [sp] shift 5 : tensor<4xf32>
  return %0, %1, %2, %3 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]

// A reshard to the sharding an annotation already gives is a no-op.
// CHECK-LABEL: func.func @reshard_after_annotate
// CHECK-SAME: %[[X:.*]]: tensor<8x16xf32>
func.func @reshard_after_annotate(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // CHECK: %[[A:.*]] = dist.annotate %[[X]]
  // CHECK-NOT: dist.reshard
  // CHECK: return %[[A]]
  %0 = dist.annotate %x sharding<@mesh, [{dp}, {tp}]> : tensor<8x16xf32>
  %1 = dist.reshard %0 to sharding<@mesh, [{dp}, {tp}]> : tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]

// A reshard to the sharding the previous reshard produced is a no-op.
// CHECK-LABEL: func.func @reshard_twice_same
// CHECK-SAME: %[[X:.*]]: tensor<8x16xf32>
func.func @reshard_twice_same(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // CHECK: %[[R:.*]] = dist.reshard %[[X]] to sharding<@mesh, [{}, {tp}]>
  // CHECK-NOT: dist.reshard
  // CHECK: return %[[R]]
  %0 = dist.reshard %x to sharding<@mesh, [{}, {tp}]> : tensor<8x16xf32>
  %1 = dist.reshard %0 to sharding<@mesh, [{}, {tp}]> : tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]

// Only the last sharding of a chain of reshards is observable.
// CHECK-LABEL: func.func @reshard_chain
// CHECK-SAME: %[[X:.*]]: tensor<8x16xf32>
func.func @reshard_chain(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // CHECK: %[[A:.*]] = dist.annotate %[[X]]
  // CHECK-NEXT: %[[R:.*]] = dist.reshard %[[A]] to sharding<@mesh, [{}, {dp}]>
  // CHECK-NEXT: return %[[R]]
  %0 = dist.annotate %x sharding<@mesh, [{dp}, {tp}]> : tensor<8x16xf32>
  %1 = dist.reshard %0 to sharding<@mesh, [{}, {tp}]> : tensor<8x16xf32>
  %2 = dist.reshard %1 to sharding<@mesh, [{}, {dp}]> : tensor<8x16xf32>
  return %2 : tensor<8x16xf32>
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]

// A chain that returns to the annotated sharding disappears entirely.
// CHECK-LABEL: func.func @reshard_round_trip
// CHECK-SAME: %[[X:.*]]: tensor<8x16xf32>
func.func @reshard_round_trip(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // CHECK: %[[A:.*]] = dist.annotate %[[X]]
  // CHECK-NEXT: return %[[A]]
  %0 = dist.annotate %x sharding<@mesh, [{dp}, {tp}]> : tensor<8x16xf32>
  %1 = dist.reshard %0 to sharding<@mesh, [{}, {tp}]> : tensor<8x16xf32>
  %2 = dist.reshard %1 to sharding<@mesh, [{dp}, {tp}]> : tensor<8x16xf32>
  return %2 : tensor<8x16xf32>
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]

// A reshard to a different sharding stays.
// CHECK-LABEL: func.func @reshard_changes
// CHECK-SAME: %[[X:.*]]: tensor<8x16xf32>
func.func @reshard_changes(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // CHECK: %[[A:.*]] = dist.annotate %[[X]] sharding<@mesh, [{dp}, {tp}]>
  // CHECK: dist.reshard %[[A]] to sharding<@mesh, [{}, {}]>
  %0 = dist.annotate %x sharding<@mesh, [{dp}, {tp}]> : tensor<8x16xf32>
  %1 = dist.reshard %0 to sharding<@mesh, [{}, {}]> : tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}
