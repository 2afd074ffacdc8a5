// RUN: partita-opt %s -split-input-file -pass-pipeline='builtin.module(func.func(partita-kv-cache{max-seq=8}))' -verify-diagnostics | FileCheck %s

// Decode: one new token after max-seq - 1 cached ones. The past argument
// becomes a cache of max-seq slots, written at cache_position; attention
// reads the written cache; the cache is returned, marked, under the
// present's name.

// CHECK-LABEL: func.func @decode
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x1x4xf32>, %[[K:.*]]: tensor<1x2x1x4xf32>, %[[POS:.*]]: tensor<1xi64> {onnx.name = "cache_position", partita.cache_position}, %[[CACHE:.*]]: tensor<1x2x8x4xf32> {onnx.name = "present.0.key", partita.kv_cache})
// CHECK-SAME: -> (tensor<1x2x1x4xf32>, tensor<1x2x8x4xf32> {onnx.name = "present.0.key", partita.kv_cache})
// CHECK: %[[W:.*]] = nn.kv_cache_write %[[CACHE]], %[[K]], %[[POS]] axis = 2
// CHECK: nn.attention %[[Q]], %[[W]], %[[W]]
// CHECK: return %{{.*}}, %[[W]]
func.func @decode(%q: tensor<1x2x1x4xf32>, %k: tensor<1x2x1x4xf32>,
                  %past: tensor<1x2x7x4xf32> {onnx.name = "past_key_values.0.key"})
    -> (tensor<1x2x1x4xf32>, tensor<1x2x8x4xf32> {onnx.name = "present.0.key"}) {
  %kv = nn.concat %past, %k axis = 2 : (tensor<1x2x7x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x8x4xf32>
  %a = nn.attention %q, %kv, %kv {causal} : (tensor<1x2x1x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x1x4xf32>
  return %a, %kv : tensor<1x2x1x4xf32>, tensor<1x2x8x4xf32>
}

// -----

// Prefill: an empty past. Attention reads the new keys, as the
// concatenation did; the write only feeds the returned cache.

// CHECK-LABEL: func.func @prefill
// CHECK-SAME: %[[POS:[^:]*]]: tensor<1xi64> {onnx.name = "cache_position", partita.cache_position}, %[[CACHE:[^:]*]]: tensor<1x2x8x4xf32> {onnx.name = "present.0.key", partita.kv_cache}
// CHECK: %[[W:.*]] = nn.kv_cache_write %[[CACHE]], %[[K:[^,]*]], %[[POS]] axis = 2 : (tensor<1x2x8x4xf32>, tensor<1x2x3x4xf32>, tensor<1xi64>)
// CHECK: nn.attention %{{[^,]*}}, %[[K]], %[[K]]
// CHECK: return %{{.*}}, %[[W]] : tensor<1x2x3x4xf32>, tensor<1x2x8x4xf32>
func.func @prefill(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>,
                   %past: tensor<1x2x0x4xf32> {onnx.name = "past_key_values.0.key"})
    -> (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32> {onnx.name = "present.0.key"}) {
  %kv = nn.concat %past, %k axis = 2 : (tensor<1x2x0x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  %a = nn.attention %q, %kv, %kv {causal} : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32>
  return %a, %kv : tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>
}

// -----

// A decode step compiled for another cache length.
func.func @wrong_length(%k: tensor<1x2x1x4xf32>,
                        %past: tensor<1x2x5x4xf32> {onnx.name = "past_key_values.0.key"})
    -> (tensor<1x2x6x4xf32> {onnx.name = "present.0.key"}) {
  // expected-error @+1 {{--max-seq 8: 'present.0.key' concatenates 5 cached and 1 new positions; a decode step needs the cached length to be max-seq less the new positions}}
  %kv = nn.concat %past, %k axis = 2 : (tensor<1x2x5x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x6x4xf32>
  return %kv : tensor<1x2x6x4xf32>
}

// -----

// A prompt longer than the cache.
func.func @long_prompt(%k: tensor<1x2x9x4xf32>,
                       %past: tensor<1x2x0x4xf32> {onnx.name = "past_key_values.0.key"})
    -> (tensor<1x2x9x4xf32> {onnx.name = "present.0.key"}) {
  // expected-error @+1 {{--max-seq 8: 'present.0.key' concatenates 0 cached and 9 new positions, more than the cache holds}}
  %kv = nn.concat %past, %k axis = 2 : (tensor<1x2x0x4xf32>, tensor<1x2x9x4xf32>) -> tensor<1x2x9x4xf32>
  return %kv : tensor<1x2x9x4xf32>
}

// -----

// No past/present pair: nothing to keep.
// expected-error @+1 {{--max-seq: the model keeps no KV cache}}
func.func @no_cache(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  return %x : tensor<2x4xf32>
}

// -----

// An empty input the cache does not replace.
// expected-error @+1 {{--max-seq: input 'extra' is empty ('tensor<1x0xf32>') and is not a past key or value the cache replaces}}
func.func @empty_input(%k: tensor<1x2x1x4xf32>, %extra: tensor<1x0xf32> {onnx.name = "extra"},
                       %past: tensor<1x2x7x4xf32> {onnx.name = "past_key_values.0.key"})
    -> (tensor<1x2x8x4xf32> {onnx.name = "present.0.key"}) {
  %kv = nn.concat %past, %k axis = 2 : (tensor<1x2x7x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x8x4xf32>
  return %kv : tensor<1x2x8x4xf32>
}

// -----

// A decode step whose rows write at positions of their own
// (GroupQueryAttention's serving form): the cache takes the padded past's
// place, the write keeps its positions, and no cache_position is added.

// CHECK-LABEL: func.func @rows_at_own_positions
// CHECK-SAME: (%[[Q:.*]]: tensor<2x2x1x4xf32>, %[[K:.*]]: tensor<2x2x1x4xf32>, %[[P:.*]]: tensor<2xi64>, %[[CACHE:.*]]: tensor<2x2x8x4xf32> {onnx.name = "present.0.key", partita.kv_cache})
// CHECK-NOT: cache_position
// CHECK: %[[W:.*]] = nn.kv_cache_write %[[CACHE]], %[[K]], %[[P]] axis = 2
// CHECK: nn.attention %[[Q]], %[[W]], %[[W]]
// CHECK: return %{{.*}}, %[[W]]
func.func @rows_at_own_positions(%q: tensor<2x2x1x4xf32>, %k: tensor<2x2x1x4xf32>, %p: tensor<2xi64>,
                                 %past: tensor<2x2x7x4xf32> {onnx.name = "past_key_values.0.key"})
    -> (tensor<2x2x1x4xf32>, tensor<2x2x8x4xf32> {onnx.name = "present.0.key"}) {
  %fill = nn.constant dense<0.0> : tensor<2x2x1x4xf32>
  %padded = nn.concat %past, %fill axis = 2 : (tensor<2x2x7x4xf32>, tensor<2x2x1x4xf32>) -> tensor<2x2x8x4xf32>
  %kv = nn.kv_cache_write %padded, %k, %p axis = 2 : (tensor<2x2x8x4xf32>, tensor<2x2x1x4xf32>, tensor<2xi64>) -> tensor<2x2x8x4xf32>
  %a = nn.attention %q, %kv, %kv {causal} : (tensor<2x2x1x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>) -> tensor<2x2x1x4xf32>
  return %a, %kv : tensor<2x2x1x4xf32>, tensor<2x2x8x4xf32>
}
