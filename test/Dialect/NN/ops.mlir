// RUN: partita-opt %s -split-input-file | partita-opt -split-input-file | FileCheck %s

// Every nn op, printed and parsed twice.

// CHECK-LABEL: func.func @constants
func.func @constants() -> (tensor<2x2xf32>, tensor<4xi64>, tensor<3xf32>) {
  // CHECK: nn.constant dense_resource<w0> : tensor<2x2xf32>
  %w = nn.constant dense_resource<w0> : tensor<2x2xf32>
  // CHECK: nn.constant dense<[2, 8, 12, 64]> : tensor<4xi64>
  %s = nn.constant dense<[2, 8, 12, 64]> : tensor<4xi64>
  // CHECK: nn.constant dense<1.000000e+00> : tensor<3xf32>
  %o = nn.constant dense<1.0> : tensor<3xf32>
  return %w, %s, %o : tensor<2x2xf32>, tensor<4xi64>, tensor<3xf32>
}

{-#
  dialect_resources: {
    builtin: {
      w0: "0x040000000000803F000000400000404000008040"
    }
  }
#-}

// -----

// CHECK-LABEL: func.func @binary
func.func @binary(%a: tensor<2x8xf32>, %row: tensor<8xf32>, %i: tensor<4xi64>,
                  %b: tensor<4xi1>) {
  // CHECK: nn.add %{{.*}}, %{{.*}} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %0 = nn.add %a, %row : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK: nn.sub
  %1 = nn.sub %row, %a : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  // CHECK: nn.mul
  %2 = nn.mul %a, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  // CHECK: nn.div
  %3 = nn.div %i, %i : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  // CHECK: nn.pow
  %4 = nn.pow %a, %row : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  // CHECK: nn.max
  %5 = nn.max %i, %i : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  // CHECK: nn.min
  %6 = nn.min %i, %i : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  // CHECK: nn.and
  %7 = nn.and %b, %b : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  // CHECK: nn.or
  %8 = nn.or %b, %b : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  // CHECK: nn.xor
  %9 = nn.xor %b, %b : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  // CHECK: nn.compare ge, %{{.*}}, %{{.*}} : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
  %10 = nn.compare ge, %i, %i : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
  // CHECK: nn.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4xi1>, tensor<4xi64>, tensor<i64>) -> tensor<4xi64>
  %z = nn.constant dense<0> : tensor<i64>
  %11 = nn.where %b, %i, %z : (tensor<4xi1>, tensor<4xi64>, tensor<i64>) -> tensor<4xi64>
  return
}

// -----

// CHECK-LABEL: func.func @unary
func.func @unary(%a: tensor<2x8xf32>, %b: tensor<4xi1>, %i: tensor<4xi64>) {
  // CHECK: nn.neg %{{.*}} : tensor<2x8xf32>
  %0 = nn.neg %a : tensor<2x8xf32>
  // CHECK: nn.abs
  %1 = nn.abs %a : tensor<2x8xf32>
  // CHECK: nn.exp
  %2 = nn.exp %a : tensor<2x8xf32>
  // CHECK: nn.log
  %3 = nn.log %a : tensor<2x8xf32>
  // CHECK: nn.sqrt
  %4 = nn.sqrt %a : tensor<2x8xf32>
  // CHECK: nn.rsqrt
  %5 = nn.rsqrt %a : tensor<2x8xf32>
  // CHECK: nn.reciprocal
  %6 = nn.reciprocal %a : tensor<2x8xf32>
  // CHECK: nn.tanh
  %7 = nn.tanh %a : tensor<2x8xf32>
  // CHECK: nn.erf
  %8 = nn.erf %a : tensor<2x8xf32>
  // CHECK: nn.sigmoid
  %9 = nn.sigmoid %a : tensor<2x8xf32>
  // CHECK: nn.relu
  %10 = nn.relu %i : tensor<4xi64>
  // CHECK: nn.silu
  %11 = nn.silu %a : tensor<2x8xf32>
  // CHECK: nn.gelu %{{.*}} : tensor<2x8xf32>
  %12 = nn.gelu %a : tensor<2x8xf32>
  // CHECK: nn.gelu %{{.*}} approximation = tanh : tensor<2x8xf32>
  %13 = nn.gelu %a approximation = tanh : tensor<2x8xf32>
  // CHECK: nn.not %{{.*}} : tensor<4xi1>
  %14 = nn.not %b : tensor<4xi1>
  // CHECK: nn.cast %{{.*}} : tensor<4xi64> -> tensor<4xbf16>
  %15 = nn.cast %i : tensor<4xi64> -> tensor<4xbf16>
  // CHECK: nn.sin %{{.*}} : tensor<2x8xf32>
  %16 = nn.sin %a : tensor<2x8xf32>
  // CHECK: nn.cos %{{.*}} : tensor<2x8xf32>
  %17 = nn.cos %a : tensor<2x8xf32>
  return
}

// -----

// CHECK-LABEL: func.func @normalizations
func.func @normalizations(%x: tensor<2x8x16xf32>, %g: tensor<16xf32>) {
  // CHECK: nn.reduce mean %{{.*}} axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %0 = nn.reduce mean %x axes = [2] keepdims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  // CHECK: nn.reduce max %{{.*}} axes = [0, 2] : tensor<2x8x16xf32> -> tensor<8xf32>
  %1 = nn.reduce max %x axes = [0, 2] : tensor<2x8x16xf32> -> tensor<8xf32>
  // CHECK: nn.softmax %{{.*}} axis = 2 : tensor<2x8x16xf32>
  %2 = nn.softmax %x axis = 2 : tensor<2x8x16xf32>
  // CHECK: nn.log_softmax %{{.*}} axis = 1 : tensor<2x8x16xf32>
  %3 = nn.log_softmax %x axis = 1 : tensor<2x8x16xf32>
  // CHECK: nn.cumsum %{{.*}} axis = 1 : tensor<2x8x16xf32>
  %7 = nn.cumsum %x axis = 1 : tensor<2x8x16xf32>
  // CHECK: nn.cumsum %{{.*}} axis = 2 exclusive reverse : tensor<2x8x16xf32>
  %8 = nn.cumsum %x axis = 2 exclusive reverse : tensor<2x8x16xf32>
  // CHECK: nn.cumsum %{{.*}} axis = 0 reverse : tensor<2x8x16xf32>
  %9 = nn.cumsum %x axis = 0 reverse : tensor<2x8x16xf32>
  // CHECK: nn.layer_norm %{{.*}} scale(%{{.*}} : tensor<16xf32>) bias(%{{.*}} : tensor<16xf32>) axis = 2 epsilon = 9.99999974E-6 : tensor<2x8x16xf32>
  %4 = nn.layer_norm %x scale(%g : tensor<16xf32>) bias(%g : tensor<16xf32>) axis = 2 epsilon = 1.0e-05 : tensor<2x8x16xf32>
  // CHECK: nn.layer_norm %{{.*}} axis = 1 epsilon = 9.99999974E-6 : tensor<2x8x16xf32>
  %5 = nn.layer_norm %x axis = 1 epsilon = 1.0e-05 : tensor<2x8x16xf32>
  // CHECK: nn.rms_norm %{{.*}} scale(%{{.*}} : tensor<16xf32>) axis = 2 epsilon = 9.99999997E-7 : tensor<2x8x16xf32>
  %6 = nn.rms_norm %x scale(%g : tensor<16xf32>) axis = 2 epsilon = 1.0e-06 : tensor<2x8x16xf32>
  return
}

// -----

// CHECK-LABEL: func.func @contractions
func.func @contractions(%x: tensor<2x8x16xf32>, %w: tensor<16x32xf32>,
                        %b: tensor<32xf32>, %q: tensor<2x8x4x16xbf16>,
                        %kv: tensor<2x2x4x16xbf16>, %m: tensor<2x1x1x4xi1>,
                        %add: tensor<4x4xbf16>) {
  // CHECK: nn.matmul %{{.*}}, %{{.*}} bias %{{.*}} : (tensor<2x8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %0 = nn.matmul %x, %w bias %b : (tensor<2x8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  // CHECK: nn.matmul %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %1 = nn.matmul %x, %w : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  // CHECK: nn.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} {causal, scale = 2.500000e-01 : f32} : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x1x1x4xi1>) -> tensor<2x8x4x16xbf16>
  %2 = nn.attention %q, %kv, %kv mask %m {causal, scale = 0.25 : f32} : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x1x1x4xi1>) -> tensor<2x8x4x16xbf16>
  // CHECK: nn.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<4x4xbf16>) -> tensor<2x8x4x16xbf16>
  %3 = nn.attention %q, %kv, %kv mask %add : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<4x4xbf16>) -> tensor<2x8x4x16xbf16>
  // CHECK: nn.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, window = 3 : i64} : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>) -> tensor<2x8x4x16xbf16>
  %windowed = nn.attention %q, %kv, %kv {causal, window = 3 : i64} : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>) -> tensor<2x8x4x16xbf16>
  // CHECK: nn.attention %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>) -> tensor<2x8x4x16xbf16>
  %4 = nn.attention %q, %kv, %kv : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>) -> tensor<2x8x4x16xbf16>
  // CHECK: nn.attention_partial %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} positions(%{{.*}}, %{{.*}}) {scale = 2.500000e-01 : f32} : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x1x1x4xi1>, tensor<4xi64>, tensor<4xi64>) -> (tensor<2x8x4x16xbf16>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  %pos = nn.constant dense<[0, 1, 2, 3]> : tensor<4xi64>
  %6, %7, %71 = nn.attention_partial %q, %kv, %kv mask %m positions(%pos, %pos) {scale = 0.25 : f32} : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x1x1x4xi1>, tensor<4xi64>, tensor<4xi64>) -> (tensor<2x8x4x16xbf16>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  // CHECK: nn.attention_partial %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>) -> (tensor<2x8x4x16xbf16>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  %8, %9, %91 = nn.attention_partial %q, %kv, %kv : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>) -> (tensor<2x8x4x16xbf16>, tensor<2x8x4xf32>, tensor<2x8x4xf32>)
  // CHECK: nn.attention_grad %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} out %{{.*}} dout %{{.*}} {causal, scale = 2.500000e-01 : f32} : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x1x1x4xi1>, tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>) -> (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>)
  %g:3 = nn.attention_grad %q, %kv, %kv mask %m out %2 dout %2 {causal, scale = 0.25 : f32} : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x1x1x4xi1>, tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>) -> (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>)
  // CHECK: nn.attention_grad %{{.*}}, %{{.*}}, %{{.*}} out %{{.*}} dout %{{.*}} : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>) -> (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>)
  %h:3 = nn.attention_grad %q, %kv, %kv out %4 dout %4 : (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x8x4x16xbf16>, tensor<2x8x4x16xbf16>) -> (tensor<2x8x4x16xbf16>, tensor<2x2x4x16xbf16>, tensor<2x2x4x16xbf16>)
  // CHECK: nn.rope %{{.*}}, %{{.*}}, %{{.*}} {interleaved} : (tensor<2x8x4x16xbf16>, tensor<1x4x4xbf16>, tensor<1x4x4xbf16>) -> tensor<2x8x4x16xbf16>
  %cs = nn.constant dense<1.0> : tensor<1x4x4xbf16>
  %5 = nn.rope %q, %cs, %cs {interleaved} : (tensor<2x8x4x16xbf16>, tensor<1x4x4xbf16>, tensor<1x4x4xbf16>) -> tensor<2x8x4x16xbf16>
  return
}

// -----

// CHECK-LABEL: func.func @data_movement
func.func @data_movement(%t: tensor<100x16xf32>, %ids: tensor<2x8xi64>,
                         %x: tensor<2x8x48xf32>, %s: tensor<4xi64>,
                         %r: tensor<16xf32>) {
  // CHECK: nn.embedding %{{.*}}, %{{.*}} : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %0 = nn.embedding %t, %ids : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  // CHECK: nn.gather %{{.*}}, %{{.*}} axis = 0 : (tensor<4xi64>, tensor<i64>) -> tensor<i64>
  %i = nn.constant dense<1> : tensor<i64>
  %1 = nn.gather %s, %i axis = 0 : (tensor<4xi64>, tensor<i64>) -> tensor<i64>
  // CHECK: nn.reshape %{{.*}} : tensor<2x8x48xf32> -> tensor<2x8x3x16xf32>
  %2 = nn.reshape %x : tensor<2x8x48xf32> -> tensor<2x8x3x16xf32>
  // CHECK: nn.transpose %{{.*}} permutation = [0, 2, 1, 3] : tensor<2x8x3x16xf32> -> tensor<2x3x8x16xf32>
  %3 = nn.transpose %2 permutation = [0, 2, 1, 3] : tensor<2x8x3x16xf32> -> tensor<2x3x8x16xf32>
  // CHECK: nn.broadcast_to %{{.*}} : tensor<16xf32> -> tensor<2x8x16xf32>
  %4 = nn.broadcast_to %r : tensor<16xf32> -> tensor<2x8x16xf32>
  // CHECK: nn.slice %{{.*}} start = [0, 0, 16] limit = [2, 8, 48] stride = [1, 1, 2] : tensor<2x8x48xf32> -> tensor<2x8x16xf32>
  %5 = nn.slice %x start = [0, 0, 16] limit = [2, 8, 48] stride = [1, 1, 2] : tensor<2x8x48xf32> -> tensor<2x8x16xf32>
  // CHECK: nn.concat %{{.*}}, %{{.*}} axis = 2 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x32xf32>
  %6 = nn.concat %4, %5 axis = 2 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x32xf32>
  // CHECK: nn.split %{{.*}} axis = 2 : tensor<2x8x48xf32> -> tensor<2x8x16xf32>, tensor<2x8x32xf32>
  %7:2 = nn.split %x axis = 2 : tensor<2x8x48xf32> -> tensor<2x8x16xf32>, tensor<2x8x32xf32>
  return
}

// -----

// CHECK-LABEL: func.func @mixtures_of_experts
func.func @mixtures_of_experts(%x: tensor<4x8xf32>, %ids: tensor<4x2xi64>,
                               %w: tensor<4x2xf32>, %fused: tensor<3x32x8xf32>,
                               %fc1: tensor<3x16x8xf32>,
                               %fc2: tensor<3x8x16xf32>,
                               %b1: tensor<3x16xf32>, %b2: tensor<3x8xf32>) {
  // CHECK: nn.moe swiglu %{{.*}}, %{{.*}}, %{{.*}} experts(%{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<3x32x8xf32>, tensor<3x8x16xf32>) -> tensor<4x8xf32>
  %0 = nn.moe swiglu %x, %ids, %w experts(%fused, %fc2) : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<3x32x8xf32>, tensor<3x8x16xf32>) -> tensor<4x8xf32>
  // CHECK: nn.moe swiglu %{{.*}}, %{{.*}}, %{{.*}} experts(%{{.*}}, %{{.*}}, %{{.*}}) fc1_bias %{{.*}} fc2_bias %{{.*}} fc3_bias %{{.*}} {alpha = 1.702000e+00 : f32, beta = 1.000000e+00 : f32, limit = 7.000000e+00 : f32}
  %1 = nn.moe swiglu %x, %ids, %w experts(%fc1, %fc2, %fc1) fc1_bias %b1 fc2_bias %b2 fc3_bias %b1 {alpha = 1.702 : f32, beta = 1.0 : f32, limit = 7.0 : f32} : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<3x16x8xf32>, tensor<3x8x16xf32>, tensor<3x16x8xf32>, tensor<3x16xf32>, tensor<3x8xf32>, tensor<3x16xf32>) -> tensor<4x8xf32>
  // CHECK: nn.moe swiglu %{{.*}}, %{{.*}}, %{{.*}} experts(%{{.*}}, %{{.*}}) {interleaved}
  %2 = nn.moe swiglu %x, %ids, %w experts(%fused, %fc2) {interleaved} : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<3x32x8xf32>, tensor<3x8x16xf32>) -> tensor<4x8xf32>
  // CHECK: nn.moe gelu_tanh %{{.*}}, %{{.*}}, %{{.*}} experts(%{{.*}}, %{{.*}}) fc2_bias %{{.*}} :
  %3 = nn.moe gelu_tanh %x, %ids, %w experts(%fc1, %fc2) fc2_bias %b2 : (tensor<4x8xf32>, tensor<4x2xi64>, tensor<4x2xf32>, tensor<3x16x8xf32>, tensor<3x8x16xf32>, tensor<3x8xf32>) -> tensor<4x8xf32>
  return
}

