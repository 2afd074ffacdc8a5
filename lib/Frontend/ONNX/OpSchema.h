//===- OpSchema.h - the ONNX signature of each supported op -----*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// One table, generated from the `onnx` package's schemas (OpSchemas.py into
// OpSchemas.inc), of every supported op at every schema version in force at
// opsets 13 to 23: how many inputs and outputs a node may have, which may be
// left empty, the type constraint of each, and each attribute's ONNX type.
// The importer checks every node against it before any handler runs, and
// each node's input data types just before its handler runs, so handlers
// may rely on their node's arity, attribute types and operand types.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_LIB_FRONTEND_ONNX_OPSCHEMA_H
#define PARTITA_LIB_FRONTEND_ONNX_OPSCHEMA_H

#include "mlir/IR/Location.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include "onnx/onnx_pb.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace mlir::partita::onnx_import {

/// How a formal input or output may appear in a node: once (never empty),
/// once or not at all (an empty name or a missing trailing one), or as the
/// last parameter repeated (never empty).
enum class ParamKind : uint8_t { Single, Optional, Variadic };

struct OpParam {
  const char *name;
  ParamKind kind;
  /// The type constraint (`T`), shared by every parameter that names it;
  /// empty for a fixed type (`tensor(int64)`) or a heterogeneous variadic.
  const char *group;
  /// Bit `t` set for each ONNX data type `t` the parameter may have.
  uint32_t types;
};

struct OpAttribute {
  const char *name;
  onnx::AttributeProto_AttributeType type;
  bool required;
  /// An INT that ONNX defines as a boolean (keepdims, transA, ...): 0 or 1.
  bool boolean;
};

struct OpSchema {
  const char *opType;
  int64_t sinceVersion;
  int minInputs, maxInputs, minOutputs, maxOutputs;
  std::vector<OpParam> inputs, outputs;
  std::vector<OpAttribute> attributes;

  /// The formal parameter that input (output) `i` of a node binds to.
  const OpParam &input(unsigned i) const;
  const OpParam &output(unsigned i) const;
  const OpAttribute *findAttribute(StringRef name) const;
};

/// No upper bound on a variadic parameter's count.
constexpr int kUnbounded = std::numeric_limits<int>::max();

/// The schema of `opType` in force at `opset` (the largest since-version not
/// above it), or null.
const OpSchema *lookupOpSchema(StringRef opType, int64_t opset);

/// Checks a node's input and output counts, empty names and attributes
/// (unknown, duplicated, of the wrong type, required and missing, booleans
/// out of range) against `schema`, with an error at `loc` for the first
/// problem found.
LogicalResult verifyNodeSignature(const onnx::NodeProto &node,
                                  const OpSchema &schema, Location loc);

/// Checks the data types of a node's present inputs: each allowed by its
/// parameter, and inputs of the same type constraint of the same type.
/// `dataTypeOf(i)` is input i's ONNX data type.
LogicalResult verifyNodeInputTypes(const onnx::NodeProto &node,
                                   const OpSchema &schema,
                                   llvm::function_ref<int(unsigned)> dataTypeOf,
                                   Location loc);

} // namespace mlir::partita::onnx_import

#endif // PARTITA_LIB_FRONTEND_ONNX_OPSCHEMA_H
