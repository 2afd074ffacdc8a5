//===- FuseDequantize.cpp - matmuls by packed weights ---------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Dialect/NN/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "partita/Dialect/NN/IR/NNOps.h"

namespace mlir::partita {
#define GEN_PASS_DEF_FUSEDEQUANTIZEPASS
#include "partita/Dialect/NN/Transforms/Passes.h.inc"
} // namespace mlir::partita

using namespace mlir;
using namespace mlir::partita;

namespace {

struct FuseDequantizePass
    : mlir::partita::impl::FuseDequantizePassBase<FuseDequantizePass> {
  void runOnOperation() override {
    SmallVector<nn::MatmulOp> matmuls;
    getOperation().walk([&](nn::MatmulOp matmul) {
      // quantized_matmul's weight is one [k, n] matrix.
      auto dequantize = matmul.getRhs().getDefiningOp<nn::DequantizeOp>();
      if (dequantize && dequantize->hasOneUse() &&
          dequantize.getType().getRank() == 2)
        matmuls.push_back(matmul);
    });
    for (nn::MatmulOp matmul : matmuls) {
      auto dequantize = matmul.getRhs().getDefiningOp<nn::DequantizeOp>();
      OpBuilder b(matmul);
      auto fused = nn::QuantizedMatmulOp::create(
          b, matmul.getLoc(), matmul.getType(), matmul.getLhs(),
          dequantize.getPacked(), dequantize.getScales(),
          dequantize.getZeroPoints(), matmul.getBias(),
          dequantize.getBitsAttr(), dequantize.getBlockSizeAttr());
      fused->setDiscardableAttrs(matmul->getDiscardableAttrDictionary());
      matmul.replaceAllUsesWith(fused.getResult());
      matmul.erase();
      dequantize.erase();
      ++numFused;
    }
  }
};

} // namespace
