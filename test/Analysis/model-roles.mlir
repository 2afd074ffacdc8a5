// RUN: partita-opt %s -split-input-file -verify-diagnostics --partita-test-model-roles

// A GPT-style layer: separate query, key and value projections, the output
// projection after attention, an MLP of two matmuls around a GELU, the LM
// head on the returned logits, and the residual-stream norms.
func.func @gpt_layer(%ids: tensor<2x8xi64>) -> tensor<2x8x32xf32> {
  %table = nn.constant dense<0.5> : tensor<32x16xf32>
  %wq = nn.constant dense<0.25> : tensor<16x16xf32>
  %wk = nn.constant dense<0.25> : tensor<16x16xf32>
  %wv = nn.constant dense<0.25> : tensor<16x16xf32>
  %wo = nn.constant dense<0.5> : tensor<16x16xf32>
  %w1 = nn.constant dense<0.5> : tensor<16x64xf32>
  %w2 = nn.constant dense<0.5> : tensor<64x16xf32>
  %head = nn.constant dense<0.5> : tensor<16x32xf32>
  // expected-remark @+1 {{model role: embedding}}
  %x = nn.embedding %table, %ids : (tensor<32x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  // expected-remark @+1 {{model role: norm (residual stream, sequence dimension 1)}}
  %n0 = nn.layer_norm %x axis = 2 epsilon = 1.0E-5 : tensor<2x8x16xf32>
  // expected-remark @+1 {{model role: attention query projection}}
  %q = nn.matmul %n0, %wq : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  // expected-remark @+1 {{model role: attention key projection}}
  %k = nn.matmul %n0, %wk : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  // expected-remark @+1 {{model role: attention value projection}}
  %v = nn.matmul %n0, %wv : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %q4 = nn.reshape %q : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  %k4 = nn.reshape %k : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  %v4 = nn.reshape %v : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  %qt = nn.transpose %q4 permutation = [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  %kt = nn.transpose %k4 permutation = [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  %vt = nn.transpose %v4 permutation = [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  %a = nn.attention %qt, %kt, %vt {causal} : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>) -> tensor<2x4x8x4xf32>
  %at = nn.transpose %a permutation = [0, 2, 1, 3] : tensor<2x4x8x4xf32> -> tensor<2x8x4x4xf32>
  %a2 = nn.reshape %at : tensor<2x8x4x4xf32> -> tensor<2x8x16xf32>
  // expected-remark @+1 {{model role: attention output projection}}
  %o = nn.matmul %a2, %wo : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %r = nn.add %x, %o : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  // expected-remark @+1 {{model role: norm (residual stream, sequence dimension 1)}}
  %n = nn.layer_norm %r axis = 2 epsilon = 1.0E-5 : tensor<2x8x16xf32>
  // expected-remark @+1 {{model role: MLP up projection}}
  %h = nn.matmul %n, %w1 : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  %g = nn.gelu %h approximation = tanh : tensor<2x8x64xf32>
  // expected-remark @+1 {{model role: MLP down projection}}
  %d = nn.matmul %g, %w2 : (tensor<2x8x64xf32>, tensor<64x16xf32>) -> tensor<2x8x16xf32>
  %r2 = nn.add %r, %d : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  // expected-remark @+1 {{model role: LM head}}
  %logits = nn.matmul %r2, %head : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  return %logits : tensor<2x8x32xf32>
}

// -----

// A Llama-style block: one fused QKV weight split three ways, and a gated
// MLP whose gate reaches the down projection through SiLU only.
func.func @llama_block(%x: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %wqkv = nn.constant dense<0.25> : tensor<16x48xf32>
  %wg = nn.constant dense<0.5> : tensor<16x32xf32>
  %wu = nn.constant dense<0.5> : tensor<16x32xf32>
  %wd = nn.constant dense<0.5> : tensor<32x16xf32>
  // expected-remark @+1 {{model role: attention fused projection}}
  %qkv = nn.matmul %x, %wqkv : (tensor<2x8x16xf32>, tensor<16x48xf32>) -> tensor<2x8x48xf32>
  %q, %k, %v = nn.split %qkv axis = 2 : tensor<2x8x48xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
  %q4 = nn.reshape %q : tensor<2x8x16xf32> -> tensor<2x4x8x4xf32>
  %k4 = nn.reshape %k : tensor<2x8x16xf32> -> tensor<2x4x8x4xf32>
  %v4 = nn.reshape %v : tensor<2x8x16xf32> -> tensor<2x4x8x4xf32>
  %a = nn.attention %q4, %k4, %v4 : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>) -> tensor<2x4x8x4xf32>
  %a2 = nn.reshape %a : tensor<2x4x8x4xf32> -> tensor<2x8x16xf32>
  // expected-remark @+1 {{model role: norm (residual stream, sequence dimension 1)}}
  %n = nn.rms_norm %a2 axis = 2 epsilon = 1.0E-6 : tensor<2x8x16xf32>
  // expected-remark @+1 {{model role: MLP gate projection}}
  %gate = nn.matmul %n, %wg : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  // expected-remark @+1 {{model role: MLP up projection}}
  %up = nn.matmul %n, %wu : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %s = nn.silu %gate : tensor<2x8x32xf32>
  %p = nn.mul %s, %up : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  // expected-remark @+1 {{model role: MLP down projection}}
  %d = nn.matmul %p, %wd : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  %y = nn.add %x, %d : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// A fused gate/up weight: one matmul whose halves meet after SiLU.
func.func @fused_gate_up(%x: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %wgu = nn.constant dense<0.5> : tensor<16x64xf32>
  %wd = nn.constant dense<0.5> : tensor<32x16xf32>
  // expected-remark @+1 {{model role: MLP fused gate/up projection}}
  %gu = nn.matmul %x, %wgu : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  %gate, %up = nn.split %gu axis = 2 : tensor<2x8x64xf32> -> tensor<2x8x32xf32>, tensor<2x8x32xf32>
  %s = nn.silu %gate : tensor<2x8x32xf32>
  %p = nn.mul %s, %up : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
  // expected-remark @+1 {{model role: MLP down projection}}
  %d = nn.matmul %p, %wd : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  %y = nn.add %x, %d : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// No roles: a matmul of two activations, a matmul whose input comes through
// a softmax (not an MLP's elementwise chain) and whose result is not
// returned as it is, a lookup in a table that is an input, and a norm over
// flattened tokens (not the residual stream).
func.func @no_roles(%x: tensor<8x16xf32>, %y: tensor<16x8xf32>, %table: tensor<32x16xf32>, %ids: tensor<8xi64>) -> tensor<8x16xf32> {
  %w = nn.constant dense<0.5> : tensor<8x16xf32>
  %m = nn.matmul %x, %y : (tensor<8x16xf32>, tensor<16x8xf32>) -> tensor<8x8xf32>
  %s = nn.softmax %m axis = 1 : tensor<8x8xf32>
  %p = nn.matmul %s, %w : (tensor<8x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %e = nn.embedding %table, %ids : (tensor<32x16xf32>, tensor<8xi64>) -> tensor<8x16xf32>
  %sum = nn.add %p, %e : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  // expected-remark @+1 {{model role: norm}}
  %n = nn.layer_norm %sum axis = 1 epsilon = 1.0E-5 : tensor<8x16xf32>
  return %n : tensor<8x16xf32>
}
