// RUN: partita-opt %s --partita-nn-pipeline | FileCheck %s
// RUN: partita-opt %s --partita-nn-pipeline=raise=false | FileCheck %s --check-prefix=NO-RAISE
// RUN: partita-opt %s --partita-nn-pipeline=dtype=bf16 | FileCheck %s --check-prefix=BF16

// What partita-compile --emit nn runs after import: canonicalize, raise,
// then clean up what raising left dead.

// CHECK-LABEL: func.func @block
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[W:.*]]: tensor<16x16xf32>, %[[B:.*]]: tensor<16xf32>)
// CHECK: %[[MM:.*]] = nn.matmul %[[X]], %[[W]] bias %[[B]]
// CHECK: %[[ACT:.*]] = nn.silu %[[MM]]
// CHECK: return %[[ACT]]
// NO-RAISE: nn.sigmoid
// NO-RAISE: nn.mul

// With dtype (partita-compile --dtype), the raised ops are stored as that
// type, last; the signature stays f32.
// BF16-LABEL: func.func @block
// BF16-SAME: (%[[X:.*]]: tensor<2x8x16xf32>, %[[W:.*]]: tensor<16x16xf32>, %[[B:.*]]: tensor<16xf32>) -> tensor<2x8x16xf32>
// BF16-DAG: %[[XB:.*]] = nn.cast %[[X]] {saturate} : tensor<2x8x16xf32> -> tensor<2x8x16xbf16>
// BF16-DAG: %[[WB:.*]] = nn.cast %[[W]] {saturate} : tensor<16x16xf32> -> tensor<16x16xbf16>
// BF16-DAG: %[[BB:.*]] = nn.cast %[[B]] {saturate} : tensor<16xf32> -> tensor<16xbf16>
// BF16: %[[MM:.*]] = nn.matmul %[[XB]], %[[WB]] bias %[[BB]] : {{.*}} -> tensor<2x8x16xbf16>
// BF16: %[[ACT:.*]] = nn.silu %[[MM]] : tensor<2x8x16xbf16>
// BF16: %[[R:.*]] = nn.cast %[[ACT]] : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
// BF16: return %[[R]]
func.func @block(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>, %b: tensor<16xf32>) -> tensor<2x8x16xf32> {
  %r = nn.reshape %x : tensor<2x8x16xf32> -> tensor<2x8x16xf32>
  %mm = nn.matmul %r, %w : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %y = nn.add %mm, %b : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %s = nn.sigmoid %y : tensor<2x8x16xf32>
  %z = nn.mul %y, %s : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %z : tensor<2x8x16xf32>
}
