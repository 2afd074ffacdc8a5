//===- DimExpr.h - symbolic dimensions that are expressions -----*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Exporters declare dimensions as expressions over other dimensions:
// `past_sequence_length + sequence_length` (optimum), `2*s0`,
// `((s0 - 1)//2) + 1` (torch's dynamo exporter), `batch_size * num_heads`.
// A DimExpr is such a `dim_param` parsed: integer literals, symbols, + - *,
// floor division (`//`, and `/` as torch writes it), unary minus and
// parentheses. Anything else (a function call, an odd character, a literal
// beyond int64, nesting deeper than 64) is not an expression, and the
// importer keeps the text as one plain symbol.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_LIB_FRONTEND_ONNX_DIMEXPR_H
#define PARTITA_LIB_FRONTEND_ONNX_DIMEXPR_H

#include "mlir/Support/LLVM.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mlir::partita::onnx_import {

class DimExpr {
public:
  /// The expression `text` spells, or nullopt when it spells none.
  static std::optional<DimExpr> parse(StringRef text);

  /// Whether the expression is one symbol alone (`batch`, `s0`, `unk__12`).
  bool isSymbol() const {
    return program.size() == 1 && program[0].kind == Step::Symbol;
  }
  /// The symbols it reads, each once, in order of appearance.
  ArrayRef<std::string> getSymbols() const { return symbols; }

  /// Its value, given each symbol's (`valueOf(i)` for getSymbols()[i]); on
  /// division by zero or int64 overflow nullopt with `error` set.
  std::optional<int64_t> evaluate(function_ref<int64_t(unsigned)> valueOf,
                                  std::string &error) const;

private:
  /// Postfix program: operands push, operators pop.
  struct Step {
    enum Kind { Literal, Symbol, Add, Sub, Mul, FloorDiv, Neg } kind;
    int64_t value = 0; // Literal: the value; Symbol: its index.
  };
  friend class DimExprParser;

  SmallVector<Step> program;
  SmallVector<std::string> symbols;
};

} // namespace mlir::partita::onnx_import

#endif // PARTITA_LIB_FRONTEND_ONNX_DIMEXPR_H
