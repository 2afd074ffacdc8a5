//===- DType.h - element sizes of the program schema's DType ----*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The bytes per element of each program::DType (program.proto), next to the
// schema so the compiler (which writes buffer types) and the runtime (which
// allocates them) read one table. Header-only: it needs nothing but the
// generated enum.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_PROTO_DTYPE_H
#define PARTITA_PROTO_DTYPE_H

#include "partita/proto/program.pb.h"

#include <cstddef>

namespace partita::program {

/// Bytes per element of `dtype` (bool: 1, as program.proto says); 0 for
/// DTYPE_UNSPECIFIED or a value the schema does not define.
constexpr size_t dtypeBytes(DType dtype) {
  switch (dtype) {
  case F32:
  case I32:
    return 4;
  case F16:
  case BF16:
    return 2;
  case I64:
    return 8;
  case I8:
  case BOOL:
    return 1;
  default:
    return 0;
  }
}

} // namespace partita::program

#endif // PARTITA_PROTO_DTYPE_H
