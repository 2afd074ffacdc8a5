// RUN: partita-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(partita-convert-float{to=bf16}))' | FileCheck %s
// RUN: partita-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(partita-convert-float{to=fp16}))' | FileCheck %s --check-prefix=F16
// RUN: not partita-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(partita-convert-float{to=f8}))' 2>&1 | FileCheck %s --check-prefix=BAD

// f32 tensors become bf16 inside; the signature stays f32, with a cast on
// entry (saturating, as constants round) and one before the return.
// Constants are rounded to nearest, ties to even: 1 + 2^-8 is halfway
// between two bf16 values and rounds to 1, while fp16 keeps it exactly.
// CHECK-LABEL: func.func @matmul
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK: %[[C:.*]] = nn.cast %[[X]] {saturate} : tensor<2x4xf32> -> tensor<2x4xbf16>
// CHECK: %[[W:.*]] = nn.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xbf16>
// CHECK: %[[Y:.*]] = nn.mul %[[C]], %[[W]] : (tensor<2x4xbf16>, tensor<4xbf16>) -> tensor<2x4xbf16>
// CHECK: %[[R:.*]] = nn.cast %[[Y]] : tensor<2x4xbf16> -> tensor<2x4xf32>
// CHECK: return %[[R]]
// F16: nn.constant dense<[1.003910e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf16>
// BAD: partita-opt: error: --to expects bf16 or fp16, got 'f8'
func.func @matmul(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %w = nn.constant dense<[1.00390625, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %y = nn.mul %x, %w : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// f32's lowest, as exporters build an additive attention mask from it
// (`(1 - mask) * finfo(float32).min`), saturates to the lowest finite bf16
// (fp16) value: rounded to -inf it would make the kept positions' 0 * -inf
// NaN. Infinities stay infinite.
// CHECK-LABEL: func.func @mask_constant
// CHECK: nn.constant dense<[-3.389530e+38, 0xFF80, 3.389530e+38]> : tensor<3xbf16>
// F16-LABEL: func.func @mask_constant
// F16: nn.constant dense<[-6.550400e+04, 0xFC00, 6.550400e+04]> : tensor<3xf16>
func.func @mask_constant(%keep: tensor<4xf32>) -> tensor<3x4xf32> {
  %lowest = nn.constant dense<[-3.40282347e+38, 0xFF800000, 3.40282347e+38]> : tensor<3xf32>
  %c = nn.reshape %lowest : tensor<3xf32> -> tensor<3x1xf32>
  %m = nn.mul %c, %keep : (tensor<3x1xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  return %m : tensor<3x4xf32>
}

// -----

// Integer and boolean tensors, and non-f32 arguments, are left alone; a
// weight held as a resource blob is not read: it becomes a view that
// converts it, under its name, and the blob keeps its f32 bytes (the
// artifact writer rounds them as it writes them).
// CHECK-LABEL: func.func @mixed
// CHECK-SAME: (%[[IDS:.*]]: tensor<2x3xi64>)
// CHECK-NOT: nn.cast %[[IDS]]
// CHECK: nn.constant #nn.view<"table", dense_resource<table> : tensor<4x2xf32>, [*, *]> : tensor<4x2xbf16>
// CHECK: nn.embedding {{.*}} -> tensor<2x3x2xbf16>
// CHECK: nn.compare
// CHECK-SAME: -> tensor<2x3xi1>
// CHECK: table: "0x040000000000803F0000004000004040000080400000A0400000C0400000E04000000041"
func.func @mixed(%ids: tensor<2x3xi64>) -> (tensor<2x3x2xf32>, tensor<2x3xi1>) {
  %t = nn.constant dense_resource<table> : tensor<4x2xf32>
  %e = nn.embedding %t, %ids : (tensor<4x2xf32>, tensor<2x3xi64>) -> tensor<2x3x2xf32>
  %z = nn.constant dense<0> : tensor<i64>
  %c = nn.compare gt, %ids, %z : (tensor<2x3xi64>, tensor<i64>) -> tensor<2x3xi1>
  return %e, %c : tensor<2x3x2xf32>, tensor<2x3xi1>
}

{-#
  dialect_resources: {
    builtin: {
      table: "0x040000000000803F0000004000004040000080400000A0400000C0400000E04000000041"
    }
  }
#-}

// -----

// Rotary angles computed from integer positions (cast, times the inverse
// frequencies, then cos/sin) stay f32: 2000 * 0.9 in bf16 is off by 4. The
// cos/sin values are cast to bf16 where the converted rotary product reads
// them; a sin/cos of an f32 argument is converted with the rest.
// CHECK-LABEL: func.func @angles
// CHECK-SAME: (%[[POS:.*]]: tensor<8x1xi64>, %[[X:.*]]: tensor<8x4xf32>)
// CHECK: %[[XC:.*]] = nn.cast %[[X]] {saturate} : tensor<8x4xf32> -> tensor<8x4xbf16>
// CHECK: %[[P:.*]] = nn.cast %[[POS]] : tensor<8x1xi64> -> tensor<8x1xf32>
// CHECK: %[[F:.*]] = nn.constant dense<{{.*}}> : tensor<4xf32>
// CHECK: %[[A:.*]] = nn.mul %[[P]], %[[F]] : (tensor<8x1xf32>, tensor<4xf32>) -> tensor<8x4xf32>
// CHECK: %[[COS:.*]] = nn.cos %[[A]] : tensor<8x4xf32>
// CHECK: %[[S:.*]] = nn.sin %[[XC]] : tensor<8x4xbf16>
// CHECK: %[[CC:.*]] = nn.cast %[[COS]] : tensor<8x4xf32> -> tensor<8x4xbf16>
// CHECK: nn.mul %[[CC]], %[[S]] : (tensor<8x4xbf16>, tensor<8x4xbf16>) -> tensor<8x4xbf16>
func.func @angles(%pos: tensor<8x1xi64>, %x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %p = nn.cast %pos : tensor<8x1xi64> -> tensor<8x1xf32>
  %f = nn.constant dense<[1.0, 0.9, 0.1, 0.01]> : tensor<4xf32>
  %a = nn.mul %p, %f : (tensor<8x1xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %c = nn.cos %a : tensor<8x4xf32>
  %s = nn.sin %x : tensor<8x4xf32>
  %y = nn.mul %c, %s : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}
