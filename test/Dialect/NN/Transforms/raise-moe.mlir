// RUN: partita-opt %s --partita-raise -split-input-file | FileCheck %s

// transformers' batched experts as the legacy exporter writes them: each
// slot's expert weights gathered from the stacked [E, 2F, H] and [E, H, F],
// multiplied by the token repeated k times, silu(gate) * up, weighted by
// the routing weights and summed over the slots. One nn.moe on the stacked
// weights; no gather of weights is left.

// CHECK-LABEL: func.func @legacy
// CHECK-NOT: nn.gather
// CHECK: %[[Y:.*]] = nn.moe swiglu %arg0, %arg1, %arg2 experts(%arg3, %arg4) : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<3x12x8xf32>, tensor<3x8x6xf32>) -> tensor<4x8xf32>
// CHECK-NOT: nn.gather
// CHECK: return %[[Y]]
func.func @legacy(%x: tensor<4x8xf32>, %ids: tensor<4x2xi64>, %w: tensor<4x2xf32>, %fc1: tensor<3x12x8xf32>, %fc2: tensor<3x8x6xf32>) -> tensor<4x8xf32> {
  %0 = nn.reshape %x : tensor<4x8xf32> -> tensor<1x4x1x1x1x8xf32>
  %1 = nn.broadcast_to %0 : tensor<1x4x1x1x1x8xf32> -> tensor<1x4x2x1x1x8xf32>
  %2 = nn.reshape %ids : tensor<4x2xi64> -> tensor<8xi64>
  %3 = nn.gather %fc1, %2 axis = 0 : (tensor<3x12x8xf32>, tensor<8xi64>) -> tensor<8x12x8xf32>
  %4 = nn.gather %fc2, %2 axis = 0 : (tensor<3x8x6xf32>, tensor<8xi64>) -> tensor<8x8x6xf32>
  %5 = nn.reshape %1 : tensor<1x4x2x1x1x8xf32> -> tensor<8x8x1xf32>
  %6 = nn.matmul %3, %5 : (tensor<8x12x8xf32>, tensor<8x8x1xf32>) -> tensor<8x12x1xf32>
  %7 = nn.reshape %6 : tensor<8x12x1xf32> -> tensor<8x12xf32>
  %8 = nn.slice %7 start = [0, 0] limit = [8, 6] stride = [1, 1] : tensor<8x12xf32> -> tensor<8x6xf32>
  %9 = nn.silu %8 : tensor<8x6xf32>
  %10 = nn.slice %7 start = [0, 6] limit = [8, 12] stride = [1, 1] : tensor<8x12xf32> -> tensor<8x6xf32>
  %11 = nn.mul %9, %10 : (tensor<8x6xf32>, tensor<8x6xf32>) -> tensor<8x6xf32>
  %12 = nn.reshape %11 : tensor<8x6xf32> -> tensor<8x6x1xf32>
  %13 = nn.matmul %4, %12 : (tensor<8x8x6xf32>, tensor<8x6x1xf32>) -> tensor<8x8x1xf32>
  %14 = nn.reshape %13 : tensor<8x8x1xf32> -> tensor<8x8xf32>
  %15 = nn.reshape %w : tensor<4x2xf32> -> tensor<8x1xf32>
  %16 = nn.mul %14, %15 : (tensor<8x8xf32>, tensor<8x1xf32>) -> tensor<8x8xf32>
  %17 = nn.reshape %16 : tensor<8x8xf32> -> tensor<4x2x8xf32>
  %18 = nn.reduce sum %17 axes = [1] : tensor<4x2x8xf32> -> tensor<4x8xf32>
  return %18 : tensor<4x8xf32>
}

// -----

// The dynamo exporter's: the gather index wrapped (negative + E) and
// range-checked, once per gather, the weights gathered through their
// [E, out * in] view, and the halves by nn.split. The index chains are the
// identity on the ids the router writes, and go too.

// CHECK-LABEL: func.func @dynamo
// CHECK-NOT: nn.gather
// CHECK: nn.moe swiglu %arg0, %arg1, %arg2 experts(%arg3, %arg4)
func.func @dynamo(%x: tensor<4x8xf32>, %ids: tensor<4x2xi64>, %w: tensor<4x2xf32>, %fc1: tensor<3x12x8xf32>, %fc2: tensor<3x8x6xf32>) -> tensor<4x8xf32> {
  %zero = nn.constant dense<0> : tensor<i64>
  %e = nn.constant dense<3> : tensor<i64>
  %bad = nn.constant dense<-1> : tensor<i64>
  %r = nn.reshape %w : tensor<4x2xf32> -> tensor<8x1xf32>
  %i0 = nn.reshape %ids : tensor<4x2xi64> -> tensor<8x1xi64>
  %neg = nn.compare lt, %i0, %zero : (tensor<8x1xi64>, tensor<i64>) -> tensor<8x1xi1>
  %up = nn.add %i0, %e : (tensor<8x1xi64>, tensor<i64>) -> tensor<8x1xi64>
  %wr = nn.where %neg, %up, %i0 : (tensor<8x1xi1>, tensor<8x1xi64>, tensor<8x1xi64>) -> tensor<8x1xi64>
  %ge = nn.compare ge, %wr, %zero : (tensor<8x1xi64>, tensor<i64>) -> tensor<8x1xi1>
  %lt = nn.compare lt, %wr, %e : (tensor<8x1xi64>, tensor<i64>) -> tensor<8x1xi1>
  %ok = nn.and %ge, %lt : (tensor<8x1xi1>, tensor<8x1xi1>) -> tensor<8x1xi1>
  %idx1 = nn.where %ok, %wr, %bad : (tensor<8x1xi1>, tensor<8x1xi64>, tensor<i64>) -> tensor<8x1xi64>
  %idx = nn.reshape %idx1 : tensor<8x1xi64> -> tensor<8xi64>
  %f1 = nn.reshape %fc1 : tensor<3x12x8xf32> -> tensor<3x96xf32>
  %g1 = nn.gather %f1, %idx axis = 0 : (tensor<3x96xf32>, tensor<8xi64>) -> tensor<8x96xf32>
  %w1 = nn.reshape %g1 : tensor<8x96xf32> -> tensor<8x12x8xf32>
  %neg2 = nn.compare lt, %i0, %zero : (tensor<8x1xi64>, tensor<i64>) -> tensor<8x1xi1>
  %up2 = nn.add %i0, %e : (tensor<8x1xi64>, tensor<i64>) -> tensor<8x1xi64>
  %wr2 = nn.where %neg2, %up2, %i0 : (tensor<8x1xi1>, tensor<8x1xi64>, tensor<8x1xi64>) -> tensor<8x1xi64>
  %idx2 = nn.reshape %wr2 : tensor<8x1xi64> -> tensor<8xi64>
  %f2 = nn.reshape %fc2 : tensor<3x8x6xf32> -> tensor<3x48xf32>
  %g2 = nn.gather %f2, %idx2 axis = 0 : (tensor<3x48xf32>, tensor<8xi64>) -> tensor<8x48xf32>
  %w2 = nn.reshape %g2 : tensor<8x48xf32> -> tensor<8x8x6xf32>
  %x1 = nn.reshape %x : tensor<4x8xf32> -> tensor<4x1x8xf32>
  %xb = nn.broadcast_to %x1 : tensor<4x1x8xf32> -> tensor<4x2x8xf32>
  %xr = nn.reshape %xb : tensor<4x2x8xf32> -> tensor<8x8x1xf32>
  %h = nn.matmul %w1, %xr : (tensor<8x12x8xf32>, tensor<8x8x1xf32>) -> tensor<8x12x1xf32>
  %h2 = nn.reshape %h : tensor<8x12x1xf32> -> tensor<8x12xf32>
  %s:2 = nn.split %h2 axis = 1 : tensor<8x12xf32> -> tensor<8x6xf32>, tensor<8x6xf32>
  %g = nn.silu %s#0 : tensor<8x6xf32>
  %a = nn.mul %g, %s#1 : (tensor<8x6xf32>, tensor<8x6xf32>) -> tensor<8x6xf32>
  %a3 = nn.reshape %a : tensor<8x6xf32> -> tensor<8x6x1xf32>
  %y = nn.matmul %w2, %a3 : (tensor<8x8x6xf32>, tensor<8x6x1xf32>) -> tensor<8x8x1xf32>
  %y2 = nn.reshape %y : tensor<8x8x1xf32> -> tensor<8x8xf32>
  %yw = nn.mul %y2, %r : (tensor<8x8xf32>, tensor<8x1xf32>) -> tensor<8x8xf32>
  %y3 = nn.reshape %yw : tensor<8x8xf32> -> tensor<4x2x8xf32>
  %sum = nn.reduce sum %y3 axes = [1] : tensor<4x2x8xf32> -> tensor<4x8xf32>
  return %sum : tensor<4x8xf32>
}

// -----

// Rows that are not the token repeated in place (the broadcast's repeat
// is major to the tokens): not the experts' pattern, left as it is.

// CHECK-LABEL: func.func @not_repeated_in_place
// CHECK-NOT: nn.moe
// CHECK: nn.gather
func.func @not_repeated_in_place(%x: tensor<4x8xf32>, %ids: tensor<4x2xi64>, %w: tensor<4x2xf32>, %fc1: tensor<3x12x8xf32>, %fc2: tensor<3x8x6xf32>) -> tensor<4x8xf32> {
  %0 = nn.reshape %x : tensor<4x8xf32> -> tensor<1x4x8xf32>
  %1 = nn.broadcast_to %0 : tensor<1x4x8xf32> -> tensor<2x4x8xf32>
  %2 = nn.reshape %ids : tensor<4x2xi64> -> tensor<8xi64>
  %3 = nn.gather %fc1, %2 axis = 0 : (tensor<3x12x8xf32>, tensor<8xi64>) -> tensor<8x12x8xf32>
  %4 = nn.gather %fc2, %2 axis = 0 : (tensor<3x8x6xf32>, tensor<8xi64>) -> tensor<8x8x6xf32>
  %5 = nn.reshape %1 : tensor<2x4x8xf32> -> tensor<8x8x1xf32>
  %6 = nn.matmul %3, %5 : (tensor<8x12x8xf32>, tensor<8x8x1xf32>) -> tensor<8x12x1xf32>
  %7 = nn.reshape %6 : tensor<8x12x1xf32> -> tensor<8x12xf32>
  %8 = nn.slice %7 start = [0, 0] limit = [8, 6] stride = [1, 1] : tensor<8x12xf32> -> tensor<8x6xf32>
  %9 = nn.silu %8 : tensor<8x6xf32>
  %10 = nn.slice %7 start = [0, 6] limit = [8, 12] stride = [1, 1] : tensor<8x12xf32> -> tensor<8x6xf32>
  %11 = nn.mul %9, %10 : (tensor<8x6xf32>, tensor<8x6xf32>) -> tensor<8x6xf32>
  %12 = nn.reshape %11 : tensor<8x6xf32> -> tensor<8x6x1xf32>
  %13 = nn.matmul %4, %12 : (tensor<8x8x6xf32>, tensor<8x6x1xf32>) -> tensor<8x8x1xf32>
  %14 = nn.reshape %13 : tensor<8x8x1xf32> -> tensor<8x8xf32>
  %15 = nn.reshape %w : tensor<4x2xf32> -> tensor<8x1xf32>
  %16 = nn.mul %14, %15 : (tensor<8x8xf32>, tensor<8x1xf32>) -> tensor<8x8xf32>
  %17 = nn.reshape %16 : tensor<8x8xf32> -> tensor<4x2x8xf32>
  %18 = nn.reduce sum %17 axes = [1] : tensor<4x2x8xf32> -> tensor<4x8xf32>
  return %18 : tensor<4x8xf32>
}
