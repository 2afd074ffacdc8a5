// RUN: partita-opt %s -split-input-file --partita-bucket-collectives="bucket-bytes=64" | FileCheck %s
// RUN: partita-opt %s -split-input-file --partita-bucket-collectives="bucket-bytes=0" | FileCheck %s --check-prefix=OFF

// Three gradients (16, 8 and 32 bytes) computed before any is used: the
// first two fit 64 bytes and are reduced together right after the second
// is computed, flattened and concatenated, and sliced back before their
// first uses; the third would pass 64 bytes and is reduced alone (a
// bucket of one stays as it was). A max and a reduction over another axis
// are not summed with them.
dist.mesh @mesh [dp = 2, tp = 2]
// CHECK-LABEL: func.func @buckets
// CHECK: %[[A:.*]] = nn.exp %arg0
// CHECK: %[[B:.*]] = nn.exp %arg1
// CHECK: %[[FA:.*]] = nn.reshape %[[A]] : tensor<2x2xf32> -> tensor<4xf32>
// CHECK: %[[FB:.*]] = nn.reshape %[[B]] : tensor<f32> -> tensor<1xf32>
// CHECK: %[[CAT:.*]] = nn.concat %[[FA]], %[[FB]] axis = 0
// CHECK: %[[R:.*]] = dist.all_reduce sum %[[CAT]] on @mesh axes [dp] {dist.reason = "a bucket of 2 sums (20 bytes), from gradient a"} : tensor<5xf32>
// CHECK: %[[C:.*]] = nn.exp %arg2
// CHECK: dist.all_reduce sum %[[C]] on @mesh axes [dp] {dist.reason = "gradient c"}
// CHECK: dist.all_reduce max
// CHECK: dist.all_reduce sum {{.*}} axes [tp]
// CHECK: %[[SA:.*]] = nn.slice %[[R]] start = [0] limit = [4]
// CHECK: %[[GA:.*]] = nn.reshape %[[SA]] : tensor<4xf32> -> tensor<2x2xf32>
// CHECK: nn.neg %[[GA]]
// CHECK: %[[SB:.*]] = nn.slice %[[R]] start = [4] limit = [5]
// CHECK: %[[GB:.*]] = nn.reshape %[[SB]] : tensor<1xf32> -> tensor<f32>
// CHECK: nn.neg %[[GB]]
// OFF-LABEL: func.func @buckets
// OFF-NOT: nn.concat
func.func @buckets(%a: tensor<2x2xf32>, %b: tensor<f32>, %c: tensor<4x3xf32>) -> (tensor<2x2xf32>, tensor<f32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>) {
  %ga = nn.exp %a : tensor<2x2xf32>
  %ra = dist.all_reduce sum %ga on @mesh axes [dp] {dist.reason = "gradient a"} : tensor<2x2xf32>
  %gb = nn.exp %b : tensor<f32>
  %rb = dist.all_reduce sum %gb on @mesh axes [dp] {dist.reason = "gradient b"} : tensor<f32>
  %gc = nn.exp %c : tensor<4x3xf32>
  %rc = dist.all_reduce sum %gc on @mesh axes [dp] {dist.reason = "gradient c"} : tensor<4x3xf32>
  %mx = dist.all_reduce max %gc on @mesh axes [dp] : tensor<4x3xf32>
  %tp = dist.all_reduce sum %gc on @mesh axes [tp] : tensor<4x3xf32>
  %ua = nn.neg %ra : tensor<2x2xf32>
  %ub = nn.neg %rb : tensor<f32>
  return %ua, %ub, %rc, %mx, %tp : tensor<2x2xf32>, tensor<f32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
}

// -----

// A use of the first sum comes before the second's operand is computed:
// a bucket would make that use wait for it, so each is reduced alone.
dist.mesh @mesh [dp = 2]
// CHECK-LABEL: func.func @used_before
// CHECK-NOT: nn.concat
// CHECK: dist.all_reduce sum
// CHECK: dist.all_reduce sum
// CHECK-NOT: nn.concat
func.func @used_before(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xf32> {
  %ra = dist.all_reduce sum %a on @mesh axes [dp] : tensor<2xf32>
  %ua = nn.exp %ra : tensor<2xf32>
  %gb = nn.mul %b, %ua : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %rb = dist.all_reduce sum %gb on @mesh axes [dp] : tensor<2xf32>
  return %rb : tensor<2xf32>
}
