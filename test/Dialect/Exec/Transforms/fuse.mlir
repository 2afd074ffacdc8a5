// RUN: partita-opt %s --split-input-file --partita-fuse | FileCheck %s -enable-var-scope

// The matmul's tanh and residual add join its epilogue: one exec.kernel at
// the matmul's place yields the chain's value.
// CHECK-LABEL: func.func @chain
// CHECK: %[[K:.*]] = exec.kernel -> tensor<4x8xf32> {
// CHECK-NEXT: %[[M:.*]] = nn.matmul %arg0, %arg1
// CHECK-NEXT: %[[T:.*]] = nn.tanh %[[M]]
// CHECK-NEXT: %[[A:.*]] = nn.add %[[T]], %arg2
// CHECK-NEXT: exec.yield %[[A]]
// CHECK: return %[[K]]
func.func @chain(%a: tensor<4x16xf32>, %w: tensor<16x8xf32>, %r: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %m = nn.matmul %a, %w : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %t = nn.tanh %m : tensor<4x8xf32>
  %s = nn.add %t, %r : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %s : tensor<4x8xf32>
}

// -----

// Not fused: a producer result with another use, a step that changes the
// shape (broadcast), and a binary op whose other operand is computed after
// the producer (and is itself read twice).
// CHECK-LABEL: func.func @unfused
// CHECK-NOT: exec.kernel
func.func @unfused(%a: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %n = nn.neg %a : tensor<4x8xf32>
  %e = nn.exp %n : tensor<4x8xf32>
  %x = nn.relu %n : tensor<4x8xf32>
  %s = nn.sigmoid %b : tensor<8xf32>
  %bc = nn.add %s, %a : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = nn.abs %a : tensor<4x8xf32>
  %later = nn.sqrt %a : tensor<4x8xf32>
  %m = nn.mul %l, %later : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %e, %x, %bc, %m, %later : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// A constant the epilogue reads moves before the kernel.
// CHECK-LABEL: func.func @late_constant
// CHECK: %[[C:.*]] = nn.constant dense<2.000000e+00>
// CHECK-NEXT: exec.kernel
// CHECK: nn.mul %{{.*}}, %[[C]]
func.func @late_constant(%a: tensor<4xf32>) -> tensor<4xf32> {
  %n = nn.neg %a : tensor<4xf32>
  %c = nn.constant dense<2.0> : tensor<4xf32>
  %m = nn.mul %n, %c : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %m : tensor<4xf32>
}
