// RUN: partita-opt %s --partita-prefetch-receives | FileCheck %s -enable-var-scope

// Receive 1 starts right after receive 0 is waited for; receive 2 waits
// behind a send (a posted receive would hold it back) and starts in place.
// CHECK-LABEL: func.func @microbatches
// CHECK: %[[T0:.*]] = dist.recv_start on @mesh axis pp from 0 tag 0 {exec.peer = 0 : i32}
// CHECK-NEXT: %[[R0:.*]] = dist.wait %[[T0]]
// CHECK-NEXT: %[[T1:.*]] = dist.recv_start on @mesh axis pp from 0 tag 1
// CHECK-NEXT: nn.relu %[[R0]]
// CHECK: %[[R1:.*]] = dist.wait %[[T1]]
// CHECK: dist.send
// CHECK-NEXT: %[[T2:.*]] = dist.recv_start on @mesh axis pp from 0 tag 2
// CHECK-NEXT: dist.wait %[[T2]]
dist.mesh @mesh [pp = 2]
func.func @microbatches() -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %r0 = dist.recv on @mesh axis pp from 0 tag 0 {exec.peer = 0 : i32} : tensor<4xf32>
  %a = nn.relu %r0 : tensor<4xf32>
  %r1 = dist.recv on @mesh axis pp from 0 tag 1 : tensor<4xf32>
  dist.send %a on @mesh axis pp to 0 tag 3 : tensor<4xf32>
  %r2 = dist.recv on @mesh axis pp from 0 tag 2 : tensor<4xf32>
  return %a, %r1, %r2 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
