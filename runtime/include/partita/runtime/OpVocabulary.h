//===- OpVocabulary.h - the ops exec-program kernels name -------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// OpVocabulary.def as data: one OpInfo per op, its attributes, and the
// properties its consumers ask about. Header-only and free of MLIR, so the
// compiler (nn traits, fusion, CUDA generator) and the runtime (kernel
// registry, program verifier) read the same table.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_OPVOCABULARY_H
#define PARTITA_RUNTIME_OPVOCABULARY_H

#include <string>
#include <string_view>

namespace partita::runtime {

enum class OpKind { Binary, Compare, Select, Unary, Cast, Copy, Structured };

/// What an elementwise op computes on; bool computes as an integer.
enum class OpTypes { Float, Integer, Any };

enum class OpAttrType { Int, Float, String, Ints, Bool };

struct OpInfo {
  std::string_view name;
  OpKind kind;
  OpTypes types;
  int minOperands;
  int maxOperands; // -1: any number.
  int minResults;
  int maxResults; // -1: any number.

  /// Operands broadcast to the result; each element depends only on the
  /// operand elements at its index.
  constexpr bool isElementwise() const {
    return kind != OpKind::Copy && kind != OpKind::Structured;
  }
  /// May be a step of a kernel's fused epilogue (where has two operands
  /// besides the value, which a step cannot name).
  constexpr bool isEpilogueStep() const {
    return isElementwise() && kind != OpKind::Select;
  }
  /// As an epilogue step, reads an operand buffer besides the value.
  constexpr bool stepTakesOperand() const {
    return kind == OpKind::Binary || kind == OpKind::Compare;
  }
  /// The result's element type may differ from the operands'.
  constexpr bool changesElementType() const {
    return kind == OpKind::Compare || kind == OpKind::Cast;
  }
  constexpr bool computesOnFloats() const { return types != OpTypes::Integer; }
  constexpr bool computesOnIntegers() const { return types != OpTypes::Float; }
};

struct OpAttrInfo {
  std::string_view op;
  const char *name;
  OpAttrType type;
  bool required;
};

inline constexpr OpInfo kOps[] = {
#define PARTITA_OP(NAME, KIND, TYPES, MIN_OPS, MAX_OPS, MIN_RES, MAX_RES)      \
  {NAME, OpKind::KIND, OpTypes::TYPES, MIN_OPS, MAX_OPS, MIN_RES, MAX_RES},
#include "partita/runtime/OpVocabulary.def"
};

inline constexpr OpAttrInfo kOpAttrs[] = {
#define PARTITA_OP_ATTR(OP, NAME, TYPE, REQUIRED)                              \
  {OP, NAME, OpAttrType::TYPE, REQUIRED},
#include "partita/runtime/OpVocabulary.def"
};

/// The op named `name`, or null when no kernel has that name.
constexpr const OpInfo *lookupOp(std::string_view name) {
  for (const OpInfo &op : kOps)
    if (op.name == name)
      return &op;
  return nullptr;
}

/// "2", "1 to 3" or "at least 1": an operand or result count as expected.
inline std::string countRange(int min, int max) {
  if (max < 0)
    return "at least " + std::to_string(min);
  if (min == max)
    return std::to_string(min);
  return std::to_string(min) + " to " + std::to_string(max);
}

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_OPVOCABULARY_H
