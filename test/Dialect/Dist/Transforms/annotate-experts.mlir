// RUN: partita-opt %s -split-input-file --partita-annotate="mesh=ep=2,tp=2" | FileCheck %s
// RUN: not partita-opt %s -split-input-file --partita-annotate="mesh=ep=3" 2>&1 | FileCheck %s --check-prefix=UNEVEN

// Over ep, a mixture of experts' weights are split by experts; with tp
// beside it, each expert's features too where the activation allows
// (silu, no fc2 bias): fc1 [E, F, H] on E and F, fc2 [E, H, F] on E and F.

// CHECK-LABEL: func.func @features
// CHECK-DAG: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {tp}, {}]> {dist.strategy} : tensor<4x16x8xf32>
// CHECK-DAG: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {}, {tp}]> {dist.strategy} : tensor<4x8x16xf32>
// UNEVEN: error: cannot split operand 3 of nn.moe (experts) over ep=3: dimension 0 has size 4, which ep does not divide
func.func @features(%x: tensor<6x8xf32>, %ids: tensor<6x2xi64>, %w: tensor<6x2xf32>) -> tensor<6x8xf32> {
  %fc1 = nn.constant dense<0.5> : tensor<4x16x8xf32>
  %fc2 = nn.constant dense<0.25> : tensor<4x8x16xf32>
  %y = nn.moe silu %x, %ids, %w experts(%fc1, %fc2) : (tensor<6x8xf32>, tensor<6x2xi64>, tensor<6x2xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return %y : tensor<6x8xf32>
}

// -----

// A fused swiglu's halves keep each expert's features whole: split by
// experts only.

// CHECK-LABEL: func.func @halves
// CHECK-DAG: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {}, {}]> {dist.strategy} : tensor<4x32x8xf32>
// CHECK-DAG: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {}, {}]> {dist.strategy} : tensor<4x8x16xf32>
func.func @halves(%x: tensor<6x8xf32>, %ids: tensor<6x2xi64>, %w: tensor<6x2xf32>) -> tensor<6x8xf32> {
  %fc1 = nn.constant dense<0.5> : tensor<4x32x8xf32>
  %fc2 = nn.constant dense<0.25> : tensor<4x8x16xf32>
  %y = nn.moe swiglu %x, %ids, %w experts(%fc1, %fc2) : (tensor<6x8xf32>, tensor<6x2xi64>, tensor<6x2xf32>, tensor<4x32x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return %y : tensor<6x8xf32>
}
