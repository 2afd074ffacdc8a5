// RUN: not partita-opt %s --pass-pipeline='builtin.module(func.func(partita-add-loss{kind=cross_entropy output=scores}))' 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: not partita-opt %s --pass-pipeline='builtin.module(func.func(partita-add-loss{kind=hinge output=logits}))' 2>&1 | FileCheck %s --check-prefix=KIND
// RUN: not partita-opt %s --pass-pipeline='builtin.module(func.func(partita-add-loss{kind=cross_entropy output=ids}))' 2>&1 | FileCheck %s --check-prefix=TYPE
// NAME: error: 'func.func' op partita-add-loss: the model has no output 'scores'; its outputs are: logits ids
// KIND: error: 'func.func' op partita-add-loss: kind must be cross_entropy or mse, got 'hinge'
// TYPE: error: 'func.func' op partita-add-loss: output 'ids' is 'tensor<2x4xi64>': cross_entropy needs float logits [..., classes]
func.func @main(%x: tensor<2x4x8xf32> {onnx.name = "x"}, %i: tensor<2x4xi64> {onnx.name = "i"})
    -> (tensor<2x4x8xf32> {onnx.name = "logits"}, tensor<2x4xi64> {onnx.name = "ids"}) {
  return %x, %i : tensor<2x4x8xf32>, tensor<2x4xi64>
}
