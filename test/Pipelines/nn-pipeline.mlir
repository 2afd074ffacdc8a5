// RUN: partita-opt %s --partita-nn-pipeline | FileCheck %s
// RUN: partita-opt %s --partita-nn-pipeline=raise=false | FileCheck %s --check-prefix=NO-RAISE

// What partita-compile --emit nn runs after import: canonicalize, raise,
// then clean up what raising left dead.

// CHECK-LABEL: func.func @block
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[W:.*]]: tensor<16x16xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK: %[[MM:.*]] = nn.matmul %[[X]], %[[W]] bias %[[B]]
// CHECK: %[[ACT:.*]] = nn.silu %[[MM]]
// CHECK: return %[[ACT]]
// NO-RAISE: nn.sigmoid
// NO-RAISE: nn.mul
func.func @block(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>, %b: tensor<16xf32>) -> tensor<2x8x16xf32> {
  %r = nn.reshape %x : tensor<2x8x16xf32> -> tensor<2x8x16xf32>
  %mm = nn.matmul %r, %w : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %y = nn.add %mm, %b : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %s = nn.sigmoid %y : tensor<2x8x16xf32>
  %z = nn.mul %y, %s : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %z : tensor<2x8x16xf32>
}
