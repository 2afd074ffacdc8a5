// RUN: partita-opt %s --partita-propagate-sharding --partita-partition | FileCheck %s

// Each mismatch between the sharding a value has and the one its user
// needs becomes the collectives that move the data; every function gets
// local types.

dist.mesh @mesh [dp = 2, tp = 2]

// A partial sum: all-reduced where the user wants it whole,
// reduce-scattered where it wants it split.
// CHECK-LABEL: func.func @reduce
// CHECK-SAME: (%[[X:.*]]: tensor<4x4xf32> {{.*}}, %[[W:.*]]: tensor<4x8xf32>
// CHECK-SAME: -> (tensor<4x8xf32> {{.*}}, tensor<2x8xf32>
// CHECK: %[[Y:.*]] = nn.matmul %[[X]], %[[W]] : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK: %[[WHOLE:.*]] = dist.all_reduce sum %[[Y]] on @mesh axes [tp] {dist.reason = "result 0: it has [{}, {}] partial [tp], needs [{}, {}]"}
// CHECK: %[[ROWS:.*]] = dist.reduce_scatter sum %[[Y]] on @mesh axes [tp] scatter_dim 0
// CHECK: return %[[WHOLE]], %[[ROWS]]
func.func @reduce(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %a = dist.annotate %w sharding<@mesh, [{tp}, {}]> : tensor<8x8xf32>
  %y = nn.matmul %x, %a : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %whole = dist.annotate %y sharding<@mesh, [{}, {}]> : tensor<4x8xf32>
  %rows = dist.annotate %y sharding<@mesh, [{tp}, {}]> : tensor<4x8xf32>
  return %whole, %rows : tensor<4x8xf32>, tensor<4x8xf32>
}

// An axis moving between dimensions is one all-to-all; a multi-axis split
// is gathered and sliced over both axes at once.
// CHECK-LABEL: func.func @move
// CHECK-SAME: (%[[X:.*]]: tensor<1x8xf32>
// CHECK: %[[COLS:.*]] = dist.all_to_all %[[X]] on @mesh axes [tp] split_dim 1 concat_dim 0 {{.*}} : tensor<1x8xf32> -> tensor<2x4xf32>
// CHECK: %[[WHOLE:.*]] = dist.all_gather %[[X]] on @mesh axes [dp, tp] gather_dim 0 {{.*}} : tensor<1x8xf32> -> tensor<4x8xf32>
// CHECK: %[[MORE:.*]] = dist.all_slice %[[WHOLE]] on @mesh axes [dp, tp] slice_dim 1 {{.*}} : tensor<4x8xf32> -> tensor<4x2xf32>
// CHECK: return %[[COLS]], %[[WHOLE]], %[[MORE]]
func.func @move(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %a = dist.annotate %x sharding<@mesh, [{dp, tp}, {}]> : tensor<4x8xf32>
  %cols = dist.annotate %a sharding<@mesh, [{dp}, {tp}]> : tensor<4x8xf32>
  %whole = dist.annotate %a sharding<@mesh, [{}, {}]> : tensor<4x8xf32>
  %more = dist.annotate %whole sharding<@mesh, [{}, {dp, tp}]> : tensor<4x8xf32>
  return %cols, %whole, %more : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// A bias entering a partial sum is added on the first device of the group
// only.
// CHECK-LABEL: func.func @bias
// CHECK-SAME: %[[B:[^:]*]]: tensor<8xf32>
// CHECK: %[[I:.*]] = dist.axis_index on @mesh axes [tp] : tensor<i64>
// CHECK: %[[FIRST:.*]] = nn.compare eq, %[[I]]
// CHECK: %[[ONCE:.*]] = nn.where %[[FIRST]], %[[B]]
// CHECK: %[[Y:.*]] = nn.matmul %{{.*}}, %{{.*}} bias %[[ONCE]] : (tensor<4x4xf32>, tensor<4x8xf32>, tensor<8xf32>)
// CHECK: dist.all_reduce sum %[[Y]] on @mesh axes [tp]
func.func @bias(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %a = dist.annotate %w sharding<@mesh, [{tp}, {}]> : tensor<8x8xf32>
  %y = nn.matmul %x, %a bias %b : (tensor<4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// A vocab-parallel lookup: negative indices count from the end of the
// whole table (32 rows), valid indices are shifted by the device's first
// row, rows it does not hold are zeroed, then summed; an index outside
// [-32, 32) reaches the lookup unchanged, out of range of every block.
// CHECK-LABEL: func.func @vocab
// CHECK-SAME: (%[[IDS:.*]]: tensor<2x4xi64> {{.*}}, %[[TABLE:.*]]: tensor<16x8xf32>
// CHECK: %[[NEGATIVE:.*]] = nn.compare lt, %[[IDS]], %{{.*}}
// CHECK: %[[TOTAL:.*]] = nn.constant dense<32> : tensor<i64>
// CHECK: %[[FROM_END:.*]] = nn.add %[[IDS]], %[[TOTAL]]
// CHECK: %[[WRAPPED:.*]] = nn.where %[[NEGATIVE]], %[[FROM_END]], %[[IDS]]
// CHECK: %[[I:.*]] = dist.axis_index on @mesh axes [tp]
// CHECK: %[[OFFSET:.*]] = nn.mul %[[I]], %{{.*}}
// CHECK: %[[SHIFTED:.*]] = nn.sub %[[WRAPPED]], %[[OFFSET]]
// CHECK: %[[HELD:.*]] = nn.and
// CHECK: %[[VALID:.*]] = nn.and
// CHECK: %[[NOT_HELD:.*]] = nn.where %[[VALID]], %{{.*}}, %[[IDS]]
// CHECK: %[[SAFE:.*]] = nn.where %[[HELD]], %[[SHIFTED]], %[[NOT_HELD]]
// CHECK: %[[ROWS:.*]] = nn.embedding %[[TABLE]], %[[SAFE]] : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
// CHECK: %[[MASK:.*]] = nn.reshape %[[HELD]] : tensor<2x4xi1> -> tensor<2x4x1xi1>
// CHECK: %[[ZEROED:.*]] = nn.where %[[MASK]], %[[ROWS]]
// CHECK: dist.all_reduce sum %[[ZEROED]] on @mesh axes [tp]
func.func @vocab(%ids: tensor<2x4xi64>, %table: tensor<32x8xf32>) -> tensor<2x4x8xf32> {
  %t = dist.annotate %table sharding<@mesh, [{tp}, {}]> : tensor<32x8xf32>
  %e = nn.embedding %t, %ids : (tensor<32x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  return %e : tensor<2x4x8xf32>
}

// A slice keeps its limits on the split dimension local.
// CHECK-LABEL: func.func @slice
// CHECK: nn.slice %{{.*}} start = [0, 2] limit = [2, 6] stride = [1, 1] : tensor<2x8xf32> -> tensor<2x4xf32>
func.func @slice(%x: tensor<4x8xf32>) -> tensor<4x4xf32> {
  %a = dist.annotate %x sharding<@mesh, [{dp}, {}]> : tensor<4x8xf32>
  %s = nn.slice %a start = [0, 2] limit = [4, 6] stride = [1, 1] : tensor<4x8xf32> -> tensor<4x4xf32>
  return %s : tensor<4x4xf32>
}

// Constants stay global; each device slices its block.
// CHECK-LABEL: func.func @weight
// CHECK: %[[W:.*]] = nn.constant dense<1.000000e+00> : tensor<4x8xf32>
// CHECK: %[[ROWS:.*]] = dist.all_slice %[[W]] on @mesh axes [dp] slice_dim 0
// CHECK: %[[BLOCK:.*]] = dist.all_slice %[[ROWS]] on @mesh axes [tp] slice_dim 1 {{.*}} -> tensor<2x4xf32>
// CHECK: nn.relu %[[BLOCK]]
func.func @weight() -> tensor<4x8xf32> {
  %w = nn.constant dense<1.0> : tensor<4x8xf32>
  %a = dist.annotate %w sharding<@mesh, [{dp}, {tp}]> : tensor<4x8xf32>
  %r = nn.relu %a : tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// An argument split on a dimension that an op's sharding rule sizes from
// that operand (a KV cache's past keys, concatenated with the new ones):
// the rule sees the global shape, so the heads stay split and the
// argument is not gathered.
// CHECK-LABEL: func.func @past_keys
// CHECK-SAME: (%[[PAST:.*]]: tensor<2x1x8x16xf32> {{.*}}, %[[NEW:.*]]: tensor<2x1x8x16xf32> {{.*}})
// CHECK-NOT: dist.all_gather
// CHECK: nn.concat %[[PAST]], %[[NEW]] axis = 2 : (tensor<2x1x8x16xf32>, tensor<2x1x8x16xf32>) -> tensor<2x1x16x16xf32>
func.func @past_keys(%past: tensor<2x2x8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {tp}, {}, {}]>}, %new: tensor<2x2x8x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {tp}, {}, {}]>}) -> tensor<2x2x16x16xf32> {
  %c = nn.concat %past, %new axis = 2 : (tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> tensor<2x2x16x16xf32>
  %r = dist.annotate %c sharding<@mesh, [{}, {tp}, {}, {}]> : tensor<2x2x16x16xf32>
  return %r : tensor<2x2x16x16xf32>
}

// attention_grad with the query heads of one kv head split over tp: each
// device reads k and v whole (its hook asks no partial sum of them, as the
// default would of operands without the factor), and dk and dv are sums
// over the devices' heads.
// CHECK-LABEL: func.func @attention_grad_group
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x3x4xf32> {{.*}}, %[[K:[^:]*]]: tensor<1x1x3x4xf32> {{.*}}, %[[V:[^:]*]]: tensor<1x1x3x4xf32>
// CHECK-NOT: nn.where
// CHECK: %{{.*}}, %[[DK:.*]], %[[DV:.*]] = nn.attention_grad %[[Q]], %[[K]], %[[V]] out
// CHECK-SAME: -> (tensor<1x2x3x4xf32>, tensor<1x1x3x4xf32>, tensor<1x1x3x4xf32>)
// CHECK: dist.all_reduce sum %[[DK]] on @mesh axes [tp]
// CHECK: dist.all_reduce sum %[[DV]] on @mesh axes [tp]
func.func @attention_grad_group(%q: tensor<1x4x3x4xf32>, %k: tensor<1x1x3x4xf32>, %v: tensor<1x1x3x4xf32>, %o: tensor<1x4x3x4xf32>, %g: tensor<1x4x3x4xf32>) -> (tensor<1x4x3x4xf32>, tensor<1x1x3x4xf32>, tensor<1x1x3x4xf32>) {
  %qs = dist.annotate %q sharding<@mesh, [{}, {tp}, {}, {}]> : tensor<1x4x3x4xf32>
  %dq, %dk, %dv = nn.attention_grad %qs, %k, %v out %o dout %g : (tensor<1x4x3x4xf32>, tensor<1x1x3x4xf32>, tensor<1x1x3x4xf32>, tensor<1x4x3x4xf32>, tensor<1x4x3x4xf32>) -> (tensor<1x4x3x4xf32>, tensor<1x1x3x4xf32>, tensor<1x1x3x4xf32>)
  %dkr = dist.annotate %dk sharding<@mesh, [{}, {}, {}, {}]> : tensor<1x1x3x4xf32>
  %dvr = dist.annotate %dv sharding<@mesh, [{}, {}, {}, {}]> : tensor<1x1x3x4xf32>
  return %dq, %dkr, %dvr : tensor<1x4x3x4xf32>, tensor<1x1x3x4xf32>, tensor<1x1x3x4xf32>
}

// Causal attention_grad compares global row positions: its query rows are
// not split, so a split q is gathered and every device computes all rows.
// CHECK-LABEL: func.func @attention_grad_causal_rows
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x2x4xf32>
// CHECK: %[[WHOLE:.*]] = dist.all_gather %[[Q]] on @mesh axes [dp] gather_dim 2
// CHECK: nn.attention_grad %[[WHOLE]], %{{.*}}, %{{.*}} out %{{.*}} dout %{{.*}} {causal} : (tensor<1x2x4x4xf32>,
func.func @attention_grad_causal_rows(%q: tensor<1x2x4x4xf32>, %k: tensor<1x2x6x4xf32>, %v: tensor<1x2x6x4xf32>, %o: tensor<1x2x4x4xf32>, %g: tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>) {
  %qs = dist.annotate %q sharding<@mesh, [{}, {}, {dp}, {}]> : tensor<1x2x4x4xf32>
  %dq, %dk, %dv = nn.attention_grad %qs, %k, %v out %o dout %g {causal} : (tensor<1x2x4x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>)
  return %dq, %dk, %dv : tensor<1x2x4x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>
}

// A distributed RMS norm: the normalized dimension is split, so each device
// sums its block's squares and one all-reduce of a value per row completes
// the mean (no gather of the rows); each device scales its block by its
// block of the scale.
// CHECK-LABEL: func.func @rms_norm_split
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xf32>
// CHECK: %[[G:.*]] = dist.all_slice %{{.*}} on @mesh axes [tp] slice_dim 0 {{.*}} -> tensor<4xf32>
// CHECK: %[[SQ:.*]] = nn.mul %[[X]], %[[X]]
// CHECK: %[[SUM:.*]] = nn.reduce sum %[[SQ]] axes = [1] keepdims : tensor<2x4xf32> -> tensor<2x1xf32>
// CHECK: %[[ALL:.*]] = dist.all_reduce sum %[[SUM]] on @mesh axes [tp] {dist.reason = "nn.rms_norm: its statistics over a split normalized dimension"} : tensor<2x1xf32>
// CHECK: %[[N:.*]] = nn.constant dense<1.250000e-01> : tensor<f32>
// CHECK: %[[MEAN:.*]] = nn.mul %[[ALL]], %[[N]]
// CHECK: %[[EPS:.*]] = nn.add %[[MEAN]], %{{.*}}
// CHECK: %[[R:.*]] = nn.rsqrt %[[EPS]]
// CHECK: %[[Y:.*]] = nn.mul %[[X]], %[[R]]
// CHECK: %[[SCALED:.*]] = nn.mul %[[Y]], %[[G]]
// CHECK: return %[[SCALED]] : tensor<2x4xf32>
func.func @rms_norm_split(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %g = nn.constant dense<2.0> : tensor<8xf32>
  %a = dist.annotate %x sharding<@mesh, [{}, {tp}]> : tensor<2x8xf32>
  %y = nn.rms_norm %a scale(%g : tensor<8xf32>) axis = 1 epsilon = 1.0e-06 : tensor<2x8xf32>
  %b = dist.annotate %y sharding<@mesh, [{}, {tp}]> : tensor<2x8xf32>
  return %b : tensor<2x8xf32>
}

// A distributed layer norm in bf16: the statistics in f32, the mean
// all-reduced first, then the squared deviations from it (two passes).
// CHECK-LABEL: func.func @layer_norm_split
// CHECK: %[[X:.*]] = nn.cast %arg0 : tensor<2x4xbf16> -> tensor<2x4xf32>
// CHECK: %[[SUM:.*]] = nn.reduce sum %[[X]] axes = [1] keepdims
// CHECK: %[[ALL:.*]] = dist.all_reduce sum %[[SUM]] on @mesh axes [tp]
// CHECK: %[[MEAN:.*]] = nn.mul %[[ALL]], %{{.*}}
// CHECK: %[[D:.*]] = nn.sub %[[X]], %[[MEAN]]
// CHECK: %[[SQ:.*]] = nn.mul %[[D]], %[[D]]
// CHECK: %[[VSUM:.*]] = nn.reduce sum %[[SQ]] axes = [1] keepdims
// CHECK: dist.all_reduce sum %[[VSUM]] on @mesh axes [tp]
// CHECK: nn.rsqrt
// CHECK: %[[NORMED:.*]] = nn.mul %[[D]], %{{.*}}
// CHECK: %[[SCALE:.*]] = nn.cast %arg1 : tensor<4xbf16> -> tensor<4xf32>
// CHECK: %[[SCALED:.*]] = nn.mul %[[NORMED]], %[[SCALE]]
// CHECK: %[[BIAS:.*]] = nn.cast %arg2 : tensor<4xbf16> -> tensor<4xf32>
// CHECK: %[[SHIFTED:.*]] = nn.add %[[SCALED]], %[[BIAS]]
// CHECK: nn.cast %[[SHIFTED]] : tensor<2x4xf32> -> tensor<2x4xbf16>
func.func @layer_norm_split(%x: tensor<2x8xbf16>, %g: tensor<8xbf16>, %c: tensor<8xbf16>) -> tensor<2x8xbf16> {
  %a = dist.annotate %x sharding<@mesh, [{}, {tp}]> : tensor<2x8xbf16>
  %y = nn.layer_norm %a scale(%g : tensor<8xbf16>) bias(%c : tensor<8xbf16>) axis = 1 epsilon = 1.0e-05 : tensor<2x8xbf16>
  %b = dist.annotate %y sharding<@mesh, [{}, {tp}]> : tensor<2x8xbf16>
  return %b : tensor<2x8xbf16>
}
