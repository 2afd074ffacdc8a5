// RUN: not partita-translate %s --split-input-file --exec-to-proto 2>&1 | FileCheck %s

// The translation decides nothing: IR the exec pipeline has not planned is
// refused.
// CHECK: error: the function is not a planned rank program (run --partita-exec-pipeline first)
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}

// -----

// A planned function whose argument lost its binding name is refused, not
// translated with a hole (or a crash).
// CHECK: error: argument 0 has no exec.binding (run --partita-exec-pipeline first)
func.func @main(%x: tensor<2xf32> {exec.buffer = #exec.buffer<id = 0, kind = input>}) -> (tensor<2xf32> {exec.binding = "y"}) attributes {exec.activation_bytes = 0 : i64, exec.arena_bytes = 0 : i64, exec.rank = 0 : i64, exec.world_size = 1 : i64} {
  %y = exec.copy %x : tensor<2xf32>
  return %y : tensor<2xf32>
}

// -----

// A value an instruction writes without a buffer is refused.
// CHECK: error: a value it reads or writes has no #exec.buffer (run --partita-plan-buffers first)
func.func @main(%x: tensor<2xf32> {exec.binding = "x", exec.buffer = #exec.buffer<id = 0, kind = input>}) -> (tensor<2xf32> {exec.binding = "y"}) attributes {exec.activation_bytes = 0 : i64, exec.arena_bytes = 0 : i64, exec.rank = 0 : i64, exec.world_size = 1 : i64} {
  %y = nn.neg %x : tensor<2xf32>
  return %y : tensor<2xf32>
}
