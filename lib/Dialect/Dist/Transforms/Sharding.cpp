//===- Sharding.cpp - What the sharding passes share ----------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Sharding.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Verifier.h"
#include "partita/Dialect/NN/IR/NNOps.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"
#include <cstring>

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

FailureOr<MeshOp> dist::getModuleMesh(ModuleOp module) {
  MeshOp found;
  for (auto mesh : module.getOps<MeshOp>()) {
    if (found)
      return mesh.emitError()
             << "the sharding passes handle one mesh per module; @"
             << found.getSymName() << " is declared already";
    found = mesh;
  }
  return found;
}

int dist::getAnnotationPriority(AnnotateOp op) {
  if (auto priority = op->getAttrOfType<IntegerAttr>(kPriorityAttr))
    return static_cast<int>(priority.getInt());
  return op->hasAttr(kStrategyAttr) ? kStrategyPriority : kUserPriority;
}

bool dist::isShardable(const ShardingFactor &factor) {
  switch (factor.kind) {
  case FactorKind::Parallel:
  case FactorKind::Lookup:
    return true;
  case FactorKind::Reduction:
    // A mean's blocks would need their counts; a max or min is complete
    // once the op's own all-reduce has combined the blocks' (isSelfReduced).
    return factor.combiner != FactorCombiner::Mean;
  case FactorKind::Normalization:
    // A norm's statistics are sums the op all-reduces itself.
    return factor.splitStatistics;
  default:
    return false;
  }
}

bool dist::isSelfReduced(const ShardingFactor &factor) {
  if (factor.kind == FactorKind::Normalization)
    return factor.splitStatistics;
  return factor.kind == FactorKind::Reduction &&
         (factor.combiner == FactorCombiner::Max ||
          factor.combiner == FactorCombiner::Min);
}

SmallVector<AxisList> dist::projectDim(const ShardingRule &rule,
                                       const DimFactors &factors,
                                       ArrayRef<StringRef> axes, MeshOp mesh) {
  SmallVector<AxisList> out(factors.size());
  unsigned current = 0;
  int64_t remaining = factors.empty() ? 1 : rule.getFactor(factors[0]).size;
  for (StringRef axis : axes) {
    // Skip factors split whole already.
    while (current < factors.size() && remaining == 1) {
      if (++current < factors.size())
        remaining = rule.getFactor(factors[current]).size;
    }
    if (current >= factors.size())
      break;
    std::optional<int64_t> size = mesh.getAxisSize(axis);
    if (!size || remaining % *size != 0)
      break;
    out[current].push_back(axis);
    remaining /= *size;
  }
  return out;
}

AxisList dist::getDimAxes(const ShardingRule &rule, const DimFactors &factors,
                          const FactorAxes &assignment, MeshOp mesh) {
  AxisList axes;
  for (unsigned factor : factors) {
    int64_t split = 1;
    for (StringRef axis : assignment[factor]) {
      axes.push_back(axis);
      split *= mesh.getAxisSize(axis).value_or(1);
    }
    // A minor factor can only be split if this one is split whole.
    if (split != rule.getFactor(factor).size)
      break;
  }
  return axes;
}

bool dist::usesFactor(const ShardingRule &rule, ShardingRule::TensorRef ref,
                      unsigned factor) {
  return llvm::any_of(rule.getTensor(ref), [&](const DimFactors &factors) {
    return llvm::is_contained(factors, factor);
  });
}

ShardingAttr dist::getTensorSharding(const ShardingRule &rule,
                                     ShardingRule::TensorRef ref,
                                     const FactorAxes &assignment, MeshOp mesh,
                                     bool withPartial) {
  const TensorFactors &tensor = rule.getTensor(ref);
  SmallVector<SmallVector<StringRef>> dims;
  llvm::SmallDenseSet<unsigned> present;
  for (const DimFactors &factors : tensor) {
    AxisList axes = getDimAxes(rule, factors, assignment, mesh);
    dims.emplace_back(axes.begin(), axes.end());
    present.insert(factors.begin(), factors.end());
  }
  SmallVector<StringRef> partial;
  if (withPartial) {
    for (unsigned f = 0; f < rule.getNumFactors(); ++f) {
      FactorKind kind = rule.getFactor(f).kind;
      if (present.contains(f) || !isShardable(rule.getFactor(f)) ||
          isSelfReduced(rule.getFactor(f)) ||
          (kind != FactorKind::Reduction && kind != FactorKind::Lookup))
        continue;
      partial.append(assignment[f].begin(), assignment[f].end());
    }
    // Partial axes in mesh order, so equal shardings compare equal.
    SmallVector<StringRef> meshOrder = mesh.getAxisNameRefs();
    llvm::sort(partial, [&](StringRef a, StringRef b) {
      return llvm::find(meshOrder, a) < llvm::find(meshOrder, b);
    });
  }
  return ShardingAttr::get(mesh.getContext(), mesh.getSymName(), dims, partial);
}

FactorAxes dist::inferAssignment(const ShardingRule &rule,
                                 ArrayRef<ShardingAttr> operands,
                                 ArrayRef<ShardingAttr> results, MeshOp mesh) {
  FactorAxes assignment(rule.getNumFactors());
  llvm::SmallDenseSet<unsigned> assigned;
  llvm::StringSet<> used;
  auto take = [&](const TensorFactors &tensor, ShardingAttr sharding,
                  function_ref<bool(unsigned, StringRef)> accept) {
    if (!sharding)
      return;
    for (auto [dim, factors] : llvm::enumerate(tensor)) {
      SmallVector<AxisList> split =
          projectDim(rule, factors, sharding.getAxesOfDim(dim), mesh);
      for (auto [i, factor] : llvm::enumerate(factors)) {
        if (assigned.contains(factor) || split[i].empty() ||
            !isShardable(rule.getFactor(factor)))
          continue;
        AxisList axes;
        for (StringRef axis : split[i]) {
          if (used.contains(axis) || !accept(factor, axis))
            break;
          axes.push_back(axis);
        }
        if (axes.empty())
          continue;
        for (StringRef axis : axes)
          used.insert(axis);
        assignment[factor] = axes;
        assigned.insert(factor);
      }
    }
  };
  for (auto [i, tensor] : llvm::enumerate(rule.getResults()))
    if (i < results.size())
      take(tensor, results[i], [](unsigned, StringRef) { return true; });
  // Partial axes of the results name the reduction and lookup factors'
  // axes.
  llvm::StringSet<> partial;
  for (ShardingAttr result : results)
    if (result)
      for (StringRef axis : result.getPartialAxisNames())
        partial.insert(axis);
  for (auto [i, tensor] : llvm::enumerate(rule.getOperands()))
    if (i < operands.size())
      take(tensor, operands[i], [&](unsigned factor, StringRef axis) {
        FactorKind kind = rule.getFactor(factor).kind;
        // A max or min over a split dimension reduces its blocks itself:
        // reading the operand as it is split is never wrong.
        if (isSelfReduced(rule.getFactor(factor)))
          return true;
        return (kind == FactorKind::Reduction || kind == FactorKind::Lookup) &&
               partial.contains(axis);
      });
  // A factor split where a tensor of the op cannot show it (the minor
  // factor of a merged dimension whose major factors are not split whole:
  // heads split in [b, s * heads, d]) is computed whole; its users slice
  // what they need, which costs nothing.
  for (bool changed = true; changed;) {
    changed = false;
    for (ArrayRef<TensorFactors> tensors :
         {ArrayRef<TensorFactors>(rule.getOperands()),
          ArrayRef<TensorFactors>(rule.getResults())})
      for (const TensorFactors &tensor : tensors)
        for (const DimFactors &factors : tensor) {
          bool whole = true;
          for (unsigned factor : factors) {
            if (!whole && !assignment[factor].empty()) {
              assignment[factor].clear();
              changed = true;
            }
            int64_t split = 1;
            for (StringRef axis : assignment[factor])
              split *= mesh.getAxisSize(axis).value_or(1);
            whole &= split == rule.getFactor(factor).size;
          }
        }
  }
  return assignment;
}

nn::ConstantOp dist::getWeightConstant(Value value, bool throughDequantize) {
  while (Operation *def = value.getDefiningOp()) {
    if (auto constant = dyn_cast<nn::ConstantOp>(def))
      return nn::isWeight(constant.getValue()) ? constant : nn::ConstantOp();
    if (auto dequantize = dyn_cast<nn::DequantizeOp>(def);
        dequantize && throughDequantize) {
      value = dequantize.getPacked();
      continue;
    }
    if (!isa<AnnotateOp, nn::TransposeOp, nn::ReshapeOp>(def))
      return {};
    value = def->getOperand(0);
  }
  return {};
}

ShardingAttr dist::getOperandNeed(const ShardingRule &rule, unsigned index,
                                  const FactorAxes &assignment, MeshOp mesh) {
  ShardingAttr need =
      getTensorSharding(rule, ShardingRule::operand(index), assignment, mesh,
                        /*withPartial=*/false);
  SmallVector<StringRef> partial;
  for (unsigned f = 0; f < rule.getNumFactors(); ++f)
    if (rule.getFactor(f).kind == FactorKind::Reduction &&
        !usesFactor(rule, ShardingRule::operand(index), f))
      partial.append(assignment[f].begin(), assignment[f].end());
  if (partial.empty())
    return need;
  SmallVector<SmallVector<StringRef>> dims;
  for (int64_t d = 0; d < need.getRank(); ++d)
    dims.push_back(need.getAxesOfDim(d));
  return ShardingAttr::get(mesh.getContext(), mesh.getSymName(), dims, partial);
}

ShardingAttr dist::getValueSharding(Value value, MeshOp mesh) {
  auto type = cast<RankedTensorType>(value.getType());
  if (auto arg = dyn_cast<BlockArgument>(value)) {
    if (auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp()))
      if (auto sharding = func.getArgAttrOfType<ShardingAttr>(
              arg.getArgNumber(), kShardingAttr))
        return sharding;
  } else if (Operation *op = value.getDefiningOp()) {
    if (auto annotate = dyn_cast<AnnotateOp>(op))
      return annotate.getSharding();
    if (auto reshard = dyn_cast<ReshardOp>(op))
      return reshard.getSharding();
    if (auto all = op->getAttrOfType<ArrayAttr>(kResultShardingsAttr)) {
      unsigned index = cast<OpResult>(value).getResultNumber();
      if (index < all.size())
        if (auto sharding = dyn_cast<ShardingAttr>(all[index]))
          return sharding;
    }
  }
  return ShardingAttr::getReplicated(mesh.getContext(), mesh.getSymName(),
                                     type.getRank());
}

ElementsAttr dist::permuteAlongDim(ElementsAttr value, int64_t dim,
                                   ArrayRef<int64_t> sourceOf, StringRef name) {
  // A weight is not read: it becomes a view reordering its source.
  if (ElementsAttr view = nn::permuteWeight(value, dim, sourceOf, name))
    return view;
  auto type = cast<RankedTensorType>(value.getType());
  auto dense = dyn_cast<DenseElementsAttr>(value);
  if (!dense || dense.isSplat() || type.getNumElements() == 0)
    return value;
  // An inline value is small (at most kMaxInlineElements elements).
  ArrayRef<char> bytes = dense.getRawData();
  size_t width = bytes.size() / type.getNumElements();
  int64_t outer = 1, inner = 1, size = type.getDimSize(dim);
  for (int64_t d = 0; d < dim; ++d)
    outer *= type.getDimSize(d);
  for (int64_t d = dim + 1; d < type.getRank(); ++d)
    inner *= type.getDimSize(d);
  size_t run = inner * width;
  std::vector<char> out(bytes.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < size; ++i)
      std::memcpy(out.data() + (o * size + i) * run,
                  bytes.data() + (o * size + sourceOf[i]) * run, run);
  return DenseElementsAttr::getFromRawBuffer(type, out);
}

ElementsAttr dist::padAlongDim(ElementsAttr value, int64_t dim, int64_t size,
                               StringRef name) {
  // A weight is not read: it becomes a view ending in a zero run.
  if (ElementsAttr view = nn::padWeight(value, dim, size, name))
    return view;
  auto type = cast<RankedTensorType>(value.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape[dim] = size;
  auto padded = type.clone(shape);
  auto dense = dyn_cast<DenseElementsAttr>(value);
  if (!dense || type.getElementTypeBitWidth() % 8 != 0)
    return {};
  // An inline value is small (at most kMaxInlineElements elements).
  size_t width = type.getElementTypeBitWidth() / 8;
  ArrayRef<char> bytes = dense.getRawData();
  int64_t outer = 1, inner = 1, from = type.getDimSize(dim);
  for (int64_t d = 0; d < dim; ++d)
    outer *= type.getDimSize(d);
  for (int64_t d = dim + 1; d < type.getRank(); ++d)
    inner *= type.getDimSize(d);
  std::vector<char> out(size_t(outer * size * inner) * width, 0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < from * inner; ++i) {
      // A splat's raw data is its one element.
      size_t at = dense.isSplat() ? 0 : size_t(o * from * inner + i) * width;
      std::memcpy(out.data() + size_t(o * size * inner + i) * width,
                  bytes.data() + at, width);
    }
  return DenseElementsAttr::getFromRawBuffer(padded, out);
}

Value dist::scalarConstant(OpBuilder &b, Location loc, Type element,
                           double value) {
  auto type = RankedTensorType::get({}, element);
  Attribute attr;
  if (auto floatType = dyn_cast<FloatType>(element))
    attr = DenseElementsAttr::get(type, b.getFloatAttr(floatType, value));
  else
    attr = DenseElementsAttr::get(
        type, b.getIntegerAttr(element, static_cast<int64_t>(value)));
  return nn::ConstantOp::create(b, loc, cast<ElementsAttr>(attr));
}

Value dist::indicesWithin(OpBuilder &b, Location loc, Value indices,
                          int64_t low, int64_t high) {
  auto type = cast<RankedTensorType>(indices.getType());
  auto boolType = type.clone(b.getI1Type());
  // Operands are built one statement at a time: argument evaluation order
  // is unspecified, and the IR must not depend on the host compiler.
  Value atLeast = nn::CompareOp::create(
      b, loc, boolType, nn::CompareDirection::GE, indices,
      scalarConstant(b, loc, type.getElementType(), double(low)));
  Value below = nn::CompareOp::create(
      b, loc, boolType, nn::CompareDirection::LT, indices,
      scalarConstant(b, loc, type.getElementType(), double(high)));
  return nn::AndOp::create(b, loc, atLeast, below);
}

LogicalResult dist::fitShapeAttributes(Operation *clone, Operation *original) {
  if (auto slice = dyn_cast<nn::SliceOp>(clone)) {
    SmallVector<int64_t> limit(slice.getLimit());
    auto in = cast<RankedTensorType>(slice.getInput().getType());
    auto before = cast<RankedTensorType>(original->getOperand(0).getType());
    for (int64_t d = 0; d < in.getRank(); ++d)
      if (in.getDimSize(d) != before.getDimSize(d))
        limit[d] = in.getDimSize(d);
    slice.setLimit(limit);
  }
  return mlir::verify(clone);
}

std::string dist::formatSharding(ShardingAttr sharding) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "[";
  for (int64_t dim = 0; dim < sharding.getRank(); ++dim) {
    os << (dim ? ", {" : "{");
    llvm::interleaveComma(sharding.getAxesOfDim(dim), os);
    os << "}";
  }
  os << "]";
  if (sharding.isPartial()) {
    os << " partial [";
    llvm::interleaveComma(sharding.getPartialAxisNames(), os);
    os << "]";
  }
  return text;
}
