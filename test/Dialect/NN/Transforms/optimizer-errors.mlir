// RUN: partita-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(func.func(partita-optimizer{optimizer="sgd:lr=0.1"}))'

// A parameter without its gradient: differentiate first.
// expected-error @+1 {{partita-optimizer: parameter 'w' has no gradient (run partita-differentiate first)}}
func.func @no_gradient(%w: tensor<2xf32> {partita.parameter = "w"})
    -> (tensor<f32> {partita.loss}) {
  %l = nn.reduce sum %w axes = [0] : tensor<2xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error @+1 {{partita-optimizer: parameter 'h' is 'f16'; the optimizers update f32 parameters}}
func.func @half(%w: tensor<2xf16> {partita.parameter = "h"})
    -> (tensor<f16> {partita.loss}, tensor<2xf16> {partita.gradient = "h"}) {
  %l = nn.reduce sum %w axes = [0] : tensor<2xf16> -> tensor<f16>
  return %l, %w : tensor<f16>, tensor<2xf16>
}

// -----

// expected-error @+1 {{partita-optimizer: the model already has an input named 'lr'}}
func.func @taken(%lr: tensor<f32> {onnx.name = "lr"},
                 %w: tensor<2xf32> {partita.parameter = "w"})
    -> (tensor<f32> {partita.loss}, tensor<2xf32> {partita.gradient = "w"}) {
  %l = nn.reduce sum %w axes = [0] : tensor<2xf32> -> tensor<f32>
  return %l, %w : tensor<f32>, tensor<2xf32>
}
