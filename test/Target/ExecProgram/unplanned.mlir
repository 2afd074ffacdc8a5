// RUN: not partita-translate %s --exec-to-proto 2>&1 | FileCheck %s

// The translation decides nothing: IR the exec pipeline has not planned is
// refused.
// CHECK: error: the function is not a planned rank program (run --partita-exec-pipeline first)
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}
