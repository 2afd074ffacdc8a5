//===- KvCache.cpp - a decoder's keys and values as resident state --------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/BitVector.h"

namespace mlir::partita {
#define GEN_PASS_DEF_KVCACHEPASS
#include "partita/Dialect/NN/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

namespace {

constexpr StringLiteral kNameAttr = "onnx.name";

/// A returned `concat(past, new)` whose `past` is an argument read by
/// nothing else; or a returned `kv_cache_write(concat(past, fill), new,
/// positions)` with a constant `fill` (`write` set): the importer's form of a
/// cache whose rows write at their own positions (GroupQueryAttention's decode
/// step), where the cache replaces the padded past and the write keeps its
/// positions.
struct CachePair {
  unsigned result;
  BlockArgument past;
  nn::ConcatOp concat;
  nn::KvCacheWriteOp write;
};

/// `value`'s `concat(past, x)` whose past is an argument of `body` that
/// nothing else reads, or null.
nn::ConcatOp concatOfPast(Value value, Block &body) {
  auto concat = value.getDefiningOp<nn::ConcatOp>();
  if (!concat || concat.getInputs().size() != 2)
    return {};
  auto past = dyn_cast<BlockArgument>(concat.getInputs()[0]);
  if (!past || past.getOwner() != &body ||
      !llvm::all_of(past.getUsers(),
                    [&](Operation *user) { return user == concat; }))
    return {};
  return concat;
}

std::string nameOf(func::FuncOp func, unsigned result) {
  if (auto name = func.getResultAttrOfType<StringAttr>(result, kNameAttr))
    return name.str();
  return "result " + std::to_string(result);
}

struct KvCachePass : mlir::partita::impl::KvCachePassBase<KvCachePass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (maxSeq <= 0) {
      func.emitError() << "partita-kv-cache needs max-seq > 0";
      return signalPassFailure();
    }
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    SmallVector<CachePair> pairs;
    Block &body = func.getBody().front();
    for (OpOperand &operand : ret->getOpOperands()) {
      auto write = operand.get().getDefiningOp<nn::KvCacheWriteOp>();
      nn::ConcatOp concat =
          concatOfPast(write ? write.getCache() : operand.get(), body);
      // The padded past's new slots: a constant (the importer's zeros).
      if (!concat ||
          (write &&
           (!concat->hasOneUse() || concat.getAxis() != write.getAxis() ||
            !concat.getInputs()[1].getDefiningOp<nn::ConstantOp>())))
        continue;
      pairs.push_back({operand.getOperandNumber(),
                       cast<BlockArgument>(concat.getInputs()[0]), concat,
                       write});
    }
    if (pairs.empty()) {
      func.emitError()
          << "--max-seq: the model keeps no KV cache: none of its outputs "
             "is an input concatenated with new keys or values (export the "
             "decoder with past key values, e.g. optimum's "
             "text-generation-with-past)";
      return signalPassFailure();
    }

    OpBuilder b(func.getContext());
    Location loc = func.getLoc();
    // The slot of the program's first token, shared by every cache that
    // does not write at positions of its own.
    Value position;
    if (llvm::any_of(pairs,
                     [](const CachePair &pair) { return !pair.write; })) {
      auto positionType = RankedTensorType::get({1}, b.getI64Type());
      unsigned positionIndex = func.getNumArguments();
      if (failed(func.insertArgument(
              positionIndex, positionType,
              b.getDictionaryAttr(
                  {b.getNamedAttr(kNameAttr, b.getStringAttr("cache_position")),
                   b.getNamedAttr(nn::NNDialect::kCachePositionAttrName,
                                  b.getUnitAttr())}),
              loc)))
        return signalPassFailure();
      position = body.getArgument(positionIndex);
    }

    llvm::BitVector erase(func.getNumArguments());
    SmallVector<Type> resultTypes(func.getResultTypes());
    for (CachePair &pair : pairs) {
      nn::ConcatOp concat = pair.concat;
      int64_t axis = concat.getAxis();
      auto past = cast<RankedTensorType>(pair.past.getType());
      Value update =
          pair.write ? pair.write.getUpdate() : concat.getInputs()[1];
      int64_t pastLength = past.getDimSize(axis);
      int64_t newLength =
          cast<RankedTensorType>(concat.getInputs()[1].getType())
              .getDimSize(axis);
      std::string name = nameOf(func, pair.result);
      bool prefill = pastLength == 0 && !pair.write;
      if (prefill ? newLength > maxSeq : pastLength + newLength != maxSeq) {
        InFlightDiagnostic diag =
            concat.emitError()
            << "--max-seq " << static_cast<int64_t>(maxSeq) << ": '" << name
            << "' concatenates " << pastLength << " cached and " << newLength
            << " new positions";
        if (prefill)
          diag << ", more than the cache holds";
        else
          diag << "; a decode step needs the cached length to be max-seq "
                  "less the new positions";
        return signalPassFailure();
      }
      SmallVector<int64_t> cacheShape(past.getShape());
      cacheShape[axis] = maxSeq;
      auto cacheType = past.clone(cacheShape);
      unsigned cacheIndex = func.getNumArguments();
      if (failed(func.insertArgument(
              cacheIndex, cacheType,
              b.getDictionaryAttr(
                  {b.getNamedAttr(kNameAttr, b.getStringAttr(name)),
                   b.getNamedAttr(nn::NNDialect::kKvCacheAttrName,
                                  b.getUnitAttr())}),
              concat.getLoc())))
        return signalPassFailure();
      erase.resize(func.getNumArguments());
      Value written;
      if (pair.write) {
        // The cache is the padded past; the write keeps its positions.
        concat.getResult().replaceAllUsesWith(body.getArgument(cacheIndex));
        written = pair.write.getResult();
      } else {
        b.setInsertionPoint(concat);
        written = nn::KvCacheWriteOp::create(b, concat.getLoc(), cacheType,
                                             body.getArgument(cacheIndex),
                                             update, position, axis);
        // Prefill: attention reads the new keys, the result is the cache.
        // Decode: both read the written cache, max-seq slots as the
        // concatenation's were.
        concat.getResult().replaceUsesWithIf(
            prefill ? update : written,
            [&](OpOperand &use) { return use.getOwner() != ret; });
      }
      ret->setOperand(pair.result, written);
      resultTypes[pair.result] = cacheType;
      func.setResultAttr(pair.result, nn::NNDialect::kKvCacheAttrName,
                         b.getUnitAttr());
      concat.erase();
      erase.set(pair.past.getArgNumber());
    }
    func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                   resultTypes));
    if (failed(func.eraseArguments(erase)))
      return signalPassFailure();
    // A prefill's empty inputs other than the pasts would stay zero-size
    // arguments of the program.
    for (BlockArgument arg : body.getArguments()) {
      auto type = dyn_cast<RankedTensorType>(arg.getType());
      if (type && type.getNumElements() == 0) {
        auto name =
            func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kNameAttr);
        func.emitError() << "--max-seq: input '"
                         << (name ? name.getValue() : StringRef("?"))
                         << "' is empty (" << type
                         << ") and is not a past key or value the cache "
                            "replaces";
        return signalPassFailure();
      }
    }
  }
};

} // namespace
