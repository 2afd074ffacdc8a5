// RUN: partita-opt %s -split-input-file --partita-annotate="mesh=dp=2,tp=2" | FileCheck %s
// RUN: partita-opt %s -split-input-file --partita-annotate="mesh=tp=4" | FileCheck %s --check-prefix=TP4
// RUN: partita-opt %s -split-input-file --partita-annotate="mesh=pp=1,dp=2,tp=2,sp=1" | FileCheck %s --check-prefix=SIZE1
// RUN: partita-opt %s -split-input-file --partita-annotate="mesh=data=2:dp,model=2:tp" | FileCheck %s --check-prefix=NAMED

// Axes of size 1 that the strategy does not use are fine.
// SIZE1: dist.mesh @mesh [pp = 1, dp = 2, tp = 2, sp = 1]

// The Megatron plan of one layer: vocab-parallel embedding, column-parallel
// fused QKV (segments permuted) and MLP up, row-parallel attention output
// and MLP down, column-parallel LM head; batch over dp at the edges.

// Any axis names: the strategy finds dp and tp by the axes' roles.
// NAMED: dist.mesh @mesh [data = 2 : dp, model = 2 : tp]
// NAMED-LABEL: func.func @layer
// NAMED: dist.annotate %arg0 sharding<@mesh, [{data}, {}]>
// NAMED: sharding<@mesh, [{model}, {}]> {dist.strategy} : tensor<32x16xf32>
// NAMED: sharding<@mesh, [{}, {model}]> {dist.strategy} : tensor<16x48xf32>
// NAMED: sharding<@mesh, [{model}, {}]> {dist.strategy} : tensor<16x16xf32>

// CHECK: dist.mesh @mesh [dp = 2, tp = 2]
// CHECK-LABEL: func.func @layer
// CHECK: %[[IDS:.*]] = dist.annotate %arg0 sharding<@mesh, [{dp}, {}]> {dist.priority = 3 : i64, dist.strategy}
// CHECK: %[[TABLE:.*]] = dist.annotate %{{.*}} sharding<@mesh, [{tp}, {}]> {dist.strategy} : tensor<32x16xf32>
// CHECK: %[[WQKV:.*]] = dist.annotate %{{.*}} sharding<@mesh, [{}, {tp}]> {dist.strategy} : tensor<16x48xf32>
// CHECK: %[[WO:.*]] = dist.annotate %{{.*}} sharding<@mesh, [{tp}, {}]> {dist.strategy} : tensor<16x16xf32>
// CHECK: %[[W1:.*]] = dist.annotate %{{.*}} sharding<@mesh, [{}, {tp}]> {dist.strategy} : tensor<16x64xf32>
// CHECK: %[[W2:.*]] = dist.annotate %{{.*}} sharding<@mesh, [{tp}, {}]> {dist.strategy} : tensor<64x16xf32>
// CHECK: %[[HEAD:.*]] = dist.annotate %{{.*}} sharding<@mesh, [{}, {tp}]> {dist.strategy} : tensor<16x32xf32>
// CHECK: nn.embedding %[[TABLE]], %[[IDS]]
// CHECK: %[[QKV:.*]] = nn.matmul %{{.*}}, %[[WQKV]] bias
// Each rank's block of the fused dimension holds its part of q, k and v.
// CHECK: %[[GROUPED:.*]] = nn.reshape %[[QKV]] : tensor<2x8x48xf32> -> tensor<2x8x2x24xf32>
// CHECK: nn.split %[[GROUPED]] axis = 3 : tensor<2x8x2x24xf32> -> tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>, tensor<2x8x2x8xf32>
// CHECK: nn.attention
// CHECK: nn.matmul %{{.*}}, %[[WO]]
// CHECK: nn.matmul %{{.*}}, %[[W1]]
// CHECK: nn.matmul %{{.*}}, %[[W2]]
// CHECK: %[[LOGITS:.*]] = nn.matmul %{{.*}}, %[[HEAD]]
// CHECK: %[[OUT:.*]] = dist.annotate %[[LOGITS]] sharding<@mesh, [{dp}, {}, {}]> {dist.priority = 3 : i64, dist.strategy}
// CHECK: return %[[OUT]]
func.func @layer(%ids: tensor<2x8xi64>) -> tensor<2x8x32xf32> {
  %table = nn.constant dense<0.5> : tensor<32x16xf32>
  %wqkv = nn.constant dense<0.25> : tensor<16x48xf32>
  %bqkv = nn.constant dense<0.125> : tensor<48xf32>
  %wo = nn.constant dense<0.5> : tensor<16x16xf32>
  %w1 = nn.constant dense<0.5> : tensor<16x64xf32>
  %w2 = nn.constant dense<0.5> : tensor<64x16xf32>
  %head = nn.constant dense<0.5> : tensor<16x32xf32>
  %x = nn.embedding %table, %ids : (tensor<32x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %qkv = nn.matmul %x, %wqkv bias %bqkv : (tensor<2x8x16xf32>, tensor<16x48xf32>, tensor<48xf32>) -> tensor<2x8x48xf32>
  %q, %k, %v = nn.split %qkv axis = 2 : tensor<2x8x48xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
  %q4 = nn.reshape %q : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  %k4 = nn.reshape %k : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  %v4 = nn.reshape %v : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  %qt = nn.transpose %q4 permutation = [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  %kt = nn.transpose %k4 permutation = [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  %vt = nn.transpose %v4 permutation = [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  %a = nn.attention %qt, %kt, %vt {causal} : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>) -> tensor<2x4x8x4xf32>
  %at = nn.transpose %a permutation = [0, 2, 1, 3] : tensor<2x4x8x4xf32> -> tensor<2x8x4x4xf32>
  %a2 = nn.reshape %at : tensor<2x8x4x4xf32> -> tensor<2x8x16xf32>
  %o = nn.matmul %a2, %wo : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %r = nn.add %x, %o : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %n = nn.layer_norm %r axis = 2 epsilon = 1.0E-5 : tensor<2x8x16xf32>
  %h = nn.matmul %n, %w1 : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
  %g = nn.gelu %h approximation = tanh : tensor<2x8x64xf32>
  %d = nn.matmul %g, %w2 : (tensor<2x8x64xf32>, tensor<64x16xf32>) -> tensor<2x8x16xf32>
  %r2 = nn.add %r, %d : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %logits = nn.matmul %r2, %head : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  return %logits : tensor<2x8x32xf32>
}

// -----

// A fused weight with real values: columns [q0 q1 | k0 k1 | v0 v1] become
// [q0 k0 v0 | q1 k1 v1], so tp rank r's contiguous block is its q, k and v.
// CHECK-LABEL: func.func @segments
// CHECK: nn.constant dense<{{\[}}[0.000000e+00, 2.000000e+00, 4.000000e+00, 1.000000e+00, 3.000000e+00, 5.000000e+00]]> : tensor<1x6xf32>
// CHECK: nn.constant dense<[1.000000e+01, 1.200000e+01, 1.400000e+01, 1.100000e+01, 1.300000e+01, 1.500000e+01]> : tensor<6xf32>
// CHECK-NOT: nn.constant
// TP4-LABEL: func.func @segments
// TP4: nn.split %{{.*}} axis = 1 : tensor<4x6xf32>
func.func @segments(%x: tensor<4x1xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) {
  %w = nn.constant dense<[[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]> : tensor<1x6xf32>
  %b = nn.constant dense<[10.0, 11.0, 12.0, 13.0, 14.0, 15.0]> : tensor<6xf32>
  %y = nn.matmul %x, %w bias %b : (tensor<4x1xf32>, tensor<1x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  %q, %k, %v = nn.split %y axis = 1 : tensor<4x6xf32> -> tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
  return %q, %k, %v : tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
}

// -----

// The same segments taken by slices (torch's legacy exporter), one of them
// twice: the slices tile the columns, so they become one split, permuted
// as above.
// CHECK-LABEL: func.func @sliced_segments
// CHECK: nn.constant dense<{{\[}}[0.000000e+00, 2.000000e+00, 4.000000e+00, 1.000000e+00, 3.000000e+00, 5.000000e+00]]> : tensor<1x6xf32>
// CHECK-NOT: nn.slice
// TP4-LABEL: func.func @sliced_segments
// TP4: nn.split %{{.*}} axis = 1 : tensor<4x6xf32>
func.func @sliced_segments(%x: tensor<4x1xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) {
  %w = nn.constant dense<[[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]> : tensor<1x6xf32>
  %y = nn.matmul %x, %w : (tensor<4x1xf32>, tensor<1x6xf32>) -> tensor<4x6xf32>
  %q = nn.slice %y start = [0, 0] limit = [4, 2] stride = [1, 1] : tensor<4x6xf32> -> tensor<4x2xf32>
  %k = nn.slice %y start = [0, 2] limit = [4, 4] stride = [1, 1] : tensor<4x6xf32> -> tensor<4x2xf32>
  %v = nn.slice %y start = [0, 4] limit = [4, 6] stride = [1, 1] : tensor<4x6xf32> -> tensor<4x2xf32>
  %q2 = nn.slice %y start = [0, 0] limit = [4, 2] stride = [1, 1] : tensor<4x6xf32> -> tensor<4x2xf32>
  return %q, %k, %v, %q2 : tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>
}

// -----

// Slices that leave a gap do not tile the columns: they stay slices.
// CHECK-LABEL: func.func @gapped_slices
// CHECK-COUNT-2: nn.slice
// CHECK-NOT: nn.split
func.func @gapped_slices(%x: tensor<4x1xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>) {
  %w = nn.constant dense<[[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]]> : tensor<1x6xf32>
  %y = nn.matmul %x, %w : (tensor<4x1xf32>, tensor<1x6xf32>) -> tensor<4x6xf32>
  %q = nn.slice %y start = [0, 0] limit = [4, 2] stride = [1, 1] : tensor<4x6xf32> -> tensor<4x2xf32>
  %v = nn.slice %y start = [0, 4] limit = [4, 6] stride = [1, 1] : tensor<4x6xf32> -> tensor<4x2xf32>
  return %q, %v : tensor<4x2xf32>, tensor<4x2xf32>
}

// -----

// Grouped attention: 2 key/value heads divide tp=2 and are split as they
// are; with tp=4 they are repeated per query head (replicated projections)
// and the module says so.
// CHECK-LABEL: func.func @grouped
// CHECK-NOT: nn.gather
// CHECK: nn.attention
// TP4: module attributes {dist.remarks = ["attention 'attn': 2 key/value heads do not divide tp=4; the key/value projections are replicated and each rank repeats the key/value heads its 1 query heads use"]}
// TP4-LABEL: func.func @grouped
// TP4: %[[WHICH:.*]] = nn.constant dense<[0, 0, 1, 1]> : tensor<4xi64>
// TP4: %[[K:.*]] = nn.gather %{{.*}}, %[[WHICH]] axis = 1 : (tensor<2x2x8x4xf32>, tensor<4xi64>) -> tensor<2x4x8x4xf32>
// TP4: %[[V:.*]] = nn.gather %{{.*}}, %[[WHICH]] axis = 1
// TP4: nn.attention %{{.*}}, %[[K]], %[[V]]
func.func @grouped(%q: tensor<2x4x8x4xf32>, %k: tensor<2x2x8x4xf32>, %v: tensor<2x2x8x4xf32>) -> tensor<2x4x8x4xf32> {
  %a = nn.attention %q, %k, %v {causal} : (tensor<2x4x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>) -> tensor<2x4x8x4xf32> loc("attn")
  return %a : tensor<2x4x8x4xf32>
}


// -----

// A decode step over KV caches of 2 key/value heads. tp=2 splits them as
// they are. At tp=4 each cache gets one slot per rank, split over tp,
// holding the key/value head its query heads use (slot s: head s / 2):
// the write writes the new keys gathered into slots, and attention reads
// the slots as its key/value heads, with no gather of the cache.
// CHECK-LABEL: func.func @grouped_cache
// CHECK-NOT: nn.gather
// CHECK: nn.kv_cache_write %{{.*}} : (tensor<2x2x16x4xf32>, tensor<2x2x1x4xf32>, tensor<1xi64>) -> tensor<2x2x16x4xf32>
// TP4: module attributes {dist.remarks = ["KV cache 'present.0.key': 2 key/value heads, fewer than tp=4; each rank holds the one its query heads use", "KV cache 'present.0.value': 2 key/value heads, fewer than tp=4; each rank holds the one its query heads use"]}
// TP4-LABEL: func.func @grouped_cache
// TP4-SAME: %[[KC:[a-z0-9]+]]: tensor<2x4x16x4xf32> {onnx.name = "present.0.key", partita.kv_cache}
// TP4-SAME: %[[VC:[a-z0-9]+]]: tensor<2x4x16x4xf32> {onnx.name = "present.0.value", partita.kv_cache}
// TP4-SAME: -> (tensor<2x4x1x4xf32>, tensor<2x4x16x4xf32> {onnx.name = "present.0.key", partita.kv_cache}, tensor<2x4x16x4xf32> {onnx.name = "present.0.value", partita.kv_cache})
// TP4-DAG: dist.annotate %[[VC]] {{.*}}<@mesh, [{}, {tp}, {}, {}]>
// TP4-DAG: dist.annotate %[[KC]] {{.*}}<@mesh, [{}, {tp}, {}, {}]>
// TP4: %[[SLOT:.*]] = nn.constant dense<[0, 0, 1, 1]> : tensor<4xi64>
// TP4: %[[KS:.*]] = nn.gather %{{.*}}, %[[SLOT]] axis = 1 : (tensor<2x2x1x4xf32>, tensor<4xi64>) -> tensor<2x4x1x4xf32>
// TP4: %[[KW:.*]] = nn.kv_cache_write %{{.*}}, %[[KS]], %{{.*}} axis = 2 : (tensor<2x4x16x4xf32>, tensor<2x4x1x4xf32>, tensor<1xi64>) -> tensor<2x4x16x4xf32>
// TP4: %[[VW:.*]] = nn.kv_cache_write
// TP4-NOT: nn.gather
// TP4: nn.attention %{{.*}}, %[[KW]], %[[VW]] : (tensor<2x4x1x4xf32>, tensor<2x4x16x4xf32>, tensor<2x4x16x4xf32>) -> tensor<2x4x1x4xf32>
func.func @grouped_cache(%q: tensor<2x4x1x4xf32>, %kc: tensor<2x2x16x4xf32> {onnx.name = "present.0.key", partita.kv_cache}, %vc: tensor<2x2x16x4xf32> {onnx.name = "present.0.value", partita.kv_cache}, %k: tensor<2x2x1x4xf32>, %v: tensor<2x2x1x4xf32>, %pos: tensor<1xi64> {partita.cache_position}) -> (tensor<2x4x1x4xf32>, tensor<2x2x16x4xf32> {onnx.name = "present.0.key", partita.kv_cache}, tensor<2x2x16x4xf32> {onnx.name = "present.0.value", partita.kv_cache}) {
  %kw = nn.kv_cache_write %kc, %k, %pos axis = 2 : (tensor<2x2x16x4xf32>, tensor<2x2x1x4xf32>, tensor<1xi64>) -> tensor<2x2x16x4xf32>
  %vw = nn.kv_cache_write %vc, %v, %pos axis = 2 : (tensor<2x2x16x4xf32>, tensor<2x2x1x4xf32>, tensor<1xi64>) -> tensor<2x2x16x4xf32>
  %a = nn.attention %q, %kw, %vw : (tensor<2x4x1x4xf32>, tensor<2x2x16x4xf32>, tensor<2x2x16x4xf32>) -> tensor<2x4x1x4xf32> loc("attn")
  return %a, %kw, %vw : tensor<2x4x1x4xf32>, tensor<2x2x16x4xf32>, tensor<2x2x16x4xf32>
}
