// RUN: partita-opt %s --partita-schedule | FileCheck %s

dist.mesh @mesh [tp = 2]

// Two microbatches in program order: each all-reduce is waited for right
// away. The scheduler starts the first, computes the second microbatch while
// it is in flight, and waits only when nothing else can run.
// CHECK-LABEL: func.func @two_microbatches
// CHECK: %[[P0:.*]] = nn.matmul %arg0
// CHECK-NEXT: %[[T0:.*]] = dist.all_reduce_start sum %[[P0]]
// CHECK-NEXT: %[[P1:.*]] = nn.matmul %arg1
// CHECK-NEXT: %[[T1:.*]] = dist.all_reduce_start sum %[[P1]]
// CHECK-NEXT: %[[R0:.*]] = dist.wait %[[T0]]
// CHECK-NEXT: nn.relu %[[R0]]
// CHECK-NEXT: %[[R1:.*]] = dist.wait %[[T1]]
// CHECK-NEXT: nn.relu %[[R1]]
func.func @two_microbatches(%x0: tensor<64x64xf32>, %x1: tensor<64x64xf32>, %w: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %p0 = nn.matmul %x0, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %t0 = dist.all_reduce_start sum %p0 on @mesh axes [tp] : tensor<64x64xf32> -> !dist.token<tensor<64x64xf32>>
  %r0 = dist.wait %t0 : !dist.token<tensor<64x64xf32>>
  %y0 = nn.relu %r0 : tensor<64x64xf32>
  %p1 = nn.matmul %x1, %w : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
  %t1 = dist.all_reduce_start sum %p1 on @mesh axes [tp] : tensor<64x64xf32> -> !dist.token<tensor<64x64xf32>>
  %r1 = dist.wait %t1 : !dist.token<tensor<64x64xf32>>
  %y1 = nn.relu %r1 : tensor<64x64xf32>
  return %y0, %y1 : tensor<64x64xf32>, tensor<64x64xf32>
}

// A decomposed reduce-scatter (collective matmul): each step adds the
// running sum received to the next block's partial product and passes it
// on; each block's matmul (24.5 us on the default device) outlasts a
// transfer (19 us). A wait whose transfer has finished is taken at once,
// and the transfers count in the critical path, so the chain of adds and
// transfers is interleaved with the blocks' matmuls (each transfer in
// flight beside one), instead of all the matmuls first and the chain
// exposed after them.
// CHECK-LABEL: func.func @scatter_chain
// CHECK: %[[P0:.*]] = nn.matmul %arg0
// CHECK-NEXT: %[[T0:.*]] = dist.collective_permute_start %[[P0]]
// CHECK-NEXT: %[[P1:.*]] = nn.matmul %arg1
// CHECK-NEXT: %[[R0:.*]] = dist.wait %[[T0]]
// CHECK-NEXT: %[[P2:.*]] = nn.matmul %arg2
// CHECK-NEXT: %[[S1:.*]] = nn.add %[[R0]], %[[P1]]
// CHECK-NEXT: %[[T1:.*]] = dist.collective_permute_start %[[S1]]
// CHECK-NEXT: %[[P3:.*]] = nn.matmul %arg3
// CHECK-NEXT: %[[R1:.*]] = dist.wait %[[T1]]
// CHECK-NEXT: nn.add %[[R1]], %[[P2]]
func.func @scatter_chain(%x0: tensor<1024x8192xf32>, %x1: tensor<1024x8192xf32>, %x2: tensor<1024x8192xf32>, %x3: tensor<1024x8192xf32>, %w: tensor<8192x1024xf32>) -> tensor<1024x1024xf32> {
  %p0 = nn.matmul %x0, %w : (tensor<1024x8192xf32>, tensor<8192x1024xf32>) -> tensor<1024x1024xf32>
  %p1 = nn.matmul %x1, %w : (tensor<1024x8192xf32>, tensor<8192x1024xf32>) -> tensor<1024x1024xf32>
  %p2 = nn.matmul %x2, %w : (tensor<1024x8192xf32>, tensor<8192x1024xf32>) -> tensor<1024x1024xf32>
  %p3 = nn.matmul %x3, %w : (tensor<1024x8192xf32>, tensor<8192x1024xf32>) -> tensor<1024x1024xf32>
  %t0 = dist.collective_permute_start %p0 on @mesh axes [tp] shift 1 : tensor<1024x1024xf32> -> !dist.token<tensor<1024x1024xf32>>
  %r0 = dist.wait %t0 : !dist.token<tensor<1024x1024xf32>>
  %s1 = nn.add %r0, %p1 : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %t1 = dist.collective_permute_start %s1 on @mesh axes [tp] shift 1 : tensor<1024x1024xf32> -> !dist.token<tensor<1024x1024xf32>>
  %r1 = dist.wait %t1 : !dist.token<tensor<1024x1024xf32>>
  %s2 = nn.add %r1, %p2 : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %t2 = dist.collective_permute_start %s2 on @mesh axes [tp] shift 1 : tensor<1024x1024xf32> -> !dist.token<tensor<1024x1024xf32>>
  %r2 = dist.wait %t2 : !dist.token<tensor<1024x1024xf32>>
  %s3 = nn.add %r2, %p3 : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  return %s3 : tensor<1024x1024xf32>
}
