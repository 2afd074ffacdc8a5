//===- CollectiveMatmul.cpp - matmuls pipelined with their collectives ----===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/Dist/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "partita/Analysis/Cluster.h"
#include "partita/Analysis/CostModel.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "partita/Dialect/Dist/Transforms/Sharding.h"
#include "partita/Dialect/NN/IR/NNOps.h"

namespace mlir::partita {
#define GEN_PASS_DEF_COLLECTIVEMATMULPASS
#include "partita/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::dist;

namespace {

/// Builds i64 index arithmetic on the rank's group position.
class Indices {
public:
  Indices(OpBuilder &b, Location loc, Operation *collective, int64_t n,
          int64_t rows)
      : b(b), loc(loc), n(n), rows(rows) {
    position = AxisIndexOp::create(
        b, loc, RankedTensorType::get({}, b.getI64Type()),
        collective->getAttrOfType<FlatSymbolRefAttr>("mesh"),
        collective->getAttrOfType<ArrayAttr>("axes"));
  }

  Value constant(ArrayRef<int64_t> values) {
    return nn::ConstantOp::create(
        b, loc,
        nn::getIndexConstant(b.getContext(),
                             {static_cast<int64_t>(values.size())}, values,
                             "collective_matmul.rows"));
  }
  Value scalar(int64_t v) {
    return nn::ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(
            RankedTensorType::get({}, b.getI64Type()), ArrayRef<int64_t>{v})));
  }
  /// (x mod n) for x in [0, 2n).
  Value wrap(Value x) {
    auto type = cast<RankedTensorType>(x.getType());
    Value over = nn::CompareOp::create(b, loc, type.clone(b.getI1Type()),
                                       nn::CompareDirection::GE, x, scalar(n));
    return nn::WhereOp::create(b, loc, type, over,
                               nn::SubOp::create(b, loc, x, scalar(n)), x);
  }
  /// Row indices of block ((r + offset) mod n) for offset in [-n, n): its
  /// `rows` rows, in order.
  Value blockRows(int64_t offset) {
    SmallVector<int64_t> iota(rows);
    for (int64_t i = 0; i < rows; ++i)
      iota[i] = i;
    Value block = wrap(nn::AddOp::create(b, loc, position, scalar(offset + n)));
    return nn::AddOp::create(
        b, loc, nn::MulOp::create(b, loc, block, scalar(rows)), constant(iota));
  }
  /// For each output row (block b, row i): the position in the step-ordered
  /// concatenation, ((r - b) mod n) * rows + i.
  Value reorder() {
    SmallVector<int64_t> minusBlock(n * rows), iota(n * rows);
    for (int64_t bk = 0; bk < n; ++bk)
      for (int64_t i = 0; i < rows; ++i) {
        minusBlock[bk * rows + i] = n - bk;
        iota[bk * rows + i] = i;
      }
    Value step =
        wrap(nn::AddOp::create(b, loc, position, constant(minusBlock)));
    return nn::AddOp::create(
        b, loc, nn::MulOp::create(b, loc, step, scalar(rows)), constant(iota));
  }

private:
  OpBuilder &b;
  Location loc;
  int64_t n, rows;
  Value position;
};

struct Decomposer {
  const ClusterModel &cluster;
  bool force;

  /// Whether n steps, each a block matmul beside a transfer of `chunkBytes`,
  /// take clearly (10%) less time than the collective followed by the whole
  /// matmul. A block matmul reads the whole weight again, which is what
  /// makes small blocks lose.
  bool pays(Operation *collective, ArrayRef<nn::MatmulOp> matmuls, int64_t n,
            int64_t chunkBytes, int64_t collectiveBytes) {
    if (force)
      return true;
    std::vector<std::string> axes;
    for (StringRef axis :
         getStringRefs(collective->getAttrOfType<ArrayAttr>("axes")))
      axes.push_back(axis.str());
    StringRef kind = collective->getName().stripDialect();
    MeshOp mesh = lookupMesh(
        collective, collective->getAttrOfType<FlatSymbolRefAttr>("mesh"));
    double wholeSeconds = cluster.collectiveSeconds(
        kind, n, (n - 1) * collectiveBytes / n, axes, mesh);
    double blockSeconds = 0;
    for (nn::MatmulOp matmul : matmuls) {
      OpCost whole = estimateCost(matmul);
      wholeSeconds += estimateSeconds(whole, cluster.device);
      double weightBytes = tensorBytes(matmul.getRhs().getType());
      OpCost block{whole.flops / n,
                   (whole.bytes - weightBytes) / n + weightBytes};
      blockSeconds += estimateSeconds(block, cluster.device);
    }
    double step = cluster.collectiveSeconds("collective_permute", n, chunkBytes,
                                            axes, mesh);
    double decomposed =
        n * blockSeconds + (n - 1) * std::max(0.0, step - blockSeconds);
    return decomposed < 0.9 * wholeSeconds;
  }

  /// all_gather(x) over rows, then matmuls of it.
  LogicalResult gatherThenMatmul(AllGatherOp gather) {
    // Every user multiplies the gathered rows (separate Q, K and V
    // projections share one ring).
    auto xType = cast<RankedTensorType>(gather.getInput().getType());
    int64_t dim = gather.getGatherDim();
    if (gather->use_empty() || dim >= xType.getRank() - 1)
      return failure();
    SmallVector<nn::MatmulOp> matmuls;
    for (Operation *user : gather->getUsers()) {
      auto matmul = dyn_cast<nn::MatmulOp>(user);
      if (!matmul || matmul.getLhs() != gather.getResult() ||
          matmul.getRhs() == gather.getResult() ||
          matmul.getBias() == gather.getResult())
        return failure();
      matmuls.push_back(matmul);
    }
    int64_t n = *gather.getGroupSize();
    if (n < 2 || !pays(gather, matmuls, n, tensorBytes(xType),
                       tensorBytes(gather.getType())))
      return failure();
    // Build after the last matmul's operands exist: at the first matmul,
    // once every weight and bias is defined (they are constants or come
    // before the gather in practice).
    Operation *insertAt = gather;
    for (nn::MatmulOp matmul : matmuls)
      for (Value operand : matmul->getOperands())
        if (Operation *def = operand.getDefiningOp())
          if (def != gather && def->getBlock() == insertAt->getBlock() &&
              insertAt->isBeforeInBlock(def))
            insertAt = def;
    OpBuilder b(insertAt->getContext());
    b.setInsertionPointAfter(insertAt);
    Location loc = gather.getLoc();
    int64_t rows = xType.getDimSize(dim);
    SmallVector<SmallVector<Value>> outputs(matmuls.size());
    Value chunk = gather.getInput();
    for (int64_t t = 0; t < n; ++t) {
      Value next;
      if (t + 1 < n)
        next = CollectivePermuteOp::create(
            b, loc, chunk.getType(), chunk, gather.getMeshAttr(),
            gather.getAxes(), b.getI64IntegerAttr(1));
      for (auto [i, matmul] : llvm::enumerate(matmuls)) {
        auto outType = cast<RankedTensorType>(matmul.getType());
        SmallVector<int64_t> blockShape(outType.getShape());
        blockShape[dim] = rows;
        outputs[i].push_back(
            nn::MatmulOp::create(b, matmul.getLoc(), outType.clone(blockShape),
                                 chunk, matmul.getRhs(), matmul.getBias()));
      }
      chunk = next;
    }
    Indices indices(b, loc, gather, n, rows);
    Value order = indices.reorder();
    for (auto [i, matmul] : llvm::enumerate(matmuls)) {
      auto outType = cast<RankedTensorType>(matmul.getType());
      Value all = nn::ConcatOp::create(b, loc, outType, outputs[i], dim);
      Value result = nn::GatherOp::create(b, loc, outType, all, order, dim);
      matmul.getResult().replaceAllUsesWith(result);
      matmul.erase();
    }
    gather.erase();
    return success();
  }

  /// matmul, then reduce_scatter of its rows.
  LogicalResult matmulThenScatter(ReduceScatterOp scatter) {
    auto matmul = scatter.getInput().getDefiningOp<nn::MatmulOp>();
    int64_t dim = scatter.getScatterDim();
    auto pType = cast<RankedTensorType>(scatter.getInput().getType());
    if (!matmul || !matmul->hasOneUse() ||
        scatter.getReduction() != ReductionKind::Sum ||
        dim >= pType.getRank() - 1)
      return failure();
    int64_t n = *scatter.getGroupSize();
    auto outType = cast<RankedTensorType>(scatter.getType());
    if (n < 2 ||
        !pays(scatter, {matmul}, n, tensorBytes(outType), tensorBytes(pType)))
      return failure();
    OpBuilder b(scatter);
    Location loc = scatter.getLoc();
    int64_t rows = outType.getDimSize(dim);
    auto xType = cast<RankedTensorType>(matmul.getLhs().getType());
    SmallVector<int64_t> xBlock(xType.getShape());
    xBlock[dim] = rows;
    Indices indices(b, loc, scatter, n, rows);
    Value acc;
    for (int64_t t = 0; t < n; ++t) {
      // The block rank r - t - 1 accumulates now; after n steps, block r.
      Value x =
          nn::GatherOp::create(b, loc, xType.clone(xBlock), matmul.getLhs(),
                               indices.blockRows(-t - 1), dim);
      Value part = nn::MatmulOp::create(b, loc, outType, x, matmul.getRhs(),
                                        matmul.getBias());
      if (acc) {
        Value received = CollectivePermuteOp::create(
            b, loc, outType, acc, scatter.getMeshAttr(), scatter.getAxes(),
            b.getI64IntegerAttr(1));
        part = nn::AddOp::create(b, loc, received, part);
      }
      acc = part;
    }
    scatter.getResult().replaceAllUsesWith(acc);
    scatter.erase();
    matmul.erase();
    return success();
  }
};

struct CollectiveMatmulPass
    : mlir::partita::impl::CollectiveMatmulPassBase<CollectiveMatmulPass> {
  using CollectiveMatmulPassBase::CollectiveMatmulPassBase;

  void runOnOperation() override {
    FailureOr<ClusterModel> cluster = ClusterModel::of(getOperation());
    if (failed(cluster))
      return signalPassFailure();
    Decomposer decomposer{*cluster, force};
    SmallVector<AllGatherOp> gathers;
    SmallVector<ReduceScatterOp> scatters;
    getOperation().walk([&](Operation *op) {
      if (auto g = dyn_cast<AllGatherOp>(op))
        gathers.push_back(g);
      else if (auto s = dyn_cast<ReduceScatterOp>(op))
        scatters.push_back(s);
    });
    for (AllGatherOp g : gathers)
      (void)decomposer.gatherThenMatmul(g);
    for (ReduceScatterOp s : scatters)
      (void)decomposer.matmulThenScatter(s);
  }
};

} // namespace
