// RUN: partita-opt %s -split-input-file --partita-plan-buffers -verify-diagnostics | FileCheck %s -enable-var-scope
// RUN: partita-opt %s -split-input-file --partita-plan-buffers=max-inline-constant-bytes=64 -verify-diagnostics | FileCheck %s -enable-var-scope --check-prefix=SMALL

// The input is caller memory, the small constant inline, the matmul an
// activation, the reshape a view of it; the view and the input returned
// get copies of their own, written last. The matmul lives until the copy
// reads its view.
// CHECK-LABEL: func.func @kinds
// CHECK-SAME: exec.buffer = #exec.buffer<id = 0, kind = input>
// CHECK-SAME: exec.arena_bytes = 128 : i64
// CHECK: nn.constant {{.*}}exec.buffers = [#exec.buffer<id = 1, kind = constant>]
// CHECK: nn.matmul {{.*}}exec.buffers = [#exec.buffer<id = 2, kind = activation, first_write = 0, last_read = 1>]
// CHECK: nn.reshape {{.*}}exec.buffers = [#exec.buffer<id = 3, kind = alias, alias_of = 2>]
// CHECK: %[[FLAT:.*]] = exec.copy {{.*}}exec.buffers = [#exec.buffer<id = 4, kind = output>]
// CHECK: %[[AGAIN:.*]] = exec.copy %arg0 {{.*}}exec.buffers = [#exec.buffer<id = 5, kind = output>]
// CHECK: return %[[FLAT]], %[[AGAIN]]
// A constant above the inline limit is a weight named by its bytes.
// SMALL-LABEL: func.func @kinds
// SMALL: nn.constant {{.*}}#exec.buffer<id = 1, kind = weight, weight = "constant.{{[0-9a-f]+}}">
func.func @kinds(%x: tensor<4x8xf32> {exec.binding = "x"}) -> (tensor<32xf32> {exec.binding = "flat"}, tensor<4x8xf32> {exec.binding = "x_again"}) {
  %w = nn.constant dense<0.5> : tensor<8x8xf32>
  %m = nn.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %f = nn.reshape %m : tensor<4x8xf32> -> tensor<32xf32>
  return %f, %x : tensor<32xf32>, tensor<4x8xf32>
}

// -----

// Activations whose lives do not overlap share arena bytes: the first and
// the third; the kernel that writes the result writes the output directly.
// CHECK-LABEL: func.func @reuse
// CHECK-SAME: exec.activation_bytes = 192 : i64, exec.arena_bytes = 128 : i64
// CHECK: nn.neg {{.*}}#exec.buffer<id = 1, kind = activation, first_write = 0, last_read = 1>
// CHECK: nn.exp {{.*}}#exec.buffer<id = 2, kind = activation, offset = 64, first_write = 1, last_read = 2>
// CHECK: nn.abs {{.*}}#exec.buffer<id = 3, kind = activation, first_write = 2, last_read = 3>
// CHECK: nn.relu {{.*}}#exec.buffer<id = 4, kind = output>
// CHECK-NOT: exec.copy
func.func @reuse(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = nn.neg %x : tensor<4xf32>
  %b = nn.exp %a : tensor<4xf32>
  %c = nn.abs %b : tensor<4xf32>
  %d = nn.relu %c : tensor<4xf32>
  return %d : tensor<4xf32>
}

// -----

// A weight read only through slice_block has no buffer; its block is
// inline, or above the limit a weight named after the block.
// CHECK-LABEL: func.func @blocks
// CHECK: nn.constant dense<1.000000e+00> : tensor<4x64xf32>
// CHECK-NOT: exec.buffers
// CHECK: exec.slice_block {{.*}}#exec.buffer<id = 1, kind = constant>
// SMALL-LABEL: func.func @blocks
// SMALL: exec.slice_block {{.*}}kind = weight, weight = "constant.{{[0-9a-f]+}}.shard1_1of2"
func.func @blocks(%x: tensor<4x32xf32>) -> tensor<4x32xf32> {
  %w = nn.constant dense<1.0> : tensor<4x64xf32>
  %b = exec.slice_block %w dim 1 block 1 of 2 : tensor<4x64xf32> -> tensor<4x32xf32>
  %s = nn.add %x, %b : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %s : tensor<4x32xf32>
}

// -----

// An async collective writes its result from its start; its operand stays
// alive until the wait.
// CHECK-LABEL: func.func @async
// CHECK: nn.neg {{.*}}#exec.buffer<id = 1, kind = activation, first_write = 0, last_read = 3>
// CHECK: dist.all_reduce_start {{.*}}#exec.buffer<id = 2, kind = activation, offset = 64, first_write = 1, last_read = 4>
// CHECK: dist.wait {{.*}}#exec.buffer<id = 2,
dist.mesh @mesh [tp = 2]
func.func @async(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = nn.neg %x : tensor<4xf32>
  %t = dist.all_reduce_start sum %a on @mesh axes [tp] {exec.group = array<i32: 0, 1>} : tensor<4xf32> -> !dist.token<tensor<4xf32>>
  %o = nn.exp %x : tensor<4xf32>
  %r = dist.wait %t : !dist.token<tensor<4xf32>>
  %s = nn.add %r, %o : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----

// expected-error@+1 {{input 'x': 'tensor<?xf32>' has a dynamic shape (give its size with --bind)}}
func.func @dynamic(%x: tensor<?xf32> {exec.binding = "x"}) -> tensor<?xf32> {
  return %x : tensor<?xf32>
}

// -----

// expected-error@+1 {{argument 0 has a type the runtime does not support}}
func.func @f64(%x: tensor<4xf64>) -> tensor<4xf64> {
  return %x : tensor<4xf64>
}

// -----

dist.mesh @mesh [tp = 2]
func.func @unspecialized() -> tensor<i64> {
  // expected-error@+1 {{the exec lowering does not handle this op yet}}
  %i = dist.axis_index on @mesh axes [tp] : tensor<i64>
  return %i : tensor<i64>
}

// -----

// A pipeline stage's KV cache written microbatch by microbatch: each
// microbatch's rows are views where they lie, of the cache argument (read)
// and of the returned cache (written, 256 bytes further for the second
// microbatch), and the slices and the concatenation are no instructions.
// CHECK-LABEL: func.func @cache_rows_in_place
// CHECK-SAME: exec.buffer = #exec.buffer<id = 0, kind = input>
// CHECK: %[[R0:.*]] = nn.slice %arg0 {{.*}}exec.buffers = [#exec.buffer<id = [[V0:[0-9]+]], kind = alias, alias_of = 0>], exec.view}
// CHECK: %[[W0:.*]] = nn.kv_cache_write %[[R0]], {{.*}}exec.buffers = [#exec.buffer<id = {{[0-9]+}}, kind = alias, alias_of = [[OUT:[0-9]+]]>]
// CHECK: %[[R1:.*]] = nn.slice %arg0 {{.*}}exec.buffers = [#exec.buffer<id = {{[0-9]+}}, kind = alias, offset = 256, alias_of = 0>], exec.view}
// CHECK: %[[W1:.*]] = nn.kv_cache_write %[[R1]], {{.*}}exec.buffers = [#exec.buffer<id = {{[0-9]+}}, kind = alias, offset = 256, alias_of = [[OUT]]>]
// CHECK: %[[ALL:.*]] = nn.concat %[[W0]], %[[W1]] {{.*}}exec.buffers = [#exec.buffer<id = [[OUT]], kind = output>], exec.view}
// CHECK-NOT: exec.copy
// CHECK: return %[[ALL]]
func.func @cache_rows_in_place(%cache: tensor<2x2x8x4xf32> {exec.binding = "cache"}, %u: tensor<1x2x1x4xf32> {exec.binding = "u"}, %pos: tensor<1xi64> {exec.binding = "pos"}) -> (tensor<2x2x8x4xf32> {exec.binding = "cache"}, tensor<1x2x8x4xf32> {exec.binding = "sum"}) {
  %r0 = nn.slice %cache start = [0, 0, 0, 0] limit = [1, 2, 8, 4] stride = [1, 1, 1, 1] : tensor<2x2x8x4xf32> -> tensor<1x2x8x4xf32>
  %w0 = nn.kv_cache_write %r0, %u, %pos axis = 2 : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x8x4xf32>
  %r1 = nn.slice %cache start = [1, 0, 0, 0] limit = [2, 2, 8, 4] stride = [1, 1, 1, 1] : tensor<2x2x8x4xf32> -> tensor<1x2x8x4xf32>
  %w1 = nn.kv_cache_write %r1, %u, %pos axis = 2 : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x8x4xf32>
  %sum = nn.add %w0, %w1 : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  %all = nn.concat %w0, %w1 axis = 0 : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<2x2x8x4xf32>
  return %all, %sum : tensor<2x2x8x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// Rows of a dimension after one of size 2 are not contiguous: the slices
// copy them, as does the concatenation.
// CHECK-LABEL: func.func @cache_heads_copied
// CHECK: nn.slice %arg0 {{.*}}kind = activation
// CHECK-NOT: exec.view
// CHECK: nn.concat {{.*}}kind = output
func.func @cache_heads_copied(%cache: tensor<2x2x8x4xf32> {exec.binding = "cache"}, %u: tensor<2x1x1x4xf32> {exec.binding = "u"}, %pos: tensor<1xi64> {exec.binding = "pos"}) -> (tensor<2x2x8x4xf32> {exec.binding = "cache"}) {
  %r0 = nn.slice %cache start = [0, 0, 0, 0] limit = [2, 1, 8, 4] stride = [1, 1, 1, 1] : tensor<2x2x8x4xf32> -> tensor<2x1x8x4xf32>
  %w0 = nn.kv_cache_write %r0, %u, %pos axis = 2 : (tensor<2x1x8x4xf32>, tensor<2x1x1x4xf32>, tensor<1xi64>) -> tensor<2x1x8x4xf32>
  %r1 = nn.slice %cache start = [0, 1, 0, 0] limit = [2, 2, 8, 4] stride = [1, 1, 1, 1] : tensor<2x2x8x4xf32> -> tensor<2x1x8x4xf32>
  %w1 = nn.kv_cache_write %r1, %u, %pos axis = 2 : (tensor<2x1x8x4xf32>, tensor<2x1x1x4xf32>, tensor<1xi64>) -> tensor<2x1x8x4xf32>
  %all = nn.concat %w0, %w1 axis = 1 : (tensor<2x1x8x4xf32>, tensor<2x1x8x4xf32>) -> tensor<2x2x8x4xf32>
  return %all : tensor<2x2x8x4xf32>
}

// -----

// A view mark the plan did not make (here on a slice it copies) goes.
// CHECK-LABEL: func.func @stale_view
// CHECK: nn.slice %arg0 {{.*}}kind = activation
// CHECK-NOT: exec.view
func.func @stale_view(%x: tensor<2x4xf32> {exec.binding = "x"}) -> (tensor<1x4xf32> {exec.binding = "y"}) {
  %r = nn.slice %x start = [0, 0] limit = [1, 4] stride = [1, 1] {exec.view} : tensor<2x4xf32> -> tensor<1x4xf32>
  %y = nn.neg %r : tensor<1x4xf32>
  return %y : tensor<1x4xf32>
}

// -----

// With another reader of the cache argument (here a write into the whole
// argument), the rows are not written in place there: the slice copies
// them, the cache write writes that copy in place (its result a view of
// it; the cache it reads is then those bytes), and the concatenation reads
// the written copies. A write into the cache argument itself keeps a
// buffer of its own (the runtime binds the cache's input and output to one
// memory).
// CHECK-LABEL: func.func @cache_rows
// CHECK: %[[ROWS:.*]] = nn.slice {{.*}}exec.buffers = [#exec.buffer<id = [[S:[0-9]+]], kind = activation
// CHECK: nn.kv_cache_write %[[ROWS]], {{.*}}exec.buffers = [#exec.buffer<id = {{[0-9]+}}, kind = alias, alias_of = [[S]]>]
// CHECK: nn.kv_cache_write %arg0, {{.*}}exec.buffers = [#exec.buffer<id = {{[0-9]+}}, kind = activation
func.func @cache_rows(%cache: tensor<2x2x8x4xf32> {exec.binding = "cache"}, %u: tensor<1x2x1x4xf32> {exec.binding = "u"}, %w: tensor<2x2x1x4xf32> {exec.binding = "w"}, %pos: tensor<1xi64> {exec.binding = "pos"}) -> (tensor<2x2x8x4xf32> {exec.binding = "rows"}, tensor<2x2x8x4xf32> {exec.binding = "whole"}) {
  %r0 = nn.slice %cache start = [0, 0, 0, 0] limit = [1, 2, 8, 4] stride = [1, 1, 1, 1] : tensor<2x2x8x4xf32> -> tensor<1x2x8x4xf32>
  %w0 = nn.kv_cache_write %r0, %u, %pos axis = 2 : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x8x4xf32>
  %r1 = nn.slice %cache start = [1, 0, 0, 0] limit = [2, 2, 8, 4] stride = [1, 1, 1, 1] : tensor<2x2x8x4xf32> -> tensor<1x2x8x4xf32>
  %w1 = nn.kv_cache_write %r1, %u, %pos axis = 2 : (tensor<1x2x8x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x8x4xf32>
  %all = nn.concat %w0, %w1 axis = 0 : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<2x2x8x4xf32>
  %whole = nn.kv_cache_write %cache, %w, %pos axis = 2 : (tensor<2x2x8x4xf32>, tensor<2x2x1x4xf32>, tensor<1xi64>) -> tensor<2x2x8x4xf32>
  %again = nn.add %whole, %whole : (tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x8x4xf32>
  return %all, %again : tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>
}
