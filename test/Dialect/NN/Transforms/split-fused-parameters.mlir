// RUN: partita-opt %s --split-input-file --partita-split-fused-parameters | FileCheck %s

// GPT-2's c_attn: a matmul by a parameter [k, 3p] whose result is only
// split into three equal segments. The parameter and its bias are held as
// [k, 3, p] and [3, p] (the same elements; the initial values reinterpreted,
// not copied) and each segment is a matmul of its own.
// CHECK-LABEL: func.func @fused
// CHECK-SAME: %[[W:arg[0-9]+]]: tensor<4x3x2xf32> {onnx.name = "w", partita.initial_value = dense<{{.*}}> : tensor<4x3x2xf32>, partita.parameter = "w", partita.parameter_shape = array<i64: 4, 6>}
// CHECK-SAME: %[[B:arg[0-9]+]]: tensor<3x2xf32> {onnx.name = "b", partita.initial_value = dense_resource<b> : tensor<3x2xf32>, partita.parameter = "b", partita.parameter_shape = array<i64: 6>}
// CHECK: %[[WS:.*]]:3 = nn.split %[[W]] axis = 1 : tensor<4x3x2xf32> -> tensor<4x1x2xf32>, tensor<4x1x2xf32>, tensor<4x1x2xf32>
// CHECK: %[[W0:.*]] = nn.reshape %[[WS]]#0 : tensor<4x1x2xf32> -> tensor<4x2xf32>
// CHECK: %[[W1:.*]] = nn.reshape %[[WS]]#1
// CHECK: %[[W2:.*]] = nn.reshape %[[WS]]#2
// CHECK: %[[BS:.*]]:3 = nn.split %[[B]] axis = 0 : tensor<3x2xf32> -> tensor<1x2xf32>, tensor<1x2xf32>, tensor<1x2xf32>
// CHECK: %[[B0:.*]] = nn.reshape %[[BS]]#0 : tensor<1x2xf32> -> tensor<2xf32>
// CHECK: %[[B1:.*]] = nn.reshape %[[BS]]#1
// CHECK: %[[B2:.*]] = nn.reshape %[[BS]]#2
// CHECK: %[[Q:.*]] = nn.matmul %{{.*}}, %[[W0]] bias %[[B0]] : (tensor<2x4xf32>, tensor<4x2xf32>, tensor<2xf32>) -> tensor<2x2xf32>
// CHECK: %[[K:.*]] = nn.matmul %{{.*}}, %[[W1]] bias %[[B1]]
// CHECK: %[[V:.*]] = nn.matmul %{{.*}}, %[[W2]] bias %[[B2]]
// CHECK-NOT: nn.split
// CHECK: return %[[Q]], %[[K]], %[[V]]
func.func @fused(
    %x: tensor<2x4xf32> {onnx.name = "x"},
    %w: tensor<4x6xf32> {onnx.name = "w", partita.parameter = "w",
                         partita.initial_value = dense<[[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 10.0, 11.0], [12.0, 13.0, 14.0, 15.0, 16.0, 17.0], [18.0, 19.0, 20.0, 21.0, 22.0, 23.0]]> : tensor<4x6xf32>},
    %b: tensor<6xf32> {onnx.name = "b", partita.parameter = "b",
                       partita.initial_value = dense_resource<b> : tensor<6xf32>})
    -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) {
  %y = nn.matmul %x, %w bias %b : (tensor<2x4xf32>, tensor<4x6xf32>, tensor<6xf32>) -> tensor<2x6xf32>
  %q, %k, %v = nn.split %y axis = 1 : tensor<2x6xf32> -> tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
  return %q, %k, %v : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
}

{-#
  dialect_resources: {
    builtin: {
      b: "0x04000000000000000000803F0000004000004040000080400000A040"
    }
  }
#-}

// -----

// The reinterpreted initial value keeps the elements in order: row 0 of
// [4, 6] is [0, 1] [2, 3] [4, 5] as [3, 2].
// CHECK-LABEL: func.func @order
// CHECK-SAME: dense<{{\[\[\[}}0.000000e+00, 1.000000e+00], [2.000000e+00, 3.000000e+00], [4.000000e+00, 5.000000e+00]]]> : tensor<1x3x2xf32>
func.func @order(
    %x: tensor<2x1xf32>,
    %w: tensor<1x6xf32> {partita.parameter = "w",
                         partita.initial_value = dense<[[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]> : tensor<1x6xf32>})
    -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) {
  %y = nn.matmul %x, %w : (tensor<2x1xf32>, tensor<1x6xf32>) -> tensor<2x6xf32>
  %q, %k, %v = nn.split %y axis = 1 : tensor<2x6xf32> -> tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
  return %q, %k, %v : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
}

// -----

// A bias that is not a parameter (frozen: a constant) is split where it
// is; the weight is still held as its segments.
// CHECK-LABEL: func.func @constant_bias
// CHECK-SAME: tensor<4x3x2xf32>
// CHECK: nn.split %{{.*}} axis = 0 : tensor<6xf32> -> tensor<2xf32>, tensor<2xf32>, tensor<2xf32>
func.func @constant_bias(
    %x: tensor<2x4xf32>,
    %w: tensor<4x6xf32> {partita.parameter = "w",
                         partita.initial_value = dense<1.0> : tensor<4x6xf32>})
    -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>) {
  %b = nn.constant dense<[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]> : tensor<6xf32>
  %y = nn.matmul %x, %w bias %b : (tensor<2x4xf32>, tensor<4x6xf32>, tensor<6xf32>) -> tensor<2x6xf32>
  %q, %k, %v = nn.split %y axis = 1 : tensor<2x6xf32> -> tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
  return %q, %k, %v : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
}

// -----

// Left fused: a parameter read elsewhere too (a tied weight), segments of
// unequal sizes, a split of another dimension, a constant weight (which
// inference permutes instead, partita-annotate), and a product read by
// more than the split.
// CHECK-LABEL: func.func @left
// CHECK-SAME: %{{.*}}: tensor<4x6xf32> {partita.initial_value = dense<1.000000e+00> : tensor<4x6xf32>, partita.parameter = "tied"}
// CHECK-SAME: %{{.*}}: tensor<4x6xf32> {partita.initial_value = dense<1.000000e+00> : tensor<4x6xf32>, partita.parameter = "uneven"}
// CHECK-SAME: %{{.*}}: tensor<4x6xf32> {partita.initial_value = dense<1.000000e+00> : tensor<4x6xf32>, partita.parameter = "rows"}
// CHECK-SAME: %{{.*}}: tensor<4x6xf32> {partita.initial_value = dense<1.000000e+00> : tensor<4x6xf32>, partita.parameter = "shared"}
// CHECK-NOT: parameter_shape
// CHECK-COUNT-5: nn.split
func.func @left(
    %x: tensor<2x4xf32>,
    %tied: tensor<4x6xf32> {partita.parameter = "tied",
                            partita.initial_value = dense<1.0> : tensor<4x6xf32>},
    %uneven: tensor<4x6xf32> {partita.parameter = "uneven",
                              partita.initial_value = dense<1.0> : tensor<4x6xf32>},
    %rows: tensor<4x6xf32> {partita.parameter = "rows",
                            partita.initial_value = dense<1.0> : tensor<4x6xf32>},
    %shared: tensor<4x6xf32> {partita.parameter = "shared",
                              partita.initial_value = dense<1.0> : tensor<4x6xf32>})
    -> (tensor<2x3xf32>, tensor<4x6xf32>, tensor<2x2xf32>, tensor<1x6xf32>, tensor<2x2xf32>, tensor<2x6xf32>, tensor<2x2xf32>) {
  %a = nn.matmul %x, %tied : (tensor<2x4xf32>, tensor<4x6xf32>) -> tensor<2x6xf32>
  %a0, %a1 = nn.split %a axis = 1 : tensor<2x6xf32> -> tensor<2x3xf32>, tensor<2x3xf32>
  %u = nn.matmul %x, %uneven : (tensor<2x4xf32>, tensor<4x6xf32>) -> tensor<2x6xf32>
  %u0, %u1 = nn.split %u axis = 1 : tensor<2x6xf32> -> tensor<2x2xf32>, tensor<2x4xf32>
  %r = nn.matmul %x, %rows : (tensor<2x4xf32>, tensor<4x6xf32>) -> tensor<2x6xf32>
  %r0, %r1 = nn.split %r axis = 0 : tensor<2x6xf32> -> tensor<1x6xf32>, tensor<1x6xf32>
  %c = nn.constant dense<1.0> : tensor<4x6xf32>
  %cy = nn.matmul %x, %c : (tensor<2x4xf32>, tensor<4x6xf32>) -> tensor<2x6xf32>
  %c0, %c1, %c2 = nn.split %cy axis = 1 : tensor<2x6xf32> -> tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
  %s = nn.matmul %x, %shared : (tensor<2x4xf32>, tensor<4x6xf32>) -> tensor<2x6xf32>
  %s0, %s1, %s2 = nn.split %s axis = 1 : tensor<2x6xf32> -> tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>
  return %a0, %tied, %u0, %r0, %c0, %s, %s1 : tensor<2x3xf32>, tensor<4x6xf32>, tensor<2x2xf32>, tensor<1x6xf32>, tensor<2x2xf32>, tensor<2x6xf32>, tensor<2x2xf32>
}
