// RUN: partita-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(partita-optimizer{optimizer="sgd:lr=0.1,momentum=0.9,weight_decay=0.01"}))' | FileCheck %s --check-prefix=SGD
// RUN: partita-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(partita-optimizer{optimizer="adamw:lr=0.01" clip-grad-norm=0.5 output-gradients=true}))' | FileCheck %s --check-prefix=ADAMW

// The update of each parameter and its state, built after the backward:
// torch.optim.SGD with momentum (one buffer per parameter) and weight
// decay; the learning rate an input `lr`.
// SGD-LABEL: func.func @step
// SGD-SAME: %[[W:arg1]]: tensor<3x2xf32> {onnx.name = "w", partita.parameter = "w"}
// SGD-SAME: %[[LR:arg2]]: tensor<f32> {onnx.name = "lr"}
// SGD-SAME: %[[BUF:arg3]]: tensor<3x2xf32> {onnx.name = "w/momentum_buffer", partita.optimizer_state = "w/momentum_buffer"}
// SGD-SAME: -> (tensor<f32> {onnx.name = "loss", partita.loss}, tensor<3x2xf32> {onnx.name = "w/momentum_buffer", partita.update = "w/momentum_buffer"}, tensor<3x2xf32> {onnx.name = "w", partita.update = "w"})
// d = g + wd * w; buf = 0.9 buf + d; w - lr * buf.
// SGD: %[[WD:.*]] = nn.mul %[[W]], %{{.*}}
// SGD: %[[D:.*]] = nn.add %{{.*}}, %[[WD]]
// SGD: %[[MB:.*]] = nn.mul %[[BUF]], %{{.*}}
// SGD: %[[NB:.*]] = nn.add %[[MB]], %[[D]]
// SGD: %[[STEP:.*]] = nn.mul %[[NB]], %[[LR]]
// SGD: %[[NW:.*]] = nn.sub %[[W]], %[[STEP]]
// SGD: return %{{.*}}, %[[NB]], %[[NW]]

// AdamW: decoupled decay, both moments, the bias corrections as inputs;
// the gradients clipped by their global norm first, the unclipped ones
// kept as outputs NAME.grad.
// ADAMW-LABEL: func.func @step
// ADAMW-SAME: {onnx.name = "lr"}
// ADAMW-SAME: {onnx.name = "bias_correction1"}
// ADAMW-SAME: {onnx.name = "bias_correction2"}
// ADAMW-SAME: {onnx.name = "w/exp_avg", partita.optimizer_state = "w/exp_avg"}
// ADAMW-SAME: {onnx.name = "w/exp_avg_sq", partita.optimizer_state = "w/exp_avg_sq"}
// ADAMW-SAME: -> (tensor<f32> {onnx.name = "loss", partita.loss}, tensor<3x2xf32> {onnx.name = "w.grad", partita.gradient = "w"}, tensor<3x2xf32> {onnx.name = "w/exp_avg", partita.update = "w/exp_avg"}, tensor<3x2xf32> {onnx.name = "w/exp_avg_sq", partita.update = "w/exp_avg_sq"}, tensor<3x2xf32> {onnx.name = "w", partita.update = "w"})
// ADAMW: nn.reduce sum
// ADAMW: nn.sqrt
// ADAMW: nn.min
// ADAMW: nn.sqrt
// ADAMW: nn.div
// ADAMW: return
func.func @step(%x: tensor<4x3xf32> {onnx.name = "x"},
                %w: tensor<3x2xf32> {onnx.name = "w", partita.parameter = "w"})
    -> (tensor<f32> {onnx.name = "loss", partita.loss},
        tensor<3x2xf32> {partita.gradient = "w"}) {
  %y = nn.matmul %x, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %l = nn.reduce sum %y axes = [0, 1] : tensor<4x2xf32> -> tensor<f32>
  %g = nn.neg %w : tensor<3x2xf32>
  return %l, %g : tensor<f32>, tensor<3x2xf32>
}

// -----

// A parameter held in another shape than its initializer's
// (partita-split-fused-parameters): its state carries the initializer's
// shape, and its gradient output is given in it.
// SGD-LABEL: func.func @held_as_segments
// SGD-SAME: {onnx.name = "w/momentum_buffer", partita.optimizer_state = "w/momentum_buffer", partita.parameter_shape = array<i64: 3, 4>}
// ADAMW-LABEL: func.func @held_as_segments
// ADAMW-SAME: {onnx.name = "w/exp_avg", partita.optimizer_state = "w/exp_avg", partita.parameter_shape = array<i64: 3, 4>}
// ADAMW-SAME: -> (tensor<f32> {onnx.name = "loss", partita.loss}, tensor<3x4xf32> {onnx.name = "w.grad", partita.gradient = "w"}, tensor<3x2x2xf32> {onnx.name = "w/exp_avg", partita.update = "w/exp_avg"}
// ADAMW: %[[G:.*]] = nn.reshape %{{.*}} : tensor<3x2x2xf32> -> tensor<3x4xf32>
// ADAMW: return %{{.*}}, %[[G]],
func.func @held_as_segments(
    %w: tensor<3x2x2xf32> {onnx.name = "w", partita.parameter = "w",
                           partita.parameter_shape = array<i64: 3, 4>})
    -> (tensor<f32> {onnx.name = "loss", partita.loss},
        tensor<3x2x2xf32> {partita.gradient = "w"}) {
  %l = nn.reduce sum %w axes = [0, 1, 2] : tensor<3x2x2xf32> -> tensor<f32>
  %g = nn.neg %w : tensor<3x2x2xf32>
  return %l, %g : tensor<f32>, tensor<3x2x2xf32>
}
