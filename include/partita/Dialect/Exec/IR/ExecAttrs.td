//===- ExecAttrs.td - exec dialect attributes --------------*- tablegen -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_EXEC_IR_EXECATTRS_TD
#define PARTITA_DIALECT_EXEC_IR_EXECATTRS_TD

include "partita/Dialect/Exec/IR/ExecBase.td"

// A string parameter that may be omitted (empty by default).
class Exec_OptionalString<string desc> : StringRefParameter<desc, "\"\""> {
  let parser = "::mlir::FieldParser<std::string>::parse($_parser)";
}

def Exec_BufferAttr : Exec_Attr<"Buffer", "buffer"> {
  let summary = "The buffer of a value in a rank's program, as planned";
  let description = [{
    `--partita-plan-buffers` gives every value that occupies memory a
    `#exec.buffer`: its id in `Program.buffers`, its kind (`input`,
    `output`, `weight`, `constant` for inline data, `activation` in the
    arena, `alias` for a view of buffer `alias_of`), for a weight the tensor
    name in the rank's safetensors files, for an activation its arena
    `offset` and lifetime: the instruction that first writes it and the last
    that reads it (through views too), counted in program order, and for an
    alias the byte `offset` where the view starts in `alias_of` (0 for a
    reshape; a block of leading rows starts further in). Function
    arguments carry it as the argument attribute `exec.buffer`, op results
    as the op attribute `exec.buffers` (one per result).

    ```mlir
    %0 = nn.relu %x {exec.buffers = [#exec.buffer<id = 1, kind = activation,
        offset = 0, first_write = 0, last_read = 2>]} : tensor<4xf32>
    ```

    **Constraints**

    1. `buffer_c1`: `id` is non-negative.
    2. `buffer_c2`: an `alias` names a non-negative `alias_of` other than
       itself; a `weight` has a non-empty name.
    3. `buffer_c3`: an `activation`'s offset is a multiple of 64 and
       `first_write <= last_read`.
    4. `buffer_c4`: an offset is non-negative, and only an `activation` or
       an `alias` has one.
  }];
  let parameters = (ins
    "int64_t":$id,
    "::mlir::partita::exec::BufferKind":$kind,
    DefaultValuedParameter<"int64_t", "0">:$offset,
    DefaultValuedParameter<"int64_t", "-1">:$first_write,
    DefaultValuedParameter<"int64_t", "-1">:$last_read,
    DefaultValuedParameter<"int64_t", "-1">:$alias_of,
    Exec_OptionalString<"the weight's name">:$weight
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // PARTITA_DIALECT_EXEC_IR_EXECATTRS_TD
