// RUN: partita-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(partita-differentiate))' | FileCheck %s

// A linear layer and a sum: d/dw = x^T 1 (the matmul's rhs rule, the
// lhs transposed), d/db = 1 summed over the rows; the gradients follow
// the existing results, marked with their parameters' names.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: -> (tensor<f32> {partita.loss}, tensor<3x2xf32> {partita.gradient = "w"}, tensor<2xf32> {partita.gradient = "b"})
// CHECK: %[[ONE:.*]] = nn.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[G:.*]] = nn.reshape %[[ONE]] : tensor<f32> -> tensor<1x1xf32>
// CHECK: %[[GY:.*]] = nn.broadcast_to %[[G]] : tensor<1x1xf32> -> tensor<4x2xf32>
// CHECK: %[[XT:.*]] = nn.transpose %arg0 permutation = [1, 0] : tensor<4x3xf32> -> tensor<3x4xf32>
// CHECK: %[[GW:.*]] = nn.matmul %[[XT]], %[[GY]] : (tensor<3x4xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
// CHECK: %[[GB:.*]] = nn.reduce sum %[[GY]] axes = [0] keepdims : tensor<4x2xf32> -> tensor<1x2xf32>
// CHECK: %[[GB1:.*]] = nn.reshape %[[GB]] : tensor<1x2xf32> -> tensor<2xf32>
// CHECK: return %{{.*}}, %[[GW]], %[[GB1]]
func.func @linear(%x: tensor<4x3xf32>,
                  %w: tensor<3x2xf32> {partita.parameter = "w"},
                  %b: tensor<2xf32> {partita.parameter = "b"})
    -> (tensor<f32> {partita.loss}) {
  %y = nn.matmul %x, %w bias %b : (tensor<4x3xf32>, tensor<3x2xf32>, tensor<2xf32>) -> tensor<4x2xf32>
  %l = nn.reduce sum %y axes = [0, 1] : tensor<4x2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A value used twice has its cotangents added; a parameter the loss does
// not reach gets zeros.
// CHECK-LABEL: func.func @fanout
// CHECK: nn.constant dense<1.000000e+00>
// CHECK: %[[A:.*]] = nn.mul %{{.*}}, %arg0
// CHECK: %[[B:.*]] = nn.mul %{{.*}}, %arg0
// CHECK: %[[S:.*]] = nn.add %[[A]], %[[B]] : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
// CHECK: %[[Z:.*]] = nn.constant dense<0.000000e+00> : tensor<2xf32>
// CHECK: return %{{.*}}, %[[S]], %[[Z]]
func.func @fanout(%w: tensor<3xf32> {partita.parameter = "w"},
                  %unused: tensor<2xf32> {partita.parameter = "unused"})
    -> (tensor<f32> {partita.loss}) {
  %sq = nn.mul %w, %w : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %l = nn.reduce sum %sq axes = [0] : tensor<3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The softmax cross-entropy chain of a classifier: log_softmax's rule, the
// mean's 1/N, the one-hot product's: d logits = (softmax - onehot) / 4.
// CHECK-LABEL: func.func @cross_entropy
// CHECK: nn.constant dense<2.500000e-01> : tensor<f32>
// CHECK: %[[G:.*]] = nn.mul %{{.*}}, %arg1 : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
// CHECK: %[[SUM:.*]] = nn.reduce sum %[[G]] axes = [1] keepdims : tensor<4x5xf32> -> tensor<4x1xf32>
// CHECK: %[[P:.*]] = nn.exp %{{.*}} : tensor<4x5xf32>
// CHECK: %[[PS:.*]] = nn.mul %[[P]], %[[SUM]]
// CHECK: %[[DL:.*]] = nn.sub %[[G]], %[[PS]]
// CHECK: %[[XT:.*]] = nn.transpose %arg0
// CHECK: %[[GW:.*]] = nn.matmul %[[XT]], %[[DL]] : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
// The gradient of x (an input, not a parameter) is not built.
// CHECK-NOT: nn.transpose %arg2
// CHECK: return %{{.*}}, %[[GW]]
func.func @cross_entropy(%x: tensor<4x3xf32>, %onehot: tensor<4x5xf32>,
                         %w: tensor<3x5xf32> {partita.parameter = "w"})
    -> (tensor<f32> {partita.loss}) {
  %logits = nn.matmul %x, %w : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
  %lp = nn.log_softmax %logits axis = 1 : tensor<4x5xf32>
  %picked = nn.mul %lp, %onehot : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
  %rows = nn.reduce sum %picked axes = [1] : tensor<4x5xf32> -> tensor<4xf32>
  %mean = nn.reduce mean %rows axes = [0] : tensor<4xf32> -> tensor<f32>
  %loss = nn.neg %mean : tensor<f32>
  return %loss : tensor<f32>
}

// -----

// What the backward keeps from the forward, as the rules decide by what
// they read: relu's rule reads its input (the matmul's result), tanh's its
// result; the input x is an argument, held anyway. Each such op lists the
// results it keeps, the function their bytes (2 x 2x4 f32).
// CHECK-LABEL: func.func @saved
// CHECK-SAME: attributes {partita.saved_bytes = 64 : i64}
// CHECK: nn.matmul %arg0, %arg1 {partita.saved = array<i64: 0>}
// CHECK-NEXT: nn.relu
// CHECK-NOT: partita.saved
// CHECK-SAME: tensor<2x4xf32>
// CHECK-NEXT: nn.tanh {{.*}} {partita.saved = array<i64: 0>}
// CHECK-NEXT: nn.reduce sum
// CHECK-NOT: partita.saved
// CHECK: return
func.func @saved(%x: tensor<2x3xf32>, %w: tensor<3x4xf32> {partita.parameter = "w"}) -> (tensor<f32> {partita.loss}) {
  %h = nn.matmul %x, %w : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %r = nn.relu %h : tensor<2x4xf32>
  %t = nn.tanh %r : tensor<2x4xf32>
  %l = nn.reduce sum %t axes = [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
