// RUN: partita-translate %s --exec-to-proto | FileCheck %s

// The translation writes what the planned IR says: buffers by id, the
// kernel with its epilogue, the collective over its recorded group, the
// bindings.
// CHECK: rank: 1
// CHECK-NEXT: world_size: 2
// CHECK: id: 1
// CHECK: kind: CONSTANT
// CHECK-NEXT: data: "\000\000\000?\000\000\000?"
// CHECK: id: 2
// CHECK: kind: ACTIVATION
// CHECK: id: 3
// CHECK: kind: OUTPUT
// CHECK: arena_bytes: 64
// CHECK: instructions {
// CHECK-NEXT: kernel {
// CHECK-NEXT: op: "mul"
// CHECK-NEXT: operands: 0
// CHECK-NEXT: operands: 1
// CHECK-NEXT: results: 2
// CHECK-NEXT: epilogue {
// CHECK-NEXT: op: "relu"
// CHECK-NEXT: operand: -1
// CHECK: location: "mul_0"
// CHECK: collective {
// CHECK-NEXT: kind: ALL_REDUCE
// CHECK-NEXT: operand: 2
// CHECK-NEXT: result: 3
// CHECK-NEXT: group: 1
// CHECK-NEXT: group: 3
// CHECK-NEXT: reduction: "sum"
// CHECK: inputs {
// CHECK-NEXT: name: "x"
// CHECK: outputs {
// CHECK-NEXT: name: "y"
// CHECK-NEXT: buffer: 3
dist.mesh @mesh [dp = 2, tp = 2]
func.func @main(%x: tensor<2xf32> {exec.binding = "x", exec.buffer = #exec.buffer<id = 0, kind = input>}) -> (tensor<2xf32> {exec.binding = "y"}) attributes {exec.activation_bytes = 64 : i64, exec.arena_bytes = 64 : i64, exec.rank = 1 : i64, exec.world_size = 2 : i64} {
  %c = nn.constant {exec.buffers = [#exec.buffer<id = 1, kind = constant>]} dense<0.5> : tensor<2xf32>
  %k = exec.kernel -> tensor<2xf32> attributes {exec.buffers = [#exec.buffer<id = 2, kind = activation, first_write = 0, last_read = 1>]} {
    %m = nn.mul %x, %c : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32> loc("mul_0")
    %r = nn.relu %m : tensor<2xf32>
    exec.yield %r : tensor<2xf32>
  } loc("mul_0")
  %s = dist.all_reduce sum %k on @mesh axes [dp] {exec.group = array<i32: 1, 3>, exec.buffers = [#exec.buffer<id = 3, kind = output>]} : tensor<2xf32>
  return %s : tensor<2xf32>
}

