// RUN: partita-opt %s --partita-shard-pipeline="mesh=tp=2" | FileCheck %s
// RUN: partita-opt %s --partita-shard-pipeline="mesh=tp=2 overlap=false" | FileCheck %s --check-prefix=SYNC
// RUN: not partita-opt %s --partita-shard-pipeline="mesh=tp=2 collective-matmul=bogus" 2>&1 | FileCheck %s --check-prefix=BOGUS

// partita-opt reproduces what partita-compile --mesh tp=2 --emit local runs
// after the nn pipeline: plan, propagate, partition, cancel, clean up, start
// the collectives asynchronously and schedule.
// CHECK: dist.mesh @mesh [tp = 2]
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%[[X:.*]]: tensor<4x16xf32> {dist.sharding = #dist.sharding<@mesh, [{}, {}]>})
// CHECK-DAG: %[[W1:.*]] = dist.all_slice %{{.*}} on @mesh axes [tp] slice_dim 1 {{.*}} : tensor<16x64xf32> -> tensor<16x32xf32>
// CHECK-DAG: %[[W2:.*]] = dist.all_slice %{{.*}} on @mesh axes [tp] slice_dim 0 {{.*}} : tensor<64x16xf32> -> tensor<32x16xf32>
// CHECK-DAG: %[[H:.*]] = nn.matmul %[[X]], %[[W1]] : (tensor<4x16xf32>, tensor<16x32xf32>) -> tensor<4x32xf32>
// CHECK-DAG: %[[G:.*]] = nn.gelu %[[H]]
// CHECK: %[[D:.*]] = nn.matmul %[[G]], %[[W2]] : (tensor<4x32xf32>, tensor<32x16xf32>) -> tensor<4x16xf32>
// CHECK: %[[T:.*]] = dist.all_reduce_start sum %[[D]] on @mesh axes [tp]
// CHECK: %[[R:.*]] = dist.wait %[[T]]
// CHECK: return %[[R]]

// With overlap=false (partita-compile --no-overlap) the collective stays
// synchronous; the pipeline's options are partita-compile's, typed.
// SYNC: %[[D:.*]] = nn.matmul %{{.*}} : (tensor<4x32xf32>, tensor<32x16xf32>)
// SYNC: %[[R:.*]] = dist.all_reduce sum %[[D]] on @mesh axes [tp]
// SYNC-NOT: all_reduce_start
// SYNC: return %[[R]]
// BOGUS: partita-opt: error: --collective-matmul expects auto, always or never, got 'bogus'
func.func @mlp(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %w1 = nn.constant dense<0.5> : tensor<16x64xf32>
  %w2 = nn.constant dense<0.25> : tensor<64x16xf32>
  %h = nn.matmul %x, %w1 : (tensor<4x16xf32>, tensor<16x64xf32>) -> tensor<4x64xf32>
  %g = nn.gelu %h approximation = none : tensor<4x64xf32>
  %d = nn.matmul %g, %w2 : (tensor<4x64xf32>, tensor<64x16xf32>) -> tensor<4x16xf32>
  return %d : tensor<4x16xf32>
}
