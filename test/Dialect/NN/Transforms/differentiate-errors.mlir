// RUN: partita-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(func.func(partita-differentiate))'

// An op without a vector-Jacobian product between a parameter and the loss
// is refused by name.
func.func @no_rule(%w: tensor<4xf32> {partita.parameter = "w"}, %slot: tensor<1xi64>) -> (tensor<f32> {partita.loss}) {
  %cache = nn.constant dense<0.0> : tensor<1x1x8x4xf32>
  %u = nn.reshape %w : tensor<4xf32> -> tensor<1x1x1x4xf32>
  // expected-error @+1 {{'nn.kv_cache_write' op cannot be differentiated: it has no vector-Jacobian product, and it lies between a parameter and the loss}}
  %c = nn.kv_cache_write %cache, %u, %slot axis = 2 : (tensor<1x1x8x4xf32>, tensor<1x1x1x4xf32>, tensor<1xi64>) -> tensor<1x1x8x4xf32>
  %l = nn.reduce sum %c axes = [0, 1, 2, 3] : tensor<1x1x8x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A rotary table that depends on a parameter has no cotangent yet: refused,
// not dropped.
func.func @rope_table(%x: tensor<1x1x2x4xf32>, %w: tensor<1x2x2xf32> {partita.parameter = "w"}) -> (tensor<f32> {partita.loss}) {
  // expected-error @+1 {{'nn.rope' op cannot be differentiated by its operand #1, which depends on a parameter}}
  %y = nn.rope %x, %w, %w : (tensor<1x1x2x4xf32>, tensor<1x2x2xf32>, tensor<1x2x2xf32>) -> tensor<1x1x2x4xf32>
  %l = nn.reduce sum %y axes = [0, 1, 2, 3] : tensor<1x1x2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// An attention mask that depends on a parameter (a learned additive bias)
// takes no cotangent: refused, not dropped.
func.func @attention_mask(%q: tensor<1x1x2x4xf32>, %w: tensor<2x2xf32> {partita.parameter = "w"}) -> (tensor<f32> {partita.loss}) {
  // expected-error @+1 {{'nn.attention' op cannot be differentiated by its operand #3, which depends on a parameter}}
  %o = nn.attention %q, %q, %q mask %w : (tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>, tensor<1x1x2x4xf32>, tensor<2x2xf32>) -> tensor<1x1x2x4xf32>
  %l = nn.reduce sum %o axes = [0, 1, 2, 3] : tensor<1x1x2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error @+1 {{partita-differentiate: no result is marked partita.loss}}
func.func @no_loss(%w: tensor<4xf32> {partita.parameter = "w"}) -> tensor<4xf32> {
  return %w : tensor<4xf32>
}

// -----

// expected-error @+1 {{partita-differentiate: the loss must be a float tensor of one element, got 'tensor<4xf32>'}}
func.func @loss_not_scalar(%w: tensor<4xf32> {partita.parameter = "w"}) -> (tensor<4xf32> {partita.loss}) {
  return %w : tensor<4xf32>
}

// -----

// expected-error @+1 {{partita-differentiate: no argument is marked partita.parameter}}
func.func @no_parameter(%w: tensor<4xf32>) -> (tensor<f32> {partita.loss}) {
  %l = nn.reduce sum %w axes = [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
