//===- AxisSyntax.h - how dist prints mesh axis names -----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Mesh axis names appear in the mesh op, the sharding attribute and every
// collective; they share one spelling: a bare identifier (`tp`), or a quoted
// string for a name that is not one, so that any IR round-trips.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_LIB_DIALECT_DIST_IR_AXISSYNTAX_H
#define PARTITA_LIB_DIALECT_DIST_IR_AXISSYNTAX_H

#include "mlir/IR/OpImplementation.h"

namespace mlir::partita::dist::syntax {

/// True when `name` is a letter or `_` followed by letters, digits or `_`.
bool isAxisIdentifier(StringRef name);

/// Parses one axis name.
ParseResult parseAxis(AsmParser &parser, StringAttr &axis);

/// Parses `[` (axis (`,` axis)*)? `]`.
ParseResult parseAxisArray(AsmParser &parser,
                           SmallVectorImpl<StringAttr> &axes);

/// Parses `{` (axis (`,` axis)*)? `}`, the axes splitting one dimension.
ParseResult parseAxisSet(AsmParser &parser, SmallVectorImpl<StringAttr> &axes);

/// Prints one axis name.
void printAxis(AsmPrinter &printer, StringRef axis);

/// Prints `[` (axis (`,` axis)*)? `]`.
void printAxisArray(AsmPrinter &printer, ArrayRef<StringAttr> axes);

/// Prints `{` (axis (`,` axis)*)? `}`.
void printAxisSet(AsmPrinter &printer, ArrayRef<StringAttr> axes);

} // namespace mlir::partita::dist::syntax

#endif // PARTITA_LIB_DIALECT_DIST_IR_AXISSYNTAX_H
