//===- WeightView.cpp - #nn.view: weights described, not copied -----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "partita/Dialect/NN/IR/NNDialect.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::partita::nn;
namespace rt = ::partita::runtime;

#define GET_ATTRDEF_CLASSES
#include "partita/Dialect/NN/IR/NNAttrs.cpp.inc"

void NNDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "partita/Dialect/NN/IR/NNAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// WeightViewAttr
//===----------------------------------------------------------------------===//

/// The index entry of a dimension read as `runs` (all of it when `whole`).
static ArrayAttr buildIndex(MLIRContext *context, ArrayRef<rt::IndexRuns> runs,
                            ArrayRef<int64_t> sourceShape) {
  SmallVector<Attribute> dims;
  for (auto [dim, list] : llvm::enumerate(runs)) {
    SmallVector<int64_t> pairs;
    if (!rt::isWholeRuns(list, sourceShape[dim]))
      for (const rt::IndexRun &run : list) {
        pairs.push_back(run.start);
        pairs.push_back(run.length);
      }
    dims.push_back(DenseI64ArrayAttr::get(context, pairs));
  }
  return ArrayAttr::get(context, dims);
}

rt::IndexRuns WeightViewAttr::getRuns(int64_t dim) const {
  ArrayRef<int64_t> pairs = cast<DenseI64ArrayAttr>(getIndex()[dim]);
  if (pairs.empty())
    return rt::wholeRuns(getSource().getType().getDimSize(dim));
  rt::IndexRuns runs;
  for (size_t i = 0; i + 1 < pairs.size(); i += 2)
    runs.push_back({pairs[i], pairs[i + 1]});
  return runs;
}

LogicalResult
WeightViewAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                       ShapedType type, StringAttr name,
                       DenseResourceElementsAttr source, ArrayAttr index) {
  if (!name || name.getValue().empty())
    return emitError() << "view_c1: a view needs a name";
  if (!source)
    return emitError() << "view_c1: a view needs a dense_resource source";
  auto sourceType = source.getType();
  if (!type.hasRank() || type.getRank() != sourceType.getRank() ||
      static_cast<int64_t>(index.size()) != type.getRank())
    return emitError() << "view_c2: a view of rank " << type.getRank()
                       << " of a source of rank " << sourceType.getRank()
                       << " needs one list of runs per dimension, not "
                       << index.size();
  Type from = sourceType.getElementType(), to = type.getElementType();
  if (from != to && !(from.isF32() && (to.isBF16() || to.isF16())))
    return emitError() << "view_c3: a view cannot convert " << from << " to "
                       << to;
  for (auto [dim, entry] : llvm::enumerate(index)) {
    auto pairs = dyn_cast<DenseI64ArrayAttr>(entry);
    if (!pairs || pairs.size() % 2 != 0)
      return emitError() << "view_c4: the runs of dimension " << dim
                         << " are not (start, length) pairs";
    int64_t size = sourceType.getDimSize(dim);
    ArrayRef<int64_t> list = pairs.asArrayRef();
    int64_t listed = list.empty() ? size : 0;
    for (size_t i = 0; i + 1 < list.size(); i += 2) {
      int64_t start = list[i], length = list[i + 1];
      if (start == rt::kZeroRunStart) {
        if (length <= 0)
          return emitError() << "view_c4: a zero run of dimension " << dim
                             << " has length " << length;
        listed += length;
        continue;
      }
      if (length <= 0 || start < 0 || start > size - length)
        return emitError() << "view_c4: run " << start << ":" << length
                           << " of dimension " << dim
                           << " is not inside the source's " << size;
      listed += length;
    }
    if (listed != type.getDimSize(dim))
      return emitError() << "view_c4: the runs of dimension " << dim << " list "
                         << listed << " indices for a dimension of size "
                         << type.getDimSize(dim);
  }
  return success();
}

Attribute WeightViewAttr::parse(AsmParser &parser, Type type) {
  MLIRContext *context = parser.getContext();
  SMLoc loc = parser.getCurrentLocation();
  std::string name;
  DenseResourceElementsAttr source;
  if (parser.parseLess() || parser.parseString(&name) || parser.parseComma() ||
      parser.parseAttribute(source) || parser.parseComma())
    return {};
  SmallVector<Attribute> index;
  auto parseDim = [&]() -> ParseResult {
    SmallVector<int64_t> pairs;
    if (succeeded(parser.parseOptionalStar())) {
      index.push_back(DenseI64ArrayAttr::get(context, pairs));
      return success();
    }
    auto parseRun = [&]() -> ParseResult {
      int64_t start = rt::kZeroRunStart, length = 0;
      if (failed(parser.parseOptionalKeyword("zero")) &&
          parser.parseInteger(start))
        return failure();
      if (parser.parseColon() || parser.parseInteger(length))
        return failure();
      pairs.push_back(start);
      pairs.push_back(length);
      return success();
    };
    if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseRun))
      return failure();
    index.push_back(DenseI64ArrayAttr::get(context, pairs));
    return success();
  };
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseDim) ||
      parser.parseGreater())
    return {};
  auto shaped = dyn_cast_if_present<ShapedType>(type);
  if (!shaped) {
    parser.emitError(loc) << "#nn.view needs its type: `: tensor<...>`";
    return {};
  }
  return parser.getChecked<WeightViewAttr>(
      loc, context, shaped, StringAttr::get(context, name), source,
      ArrayAttr::get(context, index));
}

void WeightViewAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printer.printString(getName().getValue());
  printer << ", ";
  printer.printAttribute(getSource());
  printer << ", [";
  llvm::interleaveComma(getIndex(), printer, [&](Attribute entry) {
    ArrayRef<int64_t> pairs = cast<DenseI64ArrayAttr>(entry);
    if (pairs.empty()) {
      printer << "*";
      return;
    }
    printer << "[";
    for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
      printer << (i ? ", " : "");
      if (pairs[i] == rt::kZeroRunStart)
        printer << "zero";
      else
        printer << pairs[i];
      printer << ":" << pairs[i + 1];
    }
    printer << "]";
  });
  printer << "]>";
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

bool mlir::partita::nn::isWeight(ElementsAttr value) {
  return isa_and_present<DenseResourceElementsAttr, WeightViewAttr>(value);
}

StringRef mlir::partita::nn::getWeightName(ElementsAttr value) {
  if (auto resource = dyn_cast_if_present<DenseResourceElementsAttr>(value))
    return resource.getRawHandle().getKey();
  if (auto view = dyn_cast_if_present<WeightViewAttr>(value))
    return view.getName().getValue();
  return "";
}

/// `value` as a view: a blob as the view of all of it.
static WeightViewAttr asView(ElementsAttr value) {
  if (auto view = dyn_cast_if_present<WeightViewAttr>(value))
    return view;
  auto resource = dyn_cast_if_present<DenseResourceElementsAttr>(value);
  if (!resource)
    return {};
  MLIRContext *context = resource.getContext();
  SmallVector<Attribute> whole(resource.getType().getRank(),
                               DenseI64ArrayAttr::get(context, {}));
  return WeightViewAttr::get(
      context, resource.getType(),
      StringAttr::get(context, resource.getRawHandle().getKey()), resource,
      ArrayAttr::get(context, whole));
}

ElementsAttr mlir::partita::nn::convertWeight(ElementsAttr value,
                                              Type elementType) {
  WeightViewAttr view = asView(value);
  if (!view)
    return {};
  return WeightViewAttr::get(view.getContext(),
                             view.getType().clone(elementType), view.getName(),
                             view.getSource(), view.getIndex());
}

/// The runs of every dimension of `view`.
static SmallVector<rt::IndexRuns> runsOfView(WeightViewAttr view) {
  SmallVector<rt::IndexRuns> runs;
  for (int64_t d = 0; d < view.getType().getRank(); ++d)
    runs.push_back(view.getRuns(d));
  return runs;
}

/// A view of `view`'s source named `name`, of `type`, reading `runs`.
static WeightViewAttr withRuns(WeightViewAttr view, ShapedType type,
                               StringRef name, ArrayRef<rt::IndexRuns> runs) {
  MLIRContext *context = view.getContext();
  return WeightViewAttr::get(
      context, type, StringAttr::get(context, name), view.getSource(),
      buildIndex(context, runs, view.getSource().getType().getShape()));
}

ElementsAttr mlir::partita::nn::permuteWeight(ElementsAttr value, int64_t dim,
                                              ArrayRef<int64_t> sourceOf,
                                              StringRef name) {
  WeightViewAttr view = asView(value);
  if (!view)
    return {};
  SmallVector<rt::IndexRuns> runs = runsOfView(view);
  runs[dim] = rt::composeRuns(
      runs[dim],
      rt::runsOf(std::vector<int64_t>(sourceOf.begin(), sourceOf.end())));
  return withRuns(view, view.getType(), name, runs);
}

ElementsAttr mlir::partita::nn::padWeight(ElementsAttr value, int64_t dim,
                                          int64_t size, StringRef name) {
  WeightViewAttr view = asView(value);
  if (!view)
    return {};
  SmallVector<rt::IndexRuns> runs = runsOfView(view);
  SmallVector<int64_t> shape(view.getType().getShape());
  rt::appendRun(runs[dim], {rt::kZeroRunStart, size - shape[dim]});
  shape[dim] = size;
  return withRuns(view, view.getType().clone(shape), name, runs);
}
