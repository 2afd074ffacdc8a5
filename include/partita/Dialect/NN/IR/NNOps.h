//===- NNOps.h - nn dialect ops ---------------------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_NN_IR_NNOPS_H
#define PARTITA_DIALECT_NN_IR_NNOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "partita/Dialect/NN/IR/NNDialect.h"
#include "partita/Dialect/NN/IR/PartitionContext.h"
#include "partita/Dialect/NN/IR/ShardingRule.h"
#include "partita/runtime/IndexRuns.h"

#include "partita/Dialect/NN/IR/NNEnums.h.inc"

#include "partita/Dialect/NN/IR/NNInterfaces.h.inc"

#define GET_ATTRDEF_CLASSES
#include "partita/Dialect/NN/IR/NNAttrs.h.inc"

namespace mlir::partita::nn {

/// Marks the elementwise ops (`NN_Elementwise`): each result element depends
/// only on the operand elements at its index, operands broadcast.
template <typename ConcreteType>
class ElementwiseOpTrait
    : public OpTrait::TraitBase<ConcreteType, ElementwiseOpTrait> {};

/// Attaches each op's vector-Jacobian product (DifferentiableOpInterface)
/// as an external model: NNDerivatives.cpp, called when the dialect loads.
void registerDerivatives(MLIRContext *context);

/// Whether the exec lowering may fuse `op` into the kernel that produces its
/// operand, as an epilogue step: an nn op that OpVocabulary.def lets an
/// epilogue apply and whose result keeps its operand's element type.
bool isEpilogueFusible(Operation *op);

/// The numpy broadcast of `shapes`, or failure when they do not broadcast.
FailureOr<SmallVector<int64_t>>
broadcastShapes(ArrayRef<ArrayRef<int64_t>> shapes);

/// The broadcast of the shapes of `types` with `elementType`. The shapes must
/// broadcast; builders use it to infer result types.
RankedTensorType inferBroadcastResultType(ArrayRef<Type> types,
                                          Type elementType);

/// Whether `value` is a weight: a `dense_resource` blob or a view of one.
bool isWeight(ElementsAttr value);
/// The name a weight has in the artifact: a blob's key or a view's name;
/// empty for anything else.
StringRef getWeightName(ElementsAttr value);
/// `value` rounded from f32 to `elementType` (bf16 or f16) without reading
/// it: a view converting the weight's source, under the weight's name.
/// Returns null for a value that is not a weight.
ElementsAttr convertWeight(ElementsAttr value, Type elementType);
/// `value` with dimension `dim` reordered (index j of the result is index
/// `sourceOf[j]` of `value`), named `name`, without reading it: a view for
/// a weight. Returns null for a value that is not a weight.
ElementsAttr permuteWeight(ElementsAttr value, int64_t dim,
                           ArrayRef<int64_t> sourceOf, StringRef name);
/// `value` with dimension `dim` extended to `size` by zeros at its end,
/// named `name`, without reading it: a view whose last run along `dim` is
/// a zero run. Returns null for a value that is not a weight.
ElementsAttr padWeight(ElementsAttr value, int64_t dim, int64_t size,
                       StringRef name);

/// An i64 value of `shape` holding `values` for an nn.constant (an index
/// table): inline up to nn.constant's inline limit, else a resource blob
/// named `name`.
ElementsAttr getIndexConstant(MLIRContext *context, ArrayRef<int64_t> shape,
                              ArrayRef<int64_t> values, StringRef name);

} // namespace mlir::partita::nn

#define GET_OP_CLASSES
#include "partita/Dialect/NN/IR/NNOps.h.inc"

#endif // PARTITA_DIALECT_NN_IR_NNOPS_H
