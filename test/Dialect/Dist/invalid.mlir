// RUN: partita-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// dist.mesh
//===----------------------------------------------------------------------===//

// expected-error @+1 {{mesh_c1: the mesh has no axes}}
dist.mesh @mesh []

// -----

// expected-error @+1 {{mesh_c2: 1 axis names but 2 sizes}}
"dist.mesh"() <{sym_name = "mesh", axis_names = ["dp"], axis_sizes = array<i64: 2, 4>}> : () -> ()

// -----

// expected-error @+1 {{mesh_c3: axis name '2d' is not an identifier}}
dist.mesh @mesh [dp = 2, "2d" = 4]

// -----

// expected-error @+1 {{mesh_c4: axis 'tp' is declared twice}}
dist.mesh @mesh [tp = 2, tp = 4]

// -----

// expected-error @+1 {{mesh_c5: axis 'tp' has size 0}}
dist.mesh @mesh [dp = 2, tp = 0]

// -----

// expected-error @+1 {{mesh_c6: 1 axis roles for 2 axes}}
"dist.mesh"() <{sym_name = "mesh", axis_names = ["a", "b"], axis_sizes = array<i64: 2, 4>, axis_roles = [#dist<axis_role tp>]}> : () -> ()

// -----

// expected-error @+1 {{mesh_c7: axes 'model' and 'tp' both have role tp}}
dist.mesh @mesh [model = 2 : tp, tp = 4]

// -----

// expected-error @+1 {{unknown axis role 'xp'; expected dp, tp, pp, sp, ep or none}}
dist.mesh @mesh [model = 2 : xp]

//===----------------------------------------------------------------------===//
// #dist.sharding, dist.annotate, dist.reshard
//===----------------------------------------------------------------------===//

// -----

dist.mesh @mesh [dp = 2, tp = 4]
func.func @axis_twice_across_dims(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{sharding_c1: axis 'dp' is used more than once}}
  %0 = dist.annotate %x sharding<@mesh, [{dp}, {tp, dp}]> : tensor<8x16xf32>
  return
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]
func.func @axis_twice_partial(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{sharding_c1: axis 'tp' is used more than once}}
  %0 = dist.annotate %x sharding<@mesh, [{}, {tp}], partial = [tp]> : tensor<8x16xf32>
  return
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]
func.func @rank_mismatch(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{sharding_c2: the sharding has 3 dimension entries but 'tensor<8x16xf32>' has rank 2}}
  %0 = dist.annotate %x sharding<@mesh, [{dp}, {}, {}]> : tensor<8x16xf32>
  return
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]
func.func @unknown_axis(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{sharding_c3: 'sp' is not an axis of mesh @mesh}}
  %0 = dist.annotate %x sharding<@mesh, [{dp}, {sp}]> : tensor<8x16xf32>
  return
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]
func.func @unknown_partial_axis(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{sharding_c3: 'pp' is not an axis of mesh @mesh}}
  %0 = dist.reshard %x to sharding<@mesh, [{dp}, {}], partial = [pp]> : tensor<8x16xf32>
  return
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]
func.func @indivisible_dim(%x: tensor<8x6xf32>) {
  // expected-error @+1 {{sharding_c4: dimension 1 of size 6 is not divisible by 4, the number of devices along [tp]}}
  %0 = dist.annotate %x sharding<@mesh, [{dp}, {tp}]> : tensor<8x6xf32>
  return
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]
func.func @indivisible_by_product(%x: tensor<12x16xf32>) {
  // 12 splits over tp (4) but not over dp and tp together (8).
  // expected-error @+1 {{sharding_c4: dimension 0 of size 12 is not divisible by 8, the number of devices along [tp, dp]}}
  %0 = dist.reshard %x to sharding<@mesh, [{tp, dp}, {}]> : tensor<12x16xf32>
  return
}

// -----

func.func @annotate_unknown_mesh(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{annotate_c1: @mesh does not name a dist.mesh}}
  %0 = dist.annotate %x sharding<@mesh, [{}, {}]> : tensor<8x16xf32>
  return
}

// -----

dist.mesh @mesh [dp = 2]
func.func @annotate_type_change(%x: tensor<8xf32>) {
  // expected-error @+1 {{annotate_c2: the result type 'tensor<4xf32>' differs from the operand type 'tensor<8xf32>'}}
  %0 = "dist.annotate"(%x) <{sharding = #dist.sharding<@mesh, [{dp}]>}> : (tensor<8xf32>) -> tensor<4xf32>
  return
}

// -----

// A symbol that is not a dist.mesh does not do.
func.func private @mesh()
func.func @reshard_not_a_mesh(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{reshard_c1: @mesh does not name a dist.mesh}}
  %0 = dist.reshard %x to sharding<@mesh, [{}, {}]> : tensor<8x16xf32>
  return
}

// -----

dist.mesh @mesh [dp = 2]
func.func @reshard_type_change(%x: tensor<8xf32>) {
  // expected-error @+1 {{reshard_c2: the result type 'tensor<8xf16>' differs from the operand type 'tensor<8xf32>'}}
  %0 = "dist.reshard"(%x) <{sharding = #dist.sharding<@mesh, [{dp}]>}> : (tensor<8xf32>) -> tensor<8xf16>
  return
}

//===----------------------------------------------------------------------===//
// dist.all_reduce
//===----------------------------------------------------------------------===//

// -----

func.func @all_reduce_unknown_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{all_reduce_c1: @mesh does not name a dist.mesh}}
  %0 = dist.all_reduce sum %x on @mesh axes [tp] : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]
func.func @all_reduce_unknown_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{all_reduce_c2: 'sp' is not an axis of mesh @mesh}}
  %0 = dist.all_reduce sum %x on @mesh axes [tp, sp] : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]
func.func @all_reduce_axis_twice(%x: tensor<8xf32>) {
  // expected-error @+1 {{all_reduce_c2: axis 'tp' appears more than once}}
  %0 = dist.all_reduce sum %x on @mesh axes [tp, dp, tp] : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [dp = 2, tp = 4]
func.func @all_reduce_no_axes(%x: tensor<8xf32>) {
  // expected-error @+1 {{all_reduce_c2: the group names no mesh axis}}
  %0 = dist.all_reduce sum %x on @mesh axes [] : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @all_reduce_type_change(%x: tensor<8xf32>) {
  // expected-error @+1 {{all_reduce_c3: expected result type 'tensor<8xf32>' for group size 4, got 'tensor<2xf32>'}}
  %0 = "dist.all_reduce"(%x) <{mesh = @mesh, axes = ["tp"], reduction = #dist<reduction sum>}> : (tensor<8xf32>) -> tensor<2xf32>
  return
}

//===----------------------------------------------------------------------===//
// dist.all_gather
//===----------------------------------------------------------------------===//

// -----

func.func @all_gather_unknown_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{all_gather_c1: @mesh does not name a dist.mesh}}
  %0 = dist.all_gather %x on @mesh axes [tp] gather_dim 0 : tensor<8xf32> -> tensor<32xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @all_gather_axis_twice(%x: tensor<8xf32>) {
  // expected-error @+1 {{all_gather_c2: axis 'tp' appears more than once}}
  %0 = dist.all_gather %x on @mesh axes [tp, tp] gather_dim 0 : tensor<8xf32> -> tensor<128xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @all_gather_dim_out_of_range(%x: tensor<8x2xf32>) {
  // expected-error @+1 {{all_gather_c3: gather_dim 2 is out of range for an operand of rank 2}}
  %0 = dist.all_gather %x on @mesh axes [tp] gather_dim 2 : tensor<8x2xf32> -> tensor<8x8xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @all_gather_negative_dim(%x: tensor<8x2xf32>) {
  // expected-error @+1 {{all_gather_c3: gather_dim -1 is out of range for an operand of rank 2}}
  %0 = dist.all_gather %x on @mesh axes [tp] gather_dim -1 : tensor<8x2xf32> -> tensor<8x8xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @all_gather_wrong_local_shape(%x: tensor<8x2xf32>) {
  // expected-error @+1 {{all_gather_c4: expected result type 'tensor<8x8xf32>' for group size 4, got 'tensor<32x2xf32>'}}
  %0 = dist.all_gather %x on @mesh axes [tp] gather_dim 1 : tensor<8x2xf32> -> tensor<32x2xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @all_gather_element_type(%x: tensor<8x2xf32>) {
  // expected-error @+1 {{all_gather_c4: expected result type 'tensor<32x2xf32>' for group size 4, got 'tensor<32x2xbf16>'}}
  %0 = dist.all_gather %x on @mesh axes [tp] gather_dim 0 : tensor<8x2xf32> -> tensor<32x2xbf16>
  return
}

//===----------------------------------------------------------------------===//
// dist.reduce_scatter
//===----------------------------------------------------------------------===//

// -----

func.func @reduce_scatter_unknown_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{reduce_scatter_c1: @mesh does not name a dist.mesh}}
  %0 = dist.reduce_scatter sum %x on @mesh axes [tp] scatter_dim 0 : tensor<8xf32> -> tensor<2xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @reduce_scatter_unknown_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{reduce_scatter_c2: 'dp' is not an axis of mesh @mesh}}
  %0 = dist.reduce_scatter sum %x on @mesh axes [dp] scatter_dim 0 : tensor<8xf32> -> tensor<2xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @reduce_scatter_dim_out_of_range(%x: tensor<8xf32>) {
  // expected-error @+1 {{reduce_scatter_c3: scatter_dim 1 is out of range for an operand of rank 1}}
  %0 = dist.reduce_scatter sum %x on @mesh axes [tp] scatter_dim 1 : tensor<8xf32> -> tensor<2xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @reduce_scatter_indivisible(%x: tensor<6xf32>) {
  // expected-error @+1 {{reduce_scatter_c4: dimension scatter_dim = 0 has size 6, which is not divisible by the group size 4}}
  %0 = dist.reduce_scatter sum %x on @mesh axes [tp] scatter_dim 0 : tensor<6xf32> -> tensor<1xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @reduce_scatter_wrong_local_shape(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{reduce_scatter_c5: expected result type 'tensor<8x2xf32>' for group size 4, got 'tensor<2x8xf32>'}}
  %0 = dist.reduce_scatter sum %x on @mesh axes [tp] scatter_dim 1 : tensor<8x8xf32> -> tensor<2x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// dist.all_slice
//===----------------------------------------------------------------------===//

// -----

func.func @all_slice_unknown_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{all_slice_c1: @mesh does not name a dist.mesh}}
  %0 = dist.all_slice %x on @mesh axes [tp] slice_dim 0 : tensor<8xf32> -> tensor<2xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @all_slice_no_axes(%x: tensor<8xf32>) {
  // expected-error @+1 {{all_slice_c2: the group names no mesh axis}}
  %0 = dist.all_slice %x on @mesh axes [] slice_dim 0 : tensor<8xf32> -> tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @all_slice_dim_out_of_range(%x: tensor<8xf32>) {
  // expected-error @+1 {{all_slice_c3: slice_dim 1 is out of range for an operand of rank 1}}
  %0 = dist.all_slice %x on @mesh axes [tp] slice_dim 1 : tensor<8xf32> -> tensor<2xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @all_slice_indivisible(%x: tensor<6xf32>) {
  // expected-error @+1 {{all_slice_c4: dimension slice_dim = 0 has size 6, which is not divisible by the group size 4}}
  %0 = dist.all_slice %x on @mesh axes [tp] slice_dim 0 : tensor<6xf32> -> tensor<1xf32>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @all_slice_wrong_local_shape(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{all_slice_c5: expected result type 'tensor<8x2xf32>' for group size 4, got 'tensor<2x8xf32>'}}
  %0 = dist.all_slice %x on @mesh axes [tp] slice_dim 1 : tensor<8x8xf32> -> tensor<2x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// dist.axis_index
//===----------------------------------------------------------------------===//

// -----

func.func @axis_index_unknown_mesh() {
  // expected-error @+1 {{axis_index_c1: @mesh does not name a dist.mesh}}
  %0 = dist.axis_index on @mesh axes [tp] : tensor<i64>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @axis_index_axis_twice() {
  // expected-error @+1 {{axis_index_c2: axis 'tp' appears more than once}}
  %0 = dist.axis_index on @mesh axes [tp, tp] : tensor<i64>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @axis_index_unknown_axis() {
  // expected-error @+1 {{axis_index_c2: 'dp' is not an axis of mesh @mesh}}
  %0 = dist.axis_index on @mesh axes [dp] : tensor<i64>
  return
}

//===----------------------------------------------------------------------===//
// dist.dispatch, dist.dispatch_return
//===----------------------------------------------------------------------===//

// -----

func.func @dispatch_unknown_mesh(%x: tensor<8x4xf32>, %d: tensor<8xi64>) {
  // expected-error @+1 {{dispatch_c1: @mesh does not name a dist.mesh}}
  %0, %1 = dist.dispatch %x to %d on @mesh axes [ep] : tensor<8x4xf32>, tensor<8xi64> -> tensor<16x4xf32>, tensor<2xi64>
  return
}

// -----

dist.mesh @mesh [ep = 2]
func.func @dispatch_no_axes(%x: tensor<8x4xf32>, %d: tensor<8xi64>) {
  // expected-error @+1 {{dispatch_c2: the group names no mesh axis}}
  %0, %1 = dist.dispatch %x to %d on @mesh axes [] : tensor<8x4xf32>, tensor<8xi64> -> tensor<16x4xf32>, tensor<2xi64>
  return
}

// -----

dist.mesh @mesh [ep = 2]
func.func @dispatch_destinations_per_row(%x: tensor<8x4xf32>, %d: tensor<6xi64>) {
  // expected-error @+1 {{dispatch_c3: 6 destinations for an operand of 8 rows}}
  %0, %1 = dist.dispatch %x to %d on @mesh axes [ep] : tensor<8x4xf32>, tensor<6xi64> -> tensor<16x4xf32>, tensor<2xi64>
  return
}

// -----

dist.mesh @mesh [ep = 2]
func.func @dispatch_no_rows(%x: tensor<f32>, %d: tensor<1xi64>) {
  // expected-error @+1 {{dispatch_c3: the operand has no rows}}
  %0, %1 = dist.dispatch %x to %d on @mesh axes [ep] : tensor<f32>, tensor<1xi64> -> tensor<f32>, tensor<2xi64>
  return
}

// -----

dist.mesh @mesh [ep = 2]
func.func @dispatch_row_shape(%x: tensor<8x4xf32>, %d: tensor<8xi64>) {
  // expected-error @+1 {{dispatch_c4: the result type 'tensor<16x5xf32>' is not the operand type with other rows}}
  %0, %1 = dist.dispatch %x to %d on @mesh axes [ep] : tensor<8x4xf32>, tensor<8xi64> -> tensor<16x5xf32>, tensor<2xi64>
  return
}

// -----

dist.mesh @mesh [ep = 2]
func.func @dispatch_counts(%x: tensor<8x4xf32>, %d: tensor<8xi64>) {
  // expected-error @+1 {{dispatch_c5: 3 counts for a group of 2 devices}}
  %0, %1 = dist.dispatch %x to %d on @mesh axes [ep] : tensor<8x4xf32>, tensor<8xi64> -> tensor<16x4xf32>, tensor<3xi64>
  return
}

// -----

func.func @dispatch_return_unknown_mesh(%y: tensor<16x4xf32>, %c: tensor<2xi64>, %d: tensor<8xi64>) {
  // expected-error @+1 {{dispatch_return_c1: @mesh does not name a dist.mesh}}
  %0 = dist.dispatch_return %y from %c to %d on @mesh axes [ep] : tensor<16x4xf32>, tensor<2xi64>, tensor<8xi64> -> tensor<8x4xf32>
  return
}

// -----

dist.mesh @mesh [ep = 2]
func.func @dispatch_return_unknown_axis(%y: tensor<16x4xf32>, %c: tensor<2xi64>, %d: tensor<8xi64>) {
  // expected-error @+1 {{dispatch_return_c2: 'xp' is not an axis of mesh @mesh}}
  %0 = dist.dispatch_return %y from %c to %d on @mesh axes [xp] : tensor<16x4xf32>, tensor<2xi64>, tensor<8xi64> -> tensor<8x4xf32>
  return
}

// -----

dist.mesh @mesh [ep = 2]
func.func @dispatch_return_destinations_per_row(%y: tensor<16x4xf32>, %c: tensor<2xi64>, %d: tensor<6xi64>) {
  // expected-error @+1 {{dispatch_return_c3: 6 destinations for a result of 8 rows}}
  %0 = dist.dispatch_return %y from %c to %d on @mesh axes [ep] : tensor<16x4xf32>, tensor<2xi64>, tensor<6xi64> -> tensor<8x4xf32>
  return
}

// -----

dist.mesh @mesh [ep = 2]
func.func @dispatch_return_element_type(%y: tensor<16x4xf32>, %c: tensor<2xi64>, %d: tensor<8xi64>) {
  // expected-error @+1 {{dispatch_return_c4: the result type 'tensor<8x4xf16>' is not the operand type with other rows}}
  %0 = dist.dispatch_return %y from %c to %d on @mesh axes [ep] : tensor<16x4xf32>, tensor<2xi64>, tensor<8xi64> -> tensor<8x4xf16>
  return
}

// -----

dist.mesh @mesh [ep = 2]
func.func @dispatch_return_counts(%y: tensor<16x4xf32>, %c: tensor<4xi64>, %d: tensor<8xi64>) {
  // expected-error @+1 {{dispatch_return_c5: 4 counts for a group of 2 devices}}
  %0 = dist.dispatch_return %y from %c to %d on @mesh axes [ep] : tensor<16x4xf32>, tensor<4xi64>, tensor<8xi64> -> tensor<8x4xf32>
  return
}

//===----------------------------------------------------------------------===//
// dist.all_to_all
//===----------------------------------------------------------------------===//

// -----

func.func @all_to_all_unknown_mesh(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{all_to_all_c1: @mesh does not name a dist.mesh}}
  %0 = dist.all_to_all %x on @mesh axes [sp] split_dim 0 concat_dim 1 : tensor<8x8xf32> -> tensor<2x32xf32>
  return
}

// -----

dist.mesh @mesh [sp = 4]
func.func @all_to_all_no_axes(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{all_to_all_c2: the group names no mesh axis}}
  %0 = dist.all_to_all %x on @mesh axes [] split_dim 0 concat_dim 1 : tensor<8x8xf32> -> tensor<8x8xf32>
  return
}

// -----

dist.mesh @mesh [sp = 4]
func.func @all_to_all_concat_dim_out_of_range(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{all_to_all_c3: concat_dim 2 is out of range for an operand of rank 2}}
  %0 = dist.all_to_all %x on @mesh axes [sp] split_dim 0 concat_dim 2 : tensor<8x8xf32> -> tensor<2x32xf32>
  return
}

// -----

dist.mesh @mesh [sp = 4]
func.func @all_to_all_indivisible(%x: tensor<6x8xf32>) {
  // expected-error @+1 {{all_to_all_c4: dimension split_dim = 0 has size 6, which is not divisible by the group size 4}}
  %0 = dist.all_to_all %x on @mesh axes [sp] split_dim 0 concat_dim 1 : tensor<6x8xf32> -> tensor<1x32xf32>
  return
}

// -----

dist.mesh @mesh [sp = 4]
func.func @all_to_all_wrong_local_shape(%x: tensor<8x8xf32>) {
  // Split and concat swapped.
  // expected-error @+1 {{all_to_all_c5: expected result type 'tensor<2x32xf32>' for group size 4, got 'tensor<32x2xf32>'}}
  %0 = dist.all_to_all %x on @mesh axes [sp] split_dim 0 concat_dim 1 : tensor<8x8xf32> -> tensor<32x2xf32>
  return
}

//===----------------------------------------------------------------------===//
// dist.collective_permute
//===----------------------------------------------------------------------===//

// -----

func.func @collective_permute_unknown_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{collective_permute_c1: @ring does not name a dist.mesh}}
  %0 = dist.collective_permute %x on @ring axes [sp] shift 1 : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [sp = 4]
func.func @collective_permute_unknown_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{collective_permute_c2: 'cp' is not an axis of mesh @mesh}}
  %0 = dist.collective_permute %x on @mesh axes [cp] shift 1 : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [sp = 4]
func.func @collective_permute_type_change(%x: tensor<8xf32>) {
  // expected-error @+1 {{collective_permute_c3: expected result type 'tensor<8xf32>' for group size 4, got 'tensor<8xf16>'}}
  %0 = "dist.collective_permute"(%x) <{mesh = @mesh, axes = ["sp"], shift = 1 : i64}> : (tensor<8xf32>) -> tensor<8xf16>
  return
}

//===----------------------------------------------------------------------===//
// dist.send, dist.recv
//===----------------------------------------------------------------------===//

// -----

func.func @send_unknown_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{send_c1: @mesh does not name a dist.mesh}}
  dist.send %x on @mesh axis pp to 1 tag 0 : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [tp = 2]
func.func @send_unknown_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{send_c2: 'pp' is not an axis of mesh @mesh}}
  dist.send %x on @mesh axis pp to 1 tag 0 : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @send_peer_out_of_range(%x: tensor<8xf32>) {
  // expected-error @+1 {{send_c3: peer coordinate 2 is out of range for axis 'pp' of size 2}}
  dist.send %x on @mesh axis pp to 2 tag 0 : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @send_negative_tag(%x: tensor<8xf32>) {
  // expected-error @+1 {{send_c4: tag -1 is negative}}
  dist.send %x on @mesh axis pp to 1 tag -1 : tensor<8xf32>
  return
}

// -----

func.func @recv_unknown_mesh() {
  // expected-error @+1 {{recv_c1: @mesh does not name a dist.mesh}}
  %0 = dist.recv on @mesh axis pp from 0 tag 0 : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @recv_unknown_axis() {
  // expected-error @+1 {{recv_c2: 'stage' is not an axis of mesh @mesh}}
  %0 = dist.recv on @mesh axis stage from 0 tag 0 : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @recv_negative_peer() {
  // expected-error @+1 {{recv_c3: peer coordinate -1 is negative}}
  %0 = dist.recv on @mesh axis pp from -1 tag 0 : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @recv_negative_tag() {
  // expected-error @+1 {{recv_c4: tag -3 is negative}}
  %0 = dist.recv on @mesh axis pp from 0 tag -3 : tensor<8xf32>
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @recv_start_nothing() {
  // expected-error @+1 {{recv_c5: the token's payload 'none' is not a statically shaped tensor}}
  %t = dist.recv_start on @mesh axis pp from 0 tag 0 : !dist.token<none>
  dist.wait %t : !dist.token<none>
  return
}

//===----------------------------------------------------------------------===//
// Async forms and dist.wait
//===----------------------------------------------------------------------===//

// -----

dist.mesh @mesh [tp = 4]
func.func @start_without_wait(%x: tensor<8xf32>) {
  // expected-error @+1 {{all_reduce_start_c1: the token has no dist.wait}}
  %t = dist.all_reduce_start sum %x on @mesh axes [tp] : tensor<8xf32> -> !dist.token<tensor<8xf32>>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @start_with_two_waits(%x: tensor<8xf32>) {
  // expected-error @+1 {{all_gather_start_c1: the token has 2 uses; it needs exactly one, a dist.wait}}
  %t = dist.all_gather_start %x on @mesh axes [tp] gather_dim 0 : tensor<8xf32> -> !dist.token<tensor<32xf32>>
  %0 = dist.wait %t : !dist.token<tensor<32xf32>>
  %1 = dist.wait %t : !dist.token<tensor<32xf32>>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func private @consume(!dist.token<tensor<2xf32>>)
func.func @start_used_by_call(%x: tensor<8xf32>) {
  // expected-error @+1 {{reduce_scatter_start_c1: the token is used by 'func.call', not by a dist.wait}}
  %t = dist.reduce_scatter_start sum %x on @mesh axes [tp] scatter_dim 0 : tensor<8xf32> -> !dist.token<tensor<2xf32>>
  func.call @consume(%t) : (!dist.token<tensor<2xf32>>) -> ()
  return
}

// -----

dist.mesh @mesh [sp = 4, pp = 2]
func.func @wait_in_another_block(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{all_to_all_start_c1: the dist.wait is not in the block of the start}}
  %t = dist.all_to_all_start %x on @mesh axes [sp] split_dim 0 concat_dim 1 : tensor<8x8xf32> -> !dist.token<tensor<2x32xf32>>
  %0 = dist.stage 0 on @mesh axis pp -> (tensor<2x32xf32>) {
    %1 = dist.wait %t : !dist.token<tensor<2x32xf32>>
    dist.yield %1 : tensor<2x32xf32>
  }
  return
}

// -----

dist.mesh @mesh [sp = 4]
func.func @collective_permute_start_without_wait(%x: tensor<8xf32>) {
  // expected-error @+1 {{collective_permute_start_c1: the token has no dist.wait}}
  %t = dist.collective_permute_start %x on @mesh axes [sp] shift 1 : tensor<8xf32> -> !dist.token<tensor<8xf32>>
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @send_start_without_wait(%x: tensor<8xf32>) {
  // expected-error @+1 {{send_start_c1: the token has no dist.wait}}
  %t = dist.send_start %x on @mesh axis pp to 1 tag 0 : tensor<8xf32> -> !dist.token<none>
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @send_start_payload(%x: tensor<8xf32>) {
  // expected-error @+1 {{send_start_c2: the token's payload is 'tensor<8xf32>', not none}}
  %t = dist.send_start %x on @mesh axis pp to 1 tag 0 : tensor<8xf32> -> !dist.token<tensor<8xf32>>
  %0 = dist.wait %t : !dist.token<tensor<8xf32>>
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @recv_start_with_two_waits() {
  // expected-error @+1 {{recv_start_c1: the token has 2 uses}}
  %t = dist.recv_start on @mesh axis pp from 0 tag 0 : !dist.token<tensor<8xf32>>
  %0 = dist.wait %t : !dist.token<tensor<8xf32>>
  %1 = dist.wait %t : !dist.token<tensor<8xf32>>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @start_wrong_payload(%x: tensor<8xf32>) {
  // The start ops share the constraints of their synchronous forms.
  // expected-error @+1 {{all_gather_c4: expected token payload 'tensor<32xf32>' for group size 4, got 'tensor<8xf32>'}}
  %t = dist.all_gather_start %x on @mesh axes [tp] gather_dim 0 : tensor<8xf32> -> !dist.token<tensor<8xf32>>
  %0 = dist.wait %t : !dist.token<tensor<8xf32>>
  return
}

// -----

func.func @wait_on_argument(%t: !dist.token<tensor<8xf32>>) {
  // expected-error @+1 {{wait_c1: the token is not the result of a dist.<op>_start op}}
  %0 = dist.wait %t : !dist.token<tensor<8xf32>>
  return
}

// -----

dist.mesh @mesh [tp = 4]
func.func @wait_result_type(%x: tensor<8xf32>) {
  %t = dist.all_reduce_start sum %x on @mesh axes [tp] : tensor<8xf32> -> !dist.token<tensor<8xf32>>
  // expected-error @+1 {{wait_c2: expected one result of type 'tensor<8xf32>'}}
  %0 = "dist.wait"(%t) : (!dist.token<tensor<8xf32>>) -> tensor<4xf32>
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @wait_on_send_with_result(%x: tensor<8xf32>) {
  %t = dist.send_start %x on @mesh axis pp to 1 tag 0 : tensor<8xf32> -> !dist.token<none>
  // expected-error @+1 {{wait_c2: a wait on '!dist.token<none>' has no result}}
  %0 = "dist.wait"(%t) : (!dist.token<none>) -> tensor<8xf32>
  return
}

// -----

// expected-error @+1 {{token_c1: the payload must be a statically shaped tensor or none, got 'tensor<?xf32>'}}
func.func private @dynamic_token(!dist.token<tensor<?xf32>>)

//===----------------------------------------------------------------------===//
// dist.stage, dist.yield
//===----------------------------------------------------------------------===//

// -----

func.func @stage_unknown_mesh() {
  // expected-error @+1 {{stage_c1: @mesh does not name a dist.mesh}}
  dist.stage 0 on @mesh axis pp {
    dist.yield
  }
  return
}

// -----

dist.mesh @mesh [tp = 2]
func.func @stage_unknown_axis() {
  // expected-error @+1 {{stage_c2: 'pp' is not an axis of mesh @mesh}}
  dist.stage 0 on @mesh axis pp {
    dist.yield
  }
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @stage_index_out_of_range() {
  // expected-error @+1 {{stage_c3: stage index 2 is out of range for axis 'pp' of size 2}}
  dist.stage 2 on @mesh axis pp {
    dist.yield
  }
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @stage_negative_index() {
  // expected-error @+1 {{stage_c3: stage index -1 is negative}}
  dist.stage -1 on @mesh axis pp {
    dist.yield
  }
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @stage_yield_mismatch(%x: tensor<8xf32>) {
  // expected-error @+1 {{stage_c4: the body yields ('tensor<8xf32>') but the stage returns ('tensor<4xf32>')}}
  %0 = dist.stage 0 on @mesh axis pp -> (tensor<4xf32>) {
    dist.yield %x : tensor<8xf32>
  }
  return
}

// -----

dist.mesh @mesh [pp = 2]
func.func @nested_stages() {
  dist.stage 0 on @mesh axis pp {
    // expected-error @+1 {{stage_c5: a stage is nested in another dist.stage}}
    dist.stage 1 on @mesh axis pp {
      dist.yield
    }
    dist.yield
  }
  return
}

// -----

func.func @yield_outside_stage() {
  // expected-error @+1 {{yield_c1: the parent op is not a dist.stage}}
  dist.yield
}

//===----------------------------------------------------------------------===//
// Discardable attributes and the plans on the module
//===----------------------------------------------------------------------===//

// -----

dist.mesh @mesh [tp = 2]
// expected-error @+1 {{attrs_c1: 'dist.sharding' has 1 dimension entries but the argument has rank 2}}
func.func @argument_sharding_rank(%x: tensor<4x4xf32> {dist.sharding = #dist.sharding<@mesh, [{tp}]>}) {
  return
}

// -----

// expected-error @+1 {{attrs_c1: 'dist.sharding' expects a #dist.sharding, got "tp"}}
func.func @result_sharding_kind() -> (tensor<4xf32> {dist.sharding = "tp"}) {
  %0 = nn.constant dense<1.0> : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @result_shardings_count() {
  // expected-error @+1 {{attrs_c2: 'dist.shardings' expects an array of 1 #dist.sharding, got []}}
  %0 = nn.constant {dist.shardings = []} dense<1.0> : tensor<4xf32>
  return
}

// -----

dist.mesh @mesh [tp = 2]
func.func @strategy_kind(%x: tensor<4xf32>) {
  // expected-error @+1 {{attrs_c3: 'dist.strategy' is a unit attribute on a dist.annotate}}
  %0 = dist.annotate %x sharding<@mesh, [{tp}]> {dist.strategy = 1 : i64} : tensor<4xf32>
  return
}

// -----

func.func @reason_kind() {
  // expected-error @+1 {{attrs_c4: 'dist.reason' expects a string, got 3 : i64}}
  %0 = nn.constant {dist.reason = 3} dense<1.0> : tensor<4xf32>
  return
}

// -----

// expected-error @+1 {{attrs_c5: 'dist.remarks' is an array of strings on a module}}
module attributes {dist.remarks = [1]} {
}

// -----

// expected-error @+1 {{attrs_c6: 'dist.pipeline' expects a #dist.pipeline on a module, got {stages = 2 : i64}}}
module attributes {dist.pipeline = {stages = 2}} {
}

// -----

func.func @sequence_order_mark() {
  // expected-error @+1 {{attrs_c6: 'dist.sequence_order' is a unit attribute on an op other than a module}}
  %0 = nn.constant {dist.sequence_order = 1} dense<1> : tensor<4xi64>
  return
}

// -----

dist.mesh @mesh [sp = 2]
func.func @ring_axis(%q: tensor<1x2x8x4xf32>) {
  // expected-error @+1 {{attrs_c7: 'ring' is not an axis of mesh @mesh}}
  %0 = nn.attention %q, %q, %q {dist.ring = "ring"} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  return
}

// -----

// expected-error @+1 {{attrs_c8: 'dist.plan' is not an attribute of the dist dialect}}
module attributes {dist.plan = 1} {
}

// -----

// expected-error @+1 {{pipeline_c1: stages (2), microbatches (0) and virtual_stages (1) are at least 1}}
module attributes {dist.pipeline = #dist.pipeline<stages = 2, microbatches = 0, schedule = gpipe, virtual_stages = 1, stage_seconds = [1.0, 1.0]>} {
}

// -----

// expected-error @+1 {{pipeline_c2: 2 stages but 1 stage_seconds}}
module attributes {dist.pipeline = #dist.pipeline<stages = 2, microbatches = 1, schedule = gpipe, virtual_stages = 1, stage_seconds = [1.0]>} {
}

// -----

// expected-error @+1 {{pipeline_c3: 2 stages, but the pipeline axis of mesh @mesh has size 4}}
module attributes {dist.pipeline = #dist.pipeline<stages = 2, microbatches = 1, schedule = gpipe, virtual_stages = 1, stage_seconds = [1.0, 1.0]>} {
  dist.mesh @mesh [stages = 4 : pp]
}

// -----

// expected-error @+1 {{sequence_order_c1: the order is not a permutation of 0 .. 3}}
module attributes {dist.sequence_order = #dist.sequence_order<axis = "sp", order = [0, 1, 1, 3]>} {
  dist.mesh @mesh [sp = 2]
}

// -----

// expected-error @+1 {{sequence_order_c2: 'ring' is not an axis of mesh @mesh}}
module attributes {dist.sequence_order = #dist.sequence_order<axis = "ring", order = [0, 3, 1, 2]>} {
  dist.mesh @mesh [sp = 2]
}

// -----

// expected-error @+1 {{sequence_parallel_c1: causal, zigzag and the imbalances describe ring attention, not ulysses}}
module attributes {dist.sequence_parallel = #dist.sequence_parallel<mode = ulysses, axis = "sp", ranks = 2, causal = true>} {
  dist.mesh @mesh [sp = 2]
}

// -----

// expected-error @+1 {{sequence_parallel_c2: 4 ranks, but 'sp' has size 2}}
module attributes {dist.sequence_parallel = #dist.sequence_parallel<mode = ulysses, axis = "sp", ranks = 4>} {
  dist.mesh @mesh [sp = 2]
}

// -----

func.func @split_costs_not_on_a_matmul(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{attrs_c9: 'dist.split_costs' expects a dictionary of seconds by columns, rows, batch and whole on an nn.matmul, or by experts, features and whole on an nn.moe, got {columns = 1.000000e+00 : f64}}}
  %y = nn.exp %x {dist.split_costs = {columns = 1.0 : f64}} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @split_costs_unknown_candidate(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{attrs_c9: 'dist.split_costs' expects a dictionary of seconds by columns, rows, batch and whole on an nn.matmul, or by experts, features and whole on an nn.moe, got {diagonal = 1.000000e+00 : f64}}}
  %y = nn.matmul %x, %w {dist.split_costs = {diagonal = 1.0 : f64}} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}
