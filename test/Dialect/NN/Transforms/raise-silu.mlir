// RUN: partita-opt %s --partita-raise -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @silu
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x64xf32>)
func.func @silu(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  // CHECK: %[[Y:.*]] = nn.silu %[[X]] : tensor<2x8x64xf32>
  // CHECK-NEXT: return %[[Y]]
  %s = nn.sigmoid %x : tensor<2x8x64xf32>
  %y = nn.mul %x, %s : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// -----

// The gate first, as Llama's MLP writes act(gate) * up with act = silu.
// CHECK-LABEL: func.func @silu_swapped
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x64xf32>, %[[UP:.*]]: tensor<2x8x64xf32>)
func.func @silu_swapped(%x: tensor<2x8x64xf32>, %up: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  // CHECK: %[[A:.*]] = nn.silu %[[X]] : tensor<2x8x64xf32>
  // CHECK: nn.mul %[[A]], %[[UP]]
  %s = nn.sigmoid %x : tensor<2x8x64xf32>
  %a = nn.mul %s, %x : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %y = nn.mul %a, %up : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}

// -----

// The sigmoid of another value: a gate, not a SiLU (and not quick GELU's
// x * sigmoid(1.702 x) either).
// CHECK-LABEL: func.func @gated
func.func @gated(%x: tensor<2x8x64xf32>, %g: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  // CHECK-NOT: nn.silu
  // CHECK: nn.sigmoid
  %s = nn.sigmoid %g : tensor<2x8x64xf32>
  %y = nn.mul %x, %s : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}
