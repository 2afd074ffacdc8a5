//===- ImportContext.h - state shared by the ONNX op handlers ---*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Each ONNX node is imported by the entry registered for its (op type,
// since-version): an optional evaluator that folds the node when its inputs
// are constant, and a builder that emits nn ops otherwise. Constants are
// HostTensors: initializers keep their bytes (shared with the model, never
// expanded unless folded), folded values hold elements as int64 or double.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_LIB_FRONTEND_ONNX_IMPORTCONTEXT_H
#define PARTITA_LIB_FRONTEND_ONNX_IMPORTCONTEXT_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "partita/Frontend/ONNX/Import.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include "onnx/onnx_pb.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir::partita::onnx_import {

using DataType = onnx::TensorProto_DataType;

/// The nn element type of an ONNX data type, or null if nn has none.
Type getElementType(MLIRContext *context, int dataType);
/// The ONNX data type of an nn element type.
DataType getDataType(Type elementType);
/// `float`, `int64`, ... as ONNX names them, for messages.
std::string dataTypeName(int dataType);
bool isFloatType(int dataType);
/// Bytes per element of a fixed-size data type, 0 for others.
size_t dataTypeSize(int dataType);

/// The number of elements of a tensor of `shape`, or nullopt when a
/// dimension is negative or the count overflows int64. Every shape the
/// importer makes (graph inputs, tensors, node results) is checked with it.
std::optional<int64_t> getElementCount(ArrayRef<int64_t> shape);
/// The same, saturating at INT64_MAX: for comparisons with size limits of
/// shapes that may not have been checked yet.
int64_t getElementCountSaturated(ArrayRef<int64_t> shape);
/// `[2, 3]`, for messages.
std::string shapeText(ArrayRef<int64_t> shape);

/// Bytes shared with the model (an initializer's raw data), kept alive by
/// `owner`.
struct RawBytes {
  const char *data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;
};

/// A constant tensor known at import time.
class HostTensor {
public:
  HostTensor() = default;
  HostTensor(int dataType, SmallVector<int64_t> shape)
      : dataType(dataType), shape(std::move(shape)) {}

  static HostTensor fromRaw(int dataType, SmallVector<int64_t> shape,
                            RawBytes raw) {
    HostTensor t(dataType, std::move(shape));
    t.raw = std::move(raw);
    return t;
  }

  int dataType = onnx::TensorProto_DataType_UNDEFINED;
  SmallVector<int64_t> shape;

  int64_t getNumElements() const;
  bool isFloat() const { return isFloatType(dataType); }

  /// Elements, expanded from raw bytes on first use. Floats for float types,
  /// ints (bools as 0/1) otherwise.
  const std::vector<double> &getFloats() const;
  const std::vector<int64_t> &getInts() const;
  /// The element at `i` as a double or an int64, whatever the type.
  double getAsDouble(int64_t i) const;
  int64_t getAsInt(int64_t i) const;

  /// Whether the elements are expanded (and set through the vectors).
  bool hasRawBytes() const { return raw.data != nullptr || raw.size != 0; }
  const RawBytes &getRawBytes() const { return raw; }

  std::vector<double> &mutableFloats() { return floats; }
  std::vector<int64_t> &mutableInts() { return ints; }

private:
  void expand() const;

  RawBytes raw;
  mutable bool expanded = false;
  mutable std::vector<double> floats;
  mutable std::vector<int64_t> ints;
};

class GraphImporter;

/// What a handler sees of the node it imports.
class NodeContext {
public:
  NodeContext(GraphImporter &importer, const onnx::NodeProto &node,
              int64_t opset, Location loc, OpBuilder &builder)
      : importer(importer), node(node), opset(opset), loc(loc),
        builder(builder) {}

  const onnx::NodeProto &getNode() const { return node; }
  int64_t getOpset() const { return opset; }
  Location getLoc() const { return loc; }
  OpBuilder &getBuilder() { return builder; }
  MLIRContext *getContext() { return builder.getContext(); }

  /// Inputs: ONNX marks an omitted optional input with an empty name.
  unsigned getNumInputs() const { return node.input_size(); }
  bool hasInput(unsigned i) const {
    return i < static_cast<unsigned>(node.input_size()) &&
           !node.input(i).empty();
  }
  /// The nn value of input `i`, materializing a constant if needed.
  Value getInput(unsigned i);
  /// The constant value of input `i`, if it is one.
  const HostTensor *getConstant(unsigned i) const;
  /// An nn.constant holding `tensor` (an index map, a stride table...), at
  /// the top of the function with the other constants; null with a
  /// diagnostic if nn cannot hold its type.
  Value createConstant(const HostTensor &tensor, StringRef name);
  /// An nn.constant of input `i`'s initializer bytes seen as `view` (the
  /// same bytes under another element type or shape, e.g. MatMulNBits's
  /// uint8 as i8), made once per view however many nodes read it.
  Value createConstantView(unsigned i, const HostTensor &view);
  /// Whether the model is imported for a training step (--train).
  bool isTraining() const;
  /// Which serving program the model is imported as (--max-seq), if any.
  KvCacheForm getKvCacheForm() const;
  /// The type of input `i` (constants included).
  RankedTensorType getInputType(unsigned i);
  /// The ONNX data type of input `i`.
  int getInputDataType(unsigned i) const;
  ArrayRef<int64_t> getInputShape(unsigned i);

  /// A tensor attribute read as initializers are (raw or typed data, halves,
  /// bools), with a diagnostic at the node when it is malformed.
  FailureOr<HostTensor> readTensor(const onnx::TensorProto &proto);

  /// Integer list of a constant input (axes, shape, ...): failure with a
  /// diagnostic if the input is not constant or not 1-D (or, with
  /// `allowScalar`, rank 0, as onnxruntime accepts for axes).
  FailureOr<SmallVector<int64_t>> getConstantInts(unsigned i, StringRef what,
                                                  bool allowScalar = false);

  unsigned getNumOutputs() const { return node.output_size(); }
  bool hasOutput(unsigned i) const {
    return i < static_cast<unsigned>(node.output_size()) &&
           !node.output(i).empty();
  }
  void setOutput(unsigned i, Value value);
  void setOutput(unsigned i, HostTensor value);

  const onnx::AttributeProto *getAttr(StringRef name) const;
  int64_t getAttrInt(StringRef name, int64_t defaultValue) const;
  float getAttrFloat(StringRef name, float defaultValue) const;
  std::string getAttrString(StringRef name, StringRef defaultValue) const;
  std::optional<SmallVector<int64_t>> getAttrInts(StringRef name) const;

  /// An error at the node's location.
  InFlightDiagnostic emitError();

  /// Normalizes `axis` in [-rank, rank) to [0, rank), or emits an error
  /// (always for rank 0, which has no axis).
  FailureOr<int64_t> normalizeAxis(int64_t axis, int64_t rank,
                                   StringRef what = "axis");

  /// Checks a shape the node computes (`what`: "output 0", "shape", ...):
  /// no negative dimension and an element count that fits in int64.
  LogicalResult checkShape(ArrayRef<int64_t> shape, StringRef what);

private:
  GraphImporter &importer;
  const onnx::NodeProto &node;
  int64_t opset;
  Location loc;
  OpBuilder &builder;
};

/// The type of `value`: every value a handler builds is a ranked tensor.
RankedTensorType typeOf(Value value);
/// `value` read as `shape` (an nn.reshape at the builder), or `value` itself
/// when it has that shape already.
Value reshape(OpBuilder &b, Location loc, Value value, ArrayRef<int64_t> shape);
inline Value reshape(NodeContext &ctx, Value value, ArrayRef<int64_t> shape) {
  return reshape(ctx.getBuilder(), ctx.getLoc(), value, shape);
}

/// Folds a node whose inputs are all constant. Returns failure to decline
/// (the builder then runs); must not emit errors when declining.
using FoldFn = std::function<LogicalResult(NodeContext &)>;
/// Emits nn ops for a node; emits a diagnostic on failure.
using BuildFn = std::function<LogicalResult(NodeContext &)>;

struct OpEntry {
  int64_t sinceVersion;
  FoldFn evaluate;
  BuildFn build;
  /// Evaluate even when inputs are not constant (Shape, Size: they only read
  /// types).
  bool evaluatesFromTypes = false;
};

/// The handlers, keyed by op type then since-version.
class OpRegistry {
public:
  static const OpRegistry &get();
  /// The entry for `opType` at `opset`: the one with the largest
  /// since-version not above it.
  const OpEntry *lookup(StringRef opType, int64_t opset) const;
  bool knows(StringRef opType) const;
  /// Every op type with an entry.
  SmallVector<StringRef> getOpTypes() const;

  void add(StringRef opType, OpEntry entry);

private:
  std::map<std::string, std::vector<OpEntry>, std::less<>> entries;
};

/// An nn.constant of integer `type` holding `values` (one value: that
/// value everywhere).
Value intConstant(NodeContext &ctx, RankedTensorType type,
                  ArrayRef<int64_t> values);

/// The k largest (or smallest) elements of `x` along `axis` and their
/// positions (i64), sorted, equal values by lower position first, NaN
/// above every number (OpsTransformer.cpp, TopK). 1 <= k <= the axis's
/// size. Nulls, with an error at the node, for an axis too long to number
/// at compile time.
std::pair<Value, Value> buildTopK(NodeContext &ctx, Value x, int64_t axis,
                                  int64_t k, bool largest);

void registerElementwiseOps(OpRegistry &registry);
void registerShapeOps(OpRegistry &registry);
void registerTransformerOps(OpRegistry &registry);
void registerIndexingOps(OpRegistry &registry);
void registerScanOps(OpRegistry &registry);
/// onnxruntime's com.microsoft ops (OpsContrib.cpp).
void registerContribOps(OpRegistry &registry);
/// Conv as matmuls over patches (OpsConv.cpp).
void registerConvOps(OpRegistry &registry);

/// Largest folded constant the importer computes (elements); larger ones are
/// left to run time.
constexpr int64_t kMaxFoldedElements = 1 << 24;

} // namespace mlir::partita::onnx_import

#endif // PARTITA_LIB_FRONTEND_ONNX_IMPORTCONTEXT_H
