// RUN: partita-opt %s -split-input-file --partita-annotate="mesh=tp=2" | FileCheck %s
// RUN: partita-opt %s -split-input-file --partita-annotate="mesh=tp=2 make-vocab-size-divisible-by=4" | FileCheck %s --check-prefix=BY4
// RUN: partita-opt %s -split-input-file --partita-annotate="mesh=tp=1 make-vocab-size-divisible-by=4" | FileCheck %s --check-prefix=TP1

// A vocabulary of 5 (odd, as GPT-2's 50257) tied between the embedding and
// the LM head: the table is padded with a zero row to 6 (8 when each rank's
// part must be a multiple of 4) and split on its rows; the head reads the
// same padded table through its transpose, split on its columns, and its
// bias is padded too. The logits are sliced back to the vocabulary. Ids in
// [5, 6) move up by the padding and ids in [-6, 0) down by it, so that the
// padded lookup refuses or finds what the unpadded one does.

// CHECK-LABEL: func.func @tied
// CHECK-DAG: %[[TABLE:.*]] = nn.constant #nn.view<"wte.vocab6", dense_resource<wte> : tensor<5x4xf32>, {{\[}}[0:5, zero:1], *]> : tensor<6x4xf32>
// CHECK-DAG: %[[SPLIT:.*]] = dist.annotate %[[TABLE]] sharding<@mesh, [{tp}, {}]>
// CHECK: %[[FIVE:.*]] = nn.constant dense<5> : tensor<i64>
// CHECK: %[[GE5:.*]] = nn.compare ge, %arg0, %[[FIVE]]
// CHECK: %[[SIX:.*]] = nn.constant dense<6> : tensor<i64>
// CHECK: %[[LT6:.*]] = nn.compare lt, %arg0, %[[SIX]]
// CHECK: %[[PADDING:.*]] = nn.and %[[GE5]], %[[LT6]]
// CHECK: %[[MINUS_SIX:.*]] = nn.constant dense<-6> : tensor<i64>
// CHECK: %[[GE_MINUS6:.*]] = nn.compare ge, %arg0, %[[MINUS_SIX]]
// CHECK: %[[LT0:.*]] = nn.compare lt, %arg0, %{{.*}}
// CHECK: %[[NEGATIVE:.*]] = nn.and %[[GE_MINUS6]], %[[LT0]]
// CHECK: %[[UP:.*]] = nn.add %arg0, %{{.*}}
// CHECK: %[[DOWN:.*]] = nn.sub %arg0, %{{.*}}
// CHECK: %[[SHIFTED:.*]] = nn.where %[[NEGATIVE]], %[[DOWN]], %arg0
// CHECK: %[[IDS:.*]] = nn.where %[[PADDING]], %[[UP]], %[[SHIFTED]]
// CHECK: nn.embedding %[[SPLIT]], %[[IDS]] : (tensor<6x4xf32>, tensor<2x3xi64>)
// CHECK-DAG: %[[BIAS:.*]] = nn.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00, 5.000000e+00, 0.000000e+00]> : tensor<6xf32>
// CHECK-DAG: %[[T:.*]] = nn.transpose %[[TABLE]] permutation = [1, 0] : tensor<6x4xf32> -> tensor<4x6xf32>
// CHECK: %[[HEAD:.*]] = dist.annotate %[[T]] sharding<@mesh, [{}, {tp}]>
// CHECK: %[[LOGITS:.*]] = nn.matmul %{{.*}}, %[[HEAD]] bias %[[BIAS]] : {{.*}} -> tensor<2x3x6xf32>
// CHECK: nn.slice %[[LOGITS]] start = [0, 0, 0] limit = [2, 3, 5] stride = [1, 1, 1] : tensor<2x3x6xf32> -> tensor<2x3x5xf32>

// BY4-LABEL: func.func @tied
// BY4: nn.constant #nn.view<"wte.vocab8", dense_resource<wte> : tensor<5x4xf32>, {{\[}}[0:5, zero:3], *]> : tensor<8x4xf32>
// BY4: nn.slice %{{.*}} limit = [2, 3, 5] {{.*}} : tensor<2x3x8xf32> -> tensor<2x3x5xf32>

// Without tp nothing is padded.
// TP1-LABEL: func.func @tied
// TP1-NOT: vocab
// TP1-NOT: nn.slice
func.func @tied(%ids: tensor<2x3xi64>) -> tensor<2x3x5xf32> {
  %table = nn.constant dense_resource<wte> : tensor<5x4xf32>
  %x = nn.embedding %table, %ids : (tensor<5x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %t = nn.transpose %table permutation = [1, 0] : tensor<5x4xf32> -> tensor<4x5xf32>
  %bias = nn.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0]> : tensor<5xf32>
  %logits = nn.matmul %x, %t bias %bias : (tensor<2x3x4xf32>, tensor<4x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  return %logits : tensor<2x3x5xf32>
}

{-#
  dialect_resources: {
    builtin: {
      wte: "0x040000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    }
  }
#-}

// -----

// A trained LM head (a parameter, not a constant) is not padded: it stays
// whole, and a remark says why.
// CHECK: module attributes {dist.remarks = ["LM head 'head': a vocabulary of 5 is not a multiple of 2 and cannot be padded (its weight is not a constant: a trained parameter or a quantized weight); it is replicated over tp=2"]}
// CHECK-LABEL: func.func @parameter
// CHECK-NOT: dist.annotate %arg1
// CHECK: nn.matmul %arg0, %arg1
func.func @parameter(%x: tensor<2x4xf32>, %w: tensor<4x5xf32> {partita.parameter = "head"}) -> tensor<2x5xf32> {
  %logits = nn.matmul %x, %w : (tensor<2x4xf32>, tensor<4x5xf32>) -> tensor<2x5xf32> loc("head")
  return %logits : tensor<2x5xf32>
}
