// RUN: partita-opt %s -split-input-file --partita-annotate="mesh=ep=2,tp=2" | FileCheck %s
// RUN: partita-opt %s -split-input-file --partita-annotate="mesh=ep=2,tp=2 expert-dispatch=false" | FileCheck %s --check-prefix=WHOLE
// RUN: not partita-opt %s -split-input-file --partita-annotate="mesh=ep=3" 2>&1 | FileCheck %s --check-prefix=UNEVEN

// Over ep, a mixture of experts' weights are split by experts; with tp
// beside it, each expert's features too where the activation allows
// (silu, no fc2 bias): fc1 [E, F, H] on E and F, fc2 [E, H, F] on E and F.
// The batch is split over ep as well, and so are the tokens entering the
// experts, whose annotations outrank the weights' (priority 2): ep splits
// the tokens of the op, and partitioning dispatches them to the experts.

// CHECK-LABEL: func.func @features
// CHECK: dist.annotate %arg0 sharding<@mesh, [{ep}, {}]> {dist.priority = 3 : i64, dist.strategy}
// CHECK-DAG: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {}]> {dist.strategy} : tensor<6x8xf32>
// CHECK-DAG: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {}]> {dist.strategy} : tensor<6x2xi64>
// CHECK-DAG: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {}]> {dist.strategy} : tensor<6x2xf32>
// CHECK-DAG: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {tp}, {}]> {dist.priority = 2 : i64, dist.strategy} : tensor<4x16x8xf32>
// CHECK-DAG: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {}, {tp}]> {dist.priority = 2 : i64, dist.strategy} : tensor<4x8x16xf32>
// WHOLE-LABEL: func.func @features
// WHOLE-NOT: sharding<@mesh, [{ep}, {}]>
// WHOLE-DAG: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {tp}, {}]> {dist.strategy} : tensor<4x16x8xf32>
// WHOLE-DAG: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {}, {tp}]> {dist.strategy} : tensor<4x8x16xf32>
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
// CHECK-DAG: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {}, {}]> {dist.priority = 2 : i64, dist.strategy} : tensor<4x32x8xf32>
// CHECK-DAG: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {}, {}]> {dist.priority = 2 : i64, dist.strategy} : tensor<4x8x16xf32>
func.func @halves(%x: tensor<6x8xf32>, %ids: tensor<6x2xi64>, %w: tensor<6x2xf32>) -> tensor<6x8xf32> {
  %fc1 = nn.constant dense<0.5> : tensor<4x32x8xf32>
  %fc2 = nn.constant dense<0.25> : tensor<4x8x16xf32>
  %y = nn.moe swiglu %x, %ids, %w experts(%fc1, %fc2) : (tensor<6x8xf32>, tensor<6x2xi64>, tensor<6x2xf32>, tensor<4x32x8xf32>, tensor<4x8x16xf32>) -> tensor<6x8xf32>
  return %y : tensor<6x8xf32>
}

// -----

// Five tokens do not split over ep=2: they stay whole on each ep device,
// the experts' split needs no precedence, and a remark says why.

// CHECK-LABEL: module attributes {dist.remarks = ["tokens stay on their ep devices: its batch of 5 is not a multiple of ep = 2, so every ep device runs all of its group's tokens, and the experts' outputs are summed over ep"]}
// CHECK-NOT: sharding<@mesh, [{ep}, {}]>
// CHECK: dist.annotate %{{.*}} sharding<@mesh, [{ep}, {}, {}]> {dist.strategy} : tensor<4x32x8xf32>
func.func @odd(%x: tensor<5x8xf32>, %ids: tensor<5x2xi64>, %w: tensor<5x2xf32>) -> tensor<5x8xf32> {
  %fc1 = nn.constant dense<0.5> : tensor<4x32x8xf32>
  %fc2 = nn.constant dense<0.25> : tensor<4x8x16xf32>
  %y = nn.moe swiglu %x, %ids, %w experts(%fc1, %fc2) : (tensor<5x8xf32>, tensor<5x2xi64>, tensor<5x2xf32>, tensor<4x32x8xf32>, tensor<4x8x16xf32>) -> tensor<5x8xf32>
  return %y : tensor<5x8xf32>
}

// -----

// A mixture written densely (partita-expand-moe, a training step's form):
// its reads of the stacked weights (partita.experts) are split on the
// experts over ep; the tokens stay whole (no nn.moe to dispatch them).

// CHECK-LABEL: func.func @dense
// CHECK: dist.annotate %arg0 sharding<@mesh, [{ep}, {}, {}]> {dist.strategy} : tensor<4x16x8xf32>
// CHECK: nn.transpose %{{.*}} permutation = [0, 2, 1] {partita.experts}
// UNEVEN: error: cannot split operand 0 of nn.transpose (experts) over ep=3: dimension 0 has size 4, which ep does not divide
func.func @dense(%w: tensor<4x16x8xf32>, %x: tensor<1x6x8xf32>) -> tensor<4x6x16xf32> {
  %t = nn.transpose %w permutation = [0, 2, 1] {partita.experts} : tensor<4x16x8xf32> -> tensor<4x8x16xf32>
  %y = nn.matmul %x, %t : (tensor<1x6x8xf32>, tensor<4x8x16xf32>) -> tensor<4x6x16xf32>
  return %y : tensor<4x6x16xf32>
}
