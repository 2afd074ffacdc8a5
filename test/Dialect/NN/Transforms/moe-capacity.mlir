// RUN: partita-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(partita-moe-capacity{factor=1.0}))" | FileCheck %s
// RUN: partita-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(partita-moe-capacity{factor=4.0}))" | FileCheck %s --check-prefix=ROOMY
// RUN: not partita-opt %s -split-input-file --pass-pipeline="builtin.module(func.func(partita-moe-capacity{factor=-1.0}))" 2>&1 | FileCheck %s --check-prefix=NEGATIVE

// 8 tokens, top 2 of 4 experts, factor 1: each expert takes at most
// ceil(1 * 8 * 2 / 4) = 4 pairs. Each pair's place among its expert's
// pairs is the running count of a one-hot of the ids down the pairs
// (token-major); past 4 its id becomes -1.

// CHECK-LABEL: func.func @bounded
// CHECK: %[[FLAT:.*]] = nn.reshape %arg1 : tensor<8x2xi64> -> tensor<16x1xi64>
// CHECK: %[[EQ:.*]] = nn.compare eq, %[[FLAT]], %{{.*}} : (tensor<16x1xi64>, tensor<1x4xi64>) -> tensor<16x4xi1>
// CHECK: %[[HIT:.*]] = nn.cast %[[EQ]] : tensor<16x4xi1> -> tensor<16x4xi64>
// CHECK: %[[RUNNING:.*]] = nn.cumsum %[[HIT]] axis = 0 : tensor<16x4xi64>
// CHECK: %[[MINE:.*]] = nn.mul %[[RUNNING]], %[[HIT]]
// CHECK: %[[PLACE:.*]] = nn.reduce sum %[[MINE]] axes = [1] : tensor<16x4xi64> -> tensor<16xi64>
// CHECK: %[[C:.*]] = nn.constant dense<4> : tensor<i64>
// CHECK: %[[KEPT:.*]] = nn.compare le, %[[PLACE]], %[[C]]
// CHECK: %[[KEPT2:.*]] = nn.reshape %[[KEPT]] : tensor<16xi1> -> tensor<8x2xi1>
// CHECK: %[[IDS:.*]] = nn.where %[[KEPT2]], %arg1, %{{.*}} : (tensor<8x2xi1>, tensor<8x2xi64>, tensor<i64>) -> tensor<8x2xi64>
// CHECK: nn.moe silu %arg0, %[[IDS]], %arg2
// ROOMY-LABEL: func.func @bounded
// ROOMY-NOT: nn.cumsum
// NEGATIVE: error: --moe-capacity-factor must be 0 (no bound) or more, not -1
func.func @bounded(%x: tensor<8x8xf32>, %ids: tensor<8x2xi64>, %w: tensor<8x2xf32>) -> tensor<8x8xf32> {
  %fc1 = nn.constant dense<0.5> : tensor<4x16x8xf32>
  %fc2 = nn.constant dense<0.25> : tensor<4x8x16xf32>
  %y = nn.moe silu %x, %ids, %w experts(%fc1, %fc2) : (tensor<8x8xf32>, tensor<8x2xi64>, tensor<8x2xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>) -> tensor<8x8xf32>
  return %y : tensor<8x8xf32>
}

// A factor past int64's range bounds nothing (RUN line below).
// RUN: partita-opt %s --pass-pipeline="builtin.module(func.func(partita-moe-capacity{factor=1e300}))" | FileCheck %s --check-prefix=HUGE
// HUGE-LABEL: func.func @bounded
// HUGE-NOT: nn.cumsum
