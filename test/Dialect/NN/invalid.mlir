// RUN: partita-opt %s -split-input-file -verify-diagnostics

// One case per numbered constraint of the nn ops (NNOps.td); each message
// starts with the constraint's id.

// constant_c1
func.func @constant_c1() {
  // expected-error @+1 {{constant_c1: value type 'tensor<2xf32>' differs from result type 'tensor<3xf32>'}}
  %0 = "nn.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<3xf32>
  return
}

// -----

// constant_c2
func.func @constant_c2() {
  // expected-error @+1 {{constant_c2: inline dense value has 1025 elements}}
  %0 = nn.constant dense<"0x000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F202122232425262728292A2B2C2D2E2F303132333435363738393A3B3C3D3E3F404142434445464748494A4B4C4D4E4F505152535455565758595A5B5C5D5E5F606162636465666768696A6B6C6D6E6F707172737475767778797A7B7C7D7E7F808182838485868788898A8B8C8D8E8F909192939495969798999A9B9C9D9E9FA0A1A2A3A4A5A6A7A8A9AAABACADAEAFB0B1B2B3B4B5B6B7B8B9BABBBCBDBEBFC0C1C2C3C4C5C6C7C8C9CACBCCCDCECFD0D1D2D3D4D5D6D7D8D9DADBDCDDDEDFE0E1E2E3E4E5E6E7E8E9EAEBECEDEEEFF0F1F2F3F4F5F6F7F8F9FA000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F202122232425262728292A2B2C2D2E2F303132333435363738393A3B3C3D3E3F404142434445464748494A4B4C4D4E4F505152535455565758595A5B5C5D5E5F606162636465666768696A6B6C6D6E6F707172737475767778797A7B7C7D7E7F808182838485868788898A8B8C8D8E8F909192939495969798999A9B9C9D9E9FA0A1A2A3A4A5A6A7A8A9AAABACADAEAFB0B1B2B3B4B5B6B7B8B9BABBBCBDBEBFC0C1C2C3C4C5C6C7C8C9CACBCCCDCECFD0D1D2D3D4D5D6D7D8D9DADBDCDDDEDFE0E1E2E3E4E5E6E7E8E9EAEBECEDEEEFF0F1F2F3F4F5F6F7F8F9FA000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F202122232425262728292A2B2C2D2E2F303132333435363738393A3B3C3D3E3F404142434445464748494A4B4C4D4E4F505152535455565758595A5B5C5D5E5F606162636465666768696A6B6C6D6E6F707172737475767778797A7B7C7D7E7F808182838485868788898A8B8C8D8E8F909192939495969798999A9B9C9D9E9FA0A1A2A3A4A5A6A7A8A9AAABACADAEAFB0B1B2B3B4B5B6B7B8B9BABBBCBDBEBFC0C1C2C3C4C5C6C7C8C9CACBCCCDCECFD0D1D2D3D4D5D6D7D8D9DADBDCDDDEDFE0E1E2E3E4E5E6E7E8E9EAEBECEDEEEFF0F1F2F3F4F5F6F7F8F9FA000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F202122232425262728292A2B2C2D2E2F303132333435363738393A3B3C3D3E3F404142434445464748494A4B4C4D4E4F505152535455565758595A5B5C5D5E5F606162636465666768696A6B6C6D6E6F707172737475767778797A7B7C7D7E7F808182838485868788898A8B8C8D8E8F909192939495969798999A9B9C9D9E9FA0A1A2A3A4A5A6A7A8A9AAABACADAEAFB0B1B2B3B4B5B6B7B8B9BABBBCBDBEBFC0C1C2C3C4C5C6C7C8C9CACBCCCDCECFD0D1D2D3D4D5D6D7D8D9DADBDCDDDEDFE0E1E2E3E4E5E6E7E8E9EAEBECEDEEEFF0F1F2F3F4F5F6F7F8F9FA000102030405060708090A0B0C0D0E0F1011121314"> : tensor<1025xi8>
  return
}

// -----

// add_c1
func.func @add_c1(%a: tensor<2xf32>, %b: tensor<2xf16>) {
  // expected-error @+1 {{add_c1: operand element types differ ('f32' vs 'f16')}}
  %0 = nn.add %a, %b : (tensor<2xf32>, tensor<2xf16>) -> tensor<2xf32>
  return
}

// -----

// add_c2
func.func @add_c2(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{add_c2: operand shapes [2, 3], [2, 4] do not broadcast}}
  %0 = nn.add %a, %b : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

// add_c3
func.func @add_c3(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{add_c3: result type 'tensor<3xf32>' differs from the broadcast type 'tensor<2x3xf32>'}}
  %0 = nn.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

// sub_c1
func.func @sub_c1(%a: tensor<2xf32>, %b: tensor<2xf16>) {
  // expected-error @+1 {{sub_c1: operand element types differ ('f32' vs 'f16')}}
  %0 = nn.sub %a, %b : (tensor<2xf32>, tensor<2xf16>) -> tensor<2xf32>
  return
}

// -----

// sub_c2
func.func @sub_c2(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{sub_c2: operand shapes [2, 3], [2, 4] do not broadcast}}
  %0 = nn.sub %a, %b : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

// sub_c3
func.func @sub_c3(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{sub_c3: result type 'tensor<3xf32>' differs from the broadcast type 'tensor<2x3xf32>'}}
  %0 = nn.sub %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

// mul_c1
func.func @mul_c1(%a: tensor<2xf32>, %b: tensor<2xf16>) {
  // expected-error @+1 {{mul_c1: operand element types differ ('f32' vs 'f16')}}
  %0 = nn.mul %a, %b : (tensor<2xf32>, tensor<2xf16>) -> tensor<2xf32>
  return
}

// -----

// mul_c2
func.func @mul_c2(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{mul_c2: operand shapes [2, 3], [2, 4] do not broadcast}}
  %0 = nn.mul %a, %b : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

// mul_c3
func.func @mul_c3(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{mul_c3: result type 'tensor<3xf32>' differs from the broadcast type 'tensor<2x3xf32>'}}
  %0 = nn.mul %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

// div_c1
func.func @div_c1(%a: tensor<2xf32>, %b: tensor<2xf16>) {
  // expected-error @+1 {{div_c1: operand element types differ ('f32' vs 'f16')}}
  %0 = nn.div %a, %b : (tensor<2xf32>, tensor<2xf16>) -> tensor<2xf32>
  return
}

// -----

// div_c2
func.func @div_c2(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{div_c2: operand shapes [2, 3], [2, 4] do not broadcast}}
  %0 = nn.div %a, %b : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

// div_c3
func.func @div_c3(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{div_c3: result type 'tensor<3xf32>' differs from the broadcast type 'tensor<2x3xf32>'}}
  %0 = nn.div %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

// pow_c1
func.func @pow_c1(%a: tensor<2xf32>, %b: tensor<2xf16>) {
  // expected-error @+1 {{pow_c1: operand element types differ ('f32' vs 'f16')}}
  %0 = nn.pow %a, %b : (tensor<2xf32>, tensor<2xf16>) -> tensor<2xf32>
  return
}

// -----

// pow_c2
func.func @pow_c2(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{pow_c2: operand shapes [2, 3], [2, 4] do not broadcast}}
  %0 = nn.pow %a, %b : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

// pow_c3
func.func @pow_c3(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{pow_c3: result type 'tensor<3xf32>' differs from the broadcast type 'tensor<2x3xf32>'}}
  %0 = nn.pow %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

// max_c1
func.func @max_c1(%a: tensor<2xf32>, %b: tensor<2xf16>) {
  // expected-error @+1 {{max_c1: operand element types differ ('f32' vs 'f16')}}
  %0 = nn.max %a, %b : (tensor<2xf32>, tensor<2xf16>) -> tensor<2xf32>
  return
}

// -----

// max_c2
func.func @max_c2(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{max_c2: operand shapes [2, 3], [2, 4] do not broadcast}}
  %0 = nn.max %a, %b : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

// max_c3
func.func @max_c3(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{max_c3: result type 'tensor<3xf32>' differs from the broadcast type 'tensor<2x3xf32>'}}
  %0 = nn.max %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

// min_c1
func.func @min_c1(%a: tensor<2xf32>, %b: tensor<2xf16>) {
  // expected-error @+1 {{min_c1: operand element types differ ('f32' vs 'f16')}}
  %0 = nn.min %a, %b : (tensor<2xf32>, tensor<2xf16>) -> tensor<2xf32>
  return
}

// -----

// min_c2
func.func @min_c2(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{min_c2: operand shapes [2, 3], [2, 4] do not broadcast}}
  %0 = nn.min %a, %b : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

// min_c3
func.func @min_c3(%a: tensor<2x3xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{min_c3: result type 'tensor<3xf32>' differs from the broadcast type 'tensor<2x3xf32>'}}
  %0 = nn.min %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return
}

// -----

// and_c1
func.func @and_c1(%a: tensor<2x3xi1>, %b: tensor<2x4xi1>) {
  // expected-error @+1 {{and_c1: operand shapes [2, 3], [2, 4] do not broadcast}}
  %0 = nn.and %a, %b : (tensor<2x3xi1>, tensor<2x4xi1>) -> tensor<2x4xi1>
  return
}

// -----

// and_c2
func.func @and_c2(%a: tensor<2x3xi1>, %b: tensor<1x3xi1>) {
  // expected-error @+1 {{and_c2: result type 'tensor<1x3xi1>' differs from the broadcast type 'tensor<2x3xi1>'}}
  %0 = nn.and %a, %b : (tensor<2x3xi1>, tensor<1x3xi1>) -> tensor<1x3xi1>
  return
}

// -----

// or_c1
func.func @or_c1(%a: tensor<2x3xi1>, %b: tensor<2x4xi1>) {
  // expected-error @+1 {{or_c1: operand shapes [2, 3], [2, 4] do not broadcast}}
  %0 = nn.or %a, %b : (tensor<2x3xi1>, tensor<2x4xi1>) -> tensor<2x4xi1>
  return
}

// -----

// or_c2
func.func @or_c2(%a: tensor<2x3xi1>, %b: tensor<1x3xi1>) {
  // expected-error @+1 {{or_c2: result type 'tensor<1x3xi1>' differs from the broadcast type 'tensor<2x3xi1>'}}
  %0 = nn.or %a, %b : (tensor<2x3xi1>, tensor<1x3xi1>) -> tensor<1x3xi1>
  return
}

// -----

// xor_c1
func.func @xor_c1(%a: tensor<2x3xi1>, %b: tensor<2x4xi1>) {
  // expected-error @+1 {{xor_c1: operand shapes [2, 3], [2, 4] do not broadcast}}
  %0 = nn.xor %a, %b : (tensor<2x3xi1>, tensor<2x4xi1>) -> tensor<2x4xi1>
  return
}

// -----

// xor_c2
func.func @xor_c2(%a: tensor<2x3xi1>, %b: tensor<1x3xi1>) {
  // expected-error @+1 {{xor_c2: result type 'tensor<1x3xi1>' differs from the broadcast type 'tensor<2x3xi1>'}}
  %0 = nn.xor %a, %b : (tensor<2x3xi1>, tensor<1x3xi1>) -> tensor<1x3xi1>
  return
}

// -----

// compare_c1
func.func @compare_c1(%a: tensor<2xi64>, %b: tensor<2xi32>) {
  // expected-error @+1 {{compare_c1: operand element types differ ('i64' vs 'i32')}}
  %0 = nn.compare eq, %a, %b : (tensor<2xi64>, tensor<2xi32>) -> tensor<2xi1>
  return
}

// -----

// compare_c2
func.func @compare_c2(%a: tensor<2xi64>, %b: tensor<3xi64>) {
  // expected-error @+1 {{compare_c2: operand shapes [2], [3] do not broadcast}}
  %0 = nn.compare eq, %a, %b : (tensor<2xi64>, tensor<3xi64>) -> tensor<2xi1>
  return
}

// -----

// compare_c3
func.func @compare_c3(%a: tensor<2xi64>, %b: tensor<2xi64>) {
  // expected-error @+1 {{compare_c3: result type 'tensor<1xi1>' differs from the broadcast type 'tensor<2xi1>'}}
  %0 = nn.compare eq, %a, %b : (tensor<2xi64>, tensor<2xi64>) -> tensor<1xi1>
  return
}

// -----

// where_c1
func.func @where_c1(%c: tensor<2xi1>, %a: tensor<2xf32>, %b: tensor<2xi64>) {
  // expected-error @+1 {{where_c1: operand element types differ ('f32' vs 'i64')}}
  %0 = nn.where %c, %a, %b : (tensor<2xi1>, tensor<2xf32>, tensor<2xi64>) -> tensor<2xf32>
  return
}

// -----

// where_c2
func.func @where_c2(%c: tensor<3xi1>, %a: tensor<2xf32>, %b: tensor<2xf32>) {
  // expected-error @+1 {{where_c2: operand shapes [3], [2], [2] do not broadcast}}
  %0 = nn.where %c, %a, %b : (tensor<3xi1>, tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return
}

// -----

// where_c3
func.func @where_c3(%c: tensor<4x1xi1>, %a: tensor<2xf32>, %b: tensor<f32>) {
  // expected-error @+1 {{where_c3: result type 'tensor<2xf32>' differs from the broadcast type 'tensor<4x2xf32>'}}
  %0 = nn.where %c, %a, %b : (tensor<4x1xi1>, tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
  return
}

// -----

// cast_c1
func.func @cast_c1(%a: tensor<2x3xi64>) {
  // expected-error @+1 {{cast_c1: result shape [3, 2] differs from input shape [2, 3]}}
  %0 = nn.cast %a : tensor<2x3xi64> -> tensor<3x2xf32>
  return
}

// -----

// cast_c2
func.func @cast_c2(%a: tensor<2x3xi64>) {
  // expected-error @+1 {{cast_c2: saturate converts a float to a float, not 'i64' to 'f16'}}
  %0 = nn.cast %a {saturate} : tensor<2x3xi64> -> tensor<2x3xf16>
  return
}

// -----

// reduce_c1
func.func @reduce_c1(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{reduce_c1: axis 2 is out of range [0, 2)}}
  %0 = nn.reduce sum %a axes = [2] : tensor<2x3xf32> -> tensor<2xf32>
  return
}

// -----

// reduce_c1 (order)
func.func @reduce_c1_order(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{reduce_c1: axes must be strictly increasing}}
  %0 = nn.reduce sum %a axes = [1, 0] : tensor<2x3xf32> -> tensor<f32>
  return
}

// -----

// reduce_c1 (empty)
func.func @reduce_c1_empty(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{reduce_c1: axes are empty}}
  %0 = nn.reduce sum %a axes = [] : tensor<2x3xf32> -> tensor<2x3xf32>
  return
}

// -----

// reduce_c2
func.func @reduce_c2(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{reduce_c2: result type 'tensor<2xf32>' differs from the expected 'tensor<2x1xf32>'}}
  %0 = nn.reduce max %a axes = [1] keepdims : tensor<2x3xf32> -> tensor<2xf32>
  return
}

// -----

// softmax_c1
func.func @softmax_c1(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{softmax_c1: axis 2 is out of range [0, 2)}}
  %0 = nn.softmax %a axis = 2 : tensor<2x3xf32>
  return
}

// -----

// log_softmax_c1
func.func @log_softmax_c1(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{log_softmax_c1: axis -1 is out of range [0, 2)}}
  %0 = nn.log_softmax %a axis = -1 : tensor<2x3xf32>
  return
}

// -----

// cumsum_c1
func.func @cumsum_c1(%a: tensor<2x3xi64>) {
  // expected-error @+1 {{cumsum_c1: axis 2 is out of range [0, 2)}}
  %0 = nn.cumsum %a axis = 2 : tensor<2x3xi64>
  return
}

// -----

// cumsum_c1 (negative: the importer normalizes ONNX's negative axes)
func.func @cumsum_c1_negative(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{cumsum_c1: axis -1 is out of range [0, 2)}}
  %0 = nn.cumsum %a axis = -1 : tensor<2x3xf32>
  return
}

// -----

// cumsum element types: booleans have no sum.
func.func @cumsum_bool(%a: tensor<2x3xi1>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 32-bit float or 16-bit float or bfloat16 type or 32-bit signless integer or 64-bit signless integer values}}
  %0 = nn.cumsum %a axis = 0 : tensor<2x3xi1>
  return
}

// -----

// sin of integers: the float unary ops take float tensors only.
func.func @sin_int(%a: tensor<4xi64>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of}}
  %0 = nn.sin %a : tensor<4xi64>
  return
}

// -----

// layer_norm_c1
func.func @layer_norm_c1(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{layer_norm_c1: axis 2 is out of range [0, 2)}}
  %0 = nn.layer_norm %x axis = 2 epsilon = 1.0e-05 : tensor<2x8xf32>
  return
}

// -----

// layer_norm_c2
func.func @layer_norm_c2(%x: tensor<2x8xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{layer_norm_c2: parameter shape [4] differs from the normalized shape [8]}}
  %0 = nn.layer_norm %x scale(%g : tensor<4xf32>) bias(%g : tensor<4xf32>) axis = 1 epsilon = 1.0e-05 : tensor<2x8xf32>
  return
}

// -----

// layer_norm_c3
func.func @layer_norm_c3(%x: tensor<2x8xf32>, %g: tensor<8xf16>) {
  // expected-error @+1 {{layer_norm_c3: parameter element type 'f16' differs from the input's 'f32'}}
  %0 = nn.layer_norm %x scale(%g : tensor<8xf16>) bias(%g : tensor<8xf16>) axis = 1 epsilon = 1.0e-05 : tensor<2x8xf32>
  return
}

// -----

// layer_norm_c4
func.func @layer_norm_c4(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{layer_norm_c4: epsilon must be positive, got 0}}
  %0 = nn.layer_norm %x axis = 1 epsilon = 0.0 : tensor<2x8xf32>
  return
}

// -----

// rms_norm_c1
func.func @rms_norm_c1(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{rms_norm_c1: axis 2 is out of range [0, 2)}}
  %0 = nn.rms_norm %x axis = 2 epsilon = 1.0e-05 : tensor<2x8xf32>
  return
}

// -----

// rms_norm_c2
func.func @rms_norm_c2(%x: tensor<2x8xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{rms_norm_c2: parameter shape [4] differs from the normalized shape [8]}}
  %0 = nn.rms_norm %x scale(%g : tensor<4xf32>) axis = 1 epsilon = 1.0e-05 : tensor<2x8xf32>
  return
}

// -----

// rms_norm_c3
func.func @rms_norm_c3(%x: tensor<2x8xf32>, %g: tensor<8xf16>) {
  // expected-error @+1 {{rms_norm_c3: parameter element type 'f16' differs from the input's 'f32'}}
  %0 = nn.rms_norm %x scale(%g : tensor<8xf16>) axis = 1 epsilon = 1.0e-05 : tensor<2x8xf32>
  return
}

// -----

// rms_norm_c4
func.func @rms_norm_c4(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{rms_norm_c4: epsilon must be positive, got 0}}
  %0 = nn.rms_norm %x axis = 1 epsilon = 0.0 : tensor<2x8xf32>
  return
}

// -----

// matmul_c1
func.func @matmul_c1(%a: tensor<8xf32>, %b: tensor<8x4xf32>) {
  // expected-error @+1 {{matmul_c1: operands must have rank 2 or more, got 1 and 2}}
  %0 = nn.matmul %a, %b : (tensor<8xf32>, tensor<8x4xf32>) -> tensor<4xf32>
  return
}

// -----

// matmul_c2
func.func @matmul_c2(%a: tensor<2x8xf32>, %b: tensor<6x4xf32>) {
  // expected-error @+1 {{matmul_c2: contracted sizes differ: lhs has 8, rhs has 6}}
  %0 = nn.matmul %a, %b : (tensor<2x8xf32>, tensor<6x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

// matmul_c3
func.func @matmul_c3(%a: tensor<3x2x8xf32>, %b: tensor<5x8x4xf32>) {
  // expected-error @+1 {{matmul_c3: batch dimensions [3] and [5] do not broadcast}}
  %0 = nn.matmul %a, %b : (tensor<3x2x8xf32>, tensor<5x8x4xf32>) -> tensor<3x2x4xf32>
  return
}

// -----

// matmul_c4
func.func @matmul_c4(%a: tensor<2x8xf32>, %b: tensor<8x4xf32>, %c: tensor<8xf32>) {
  // expected-error @+1 {{matmul_c4: bias shape [8] must be [4]}}
  %0 = nn.matmul %a, %b bias %c : (tensor<2x8xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x4xf32>
  return
}

// -----

// matmul_c5
func.func @matmul_c5(%a: tensor<2x8xf32>, %b: tensor<8x4xbf16>) {
  // expected-error @+1 {{matmul_c5: operand element types differ ('f32' vs 'bf16')}}
  %0 = nn.matmul %a, %b : (tensor<2x8xf32>, tensor<8x4xbf16>) -> tensor<2x4xf32>
  return
}

// -----

// matmul_c6
func.func @matmul_c6(%a: tensor<3x2x8xf32>, %b: tensor<8x4xf32>) {
  // expected-error @+1 {{matmul_c6: result type 'tensor<2x4xf32>' differs from the expected 'tensor<3x2x4xf32>'}}
  %0 = nn.matmul %a, %b : (tensor<3x2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  return
}

// dequantize_c1
func.func @dequantize_c1(%q: tensor<8x2x8xi8>, %s: tensor<8x2xf32>) {
  // expected-error @+1 {{dequantize_c1: bits must be 4 or 8 and block_size a power of two of at least 16, got 3 and 16}}
  %0 = nn.dequantize %q, %s {bits = 3 : i64, block_size = 16 : i64} : (tensor<8x2x8xi8>, tensor<8x2xf32>) -> tensor<32x8xf32>
  return
}

// -----

// dequantize_c2
func.func @dequantize_c2(%q: tensor<8x2x16xi8>, %s: tensor<8x2xf32>) {
  // expected-error @+1 {{dequantize_c2: packed must be i8 [8, 2, 8] for a [32, 8] weight, got 'tensor<8x2x16xi8>'}}
  %0 = nn.dequantize %q, %s {bits = 4 : i64, block_size = 16 : i64} : (tensor<8x2x16xi8>, tensor<8x2xf32>) -> tensor<32x8xf32>
  return
}

// -----

// dequantize_c3
func.func @dequantize_c3(%q: tensor<8x2x8xi8>, %s: tensor<8x2xf16>) {
  // expected-error @+1 {{dequantize_c3: scales must be [8, 2] of 'f32', got 'tensor<8x2xf16>'}}
  %0 = nn.dequantize %q, %s {bits = 4 : i64, block_size = 16 : i64} : (tensor<8x2x8xi8>, tensor<8x2xf16>) -> tensor<32x8xf32>
  return
}

// -----

// dequantize_c4
func.func @dequantize_c4(%q: tensor<8x2x8xi8>, %s: tensor<8x2xf32>, %z: tensor<8x2xi8>) {
  // expected-error @+1 {{dequantize_c4: zero_points must be i8 [8, 1], got 'tensor<8x2xi8>'}}
  %0 = nn.dequantize %q, %s zero_points %z {bits = 4 : i64, block_size = 16 : i64} : (tensor<8x2x8xi8>, tensor<8x2xf32>, tensor<8x2xi8>) -> tensor<32x8xf32>
  return
}

// -----

// dequantize_c5
func.func @dequantize_c5(%q: tensor<8x2x8xi8>, %s: tensor<8x2xf32>) {
  // expected-error @+1 {{dequantize_c5: result must be [B..., k, n], got 'tensor<32xf32>'}}
  %0 = nn.dequantize %q, %s {bits = 4 : i64, block_size = 16 : i64} : (tensor<8x2x8xi8>, tensor<8x2xf32>) -> tensor<32xf32>
  return
}

// -----

// dequantize_c2: batch dimensions lead every operand, the result's.
func.func @dequantize_c2_batch(%q: tensor<4x8x2x8xi8>, %s: tensor<4x8x2xf32>) {
  // expected-error @+1 {{dequantize_c2: packed must be i8 [3, 8, 2, 8] for a [32, 8] weight, got 'tensor<4x8x2x8xi8>'}}
  %0 = nn.dequantize %q, %s {bits = 4 : i64, block_size = 16 : i64} : (tensor<4x8x2x8xi8>, tensor<4x8x2xf32>) -> tensor<3x32x8xf32>
  return
}

// -----

// dequantize_c3: batched scales.
func.func @dequantize_c3_batch(%q: tensor<4x8x2x8xi8>, %s: tensor<8x2xf32>) {
  // expected-error @+1 {{dequantize_c3: scales must be [4, 8, 2] of 'f32', got 'tensor<8x2xf32>'}}
  %0 = nn.dequantize %q, %s {bits = 4 : i64, block_size = 16 : i64} : (tensor<4x8x2x8xi8>, tensor<8x2xf32>) -> tensor<4x32x8xf32>
  return
}

// -----

// quantized_matmul_c1
func.func @quantized_matmul_c1(%x: tensor<2x32xf32>, %q: tensor<8x2x8xi8>, %s: tensor<8x2xf32>) {
  // expected-error @+1 {{quantized_matmul_c1: lhs 'tensor<2x32xf32>' must have rank 2 or more and the result be 'tensor<2x8xf32>', got 'tensor<2x9xf32>'}}
  %0 = nn.quantized_matmul %x, %q, %s {bits = 4 : i64, block_size = 16 : i64} : (tensor<2x32xf32>, tensor<8x2x8xi8>, tensor<8x2xf32>) -> tensor<2x9xf32>
  return
}

// -----

// quantized_matmul_c2
func.func @quantized_matmul_c2(%x: tensor<2x48xf32>, %q: tensor<8x2x8xi8>, %s: tensor<8x2xf32>) {
  // expected-error @+1 {{quantized_matmul_c2: packed must be i8 [8, 3, 8] for a [48, 8] weight, got 'tensor<8x2x8xi8>'}}
  %0 = nn.quantized_matmul %x, %q, %s {bits = 4 : i64, block_size = 16 : i64} : (tensor<2x48xf32>, tensor<8x2x8xi8>, tensor<8x2xf32>) -> tensor<2x8xf32>
  return
}

// -----

// quantized_matmul_c3
func.func @quantized_matmul_c3(%x: tensor<2x32xf32>, %q: tensor<8x2x8xi8>, %s: tensor<8x2xf32>, %b: tensor<9xf32>) {
  // expected-error @+1 {{quantized_matmul_c3: bias must be 'tensor<8xf32>', got 'tensor<9xf32>'}}
  %0 = nn.quantized_matmul %x, %q, %s bias %b {bits = 4 : i64, block_size = 16 : i64} : (tensor<2x32xf32>, tensor<8x2x8xi8>, tensor<8x2xf32>, tensor<9xf32>) -> tensor<2x8xf32>
  return
}

// -----


// attention_c1
func.func @attention_c1(%q: tensor<2x8x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>) {
  // expected-error @+1 {{attention_c1: query, key and value must have rank 4}}
  %0 = nn.attention %q, %k, %v : (tensor<2x8x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// attention_c2
func.func @attention_c2(%q: tensor<2x8x4x16xf32>, %k: tensor<3x2x4x16xf32>, %v: tensor<3x2x4x16xf32>) {
  // expected-error @+1 {{attention_c2: batch sizes differ (2, 3, 3)}}
  %0 = nn.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<3x2x4x16xf32>, tensor<3x2x4x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// attention_c3
func.func @attention_c3(%q: tensor<2x8x4x16xf32>, %k: tensor<2x3x4x16xf32>, %v: tensor<2x3x4x16xf32>) {
  // expected-error @+1 {{attention_c3: key/value heads (3, 3) must be equal and divide the 8 query heads}}
  %0 = nn.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x3x4x16xf32>, tensor<2x3x4x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// attention_c4
func.func @attention_c4(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x32xf32>, %v: tensor<2x2x4x16xf32>) {
  // expected-error @+1 {{attention_c4: query head size 16 differs from key head size 32}}
  %0 = nn.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x2x4x32xf32>, tensor<2x2x4x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// attention_c5
func.func @attention_c5(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x6x16xf32>) {
  // expected-error @+1 {{attention_c5: key sequence 4 differs from value sequence 6}}
  %0 = nn.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x6x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// attention_c6
func.func @attention_c6(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %m: tensor<2x1x4x5xi1>) {
  // expected-error @+1 {{attention_c6: mask shape [2, 1, 4, 5] does not broadcast to the scores' shape [2, 8, 4, 4]}}
  %0 = nn.attention %q, %k, %v mask %m : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x1x4x5xi1>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// attention_c7
func.func @attention_c7(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %m: tensor<4x4xi64>) {
  // expected-error @+1 {{attention_c7: mask element type 'i64' must be i1 or 'f32'}}
  %0 = nn.attention %q, %k, %v mask %m : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<4x4xi64>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// attention_c8
func.func @attention_c8(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xbf16>, %v: tensor<2x2x4x16xbf16>) {
  // expected-error @+1 {{attention_c8: query, key and value element types differ}}
  %0 = nn.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// attention_c9
func.func @attention_c9(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x8xf32>) {
  // expected-error @+1 {{attention_c9: result type 'tensor<2x8x4x16xf32>' differs from the expected 'tensor<2x8x4x8xf32>'}}
  %0 = nn.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x8xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// attention_c10
func.func @attention_c10(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>) {
  // expected-error @+1 {{attention_c10: scale must be positive, got -1}}
  %0 = nn.attention %q, %k, %v {scale = -1.0 : f32} : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>) -> tensor<2x8x4x16xf32>
  return
}

// -----

// attention_grad_c1
func.func @attention_grad_c1(%q: tensor<2x8x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %o: tensor<2x8x4x16xf32>, %d: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{attention_grad_c1: query, key and value must have rank 4}}
  %0:3 = nn.attention_grad %q, %k, %v out %o dout %d : (tensor<2x8x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>)
  return
}

// -----

// attention_grad_c2
func.func @attention_grad_c2(%q: tensor<2x8x4x16xf32>, %k: tensor<3x2x4x16xf32>, %v: tensor<3x2x4x16xf32>, %o: tensor<2x8x4x16xf32>, %d: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{attention_grad_c2: batch sizes differ (2, 3, 3)}}
  %0:3 = nn.attention_grad %q, %k, %v out %o dout %d : (tensor<2x8x4x16xf32>, tensor<3x2x4x16xf32>, tensor<3x2x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<3x2x4x16xf32>, tensor<3x2x4x16xf32>)
  return
}

// -----

// attention_grad_c3
func.func @attention_grad_c3(%q: tensor<2x8x4x16xf32>, %k: tensor<2x3x4x16xf32>, %v: tensor<2x3x4x16xf32>, %o: tensor<2x8x4x16xf32>, %d: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{attention_grad_c3: key/value heads (3, 3) must be equal and divide the 8 query heads}}
  %0:3 = nn.attention_grad %q, %k, %v out %o dout %d : (tensor<2x8x4x16xf32>, tensor<2x3x4x16xf32>, tensor<2x3x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x3x4x16xf32>, tensor<2x3x4x16xf32>)
  return
}

// -----

// attention_grad_c4
func.func @attention_grad_c4(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x32xf32>, %v: tensor<2x2x4x16xf32>, %o: tensor<2x8x4x16xf32>, %d: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{attention_grad_c4: query head size 16 differs from key head size 32}}
  %0:3 = nn.attention_grad %q, %k, %v out %o dout %d : (tensor<2x8x4x16xf32>, tensor<2x2x4x32xf32>, tensor<2x2x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x2x4x32xf32>, tensor<2x2x4x16xf32>)
  return
}

// -----

// attention_grad_c5
func.func @attention_grad_c5(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x6x16xf32>, %o: tensor<2x8x4x16xf32>, %d: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{attention_grad_c5: key sequence 4 differs from value sequence 6}}
  %0:3 = nn.attention_grad %q, %k, %v out %o dout %d : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x6x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x6x16xf32>)
  return
}

// -----

// attention_grad_c6
func.func @attention_grad_c6(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %o: tensor<2x8x4x16xf32>, %d: tensor<2x8x4x16xf32>, %m: tensor<2x1x4x5xi1>) {
  // expected-error @+1 {{attention_grad_c6: mask shape [2, 1, 4, 5] does not broadcast to the scores' shape [2, 8, 4, 4]}}
  %0:3 = nn.attention_grad %q, %k, %v mask %m out %o dout %d : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x1x4x5xi1>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>)
  return
}

// -----

// attention_grad_c7
func.func @attention_grad_c7(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %o: tensor<2x8x4x16xf32>, %d: tensor<2x8x4x16xf32>, %m: tensor<4x4xi64>) {
  // expected-error @+1 {{attention_grad_c7: mask element type 'i64' must be i1 or 'f32'}}
  %0:3 = nn.attention_grad %q, %k, %v mask %m out %o dout %d : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<4x4xi64>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>)
  return
}

// -----

// attention_grad_c8
func.func @attention_grad_c8(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xbf16>, %v: tensor<2x2x4x16xbf16>, %o: tensor<2x8x4x16xf32>, %d: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{attention_grad_c8: query, key and value element types differ}}
  %0:3 = nn.attention_grad %q, %k, %v out %o dout %d : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>)
  return
}

// -----

// attention_grad_c9
func.func @attention_grad_c9(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %o: tensor<2x8x4x16xf32>, %d: tensor<2x8x4x8xf32>) {
  // expected-error @+1 {{attention_grad_c9: dout type 'tensor<2x8x4x8xf32>' differs from the expected 'tensor<2x8x4x16xf32>'}}
  %0:3 = nn.attention_grad %q, %k, %v out %o dout %d : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x8xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>)
  return
}

// -----

// attention_grad_c10
func.func @attention_grad_c10(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %o: tensor<2x8x4x16xf32>, %d: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{attention_grad_c10: scale must be positive, got 0}}
  %0:3 = nn.attention_grad %q, %k, %v out %o dout %d {scale = 0.0 : f32} : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>)
  return
}

// -----

// attention_grad_c11
func.func @attention_grad_c11(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %o: tensor<2x8x4x16xf32>, %d: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{attention_grad_c11: dk type 'tensor<2x2x4x16xbf16>' differs from the expected 'tensor<2x2x4x16xf32>'}}
  %0:3 = nn.attention_grad %q, %k, %v out %o dout %d : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xf32>)
  return
}

// -----

// attention_partial_c1
func.func @attention_partial_c1(%q: tensor<2x8x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>) {
  // expected-error @+1 {{attention_partial_c1: query, key and value must have rank 4}}
  %0, %1, %2 = nn.attention_partial %q, %k, %v : (tensor<2x8x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  return
}

// -----

// attention_partial_c2
func.func @attention_partial_c2(%q: tensor<2x8x4x16xf32>, %k: tensor<3x2x4x16xf32>, %v: tensor<3x2x4x16xf32>) {
  // expected-error @+1 {{attention_partial_c2: batch sizes differ (2, 3, 3)}}
  %0, %1, %2 = nn.attention_partial %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<3x2x4x16xf32>, tensor<3x2x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  return
}

// -----

// attention_partial_c3
func.func @attention_partial_c3(%q: tensor<2x8x4x16xf32>, %k: tensor<2x3x4x16xf32>, %v: tensor<2x3x4x16xf32>) {
  // expected-error @+1 {{attention_partial_c3: key/value heads (3, 3) must be equal and divide the 8 query heads}}
  %0, %1, %2 = nn.attention_partial %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x3x4x16xf32>, tensor<2x3x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  return
}

// -----

// attention_partial_c4
func.func @attention_partial_c4(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x32xf32>, %v: tensor<2x2x4x16xf32>) {
  // expected-error @+1 {{attention_partial_c4: query head size 16 differs from key head size 32}}
  %0, %1, %2 = nn.attention_partial %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x2x4x32xf32>, tensor<2x2x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  return
}

// -----

// attention_partial_c5
func.func @attention_partial_c5(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x6x16xf32>) {
  // expected-error @+1 {{attention_partial_c5: key sequence 4 differs from value sequence 6}}
  %0, %1, %2 = nn.attention_partial %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x6x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  return
}

// -----

// attention_partial_c6
func.func @attention_partial_c6(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %m: tensor<2x1x4x5xi1>) {
  // expected-error @+1 {{attention_partial_c6: mask shape [2, 1, 4, 5] does not broadcast to the scores' shape [2, 8, 4, 4]}}
  %0, %1, %2 = nn.attention_partial %q, %k, %v mask %m : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x1x4x5xi1>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  return
}

// -----

// attention_partial_c7
func.func @attention_partial_c7(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %m: tensor<4x4xi64>) {
  // expected-error @+1 {{attention_partial_c7: mask element type 'i64' must be i1 or 'f32'}}
  %0, %1, %2 = nn.attention_partial %q, %k, %v mask %m : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<4x4xi64>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  return
}

// -----

// attention_partial_c8
func.func @attention_partial_c8(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xbf16>, %v: tensor<2x2x4x16xbf16>) {
  // expected-error @+1 {{attention_partial_c8: query, key and value element types differ}}
  %0, %1, %2 = nn.attention_partial %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  return
}

// -----

// attention_partial_c9
func.func @attention_partial_c9(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x8xf32>) {
  // expected-error @+1 {{attention_partial_c9: result type 'tensor<2x8x4x16xf32>' differs from the expected 'tensor<2x8x4x8xf32>'}}
  %0, %1, %2 = nn.attention_partial %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x8xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  return
}

// -----

// attention_partial_c10
func.func @attention_partial_c10(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>) {
  // expected-error @+1 {{attention_partial_c10: scale must be positive, got -1}}
  %0, %1, %2 = nn.attention_partial %q, %k, %v {scale = -1.0 : f32} : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  return
}

// -----

// attention_partial_c11
func.func @attention_partial_c11(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %qp: tensor<4xi64>, %kp: tensor<5xi64>) {
  // expected-error @+1 {{attention_partial_c11: positions must be 'tensor<4xi64>' and 'tensor<4xi64>', got 'tensor<4xi64>' and 'tensor<5xi64>'}}
  %0, %1, %2 = nn.attention_partial %q, %k, %v positions(%qp, %kp) : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>, tensor<4xi64>, tensor<5xi64>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  return
}

// -----

// attention_partial_c12
func.func @attention_partial_c12(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>) {
  // expected-error @+1 {{attention_partial_c12: row_max type 'tensor<2x8x4xf16>' differs from the expected 'tensor<2x8x4xf32>'}}
  %0, %1, %2 = nn.attention_partial %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf16>, tensor<2x8x4xf32>)
  return
}

// -----

// attention_partial_c12
func.func @attention_partial_c12_sum(%q: tensor<2x8x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>) {
  // expected-error @+1 {{attention_partial_c12: row_sum type 'tensor<2x8x5xf32>' differs from the expected 'tensor<2x8x4xf32>'}}
  %0, %1, %2 = nn.attention_partial %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4xf32>, tensor<2x8x5xf32>)
  return
}

// -----

// rope_c1
func.func @rope_c1(%x: tensor<2x8x16xf32>, %c: tensor<1x8x8xf32>) {
  // expected-error @+1 {{rope_c1: input must have rank 4 [batch, heads, sequence, head size], got rank 3}}
  %0 = nn.rope %x, %c, %c : (tensor<2x8x16xf32>, tensor<1x8x8xf32>, tensor<1x8x8xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

// rope_c2
func.func @rope_c2(%x: tensor<2x4x8x16xf32>, %c: tensor<1x4x8xf32>) {
  // expected-error @+1 {{rope_c2: cos 'tensor<1x4x8xf32>' and sin 'tensor<1x4x8xf32>' must both be [2 or 1, 8, r/2] of 'f32'}}
  %0 = nn.rope %x, %c, %c : (tensor<2x4x8x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> tensor<2x4x8x16xf32>
  return
}

// -----

// rope_c3
func.func @rope_c3(%x: tensor<2x4x8x16xf32>, %c: tensor<1x8x10xf32>) {
  // expected-error @+1 {{rope_c3: 20 rotary features exceed the head size 16}}
  %0 = nn.rope %x, %c, %c : (tensor<2x4x8x16xf32>, tensor<1x8x10xf32>, tensor<1x8x10xf32>) -> tensor<2x4x8x16xf32>
  return
}

// -----

// moe_c1
func.func @moe_c1(%x: tensor<4x8xf32>, %ids: tensor<3x2xi64>, %w: tensor<3x2xf32>, %fc1: tensor<3x16x8xf32>, %fc2: tensor<3x8x16xf32>) {
  // expected-error @+1 {{moe_c1: input 'tensor<4x8xf32>' must be [tokens, hidden], expert_ids 'tensor<3x2xi64>' and routing_weights 'tensor<3x2xf32>' [tokens, k] (k >= 1), the weights and the result of the input's type}}
  %0 = nn.moe silu %x, %ids, %w experts(%fc1, %fc2) : (tensor<4x8xf32>, tensor<3x2xi64>, tensor<3x2xf32>, tensor<3x16x8xf32>, tensor<3x8x16xf32>) -> tensor<4x8xf32>
  return
}

// -----

// moe_c2
func.func @moe_c2(%x: tensor<4x8xf32>, %ids: tensor<4x2xi64>, %w: tensor<4x2xf32>, %fc1: tensor<3x16x8xf32>, %fc2: tensor<3x8x16xf32>) {
  // expected-error @+1 {{moe_c2: fc1 'tensor<3x16x8xf32>' and fc2 'tensor<3x8x16xf32>' must be [E, F1, 8] and [E, 8, F] of 'f32', with F1 = 2F (a fused swiglu)}}
  %0 = nn.moe swiglu %x, %ids, %w experts(%fc1, %fc2) : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<3x16x8xf32>, tensor<3x8x16xf32>) -> tensor<4x8xf32>
  return
}

// -----

// moe_c3
func.func @moe_c3(%x: tensor<4x8xf32>, %ids: tensor<4x2xi64>, %w: tensor<4x2xf32>, %fc1: tensor<3x16x8xf32>, %fc2: tensor<3x8x16xf32>) {
  // expected-error @+1 {{moe_c3: alpha, beta and limit are a swiglu's, not silu's}}
  %0 = nn.moe silu %x, %ids, %w experts(%fc1, %fc2) {alpha = 2.0 : f32} : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<3x16x8xf32>, tensor<3x8x16xf32>) -> tensor<4x8xf32>
  return
}

// -----

// moe_c3
func.func @moe_c3_fc3(%x: tensor<4x8xf32>, %ids: tensor<4x2xi64>, %w: tensor<4x2xf32>, %fc1: tensor<3x16x8xf32>, %fc2: tensor<3x8x16xf32>) {
  // expected-error @+1 {{moe_c3: fc3 is the up projection of a swiglu, not of relu}}
  %0 = nn.moe relu %x, %ids, %w experts(%fc1, %fc2, %fc1) : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<3x16x8xf32>, tensor<3x8x16xf32>, tensor<3x16x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// moe_c3
func.func @moe_c3_limit(%x: tensor<4x8xf32>, %ids: tensor<4x2xi64>, %w: tensor<4x2xf32>, %fc1: tensor<3x32x8xf32>, %fc2: tensor<3x8x16xf32>) {
  // expected-error @+1 {{moe_c3: limit must be positive}}
  %0 = nn.moe swiglu %x, %ids, %w experts(%fc1, %fc2) {limit = 0.0 : f32} : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<3x32x8xf32>, tensor<3x8x16xf32>) -> tensor<4x8xf32>
  return
}

// -----

// moe_c4
func.func @moe_c4(%x: tensor<4x8xf32>, %ids: tensor<4x2xi64>, %w: tensor<4x2xf32>, %fc1: tensor<3x16x8xf32>, %fc2: tensor<3x8x16xf32>, %b: tensor<3x8xf32>) {
  // expected-error @+1 {{moe_c4: bias 'tensor<3x8xf32>' must be 'tensor<3x16xf32>'}}
  %0 = nn.moe relu %x, %ids, %w experts(%fc1, %fc2) fc1_bias %b : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<3x16x8xf32>, tensor<3x8x16xf32>, tensor<3x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// embedding_c1
func.func @embedding_c1(%t: tensor<100xf32>, %i: tensor<2xi64>) {
  // expected-error @+1 {{embedding_c1: table must have rank 2, got 1}}
  %0 = nn.embedding %t, %i : (tensor<100xf32>, tensor<2xi64>) -> tensor<2xf32>
  return
}

// -----

// embedding_c2
func.func @embedding_c2(%t: tensor<100x16xf32>, %i: tensor<2xi64>) {
  // expected-error @+1 {{embedding_c2: result type 'tensor<2x8xf32>' differs from the expected 'tensor<2x16xf32>'}}
  %0 = nn.embedding %t, %i : (tensor<100x16xf32>, tensor<2xi64>) -> tensor<2x8xf32>
  return
}

// -----

// gather_c1
func.func @gather_c1(%d: tensor<4xi64>, %i: tensor<i64>) {
  // expected-error @+1 {{gather_c1: axis 1 is out of range [0, 1)}}
  %0 = nn.gather %d, %i axis = 1 : (tensor<4xi64>, tensor<i64>) -> tensor<i64>
  return
}

// -----

// gather_c2
func.func @gather_c2(%d: tensor<4x3xf32>, %i: tensor<2xi64>) {
  // expected-error @+1 {{gather_c2: result type 'tensor<2xf32>' differs from the expected 'tensor<2x3xf32>'}}
  %0 = nn.gather %d, %i axis = 0 : (tensor<4x3xf32>, tensor<2xi64>) -> tensor<2xf32>
  return
}

// -----

// reshape_c1
func.func @reshape_c1(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{reshape_c1: cannot reshape 'tensor<2x3xf32>' (6 elements) to 'tensor<4xf32>' (4 elements)}}
  %0 = nn.reshape %x : tensor<2x3xf32> -> tensor<4xf32>
  return
}

// -----

// transpose_c1
func.func @transpose_c1(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{transpose_c1: [0, 0] is not a permutation of [0, 2)}}
  %0 = nn.transpose %x permutation = [0, 0] : tensor<2x3xf32> -> tensor<2x2xf32>
  return
}

// -----

// transpose_c2
func.func @transpose_c2(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{transpose_c2: result type 'tensor<2x3xf32>' differs from the expected 'tensor<3x2xf32>'}}
  %0 = nn.transpose %x permutation = [1, 0] : tensor<2x3xf32> -> tensor<2x3xf32>
  return
}

// -----

// broadcast_to_c1
func.func @broadcast_to_c1(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{broadcast_to_c1: cannot broadcast 'tensor<2x3xf32>' to 'tensor<3xf32>'}}
  %0 = nn.broadcast_to %x : tensor<2x3xf32> -> tensor<3xf32>
  return
}

// -----

// broadcast_to_c2
func.func @broadcast_to_c2(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{broadcast_to_c2: input dimension 1 has size 3, which is neither 1 nor the result's 4}}
  %0 = nn.broadcast_to %x : tensor<2x3xf32> -> tensor<5x2x4xf32>
  return
}

// -----

// slice_c1
func.func @slice_c1(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{slice_c1: start, limit and stride need 2 entries each}}
  %0 = nn.slice %x start = [0] limit = [4, 6] stride = [1, 1] : tensor<4x6xf32> -> tensor<4x6xf32>
  return
}

// -----

// slice_c2
func.func @slice_c2(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{slice_c2: dimension 1 bounds [2, 7) are not within [0, 6]}}
  %0 = nn.slice %x start = [0, 2] limit = [4, 7] stride = [1, 1] : tensor<4x6xf32> -> tensor<4x5xf32>
  return
}

// -----

// slice_c3
func.func @slice_c3(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{slice_c3: stride 0 of dimension 0 is below 1}}
  %0 = nn.slice %x start = [0, 0] limit = [4, 6] stride = [0, 1] : tensor<4x6xf32> -> tensor<4x6xf32>
  return
}

// -----

// slice_c4
func.func @slice_c4(%x: tensor<4x6xf32>) {
  // expected-error @+1 {{slice_c4: result type 'tensor<4x2xf32>' differs from the expected 'tensor<4x3xf32>'}}
  %0 = nn.slice %x start = [0, 0] limit = [4, 6] stride = [1, 2] : tensor<4x6xf32> -> tensor<4x2xf32>
  return
}

// -----

// concat_c1
func.func @concat_c1() {
  // expected-error @+1 {{concat_c1: needs at least one operand}}
  %0 = "nn.concat"() <{axis = 0 : i64}> : () -> tensor<2xf32>
  return
}

// -----

// concat_c2
func.func @concat_c2(%a: tensor<2xf32>) {
  // expected-error @+1 {{concat_c2: axis 1 is out of range [0, 1)}}
  %0 = nn.concat %a, %a axis = 1 : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
  return
}

// -----

// concat_c3
func.func @concat_c3(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error @+1 {{concat_c3: operand 'tensor<2x4xf32>' is incompatible with 'tensor<2x3xf32>' along axis 0}}
  %0 = nn.concat %a, %b axis = 0 : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  return
}

// -----

// concat_c4
func.func @concat_c4(%a: tensor<2x3xf32>) {
  // expected-error @+1 {{concat_c4: result type 'tensor<4x3xf32>' differs from the expected 'tensor<2x6xf32>'}}
  %0 = nn.concat %a, %a axis = 1 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

// split_c1
func.func @split_c1(%x: tensor<4xf32>) {
  // expected-error @+1 {{split_c1: needs at least one result}}
  "nn.split"(%x) <{axis = 0 : i64}> : (tensor<4xf32>) -> ()
  return
}

// -----

// split_c2
func.func @split_c2(%x: tensor<4xf32>) {
  // expected-error @+1 {{split_c2: axis 1 is out of range [0, 1)}}
  %0:2 = nn.split %x axis = 1 : tensor<4xf32> -> tensor<2xf32>, tensor<2xf32>
  return
}

// -----

// split_c3
func.func @split_c3(%x: tensor<4x3xf32>) {
  // expected-error @+1 {{split_c3: result 'tensor<2x2xf32>' is incompatible with the input 'tensor<4x3xf32>' along axis 0}}
  %0:2 = nn.split %x axis = 0 : tensor<4x3xf32> -> tensor<2x3xf32>, tensor<2x2xf32>
  return
}

// -----

// split_c4
func.func @split_c4(%x: tensor<4xf32>) {
  // expected-error @+1 {{split_c4: result sizes along axis 0 sum to 5, not 4}}
  %0:2 = nn.split %x axis = 0 : tensor<4xf32> -> tensor<2xf32>, tensor<3xf32>
  return
}

// -----

func.func @view_c1() -> tensor<2xf32> {
  // expected-error @+1 {{view_c1: a view needs a name}}
  %0 = nn.constant #nn.view<"", dense_resource<w> : tensor<2xf32>, [*]> : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @view_c2() -> tensor<2xf32> {
  // expected-error @+1 {{view_c2: a view of rank 1 of a source of rank 2 needs one list of runs per dimension, not 1}}
  %0 = nn.constant #nn.view<"v", dense_resource<w> : tensor<2x1xf32>, [*]> : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @view_c3() -> tensor<2xf32> {
  // expected-error @+1 {{view_c3: a view cannot convert 'i64' to 'f32'}}
  %0 = nn.constant #nn.view<"v", dense_resource<w> : tensor<2xi64>, [*]> : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @view_c4_outside() -> tensor<2xf32> {
  // expected-error @+1 {{view_c4: run 3:2 of dimension 0 is not inside the source's 4}}
  %0 = nn.constant #nn.view<"v", dense_resource<w> : tensor<4xf32>, [[3:2]]> : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @view_c4_count() -> tensor<2xf32> {
  // expected-error @+1 {{view_c4: the runs of dimension 0 list 3 indices for a dimension of size 2}}
  %0 = nn.constant #nn.view<"v", dense_resource<w> : tensor<4xf32>, [[0:1, 2:2]]> : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @view_c4_empty_zero_run() -> tensor<2xf32> {
  // expected-error @+1 {{view_c4: a zero run of dimension 0 has length 0}}
  %0 = nn.constant #nn.view<"v", dense_resource<w> : tensor<4xf32>, [[0:2, zero:0]]> : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @view_whole() -> tensor<2xf32> {
  // expected-error @+1 {{view_c4: the runs of dimension 0 list 4 indices for a dimension of size 2}}
  %0 = nn.constant #nn.view<"v", dense_resource<w> : tensor<4xf32>, [*]> : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// kv_cache_write_c1
func.func @kv_cache_write_c1(%c: tensor<1x2x8x4xf32>, %k: tensor<1x2x1x4xf32>, %p: tensor<1xi64>) {
  // expected-error @+1 {{kv_cache_write_c1}}
  %0 = nn.kv_cache_write %c, %k, %p axis = 4 : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x8x4xf32>
  return
}

// -----

// kv_cache_write_c2
func.func @kv_cache_write_c2(%c: tensor<1x2x8x4xf32>, %k: tensor<1x2x9x4xf32>, %p: tensor<1xi64>) {
  // expected-error @+1 {{kv_cache_write_c2: update 'tensor<1x2x9x4xf32>' does not fit cache 'tensor<1x2x8x4xf32>' along axis 2}}
  %0 = nn.kv_cache_write %c, %k, %p axis = 2 : (tensor<1x2x8x4xf32>, tensor<1x2x9x4xf32>, tensor<1xi64>) -> tensor<1x2x8x4xf32>
  return
}

// -----

// kv_cache_write_c3
func.func @kv_cache_write_c3(%c: tensor<1x2x8x4xf32>, %k: tensor<1x2x1x4xf32>, %p: tensor<2xi64>) {
  // expected-error @+1 {{kv_cache_write_c3: position must be i64 with one element or one per row of the batch, got 'tensor<2xi64>'}}
  %0 = nn.kv_cache_write %c, %k, %p axis = 2 : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>, tensor<2xi64>) -> tensor<1x2x8x4xf32>
  return
}

// -----

// kv_cache_write_c3: rows cannot have positions of their own along the
// batch itself.
func.func @kv_cache_write_c3_batch_axis(%c: tensor<2x8x4xf32>, %k: tensor<1x8x4xf32>, %p: tensor<2xi64>) {
  // expected-error @+1 {{kv_cache_write_c3: position must be i64 with one element or one per row of the batch, got 'tensor<2xi64>'}}
  %0 = nn.kv_cache_write %c, %k, %p axis = 0 : (tensor<2x8x4xf32>, tensor<1x8x4xf32>, tensor<2xi64>) -> tensor<2x8x4xf32>
  return
}

// -----

// kv_cache_write_c4
func.func @kv_cache_write_c4(%c: tensor<1x2x8x4xf32>, %k: tensor<1x2x1x4xf32>, %p: tensor<1xi64>) {
  // expected-error @+1 {{kv_cache_write_c4: result type 'tensor<1x2x8x4xbf16>' differs from the cache's 'tensor<1x2x8x4xf32>'}}
  %0 = nn.kv_cache_write %c, %k, %p axis = 2 : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x8x4xbf16>
  return
}

// -----

// attention_c10: softcap
func.func @attention_c10_softcap(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>, %v: tensor<1x2x3x4xf32>) {
  // expected-error @+1 {{attention_c10: softcap must be positive and finite, got 0}}
  %0 = nn.attention %q, %k, %v {softcap = 0.0 : f32} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return
}

// -----

// attention_c11: a window needs causal
func.func @attention_c11_window_without_causal(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>, %v: tensor<1x2x3x4xf32>) {
  // expected-error @+1 {{attention_c11: a window needs causal}}
  %0 = nn.attention %q, %k, %v {window = 2 : i64} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return
}

// -----

// attention_c11: a positive window
func.func @attention_c11_window_zero(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>, %v: tensor<1x2x3x4xf32>) {
  // expected-error @+1 {{attention_c11: window must be positive, got 0}}
  %0 = nn.attention %q, %k, %v {causal, window = 0 : i64} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return
}

// -----

// attention_partial_c13: a window needs the positions
func.func @attention_partial_c13(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>, %v: tensor<1x2x3x4xf32>) {
  // expected-error @+1 {{attention_partial_c13: a window needs positions}}
  %0:3 = nn.attention_partial %q, %k, %v {window = 2 : i64} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> (tensor<1x2x3x4xf32>, tensor<1x2x3xf32>, tensor<1x2x3xf32>)
  return
}

// -----

// attention_grad_c12: a window needs causal
func.func @attention_grad_c12(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>, %v: tensor<1x2x3x4xf32>) {
  // expected-error @+1 {{attention_grad_c12: a window needs causal}}
  %0:3 = nn.attention_grad %q, %k, %v out %q dout %q {window = 2 : i64} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>)
  return
}
