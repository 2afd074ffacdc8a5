// RUN: partita-opt %s --partita-raise -split-input-file | FileCheck %s

// torch's GELU module: (x * 0.5) * (erf(x * 0.70710678) + 1).
// CHECK-LABEL: func.func @erf_torch
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x64xf32>)
func.func @erf_torch(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  // CHECK: %[[Y:.*]] = nn.gelu %[[X]] : tensor<2x8x64xf32>
  // CHECK-NEXT: return %[[Y]]
  %half = nn.constant dense<0.5> : tensor<f32>
  %xh = nn.mul %x, %half : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8x64xf32>
  %c = nn.constant dense<0.70710678> : tensor<f32>
  %z = nn.mul %x, %c : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8x64xf32>
  %e = nn.erf %z : tensor<2x8x64xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %p = nn.add %e, %one : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8x64xf32>
  %y = nn.mul %xh, %p : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// -----

// HF's association, x * (0.5 * (1 + erf(x / 1.41421))), with [1] constants.
// CHECK-LABEL: func.func @erf_hf
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x64xf32>)
func.func @erf_hf(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  // CHECK: %[[Y:.*]] = nn.gelu %[[X]] : tensor<2x8x64xf32>
  // CHECK-NEXT: return %[[Y]]
  %c = nn.constant dense<1.41421> : tensor<1xf32>
  %z = nn.div %x, %c : (tensor<2x8x64xf32>, tensor<1xf32>) -> tensor<2x8x64xf32>
  %e = nn.erf %z : tensor<2x8x64xf32>
  %one = nn.constant dense<1.0> : tensor<1xf32>
  %p = nn.add %one, %e : (tensor<1xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %half = nn.constant dense<0.5> : tensor<1xf32>
  %ph = nn.mul %half, %p : (tensor<1xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %y = nn.mul %x, %ph : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// -----

// GPT-2's gelu_new: 0.5 * x * (1 + tanh(0.7978845608 * (x + 0.044715 * pow(x, 3)))).
// CHECK-LABEL: func.func @tanh_pow
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x64xf32>)
func.func @tanh_pow(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  // CHECK: %[[Y:.*]] = nn.gelu %[[X]] approximation = tanh : tensor<2x8x64xf32>
  // CHECK-NEXT: return %[[Y]]
  %half = nn.constant dense<0.5> : tensor<f32>
  %hx = nn.mul %half, %x : (tensor<f32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %three = nn.constant dense<3.0> : tensor<f32>
  %x3 = nn.pow %x, %three : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8x64xf32>
  %k = nn.constant dense<0.044715> : tensor<f32>
  %kx3 = nn.mul %k, %x3 : (tensor<f32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %inner = nn.add %x, %kx3 : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %c = nn.constant dense<0.7978845608> : tensor<f32>
  %u = nn.mul %c, %inner : (tensor<f32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %t = nn.tanh %u : tensor<2x8x64xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %p = nn.add %one, %t : (tensor<f32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %y = nn.mul %hx, %p : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// -----

// x^3 as x * x * x, and the inner sum in the other order.
// CHECK-LABEL: func.func @tanh_cube_product
// CHECK-SAME: (%[[X:.*]]: tensor<8x64xf32>)
func.func @tanh_cube_product(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
  // CHECK: %[[Y:.*]] = nn.gelu %[[X]] approximation = tanh : tensor<8x64xf32>
  // CHECK-NEXT: return %[[Y]]
  %x2 = nn.mul %x, %x : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %x3 = nn.mul %x2, %x : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %k = nn.constant dense<0.044715> : tensor<f32>
  %kx3 = nn.mul %x3, %k : (tensor<8x64xf32>, tensor<f32>) -> tensor<8x64xf32>
  %inner = nn.add %kx3, %x : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %c = nn.constant dense<0.7978845608> : tensor<f32>
  %u = nn.mul %inner, %c : (tensor<8x64xf32>, tensor<f32>) -> tensor<8x64xf32>
  %t = nn.tanh %u : tensor<8x64xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %p = nn.add %t, %one : (tensor<8x64xf32>, tensor<f32>) -> tensor<8x64xf32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %ph = nn.mul %p, %half : (tensor<8x64xf32>, tensor<f32>) -> tensor<8x64xf32>
  %y = nn.mul %ph, %x : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  return %y : tensor<8x64xf32>
}

// -----

// HF's FastGELU: 0.5 * x * (1 + tanh(x * 0.7978845608 * (1 + 0.044715 * x * x))).
// CHECK-LABEL: func.func @tanh_fast
// CHECK-SAME: (%[[X:.*]]: tensor<8x64xf32>)
func.func @tanh_fast(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
  // CHECK: %[[Y:.*]] = nn.gelu %[[X]] approximation = tanh : tensor<8x64xf32>
  // CHECK-NEXT: return %[[Y]]
  %c = nn.constant dense<0.7978845608> : tensor<f32>
  %xc = nn.mul %x, %c : (tensor<8x64xf32>, tensor<f32>) -> tensor<8x64xf32>
  %k = nn.constant dense<0.044715> : tensor<f32>
  %kx = nn.mul %k, %x : (tensor<f32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %kx2 = nn.mul %kx, %x : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %g = nn.add %one, %kx2 : (tensor<f32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %u = nn.mul %xc, %g : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %t = nn.tanh %u : tensor<8x64xf32>
  %p = nn.add %one, %t : (tensor<f32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %half = nn.constant dense<0.5> : tensor<f32>
  %hx = nn.mul %half, %x : (tensor<f32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %y = nn.mul %hx, %p : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  return %y : tensor<8x64xf32>
}

// -----

// A constant off by more than the tolerance (0.6 instead of 0.5): left alone.
// CHECK-LABEL: func.func @wrong_half
func.func @wrong_half(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  // CHECK-NOT: nn.gelu
  // CHECK: nn.erf
  %half = nn.constant dense<0.6> : tensor<f32>
  %xh = nn.mul %x, %half : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8x64xf32>
  %c = nn.constant dense<0.70710678> : tensor<f32>
  %z = nn.mul %x, %c : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8x64xf32>
  %e = nn.erf %z : tensor<2x8x64xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %p = nn.add %e, %one : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8x64xf32>
  %y = nn.mul %xh, %p : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// -----

// erf of one tensor multiplied into another: not a GELU.
// CHECK-LABEL: func.func @different_inputs
func.func @different_inputs(%x: tensor<2x8x64xf32>, %w: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  // CHECK-NOT: nn.gelu
  // CHECK: nn.erf
  %half = nn.constant dense<0.5> : tensor<f32>
  %wh = nn.mul %w, %half : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8x64xf32>
  %c = nn.constant dense<0.70710678> : tensor<f32>
  %z = nn.mul %x, %c : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8x64xf32>
  %e = nn.erf %z : tensor<2x8x64xf32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %p = nn.add %e, %one : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8x64xf32>
  %y = nn.mul %wh, %p : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}
