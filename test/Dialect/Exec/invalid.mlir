// RUN: partita-opt %s -split-input-file -verify-diagnostics

func.func @kernel_c1(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{kernel_c1: the body holds a head with one result and at least one step}}
  %k = exec.kernel -> tensor<4xf32> {
    %n = nn.neg %x : tensor<4xf32>
    exec.yield %n : tensor<4xf32>
  }
  return %k : tensor<4xf32>
}

// -----

func.func @kernel_c2(%x: tensor<4xf32>) -> tensor<4xf32> {
  %k = exec.kernel -> tensor<4xf32> {
    %n = nn.neg %x : tensor<4xf32>
    // expected-error@+1 {{kernel_c2: a step reads the value of the op before it and has its type}}
    %e = nn.exp %x : tensor<4xf32>
    exec.yield %e : tensor<4xf32>
  }
  return %k : tensor<4xf32>
}

// -----

func.func @kernel_c3(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{kernel_c3: the body yields the last step's result}}
  %k = exec.kernel -> tensor<4xf32> {
    %n = nn.neg %x : tensor<4xf32>
    %e = nn.exp %n : tensor<4xf32>
    exec.yield %n : tensor<4xf32>
  }
  return %k : tensor<4xf32>
}

// -----

func.func @slice_block_c1(%x: tensor<4x8xf32>) -> tensor<4x4xf32> {
  // expected-error@+1 {{slice_block_c1: dim 2 is not a dimension of 'tensor<4x8xf32>'}}
  %b = exec.slice_block %x dim 2 block 0 of 2 : tensor<4x8xf32> -> tensor<4x4xf32>
  return %b : tensor<4x4xf32>
}

// -----

func.func @slice_block_c2(%x: tensor<4x8xf32>) -> tensor<4x4xf32> {
  // expected-error@+1 {{slice_block_c2: block 2 is not one of 2}}
  %b = exec.slice_block %x dim 1 block 2 of 2 : tensor<4x8xf32> -> tensor<4x4xf32>
  return %b : tensor<4x4xf32>
}

// -----

func.func @slice_block_c3(%x: tensor<4x8xf32>) -> tensor<4x2xf32> {
  // expected-error@+1 {{slice_block_c3: the result type is 'tensor<4x8xf32>' with dimension 1 divided by 2}}
  %b = exec.slice_block %x dim 1 block 0 of 2 : tensor<4x8xf32> -> tensor<4x2xf32>
  return %b : tensor<4x2xf32>
}

// -----

// expected-error@+1 {{buffer_c1: id -1 is negative}}
func.func @buffer_c1(%x: tensor<4xf32> {exec.buffer = #exec.buffer<id = -1, kind = input>}) {
  return
}

// -----

// expected-error@+1 {{buffer_c2: an alias names another buffer, not 0}}
func.func @buffer_c2(%x: tensor<4xf32> {exec.buffer = #exec.buffer<id = 0, kind = alias, alias_of = 0>}) {
  return
}

// -----

// expected-error@+1 {{buffer_c2: a weight has a name}}
func.func @buffer_c2_weight(%x: tensor<4xf32> {exec.buffer = #exec.buffer<id = 0, kind = weight>}) {
  return
}

// -----

// expected-error@+1 {{buffer_c3: an activation sits at a multiple of 64 and is written before it is last read}}
func.func @buffer_c3(%x: tensor<4xf32> {exec.buffer = #exec.buffer<id = 0, kind = activation, offset = 8>}) {
  return
}

// -----

// expected-error@+1 {{buffer_c4: only an activation or an alias has an offset, and it is non-negative (got 64)}}
func.func @buffer_c4(%x: tensor<4xf32> {exec.buffer = #exec.buffer<id = 0, kind = input, offset = 64>}) {
  return
}

// -----

// expected-error@+1 {{buffer_c4: only an activation or an alias has an offset, and it is non-negative (got -4)}}
func.func @buffer_c4_negative(%x: tensor<4xf32> {exec.buffer = #exec.buffer<id = 1, kind = alias, alias_of = 0, offset = -4>}) {
  return
}

// -----

func.func @view(%x: tensor<4xf32>) {
  // expected-error@+1 {{'exec.view' must be a unit attribute on an nn.slice or nn.concat}}
  %n = nn.neg %x {exec.view} : tensor<4xf32>
  return
}

// -----

func.func @group(%x: tensor<4xf32>) {
  // expected-error@+1 {{'exec.group' must be a non-empty array<i32> of global ranks}}
  %n = nn.neg %x {exec.group = array<i32>} : tensor<4xf32>
  return
}

// -----

func.func @buffers(%x: tensor<4xf32>) {
  // expected-error@+1 {{'exec.buffers' must be one #exec.buffer per result}}
  %n = nn.neg %x {exec.buffers = []} : tensor<4xf32>
  return
}

// -----

// expected-error@+1 {{'exec.binding' must be a string}}
func.func @binding(%x: tensor<4xf32> {exec.binding = 1}) {
  return
}

// -----

// expected-error@+1 {{'exec.binding' must be a string}}
func.func @result_binding() -> (tensor<4xf32> {exec.binding = 1}) {
  %c = nn.constant dense<1.0> : tensor<4xf32>
  return %c : tensor<4xf32>
}
