// RUN: partita-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(partita-differentiate))' | FileCheck %s --enable-var-scope

// Attention's rule is one nn.attention_grad on the forward's operands, its
// result and the result's cotangent, with the forward's causal flag and
// scale; its three results are the cotangents of q, k and v.
// CHECK-LABEL: func.func @gqa_causal
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x4x3x8xf32> {{[^,]*}}, %[[K:[^:]*]]: tensor<1x2x5x8xf32> {{[^,]*}}, %[[V:[^:]*]]: tensor<1x2x5x6xf32>
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]]
// CHECK: %[[G:.*]] = nn.broadcast_to
// CHECK: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = nn.attention_grad %[[Q]], %[[K]], %[[V]] out %[[O]] dout %[[G]] {causal, scale = 2.500000e-01 : f32} : (tensor<1x4x3x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x6xf32>, tensor<1x4x3x6xf32>, tensor<1x4x3x6xf32>) -> (tensor<1x4x3x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x6xf32>)
// CHECK: return %{{.*}}, %[[DQ]], %[[DK]], %[[DV]]
func.func @gqa_causal(%q: tensor<1x4x3x8xf32> {partita.parameter = "q"},
                      %k: tensor<1x2x5x8xf32> {partita.parameter = "k"},
                      %v: tensor<1x2x5x6xf32> {partita.parameter = "v"})
    -> (tensor<f32> {partita.loss}) {
  %o = nn.attention %q, %k, %v {causal, scale = 0.25 : f32} : (tensor<1x4x3x8xf32>, tensor<1x2x5x8xf32>, tensor<1x2x5x6xf32>) -> tensor<1x4x3x6xf32>
  %l = nn.reduce sum %o axes = [0, 1, 2, 3] : tensor<1x4x3x6xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A mask (an input, inactive) is passed on and takes no cotangent; of
// the three cotangents only dv, the parameter's, is returned.
// CHECK-LABEL: func.func @masked_value_only
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<1x2x4x8xf32>, %[[K:[^:]*]]: tensor<1x2x4x8xf32>, %[[V:[^:]*]]: tensor<1x2x4x8xf32> {{[^,]*}}, %[[M:[^:]*]]: tensor<1x1x4x4xi1>)
// CHECK: %[[O:.*]] = nn.attention %[[Q]], %[[K]], %[[V]] mask %[[M]]
// CHECK: %{{.*}}, %{{.*}}, %[[DV:.*]] = nn.attention_grad %[[Q]], %[[K]], %[[V]] mask %[[M]] out %[[O]] dout %{{.*}} :
// CHECK: return %{{.*}}, %[[DV]]
func.func @masked_value_only(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>,
                             %v: tensor<1x2x4x8xf32> {partita.parameter = "v"},
                             %m: tensor<1x1x4x4xi1>)
    -> (tensor<f32> {partita.loss}) {
  %o = nn.attention %q, %k, %v mask %m : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x1x4x4xi1>) -> tensor<1x2x4x8xf32>
  %l = nn.reduce sum %o axes = [0, 1, 2, 3] : tensor<1x2x4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}
