// RUN: partita-opt %s -split-input-file --partita-annotate="mesh=tp=2" | FileCheck %s

// Weights no role places (the matmul before a softmax is neither an MLP's,
// attention's nor an LM head) get the split the cost model's estimate of
// the whole function prefers. Large enough, halving the matmul's compute
// pays for gathering its result before the softmax: columns.

// The report says why the weight is split, with the estimates.
// CHECK: dist.remarks = ["weight 'w', which no role splits, is split by columns over tp: the cost model's estimate of a step is whole {{.*}} s, columns {{.*}} s, rows {{.*}} s"]
// CHECK-LABEL: func.func @large
// CHECK: %[[W:.*]] = dist.annotate %{{.*}} sharding<@mesh, [{}, {tp}]> {dist.strategy} : tensor<16384x1024xf32>
// CHECK: nn.matmul %arg0, %[[W]] {dist.split_costs = {columns = {{.*}} : f64, rows = {{.*}} : f64, whole = {{.*}} : f64}}
// CHECK: nn.softmax
// Propagation's own attributes are gone: the search only decided.
// CHECK-NOT: dist.shardings
func.func @large(%x: tensor<8192x16384xf32>) -> tensor<8192x1024xf32> {
  %w = nn.constant dense_resource<w> : tensor<16384x1024xf32>
  %y = nn.matmul %x, %w : (tensor<8192x16384xf32>, tensor<16384x1024xf32>) -> tensor<8192x1024xf32>
  %p = nn.softmax %y axis = 1 : tensor<8192x1024xf32>
  return %p : tensor<8192x1024xf32>
}

// -----

// The same at a tiny width: every split's collective latency exceeds the
// compute it saves, so the weight stays whole, pinned so (an empty
// sharding) so that the plan is the one estimated.

// CHECK-LABEL: func.func @tiny
// CHECK: %[[W:.*]] = dist.annotate %{{.*}} sharding<@mesh, [{}, {}]> {dist.strategy} : tensor<16x8xf32>
// CHECK: nn.matmul %arg0, %[[W]] {dist.split_costs = {columns = {{.*}}, rows = {{.*}}, whole = {{.*}}}}
func.func @tiny(%x: tensor<4x16xf32>) -> tensor<4x8xf32> {
  %w = nn.constant dense_resource<w> : tensor<16x8xf32>
  %y = nn.matmul %x, %w : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %p = nn.softmax %y axis = 1 : tensor<4x8xf32>
  return %p : tensor<4x8xf32>
}

// -----

// The cluster prices the collectives: the large matmul on links of 1 GB/s
// (partita.cluster, as --cluster sets it) stays whole.

// CHECK-LABEL: func.func @slow_links
// CHECK: dist.annotate %{{.*}} sharding<@mesh, [{}, {}]> {dist.strategy} : tensor<16384x1024xf32>
module attributes {partita.cluster = "{\22intra_node\22: {\22bandwidth_gb_per_s\22: 1}}"} {
  func.func @slow_links(%x: tensor<8192x16384xf32>) -> tensor<8192x1024xf32> {
    %w = nn.constant dense_resource<w> : tensor<16384x1024xf32>
    %y = nn.matmul %x, %w : (tensor<8192x16384xf32>, tensor<16384x1024xf32>) -> tensor<8192x1024xf32>
    %p = nn.softmax %y axis = 1 : tensor<8192x1024xf32>
    return %p : tensor<8192x1024xf32>
  }
}

// -----

// Two searched matmuls in a row are decided together: a column split of
// the first pays only with the row split of the second (one all-reduce
// at the end), which neither would choose alone. Neither is an MLP: the
// first's result reaches the second through a softmax (over the rows, so
// the column split passes through it).

// CHECK-LABEL: func.func @pair
// CHECK: %[[W1:.*]] = dist.annotate %{{.*}} sharding<@mesh, [{}, {tp}]> {dist.strategy} : tensor<4096x8192xf32>
// CHECK: %[[W2:.*]] = dist.annotate %{{.*}} sharding<@mesh, [{tp}, {}]> {dist.strategy} : tensor<8192x4096xf32>
func.func @pair(%x: tensor<8192x4096xf32>) -> tensor<8192x4096xf32> {
  %w1 = nn.constant dense_resource<w1> : tensor<4096x8192xf32>
  %w2 = nn.constant dense_resource<w2> : tensor<8192x4096xf32>
  %y = nn.matmul %x, %w1 : (tensor<8192x4096xf32>, tensor<4096x8192xf32>) -> tensor<8192x8192xf32>
  %a = nn.softmax %y axis = 0 : tensor<8192x8192xf32>
  %z = nn.matmul %a, %w2 : (tensor<8192x8192xf32>, tensor<8192x4096xf32>) -> tensor<8192x4096xf32>
  %p = nn.softmax %z axis = 1 : tensor<8192x4096xf32>
  return %p : tensor<8192x4096xf32>
}

// -----

// A stacked weight (a mixture of experts' [E, in, out], every expert on
// every token) may be split on its batch dimension, the experts: each rank
// computes its experts, and the sum over them is one all-reduce. At this
// size that beats splitting either projection alone. (A softmax over the
// tokens between the two keeps the role analysis from calling it an MLP.)

// CHECK-LABEL: func.func @experts
// CHECK: %[[W1:.*]] = dist.annotate %{{.*}} sharding<@mesh, [{tp}, {}, {}]> {dist.strategy} : tensor<8x2048x4096xf32>
// CHECK: %[[W2:.*]] = dist.annotate %{{.*}} sharding<@mesh, [{tp}, {}, {}]> {dist.strategy} : tensor<8x4096x2048xf32>
// CHECK: nn.matmul %{{.*}}, %[[W1]] {dist.split_costs = {batch = {{.*}}, columns = {{.*}}, rows = {{.*}}, whole = {{.*}}}}
func.func @experts(%x: tensor<1x4096x2048xf32>) -> tensor<4096x2048xf32> {
  %w1 = nn.constant dense_resource<w1> : tensor<8x2048x4096xf32>
  %w2 = nn.constant dense_resource<w2> : tensor<8x4096x2048xf32>
  %h = nn.matmul %x, %w1 : (tensor<1x4096x2048xf32>, tensor<8x2048x4096xf32>) -> tensor<8x4096x4096xf32>
  %a = nn.softmax %h axis = 1 : tensor<8x4096x4096xf32>
  %y = nn.matmul %a, %w2 : (tensor<8x4096x4096xf32>, tensor<8x4096x2048xf32>) -> tensor<8x4096x2048xf32>
  %s = nn.reduce sum %y axes = [0] : tensor<8x4096x2048xf32> -> tensor<4096x2048xf32>
  return %s : tensor<4096x2048xf32>
}
