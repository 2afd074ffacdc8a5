//===- DimExpr.cpp - symbolic dimensions that are expressions -------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "DimExpr.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/CheckedArithmetic.h"

#include <cctype>

using namespace mlir;
using namespace mlir::partita::onnx_import;

namespace mlir::partita::onnx_import {

/// Recursive descent over
///   expr    := term (('+' | '-') term)*
///   term    := unary (('*' | '/' | '//') unary)*
///   unary   := '-' unary | primary
///   primary := integer | identifier | '(' expr ')'
/// with identifiers [A-Za-z_][A-Za-z0-9_]*.
class DimExprParser {
public:
  DimExprParser(StringRef text, DimExpr &expr) : text(text), expr(expr) {}

  bool parse() {
    if (!parseExpr())
      return false;
    skipSpaces();
    return pos == text.size();
  }

private:
  void skipSpaces() {
    while (pos < text.size() &&
           std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
  }
  bool consume(char c) {
    skipSpaces();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  void emit(DimExpr::Step::Kind kind, int64_t value = 0) {
    expr.program.push_back({kind, value});
  }

  bool parseExpr() {
    if (!parseTerm())
      return false;
    while (true) {
      if (consume('+')) {
        if (!parseTerm())
          return false;
        emit(DimExpr::Step::Add);
      } else if (consume('-')) {
        if (!parseTerm())
          return false;
        emit(DimExpr::Step::Sub);
      } else {
        return true;
      }
    }
  }

  bool parseTerm() {
    if (!parseUnary())
      return false;
    while (true) {
      if (consume('*')) {
        if (!parseUnary())
          return false;
        emit(DimExpr::Step::Mul);
      } else if (consume('/')) {
        consume('/'); // `//` and `/` both floor-divide.
        if (!parseUnary())
          return false;
        emit(DimExpr::Step::FloorDiv);
      } else {
        return true;
      }
    }
  }

  bool parseUnary() {
    if (consume('-')) {
      DepthGuard guard(depth);
      if (!guard.ok() || !parseUnary())
        return false;
      emit(DimExpr::Step::Neg);
      return true;
    }
    return parsePrimary();
  }

  bool parsePrimary() {
    skipSpaces();
    if (pos >= text.size())
      return false;
    if (consume('(')) {
      DepthGuard guard(depth);
      if (!guard.ok() || !parseExpr())
        return false;
      return consume(')');
    }
    char c = text[pos];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t value = 0;
      while (pos < text.size() &&
             std::isdigit(static_cast<unsigned char>(text[pos]))) {
        std::optional<int64_t> next = llvm::checkedMul<int64_t>(value, 10);
        if (next)
          next = llvm::checkedAdd<int64_t>(*next, text[pos] - '0');
        if (!next)
          return false;
        value = *next;
        ++pos;
      }
      emit(DimExpr::Step::Literal, value);
      return true;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos;
      while (pos < text.size() &&
             (std::isalnum(static_cast<unsigned char>(text[pos])) ||
              text[pos] == '_'))
        ++pos;
      std::string name = text.slice(start, pos).str();
      auto *it = llvm::find(expr.symbols, name);
      if (it == expr.symbols.end()) {
        expr.symbols.push_back(name);
        it = expr.symbols.end() - 1;
      }
      emit(DimExpr::Step::Symbol, it - expr.symbols.begin());
      return true;
    }
    return false;
  }

  /// Nesting (parentheses, unary minus) deeper than this is not a
  /// dimension expression: a model's text must not exhaust the stack.
  static constexpr unsigned kMaxDepth = 64;
  struct DepthGuard {
    explicit DepthGuard(unsigned &depth) : depth(depth) { ++depth; }
    ~DepthGuard() { --depth; }
    bool ok() const { return depth <= kMaxDepth; }
    unsigned &depth;
  };

  StringRef text;
  DimExpr &expr;
  size_t pos = 0;
  unsigned depth = 0;
};

} // namespace mlir::partita::onnx_import

std::optional<DimExpr> DimExpr::parse(StringRef text) {
  DimExpr expr;
  DimExprParser parser(text, expr);
  if (!parser.parse())
    return std::nullopt;
  return expr;
}

std::optional<int64_t>
DimExpr::evaluate(function_ref<int64_t(unsigned)> valueOf,
                  std::string &error) const {
  SmallVector<int64_t> stack;
  for (const Step &step : program) {
    if (step.kind == Step::Literal) {
      stack.push_back(step.value);
      continue;
    }
    if (step.kind == Step::Symbol) {
      stack.push_back(valueOf(step.value));
      continue;
    }
    if (step.kind == Step::Neg) {
      std::optional<int64_t> v = llvm::checkedSub<int64_t>(0, stack.back());
      if (!v)
        return error = "it overflows int64", std::nullopt;
      stack.back() = *v;
      continue;
    }
    int64_t rhs = stack.pop_back_val(), lhs = stack.back();
    std::optional<int64_t> v;
    switch (step.kind) {
    case Step::Add:
      v = llvm::checkedAdd(lhs, rhs);
      break;
    case Step::Sub:
      v = llvm::checkedSub(lhs, rhs);
      break;
    case Step::Mul:
      v = llvm::checkedMul(lhs, rhs);
      break;
    default: // FloorDiv, rounding toward negative infinity as Python does.
      if (rhs == 0)
        return error = "it divides by zero", std::nullopt;
      if (lhs == INT64_MIN && rhs == -1)
        break;
      v = lhs / rhs;
      if ((lhs % rhs != 0) && ((lhs < 0) != (rhs < 0)))
        --*v;
      break;
    }
    if (!v)
      return error = "it overflows int64", std::nullopt;
    stack.back() = *v;
  }
  return stack.back();
}
