// RUN: partita-opt %s -canonicalize -split-input-file | FileCheck %s

// A torch-style shape computation: take dims 0 and 1 of a static shape,
// append the head split, and reshape. All of it folds to constants.
// CHECK-LABEL: func.func @shape_arithmetic
func.func @shape_arithmetic() -> tensor<4xi64> {
  // CHECK: %[[SHAPE:.*]] = nn.constant dense<[2, 8, 12, 64]> : tensor<4xi64>
  // CHECK-NEXT: return %[[SHAPE]]
  %shape = nn.constant dense<[2, 8, 768]> : tensor<3xi64>
  %idx = nn.constant dense<[0, 1]> : tensor<2xi64>
  %bs = nn.gather %shape, %idx axis = 0 : (tensor<3xi64>, tensor<2xi64>) -> tensor<2xi64>
  %heads = nn.constant dense<12> : tensor<1xi64>
  %hidden = nn.slice %shape start = [2] limit = [3] stride = [1] : tensor<3xi64> -> tensor<1xi64>
  %dim = nn.div %hidden, %heads : (tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %r = nn.concat %bs, %heads, %dim axis = 0 : (tensor<2xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  return %r : tensor<4xi64>
}

// -----

// CHECK-LABEL: func.func @arithmetic_broadcasts
func.func @arithmetic_broadcasts() -> (tensor<2x2xi64>, tensor<2xf32>, tensor<2xi64>) {
  // CHECK-DAG: nn.constant dense<{{\[}}[11, 21], [12, 22]]> : tensor<2x2xi64>
  // CHECK-DAG: nn.constant dense<[5.000000e-01, 2.500000e-01]> : tensor<2xf32>
  // CHECK-DAG: nn.constant dense<[3, -2]> : tensor<2xi64>
  %col = nn.constant dense<[[1], [2]]> : tensor<2x1xi64>
  %row = nn.constant dense<[10, 20]> : tensor<2xi64>
  %sum = nn.add %col, %row : (tensor<2x1xi64>, tensor<2xi64>) -> tensor<2x2xi64>
  %one = nn.constant dense<1.0> : tensor<f32>
  %den = nn.constant dense<[2.0, 4.0]> : tensor<2xf32>
  %q = nn.div %one, %den : (tensor<f32>, tensor<2xf32>) -> tensor<2xf32>
  // Integer division rounds toward zero.
  %a = nn.constant dense<[7, -7]> : tensor<2xi64>
  %b = nn.constant dense<[2, 3]> : tensor<2xi64>
  %d = nn.div %a, %b : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  return %sum, %q, %d : tensor<2x2xi64>, tensor<2xf32>, tensor<2xi64>
}

// -----

// Division by zero is left for run time.
// CHECK-LABEL: func.func @no_fold_div_by_zero
func.func @no_fold_div_by_zero() -> tensor<2xi64> {
  // CHECK: nn.div
  %a = nn.constant dense<[7, 8]> : tensor<2xi64>
  %z = nn.constant dense<[1, 0]> : tensor<2xi64>
  %d = nn.div %a, %z : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  return %d : tensor<2xi64>
}

// -----

// CHECK-LABEL: func.func @compare_where_cast
func.func @compare_where_cast(%x: tensor<4xf32>, %y: tensor<4xf32>)
    -> (tensor<3xi1>, tensor<4xf32>, tensor<2xf32>, tensor<2xi64>, tensor<2xi64>) {
  // CHECK-DAG: %[[LT:.*]] = nn.constant dense<[true, false, false]> : tensor<3xi1>
  // CHECK-DAG: %[[F:.*]] = nn.constant dense<[1.000000e+00, 0.000000e+00]> : tensor<2xf32>
  // CHECK-DAG: %[[TRUNC:.*]] = nn.constant dense<[2, -2]> : tensor<2xi64>
  // CHECK-DAG: %[[SEL:.*]] = nn.constant dense<[2, 7]> : tensor<2xi64>
  // CHECK: return %[[LT]], %[[X:.*]], %[[F]], %[[TRUNC]], %[[SEL]]
  %a = nn.constant dense<[1, 2, 3]> : tensor<3xi64>
  %b = nn.constant dense<2> : tensor<i64>
  %lt = nn.compare lt, %a, %b : (tensor<3xi64>, tensor<i64>) -> tensor<3xi1>
  // A uniform condition picks a side.
  %t = nn.constant dense<true> : tensor<i1>
  %w = nn.where %t, %x, %y : (tensor<i1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  // i1 converts to 1.0, not -1.0.
  %bools = nn.constant dense<[true, false]> : tensor<2xi1>
  %f = nn.cast %bools : tensor<2xi1> -> tensor<2xf32>
  // Float to integer rounds toward zero.
  %g = nn.constant dense<[2.7, -2.7]> : tensor<2xf32>
  %trunc = nn.cast %g : tensor<2xf32> -> tensor<2xi64>
  %c = nn.constant dense<[true, false]> : tensor<2xi1>
  %a2 = nn.constant dense<[5, 7]> : tensor<2xi64>
  %sel = nn.where %c, %b, %a2 : (tensor<2xi1>, tensor<i64>, tensor<2xi64>) -> tensor<2xi64>
  return %lt, %w, %f, %trunc, %sel : tensor<3xi1>, tensor<4xf32>, tensor<2xf32>, tensor<2xi64>, tensor<2xi64>
}

// -----

// Float to a narrower float rounds to nearest; a finite value beyond the
// range becomes an infinity, or with `saturate` the largest finite value of
// its sign. Infinities stay either way.
// CHECK-LABEL: func.func @cast_saturate
// CHECK-DAG: %[[PLAIN:.*]] = nn.constant dense<[0x7C00, 0xFC00, 1.000000e+00, 0x7C00]> : tensor<4xf16>
// CHECK-DAG: %[[SAT:.*]] = nn.constant dense<[6.550400e+04, -6.550400e+04, 1.000000e+00, 0x7C00]> : tensor<4xf16>
// CHECK: return %[[PLAIN]], %[[SAT]]
func.func @cast_saturate() -> (tensor<4xf16>, tensor<4xf16>) {
  %x = nn.constant dense<[1.0e20, -7.0e4, 1.0, 0x7F800000]> : tensor<4xf32>
  %plain = nn.cast %x : tensor<4xf32> -> tensor<4xf16>
  %sat = nn.cast %x {saturate} : tensor<4xf32> -> tensor<4xf16>
  return %plain, %sat : tensor<4xf16>, tensor<4xf16>
}

// -----

// A uniform condition that picks a splat needing broadcast folds to the
// splat of the result type (the other side need not be constant).
// CHECK-LABEL: func.func @where_splat_broadcast
// CHECK: %[[Z:.*]] = nn.constant dense<0.000000e+00> : tensor<2x4xf32>
// CHECK: return %[[Z]]
func.func @where_splat_broadcast(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %f = nn.constant dense<false> : tensor<i1>
  %z = nn.constant dense<0.0> : tensor<f32>
  %w = nn.where %f, %x, %z : (tensor<i1>, tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
  return %w : tensor<2x4xf32>
}

// -----

// CHECK-LABEL: func.func @identities
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>
func.func @identities(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  // CHECK-NOT: nn.
  // CHECK: return %[[X]], %[[X]], %[[X]], %[[X]], %[[X]]
  %0 = nn.reshape %x : tensor<2x3xf32> -> tensor<2x3xf32>
  %1 = nn.transpose %x permutation = [0, 1] : tensor<2x3xf32> -> tensor<2x3xf32>
  %2 = nn.broadcast_to %x : tensor<2x3xf32> -> tensor<2x3xf32>
  %3 = nn.slice %x start = [0, 0] limit = [2, 3] stride = [1, 1] : tensor<2x3xf32> -> tensor<2x3xf32>
  %4 = nn.concat %x axis = 0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0, %1, %2, %3, %4 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @chains
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x768xf32>, %[[Y:.*]]: tensor<2x3x4x5xf32>)
func.func @chains(%x: tensor<2x8x768xf32>, %y: tensor<2x3x4x5xf32>) -> (tensor<16x768xf32>, tensor<2x4x5x3xf32>) {
  // CHECK: %[[R:.*]] = nn.reshape %[[X]] : tensor<2x8x768xf32> -> tensor<16x768xf32>
  %0 = nn.reshape %x : tensor<2x8x768xf32> -> tensor<2x8x12x64xf32>
  %1 = nn.reshape %0 : tensor<2x8x12x64xf32> -> tensor<16x768xf32>
  // CHECK: %[[T:.*]] = nn.transpose %[[Y]] permutation = [0, 2, 3, 1] : tensor<2x3x4x5xf32> -> tensor<2x4x5x3xf32>
  %2 = nn.transpose %y permutation = [0, 2, 1, 3] : tensor<2x3x4x5xf32> -> tensor<2x4x3x5xf32>
  %3 = nn.transpose %2 permutation = [0, 1, 3, 2] : tensor<2x4x3x5xf32> -> tensor<2x4x5x3xf32>
  // CHECK: return %[[R]], %[[T]]
  return %1, %3 : tensor<16x768xf32>, tensor<2x4x5x3xf32>
}

// -----

// CHECK-LABEL: func.func @constant_data_movement
func.func @constant_data_movement() -> (tensor<3x2xi64>, tensor<2x3xi64>, tensor<2xi64>, tensor<4x2xf32>) {
  // CHECK-DAG: nn.constant dense<{{\[}}[1, 4], [2, 5], [3, 6]]> : tensor<3x2xi64>
  // CHECK-DAG: nn.constant dense<{{\[}}[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
  // CHECK-DAG: nn.constant dense<[3, 1]> : tensor<2xi64>
  // CHECK-DAG: nn.constant dense<5.000000e-01> : tensor<4x2xf32>
  %m = nn.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
  %t = nn.transpose %m permutation = [1, 0] : tensor<2x3xi64> -> tensor<3x2xi64>
  %flat = nn.constant dense<[1, 2, 3, 4, 5, 6]> : tensor<6xi64>
  %r = nn.reshape %flat : tensor<6xi64> -> tensor<2x3xi64>
  // Negative indices count from the end.
  %idx = nn.constant dense<[-1, 0]> : tensor<2xi64>
  %v = nn.constant dense<[1, 2, 3]> : tensor<3xi64>
  %g = nn.gather %v, %idx axis = 0 : (tensor<3xi64>, tensor<2xi64>) -> tensor<2xi64>
  %h = nn.constant dense<0.5> : tensor<2xf32>
  %b = nn.broadcast_to %h : tensor<2xf32> -> tensor<4x2xf32>
  return %t, %r, %g, %b : tensor<3x2xi64>, tensor<2x3xi64>, tensor<2xi64>, tensor<4x2xf32>
}

// -----

// GPT-2's Conv1D: flatten the tokens, multiply, unflatten. One batched
// matmul does the same and keeps the sequence dimension visible.
// CHECK-LABEL: func.func @reshapes_around_matmul
// CHECK-SAME: (%[[X:.*]]: tensor<2x16x64xf32>, %[[W:.*]]: tensor<64x192xf32>, %[[B:.*]]: tensor<192xf32>)
func.func @reshapes_around_matmul(%x: tensor<2x16x64xf32>, %w: tensor<64x192xf32>, %b: tensor<192xf32>) -> (tensor<2x16x192xf32>, tensor<4x8x192xf32>, tensor<64x96xf32>) {
  // CHECK-DAG: %[[MM:.*]] = nn.matmul %[[X]], %[[W]] bias %[[B]] : (tensor<2x16x64xf32>, tensor<64x192xf32>, tensor<192xf32>) -> tensor<2x16x192xf32>
  %0 = nn.reshape %x : tensor<2x16x64xf32> -> tensor<32x64xf32>
  %1 = nn.matmul %0, %w bias %b : (tensor<32x64xf32>, tensor<64x192xf32>, tensor<192xf32>) -> tensor<32x192xf32>
  %2 = nn.reshape %1 : tensor<32x192xf32> -> tensor<2x16x192xf32>
  // Other leading dimensions: the input is reshaped to them instead.
  // CHECK-DAG: %[[X48:.*]] = nn.reshape %[[X]] : tensor<2x16x64xf32> -> tensor<4x8x64xf32>
  // CHECK-DAG: %[[MM48:.*]] = nn.matmul %[[X48]], %[[W]] : (tensor<4x8x64xf32>, tensor<64x192xf32>) -> tensor<4x8x192xf32>
  %3 = nn.reshape %x : tensor<2x16x64xf32> -> tensor<32x64xf32>
  %4 = nn.matmul %3, %w : (tensor<32x64xf32>, tensor<64x192xf32>) -> tensor<32x192xf32>
  %5 = nn.reshape %4 : tensor<32x192xf32> -> tensor<4x8x192xf32>
  // A reshape that splits the features is not a batched matmul.
  // CHECK-DAG: %[[FLAT:.*]] = nn.matmul %{{.*}}, %[[W]] : (tensor<32x64xf32>, tensor<64x192xf32>) -> tensor<32x192xf32>
  // CHECK-DAG: %[[SPLIT:.*]] = nn.reshape %[[FLAT]] : tensor<32x192xf32> -> tensor<64x96xf32>
  %6 = nn.reshape %x : tensor<2x16x64xf32> -> tensor<32x64xf32>
  %7 = nn.matmul %6, %w : (tensor<32x64xf32>, tensor<64x192xf32>) -> tensor<32x192xf32>
  %8 = nn.reshape %7 : tensor<32x192xf32> -> tensor<64x96xf32>
  // CHECK: return %[[MM]], %[[MM48]], %[[SPLIT]]
  return %2, %5, %8 : tensor<2x16x192xf32>, tensor<4x8x192xf32>, tensor<64x96xf32>
}

// -----

// sin and cos of constants fold in double precision, rounded once to the
// element type: rotary tables of constant positions become constants, at
// angles where a short polynomial would have lost every digit.
// CHECK-LABEL: func.func @trig_folds
func.func @trig_folds(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<2xbf16>, tensor<3xf32>) {
  // CHECK-DAG: nn.constant dense<[0.000000e+00, 1.000000e+00, -5.946420e-01]> : tensor<3xf32>
  // CHECK-DAG: nn.constant dense<[1.000000e+00, -4.160160e-01]> : tensor<2xbf16>
  %a = nn.constant dense<[0.0, 1.57079637, 4096.0]> : tensor<3xf32>
  %s = nn.sin %a : tensor<3xf32>
  %b = nn.constant dense<[0.0, 2.0]> : tensor<2xbf16>
  %c = nn.cos %b : tensor<2xbf16>
  // A non-constant operand stays.
  // CHECK: nn.sin %{{.*}} : tensor<3xf32>
  %v = nn.sin %x : tensor<3xf32>
  return %s, %c, %v : tensor<3xf32>, tensor<2xbf16>, tensor<3xf32>
}

// -----

// cumsum of a constant folds for every attribute combination; integers
// wrap at their width.
// CHECK-LABEL: func.func @cumsum_folds
func.func @cumsum_folds(%x: tensor<2x3xi64>) -> (tensor<2x3xi64>, tensor<2x3xi64>, tensor<2x3xi64>, tensor<2x3xi64>, tensor<2x3xi64>, tensor<3xf32>, tensor<2xi32>, tensor<2x3xi64>) {
  // CHECK-DAG: %[[INC:.*]] = nn.constant dense<{{\[}}[1, 3, 6], [4, 9, 15]]> : tensor<2x3xi64>
  // CHECK-DAG: %[[EXC:.*]] = nn.constant dense<{{\[}}[0, 1, 3], [0, 4, 9]]> : tensor<2x3xi64>
  // CHECK-DAG: %[[REV:.*]] = nn.constant dense<{{\[}}[6, 5, 3], [15, 11, 6]]> : tensor<2x3xi64>
  // CHECK-DAG: %[[EXREV:.*]] = nn.constant dense<{{\[}}[5, 3, 0], [11, 6, 0]]> : tensor<2x3xi64>
  // CHECK-DAG: %[[AX0:.*]] = nn.constant dense<{{\[}}[1, 2, 3], [5, 7, 9]]> : tensor<2x3xi64>
  // CHECK-DAG: %[[F:.*]] = nn.constant dense<[1.250000e+00, 1.000000e+00, 0.000000e+00]> : tensor<3xf32>
  // CHECK-DAG: %[[WRAP:.*]] = nn.constant dense<[2147483647, -2147483648]> : tensor<2xi32>
  // CHECK-DAG: %[[DYN:.*]] = nn.cumsum %{{.*}} axis = 1 exclusive : tensor<2x3xi64>
  // CHECK: return %[[INC]], %[[EXC]], %[[REV]], %[[EXREV]], %[[AX0]], %[[F]], %[[WRAP]], %[[DYN]]
  %m = nn.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
  %0 = nn.cumsum %m axis = 1 : tensor<2x3xi64>
  %1 = nn.cumsum %m axis = 1 exclusive : tensor<2x3xi64>
  %2 = nn.cumsum %m axis = 1 reverse : tensor<2x3xi64>
  %3 = nn.cumsum %m axis = 1 exclusive reverse : tensor<2x3xi64>
  %4 = nn.cumsum %m axis = 0 : tensor<2x3xi64>
  %f = nn.constant dense<[0.5, 0.25, 1.0]> : tensor<3xf32>
  %5 = nn.cumsum %f axis = 0 exclusive reverse : tensor<3xf32>
  %i = nn.constant dense<[2147483647, 1]> : tensor<2xi32>
  %6 = nn.cumsum %i axis = 0 : tensor<2xi32>
  %7 = nn.cumsum %x axis = 1 exclusive : tensor<2x3xi64>
  return %0, %1, %2, %3, %4, %5, %6, %7 : tensor<2x3xi64>, tensor<2x3xi64>, tensor<2x3xi64>, tensor<2x3xi64>, tensor<2x3xi64>, tensor<3xf32>, tensor<2xi32>, tensor<2x3xi64>
}

// -----

// A gather whose constant indices enumerate the axis in order keeps every
// element in place: a reshape (torch's legacy export of HF's padding mask).
// Indices out of order, or fewer than the axis, stay a gather.
// CHECK-LABEL: func.func @gather_of_iota
// CHECK: %[[R:.*]] = nn.reshape %arg0 : tensor<4x1xi1> -> tensor<2x1x2x1xi1>
// CHECK: %[[G:.*]] = nn.gather %arg0
// CHECK: %[[H:.*]] = nn.gather %arg0
// CHECK: return %[[R]], %[[G]], %[[H]]
func.func @gather_of_iota(%m: tensor<4x1xi1>) -> (tensor<2x1x2x1xi1>, tensor<2x1x2x1xi1>, tensor<3x1xi1>) {
  %iota = nn.constant dense<[[[0, 1]], [[2, 3]]]> : tensor<2x1x2xi64>
  %a = nn.gather %m, %iota axis = 0 : (tensor<4x1xi1>, tensor<2x1x2xi64>) -> tensor<2x1x2x1xi1>
  %swapped = nn.constant dense<[[[1, 0]], [[2, 3]]]> : tensor<2x1x2xi64>
  %b = nn.gather %m, %swapped axis = 0 : (tensor<4x1xi1>, tensor<2x1x2xi64>) -> tensor<2x1x2x1xi1>
  %short = nn.constant dense<[0, 1, 2]> : tensor<3xi64>
  %c = nn.gather %m, %short axis = 0 : (tensor<4x1xi1>, tensor<3xi64>) -> tensor<3x1xi1>
  return %a, %b, %c : tensor<2x1x2x1xi1>, tensor<2x1x2x1xi1>, tensor<3x1xi1>
}

// -----

// Qwen3's per-head query norm as onnxruntime-genai's builder writes it: the
// heads merged into the sequence ([2, 6, 64] read as [2, 24, 16]), an RMS
// norm over the head size, and back. The norm reads the unmerged
// [2, 6, 4, 16] instead, so that the heads stay a dimension, and the two
// reshapes fold into one. A reshape that merges nothing before the
// normalized dimensions, or whose source's last dimension is not a
// multiple of them, is left alone.
// CHECK-LABEL: func.func @norm_before_merge
// CHECK: %[[U:.*]] = nn.reshape %arg0 : tensor<2x6x64xf32> -> tensor<2x6x4x16xf32>
// CHECK: %[[N:.*]] = nn.rms_norm %[[U]] scale(%arg1 : tensor<16xf32>) axis = 3 epsilon = 9.99999997E-7 : tensor<2x6x4x16xf32>
// CHECK: %[[R:.*]] = nn.reshape %[[N]] : tensor<2x6x4x16xf32> -> tensor<2x6x64xf32>
// CHECK: %[[L:.*]] = nn.layer_norm %{{.*}} axis = 3
// CHECK: nn.rms_norm %{{.*}} axis = 1 {{.*}} : tensor<12x16xf32>
// CHECK: nn.rms_norm %{{.*}} axis = 1 {{.*}} : tensor<6x6xf32>
// CHECK: return %[[R]]
func.func @norm_before_merge(%x: tensor<2x6x64xf32>, %w: tensor<16xf32>, %y: tensor<2x6x16xf32>, %z: tensor<4x9xf32>) -> (tensor<2x6x64xf32>, tensor<2x24x16xf32>, tensor<2x6x16xf32>, tensor<6x6xf32>) {
  %m = nn.reshape %x : tensor<2x6x64xf32> -> tensor<2x24x16xf32>
  %n = nn.rms_norm %m scale(%w : tensor<16xf32>) axis = 2 epsilon = 1.0e-06 : tensor<2x24x16xf32>
  %r = nn.reshape %n : tensor<2x24x16xf32> -> tensor<2x6x64xf32>
  %m2 = nn.reshape %x : tensor<2x6x64xf32> -> tensor<2x24x16xf32>
  %l = nn.layer_norm %m2 axis = 2 epsilon = 1.0e-05 : tensor<2x24x16xf32>
  %same = nn.reshape %y : tensor<2x6x16xf32> -> tensor<12x16xf32>
  %s = nn.rms_norm %same axis = 1 epsilon = 1.0e-06 : tensor<12x16xf32>
  %back = nn.reshape %s : tensor<12x16xf32> -> tensor<2x6x16xf32>
  %odd = nn.reshape %z : tensor<4x9xf32> -> tensor<6x6xf32>
  %o = nn.rms_norm %odd axis = 1 epsilon = 1.0e-06 : tensor<6x6xf32>
  return %r, %l, %back, %o : tensor<2x6x64xf32>, tensor<2x24x16xf32>, tensor<2x6x16xf32>, tensor<6x6xf32>
}
