// RUN: partita-opt %s --verify-diagnostics --pass-pipeline='builtin.module(func.func(partita-optimizer{optimizer="adamw:lr=1,momentum=0.9"}))'

// expected-error @+1 {{partita-optimizer: --optimizer: adamw has no key 'momentum'; its keys are lr, beta1, beta2, eps and weight_decay}}
func.func @spec(%w: tensor<2xf32> {partita.parameter = "w"})
    -> (tensor<f32> {partita.loss}, tensor<2xf32> {partita.gradient = "w"}) {
  %l = nn.reduce sum %w axes = [0] : tensor<2xf32> -> tensor<f32>
  return %l, %w : tensor<f32>, tensor<2xf32>
}
