//===- AxisSyntax.cpp - how dist prints mesh axis names -------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "AxisSyntax.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace mlir::partita::dist;

bool syntax::isAxisIdentifier(StringRef name) {
  if (name.empty() || !(llvm::isAlpha(name.front()) || name.front() == '_'))
    return false;
  return llvm::all_of(name.drop_front(),
                      [](char c) { return llvm::isAlnum(c) || c == '_'; });
}

ParseResult syntax::parseAxis(AsmParser &parser, StringAttr &axis) {
  std::string name;
  if (parser.parseKeywordOrString(&name))
    return failure();
  axis = parser.getBuilder().getStringAttr(name);
  return success();
}

namespace {

ParseResult parseAxes(AsmParser &parser, AsmParser::Delimiter delimiter,
                      SmallVectorImpl<StringAttr> &axes) {
  return parser.parseCommaSeparatedList(delimiter, [&]() -> ParseResult {
    StringAttr axis;
    if (syntax::parseAxis(parser, axis))
      return failure();
    axes.push_back(axis);
    return success();
  });
}

void printAxes(AsmPrinter &printer, char open, char close,
               ArrayRef<StringAttr> axes) {
  printer << open;
  llvm::interleaveComma(axes, printer, [&](StringAttr axis) {
    syntax::printAxis(printer, axis.getValue());
  });
  printer << close;
}

} // namespace

ParseResult syntax::parseAxisArray(AsmParser &parser,
                                   SmallVectorImpl<StringAttr> &axes) {
  return parseAxes(parser, AsmParser::Delimiter::Square, axes);
}

ParseResult syntax::parseAxisSet(AsmParser &parser,
                                 SmallVectorImpl<StringAttr> &axes) {
  return parseAxes(parser, AsmParser::Delimiter::Braces, axes);
}

void syntax::printAxis(AsmPrinter &printer, StringRef axis) {
  printer.printKeywordOrString(axis);
}

void syntax::printAxisArray(AsmPrinter &printer, ArrayRef<StringAttr> axes) {
  printAxes(printer, '[', ']', axes);
}

void syntax::printAxisSet(AsmPrinter &printer, ArrayRef<StringAttr> axes) {
  printAxes(printer, '{', '}', axes);
}
