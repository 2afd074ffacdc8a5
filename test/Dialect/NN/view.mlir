// RUN: partita-opt %s --split-input-file | FileCheck %s
// RUN: partita-opt %s --split-input-file | partita-opt --split-input-file | FileCheck %s

// A view prints its name, its source with the source's type, one list of
// runs per dimension (`*` for all of it) and its own type after it.
// CHECK-LABEL: func.func @qkv
// CHECK: nn.constant #nn.view<"w.qkv", dense_resource<w> : tensor<2x6xf32>, [*, [0:1, 2:1, 4:1, 1:1, 3:1, 5:1]]> : tensor<2x6xbf16>
// CHECK: nn.constant #nn.view<"w.half", dense_resource<w> : tensor<2x6xf32>, {{\[}}[1:1], [3:3]]> : tensor<1x3xf32>
func.func @qkv() -> (tensor<2x6xbf16>, tensor<1x3xf32>) {
  %a = nn.constant #nn.view<"w.qkv", dense_resource<w> : tensor<2x6xf32>, [*, [0:1, 2:1, 4:1, 1:1, 3:1, 5:1]]> : tensor<2x6xbf16>
  %b = nn.constant #nn.view<"w.half", dense_resource<w> : tensor<2x6xf32>, [[1:1], [3:3]]> : tensor<1x3xf32>
  return %a, %b : tensor<2x6xbf16>, tensor<1x3xf32>
}

{-#
  dialect_resources: {
    builtin: {
      w: "0x04000000000000000000803F000000400000404000008040"
    }
  }
#-}

// -----

// A zero run (`zero:n`) lists indices that read zeros: a vocabulary
// padded for tp.
// CHECK-LABEL: func.func @padded
// CHECK: nn.constant #nn.view<"w.vocab4", dense_resource<w> : tensor<2x3xf32>, [*, [0:3, zero:1]]> : tensor<2x4xf32>
func.func @padded() -> tensor<2x4xf32> {
  %a = nn.constant #nn.view<"w.vocab4", dense_resource<w> : tensor<2x3xf32>, [*, [0:3, zero:1]]> : tensor<2x4xf32>
  return %a : tensor<2x4xf32>
}

{-#
  dialect_resources: {
    builtin: {
      w: "0x04000000000000000000803F000000400000404000008040"
    }
  }
#-}
