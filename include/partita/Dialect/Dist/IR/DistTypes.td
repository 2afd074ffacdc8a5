//===- DistTypes.td - dist dialect types -------------------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_DIST_IR_DISTTYPES_TD
#define PARTITA_DIALECT_DIST_IR_DISTTYPES_TD

include "partita/Dialect/Dist/IR/DistBase.td"

def Dist_TokenType : Dist_Type<"Token", "token"> {
  let summary = "A communication in flight";
  let description = [{
    `!dist.token<T>` stands for a collective or point-to-point transfer that a
    `dist.<op>_start` op began and that has not finished yet. Its parameter
    is what finishing it yields: the tensor type `dist.wait` returns, or
    `none` for a send, which yields nothing. Carrying the payload type keeps
    `dist.wait` self-describing, so a scheduler can move a wait without
    looking up its start.

    ```mlir
    %t = dist.all_reduce_start sum %x on @mesh axes [tp]
        : tensor<4x8xf32> -> !dist.token<tensor<4x8xf32>>
    %r = dist.wait %t : !dist.token<tensor<4x8xf32>>
    ```

    **Constraints**

    1. `token_c1`: the payload is a statically shaped tensor type or `none`.
  }];
  let parameters = (ins "::mlir::Type":$payload);
  let assemblyFormat = "`<` $payload `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// True when waiting yields a tensor (false for sends).
    bool hasPayload() const {
      return ::llvm::isa<::mlir::RankedTensorType>(getPayload());
    }
  }];
}

#endif // PARTITA_DIALECT_DIST_IR_DISTTYPES_TD
