//===- NNAttrs.td - nn dialect attributes ------------------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_NN_IR_NNATTRS_TD
#define PARTITA_DIALECT_NN_IR_NNATTRS_TD

include "partita/Dialect/NN/IR/NNBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

class NN_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<NN_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def NN_WeightViewAttr : NN_Attr<"WeightView", "view", [ElementsAttrInterface]> {
  let summary = "A weight described by where its elements come from";
  let description = [{
    A weight the compiler has reordered, sliced or converted, without
    copying it: the elements of `source` (a `dense_resource` blob, usually
    the model's mapped bytes), picked along each dimension by a list of
    runs of indices, and converted to the view's element type. Index `i`
    of the view along dimension `d` is the `i`-th index the runs of `d`
    list; `*` stands for all of the dimension, in order; a run
    `zero:n` lists `n` indices that read zeros (a vocabulary padded to a
    multiple of tp, as Megatron-LM pads it). The bytes are
    only read when the artifact writer streams the weight into its
    safetensors file, so compiling never holds a copy of a weight.

    `name` is the tensor's name in the artifact (each distinct view has its
    own). The elements cannot be read through `ElementsAttr` (folders leave
    views alone).

    ```mlir
    // The fused QKV weight of 2 heads groups, its columns reordered so
    // that each tp rank's block holds its q, k and v columns, in bf16.
    %w = nn.constant #nn.view<"h0.qkv.w.qkv", dense_resource<h0.qkv.w>
        : tensor<64x192xf32>, [*, [0:32, 64:32, 128:32, 32:32, 96:32,
        160:32]]> : tensor<64x192xbf16>
    ```

    **Constraints**

    1. `view_c1`: `name` is not empty, and `source` has a blob.
    2. `view_c2`: `source` has the view's rank, and one list of runs per
       dimension.
    3. `view_c3`: the element types are equal, or `source` is `f32` and the
       view `bf16` or `f16`.
    4. `view_c4`: every run has a positive length and lies inside its
       dimension of `source` (a zero run reads no source index); the runs
       of a dimension list as many indices as the view's dimension has
       (`*`: the view's and the source's dimension are equal).
  }];
  let parameters = (ins
    AttributeSelfTypeParameter<"", "::mlir::ShapedType">:$type,
    "::mlir::StringAttr":$name,
    "::mlir::DenseResourceElementsAttr":$source,
    // One entry per dimension: the runs as flattened (start, length) pairs;
    // empty for all of the dimension.
    "::mlir::ArrayAttr":$index
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The runs of dimension `dim` (all of it when the list is `*`).
    ::partita::runtime::IndexRuns getRuns(int64_t dim) const;
    /// Whether the view converts its source's elements.
    bool isConverted() const {
      return getType().getElementType() !=
             getSource().getType().getElementType();
    }
  }];
}

#endif // PARTITA_DIALECT_NN_IR_NNATTRS_TD
