//===- Importer.cpp - ONNX graphs into nn ---------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Walks an ONNX graph in dependency order. Each node is folded when its
// inputs are constant (the evaluators of OpHandlers*.cpp) and otherwise
// emitted as nn ops; constants become nn.constant only where a non-constant
// op or a graph output uses them. Every failure is a diagnostic at the node's
// location, and the importer reports all unsupported ops at once before it
// emits anything.
//
//===----------------------------------------------------------------------===//

#include "partita/Frontend/ONNX/Import.h"

#include "DimExpr.h"
#include "ExpertLoops.h"
#include "ImportContext.h"
#include "OpSchema.h"
#include "OptimumDecoders.h"
#include "Reader/ModelReader.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/Verifier.h"
#include "partita/Dialect/NN/IR/NNOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"

#include <cstring>

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::onnx_import;

//===----------------------------------------------------------------------===//
// Registry
//===----------------------------------------------------------------------===//

const OpRegistry &OpRegistry::get() {
  static const OpRegistry *registry = [] {
    auto *r = new OpRegistry();
    registerElementwiseOps(*r);
    registerShapeOps(*r);
    registerTransformerOps(*r);
    registerIndexingOps(*r);
    registerScanOps(*r);
    registerContribOps(*r);
    registerConvOps(*r);
    return r;
  }();
  return *registry;
}

void OpRegistry::add(StringRef opType, OpEntry entry) {
  auto &list = entries[opType.str()];
  list.push_back(std::move(entry));
  llvm::sort(list, [](const OpEntry &a, const OpEntry &b) {
    return a.sinceVersion < b.sinceVersion;
  });
}

const OpEntry *OpRegistry::lookup(StringRef opType, int64_t opset) const {
  auto it = entries.find(opType);
  if (it == entries.end())
    return nullptr;
  const OpEntry *best = nullptr;
  for (const OpEntry &entry : it->second)
    if (entry.sinceVersion <= opset)
      best = &entry;
  return best;
}

bool OpRegistry::knows(StringRef opType) const {
  return entries.find(opType) != entries.end();
}

SmallVector<StringRef> OpRegistry::getOpTypes() const {
  SmallVector<StringRef> names;
  for (const auto &entry : entries)
    names.push_back(entry.first);
  return names;
}

/// Op types (at an opset) that have a handler but no entry in the schema
/// table, which must not happen: OpSchemas.py lists the op types.
static const SmallVector<std::string> &opsWithoutSchema() {
  static const SmallVector<std::string> missing = [] {
    SmallVector<std::string> names;
    const OpRegistry &registry = OpRegistry::get();
    for (StringRef op : registry.getOpTypes())
      for (int64_t opset = kMinOnnxOpset; opset <= kMaxOnnxOpset; ++opset)
        if (registry.lookup(op, opset) && !lookupOpSchema(op, opset)) {
          names.push_back(op.str() + " at opset " + std::to_string(opset));
          break;
        }
    return names;
  }();
  return missing;
}

//===----------------------------------------------------------------------===//
// GraphImporter
//===----------------------------------------------------------------------===//

/// Initializers with more elements than this become dense_resource blobs.
static constexpr int64_t kMaxInlineInitializerElements = 8;

namespace mlir::partita::onnx_import {

class GraphImporter {
public:
  GraphImporter(MLIRContext *context, std::unique_ptr<onnx::ModelProto> model,
                ::partita::onnx_reader::MappedInitializers mapped,
                StringRef modelName, StringRef modelDir,
                const OnnxImportOptions &options)
      : context(context), model(std::move(model)), mapped(std::move(mapped)),
        modelName(modelName.str()), modelDir(modelDir.str()), options(options),
        bindings(options.bindings), builder(context),
        fileLoc(FileLineColLoc::get(context, modelName, 0, 0)) {}

  OwningOpRef<ModuleOp> run();

  struct ValueInfo {
    Value value;
    std::shared_ptr<HostTensor> constant;
    RankedTensorType type;
    int dataType = onnx::TensorProto_DataType_UNDEFINED;
  };

  ValueInfo *lookup(StringRef name) {
    auto it = values.find(name);
    return it == values.end() ? nullptr : &it->second;
  }
  Value materialize(StringRef name, Location loc);
  /// NodeContext::createConstantView's constants, by initializer, type,
  /// block and shape.
  llvm::StringMap<Value> constantViews;
  bool isTraining() const { return options.train; }
  KvCacheForm getKvCacheForm() const { return options.kvCache; }
  /// An nn.constant of `tensor` after the constants at the top of the
  /// function.
  Value createConstant(const HostTensor &tensor, StringRef name, Location loc);
  RankedTensorType typeOf(const ValueInfo &info);
  void define(StringRef name, Value value) {
    ValueInfo &info = values[name];
    info.value = value;
    info.type = cast<RankedTensorType>(value.getType());
    info.dataType = getDataType(info.type.getElementType());
  }
  void define(StringRef name, HostTensor tensor) {
    ValueInfo &info = values[name];
    info.dataType = tensor.dataType;
    info.constant = std::make_shared<HostTensor>(std::move(tensor));
  }
  Location nodeLoc(const onnx::NodeProto &node, unsigned index);

  /// A constant as an nn elements attribute: the model's bytes shared as a
  /// dense_resource blob, or an inline dense value when small.
  FailureOr<ElementsAttr> toElementsAttr(const HostTensor &tensor,
                                         StringRef name, Location loc);

  /// Reads a tensor proto (an initializer, `initializer` its index, or an
  /// attribute). Moves raw bytes out of `proto` rather than copying them.
  FailureOr<HostTensor>
  tensorFromProto(onnx::TensorProto &proto, Location loc,
                  std::optional<size_t> initializer = std::nullopt);

private:
  /// What --bind makes of a dim_param: its value, or the symbols it lacks.
  struct ResolvedDim {
    std::optional<int64_t> value;
    /// Parsed as an expression other than one symbol.
    bool isExpression = false;
    /// The symbols without a value (the text itself for a plain symbol).
    SmallVector<std::string> unbound;
    /// Why an expression whose symbols are all bound has no value.
    std::string error;
  };
  /// Resolves `param`; `used` collects the bindings it reads.
  ResolvedDim resolveDimParam(StringRef param, llvm::StringSet<> *used);

  LogicalResult checkModel();
  LogicalResult checkOpsets();
  LogicalResult importInitializers();
  /// --train: the trainable initializers as arguments of `func`, their
  /// types appended to `inputTypes` (OnnxImportOptions::train).
  LogicalResult makeParameters(func::FuncOp func,
                               SmallVector<Type> &inputTypes);

  /// For a KV-cache form, adds the cached length and sequence to
  /// `bindings`.
  LogicalResult bindCacheLengths();
  LogicalResult bindInputs(SmallVectorImpl<std::string> &inputNames,
                           SmallVectorImpl<Type> &inputTypes);
  LogicalResult sortNodes(SmallVectorImpl<const onnx::NodeProto *> &order);
  LogicalResult checkSupported(ArrayRef<const onnx::NodeProto *> order);
  LogicalResult checkNodes(ArrayRef<const onnx::NodeProto *> order);
  /// A node's op as the schema table and the registry key it, and the
  /// version of its domain the model imports.
  struct OpKey {
    std::string type;
    int64_t version;
  };
  OpKey opKey(const onnx::NodeProto &node) const;
  LogicalResult importNode(const onnx::NodeProto &node, unsigned index);
  /// An If whose condition folded: the branch it takes, imported in its
  /// place (both were checked with the graph's nodes).
  LogicalResult importIf(const onnx::NodeProto &node, unsigned index);
  /// transformers' eager expert loop, folded into one node
  /// (ExpertLoops.h): an nn.moe.
  LogicalResult importExpertLoop(const onnx::NodeProto &node, unsigned index);
  /// foldExpertLoops over the top-level graph, reading constants as the
  /// import does.
  LogicalResult foldEagerExperts();
  LogicalResult runHandlers(const OpEntry &entry, NodeContext &ctx);

  MLIRContext *context;
  std::unique_ptr<onnx::ModelProto> model;
  ::partita::onnx_reader::MappedInitializers mapped;
  std::string modelName;
  std::string modelDir;
  const OnnxImportOptions &options;
  /// `options.bindings` with what the KV-cache form binds.
  llvm::StringMap<int64_t> bindings;
  OpBuilder builder;
  Location fileLoc;
  int64_t opset = 0;
  /// The version the model imports of each other domain it names
  /// (com.microsoft: onnxruntime's contrib ops).
  llvm::StringMap<int64_t> domainOpsets;
  llvm::StringMap<ValueInfo> values;
  llvm::StringMap<std::shared_ptr<::partita::onnx_reader::MappedFile>>
      externalFiles;
  std::vector<std::unique_ptr<NodeContext>> contexts;
  /// Each If's name and whether its condition picked the then branch
  /// (the module's partita.if_branches).
  SmallVector<NamedAttribute> ifBranches;
};

} // namespace mlir::partita::onnx_import

GraphImporter::OpKey GraphImporter::opKey(const onnx::NodeProto &node) const {
  if (node.domain().empty() || node.domain() == "ai.onnx")
    return {node.op_type(), opset};
  // Another domain's ops are keyed by domain and type, at the version of
  // that domain the model imports (none: nothing is found).
  auto it = domainOpsets.find(node.domain());
  return {node.domain() + "." + node.op_type(),
          it == domainOpsets.end() ? 0 : it->second};
}

Location GraphImporter::nodeLoc(const onnx::NodeProto &node, unsigned index) {
  std::string name = node.name();
  if (name.empty())
    name = node.op_type() + "_" + std::to_string(index);
  return NameLoc::get(StringAttr::get(context, name), fileLoc);
}

LogicalResult GraphImporter::checkModel() {
  if (!opsWithoutSchema().empty()) {
    InFlightDiagnostic diag = emitError(fileLoc)
                              << "internal error: the ONNX schema table "
                                 "(OpSchemas.inc) lacks ";
    llvm::interleaveComma(opsWithoutSchema(), diag);
    return diag;
  }
  int64_t ir = model->ir_version();
  if (ir < kMinOnnxIrVersion || ir > kMaxOnnxIrVersion)
    return emitError(fileLoc)
           << "the model has IR version " << ir
           << "; Partita reads IR versions " << kMinOnnxIrVersion << " to "
           << kMaxOnnxIrVersion;
  if (model->graph().output_size() == 0)
    return emitError(fileLoc) << "the graph has no outputs";
  // Node names, where given, are unique (onnxruntime refuses a graph that
  // repeats one; the importer locates its diagnostics by them).
  llvm::StringMap<int> names;
  for (auto [i, node] : llvm::enumerate(model->graph().node())) {
    if (node.name().empty())
      continue;
    auto [it, inserted] = names.try_emplace(node.name(), int(i));
    if (!inserted)
      return emitError(fileLoc)
             << "nodes " << it->second << " and " << i << " are both named '"
             << node.name() << "'; node names must be unique";
  }
  return success();
}

LogicalResult GraphImporter::checkOpsets() {
  bool found = false;
  for (const onnx::OperatorSetIdProto &id : model->opset_import()) {
    if (!id.domain().empty() && id.domain() != "ai.onnx") {
      domainOpsets[id.domain()] = id.version();
      continue;
    }
    found = true;
    opset = id.version();
  }
  if (!found)
    return emitError(fileLoc) << "the model imports no default-domain opset";
  if (opset < kMinOnnxOpset || opset > kMaxOnnxOpset)
    return emitError(fileLoc)
           << "the model uses opset " << opset
           << " of the default domain; Partita supports opsets "
           << kMinOnnxOpset << " to " << kMaxOnnxOpset
           << " (convert it with onnx.version_converter)";
  return success();
}

FailureOr<HostTensor>
GraphImporter::tensorFromProto(onnx::TensorProto &proto, Location loc,
                               std::optional<size_t> initializer) {
  SmallVector<int64_t> shape;
  int64_t numElements = 1;
  for (int64_t dim : proto.dims()) {
    std::optional<int64_t> product =
        dim < 0 ? std::nullopt : llvm::checkedMul(numElements, dim);
    if (!product)
      return emitError(loc)
             << "tensor '" << proto.name() << "' has an invalid shape";
    numElements = *product;
    shape.push_back(dim);
  }
  int dataType = proto.data_type();
  size_t elementSize = dataTypeSize(dataType);
  if (elementSize == 0)
    return emitError(loc) << "tensor '" << proto.name() << "' has type "
                          << dataTypeName(dataType)
                          << ", which Partita does not support";
  std::optional<int64_t> byteCount =
      llvm::checkedMul(numElements, static_cast<int64_t>(elementSize));
  if (!byteCount)
    return emitError(loc) << "tensor '" << proto.name() << "' is too large";

  if (proto.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const onnx::StringStringEntryProto &kv : proto.external_data()) {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset" || kv.key() == "length") {
        char *end = nullptr;
        errno = 0;
        long long v = std::strtoll(kv.value().c_str(), &end, 10);
        if (errno || !end || *end || v < 0)
          return emitError(loc) << "tensor '" << proto.name() << "' has an "
                                << "invalid external data " << kv.key();
        (kv.key() == "offset" ? offset : length) = v;
      }
    }
    if (modelDir.empty())
      return emitError(loc) << "tensor '" << proto.name()
                            << "' uses external data, which a model read "
                               "from memory cannot locate";
    std::shared_ptr<::partita::onnx_reader::MappedFile> &file =
        externalFiles[location];
    if (!file) {
      std::string error;
      if (!::partita::onnx_reader::mapExternalFile(modelDir, location, file,
                                                   error))
        return emitError(loc) << "tensor '" << proto.name() << "': " << error;
    }
    if (length < 0)
      length = *byteCount;
    std::optional<int64_t> end = llvm::checkedAdd(offset, length);
    if (length != *byteCount || !end ||
        static_cast<uint64_t>(*end) > file->size())
      return emitError(loc) << "tensor '" << proto.name() << "' needs "
                            << *byteCount << " bytes at offset " << offset
                            << " of '" << location << "', which holds "
                            << file->size() << " (length " << length << ")";
    RawBytes raw{file->data() + offset, static_cast<size_t>(length), file};
    return HostTensor::fromRaw(dataType, shape, std::move(raw));
  }

  // Bytes the reader left in the mapped model file.
  if (initializer && *initializer < mapped.rawData.size() &&
      mapped.rawData[*initializer].present) {
    const auto &span = mapped.rawData[*initializer];
    if (static_cast<int64_t>(span.length) != *byteCount)
      return emitError(loc) << "tensor '" << proto.name() << "' holds "
                            << span.length << " bytes; its shape and type "
                            << "need " << *byteCount;
    RawBytes raw{mapped.file->data() + span.offset,
                 static_cast<size_t>(span.length), mapped.file};
    return HostTensor::fromRaw(dataType, shape, std::move(raw));
  }

  if (proto.has_raw_data()) {
    if (static_cast<int64_t>(proto.raw_data().size()) != *byteCount)
      return emitError(loc) << "tensor '" << proto.name() << "' holds "
                            << proto.raw_data().size() << " bytes; its shape "
                            << "and type need " << *byteCount;
    // Take the bytes out of the proto rather than copying them.
    auto holder =
        std::make_shared<std::string>(std::move(*proto.mutable_raw_data()));
    RawBytes raw{holder->data(), holder->size(), holder};
    return HostTensor::fromRaw(dataType, shape, std::move(raw));
  }

  HostTensor tensor(dataType, shape);
  auto mismatch = [&](int64_t have) -> FailureOr<HostTensor> {
    return emitError(loc) << "tensor '" << proto.name() << "' holds " << have
                          << " values; its shape needs " << numElements;
  };
  if (isFloatType(dataType)) {
    std::vector<double> &out = tensor.mutableFloats();
    if (dataType == onnx::TensorProto_DataType_FLOAT) {
      out.assign(proto.float_data().begin(), proto.float_data().end());
    } else if (dataType == onnx::TensorProto_DataType_DOUBLE) {
      out.assign(proto.double_data().begin(), proto.double_data().end());
    } else {
      // Halves are stored as their bit patterns in int32_data.
      bool isBF16 = dataType == onnx::TensorProto_DataType_BFLOAT16;
      for (int32_t bits : proto.int32_data()) {
        if (isBF16) {
          uint32_t word = static_cast<uint32_t>(bits) << 16;
          float f;
          std::memcpy(&f, &word, sizeof(f));
          out.push_back(f);
        } else {
          out.push_back(llvm::APFloat(llvm::APFloat::IEEEhalf(),
                                      llvm::APInt(16, bits & 0xffff))
                            .convertToDouble());
        }
      }
    }
    if (static_cast<int64_t>(out.size()) != numElements)
      return mismatch(out.size());
  } else {
    std::vector<int64_t> &out = tensor.mutableInts();
    if (dataType == onnx::TensorProto_DataType_INT64)
      out.assign(proto.int64_data().begin(), proto.int64_data().end());
    else if (dataType == onnx::TensorProto_DataType_UINT64 ||
             dataType == onnx::TensorProto_DataType_UINT32)
      out.assign(proto.uint64_data().begin(), proto.uint64_data().end());
    else
      out.assign(proto.int32_data().begin(), proto.int32_data().end());
    if (dataType == onnx::TensorProto_DataType_BOOL)
      for (int64_t &v : out)
        v = v != 0;
    if (static_cast<int64_t>(out.size()) != numElements)
      return mismatch(out.size());
  }
  return tensor;
}

LogicalResult GraphImporter::makeParameters(func::FuncOp func,
                                            SmallVector<Type> &inputTypes) {
  std::optional<llvm::Regex> freeze;
  if (!options.freeze.empty()) {
    freeze.emplace(options.freeze);
    std::string error;
    if (!freeze->isValid(error))
      return emitError(fileLoc) << "--freeze '" << options.freeze
                                << "' is not a regular expression: " << error;
  }
  Block &body = func.getBody().front();
  for (const onnx::TensorProto &proto : model->graph().initializer()) {
    ValueInfo *info = lookup(proto.name());
    if (!info || !info->constant || !info->constant->isFloat() ||
        (freeze && freeze->match(proto.name())))
      continue;
    Location loc =
        NameLoc::get(StringAttr::get(context, proto.name()), fileLoc);
    if (info->constant->dataType != onnx::TensorProto_DataType_FLOAT)
      return emitError(loc)
             << "initializer '" << proto.name() << "' is "
             << dataTypeName(info->constant->dataType)
             << "; --train trains float32 parameters (freeze it with "
                "--freeze)";
    FailureOr<ElementsAttr> initial =
        toElementsAttr(*info->constant, proto.name(), loc);
    if (failed(initial))
      return failure();
    Type type = initial->getType();
    StringAttr name = builder.getStringAttr(proto.name());
    unsigned position = func.getNumArguments();
    if (failed(func.insertArgument(
            position, type,
            builder.getDictionaryAttr(
                {builder.getNamedAttr("onnx.name", name),
                 builder.getNamedAttr(nn::NNDialect::kParameterAttrName, name),
                 builder.getNamedAttr(nn::NNDialect::kInitialValueAttrName,
                                      *initial)}),
            loc)))
      return failure();
    inputTypes.push_back(type);
    info->constant.reset();
    define(proto.name(), body.getArgument(position));
  }
  return success();
}

LogicalResult GraphImporter::importInitializers() {
  onnx::GraphProto *graph = model->mutable_graph();
  for (auto [index, proto] : llvm::enumerate(*graph->mutable_initializer())) {
    Location loc =
        NameLoc::get(StringAttr::get(context, proto.name()), fileLoc);
    FailureOr<HostTensor> tensor = tensorFromProto(proto, loc, index);
    if (failed(tensor))
      return failure();
    define(proto.name(), std::move(*tensor));
  }
  return success();
}

RankedTensorType GraphImporter::typeOf(const ValueInfo &info) {
  if (info.value)
    return info.type;
  Type element = getElementType(context, info.constant->dataType);
  if (!element)
    return {};
  return RankedTensorType::get(info.constant->shape, element);
}

FailureOr<ElementsAttr> GraphImporter::toElementsAttr(const HostTensor &tensor,
                                                      StringRef name,
                                                      Location loc) {
  Type element = getElementType(context, tensor.dataType);
  if (!element)
    return emitError(loc) << "'" << name << "' has type "
                          << dataTypeName(tensor.dataType)
                          << ", which nn does not support";
  auto type = RankedTensorType::get(tensor.shape, element);
  int64_t n = tensor.getNumElements();
  size_t elementSize = dataTypeSize(tensor.dataType);

  // Model bytes are shared, not copied: the blob declares the alignment the
  // bytes happen to have, so readers of nn constants decode them with memcpy.
  auto makeResource = [&](ArrayRef<char> bytes,
                          std::shared_ptr<const void> owner) -> ElementsAttr {
    AsmResourceBlob blob;
    if (owner) {
      size_t alignment = 1;
      auto address = reinterpret_cast<uintptr_t>(bytes.data());
      while (alignment < elementSize && address % (alignment * 2) == 0)
        alignment *= 2;
      blob = AsmResourceBlob(
          bytes, alignment, [owner](void *, size_t, size_t) {},
          /*dataIsMutable=*/false);
    } else {
      blob = HeapAsmResourceBlob::allocateAndCopyWithAlign(bytes, elementSize);
    }
    std::string blobName = name.empty() ? std::string("constant") : name.str();
    return DenseResourceElementsAttr::get(type, blobName, std::move(blob));
  };

  if (tensor.hasRawBytes() && n > kMaxInlineInitializerElements) {
    const RawBytes &raw = tensor.getRawBytes();
    return makeResource(ArrayRef<char>(raw.data, raw.size), raw.owner);
  }

  if (n <= nn::ConstantOp::kMaxInlineElements) {
    if (auto floatType = dyn_cast<FloatType>(element)) {
      SmallVector<APFloat> values;
      for (int64_t i = 0; i < n; ++i) {
        APFloat v(tensor.getAsDouble(i));
        bool losesInfo;
        v.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                  &losesInfo);
        values.push_back(v);
      }
      return cast<ElementsAttr>(DenseElementsAttr::get(type, values));
    }
    unsigned width = element.getIntOrFloatBitWidth();
    SmallVector<APInt> values;
    for (int64_t i = 0; i < n; ++i)
      values.push_back(APInt(width, static_cast<uint64_t>(tensor.getAsInt(i)),
                             /*isSigned=*/width > 1, /*implicitTrunc=*/true));
    return cast<ElementsAttr>(DenseElementsAttr::get(type, values));
  }

  // A large folded value: pack its elements little-endian.
  std::vector<char> bytes(static_cast<size_t>(n) * elementSize);
  for (int64_t i = 0; i < n; ++i) {
    char *p = bytes.data() + i * elementSize;
    if (auto floatType = dyn_cast<FloatType>(element)) {
      APFloat v(tensor.getAsDouble(i));
      bool losesInfo;
      v.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                &losesInfo);
      uint64_t bits = v.bitcastToAPInt().getZExtValue();
      std::memcpy(p, &bits, elementSize);
    } else {
      int64_t v = tensor.getAsInt(i);
      std::memcpy(p, &v, elementSize);
    }
  }
  return makeResource(ArrayRef<char>(bytes.data(), bytes.size()), nullptr);
}

Value GraphImporter::materialize(StringRef name, Location loc) {
  ValueInfo *info = lookup(name);
  if (!info)
    return {};
  if (info->value)
    return info->value;
  Value value = createConstant(*info->constant, name, loc);
  if (!value)
    return {};
  info->value = value;
  info->type = cast<RankedTensorType>(value.getType());
  return value;
}

Value GraphImporter::createConstant(const HostTensor &tensor, StringRef name,
                                    Location loc) {
  FailureOr<ElementsAttr> attr = toElementsAttr(tensor, name, loc);
  if (failed(attr))
    return {};
  // Constants go at the top of the function, in first-use order.
  OpBuilder::InsertionGuard guard(builder);
  Block *body = builder.getInsertionBlock();
  builder.setInsertionPointToStart(body);
  for (Operation &op : *body) {
    if (!isa<nn::ConstantOp>(op))
      break;
    builder.setInsertionPointAfter(&op);
  }
  return nn::ConstantOp::create(builder, loc, *attr);
}

GraphImporter::ResolvedDim
GraphImporter::resolveDimParam(StringRef param, llvm::StringSet<> *used) {
  ResolvedDim r;
  std::optional<DimExpr> expr = DimExpr::parse(param);
  r.isExpression = expr && !expr->isSymbol();
  // The text itself may be bound, expression or not.
  auto direct = bindings.find(param);
  if (direct != bindings.end()) {
    if (used)
      used->insert(param);
    r.value = direct->second;
  }
  if (!r.isExpression) {
    if (!r.value)
      r.unbound.push_back(param.str());
    return r;
  }
  SmallVector<int64_t> values;
  for (const std::string &symbol : expr->getSymbols()) {
    auto it = bindings.find(symbol);
    if (it == bindings.end()) {
      r.unbound.push_back(symbol);
      continue;
    }
    if (used)
      used->insert(symbol);
    values.push_back(it->second);
  }
  if (!r.unbound.empty()) {
    // A binding of the whole text stands in for its symbols.
    if (r.value)
      r.unbound.clear();
    return r;
  }
  std::string error;
  std::optional<int64_t> value =
      expr->evaluate([&](unsigned i) { return values[i]; }, error);
  if (!value) {
    r.error = "with the bound values " + error;
    return r;
  }
  if (r.value && *r.value != *value) {
    r.error = "--bind gives it " + std::to_string(*r.value) +
              " and its symbols make it " + std::to_string(*value);
    return r;
  }
  r.value = value;
  return r;
}

LogicalResult GraphImporter::bindCacheLengths() {
  if (options.kvCache == KvCacheForm::None)
    return success();
  CacheSymbols symbols = findCacheSymbols(model->graph());
  const std::string &past = symbols.past, &sequence = symbols.sequence;
  if (!symbols.otherPast.empty())
    return emitError(fileLoc)
           << "--max-seq: the past inputs' lengths are named both '" << past
           << "' and '" << symbols.otherPast << "'";
  if (past.empty())
    return emitError(fileLoc)
           << "--max-seq: the model has no past key or value inputs with a "
              "symbolic length (past_key_values.N.key of shape [batch, "
              "heads, past_sequence_length, head_dim]); export the decoder "
              "with past key values";
  if (sequence.empty())
    return emitError(fileLoc) << "--max-seq: the model has no input_ids of "
                                 "shape [batch, sequence] with a symbolic "
                                 "sequence";
  if (options.bindings.count(past))
    return emitError(fileLoc)
           << "--max-seq sets the cached length '" << past
           << "' itself (0 for the prompt, max-seq - 1 for a decode step); "
              "do not --bind it";
  if (options.kvCache == KvCacheForm::Prefill) {
    bindings[past] = 0;
  } else {
    bindings[sequence] = 1;
    bindings[past] = options.maxSeq - 1;
  }
  // onnxruntime-genai's builder names the mask's length, and the
  // presents', with a symbol of its own (total_sequence_length): past plus
  // sequence.
  for (const onnx::ValueInfoProto &input : model->graph().input()) {
    const onnx::TensorShapeProto &shape = input.type().tensor_type().shape();
    if (input.name() != "attention_mask" || shape.dim_size() != 2)
      continue;
    const std::string &total = shape.dim(1).dim_param();
    std::optional<DimExpr> expr = DimExpr::parse(total);
    if (!expr || expr->getSymbols().size() != 1 ||
        expr->getSymbols().front() != total || total == past ||
        total == sequence)
      continue;
    if (options.bindings.count(total))
      return emitError(fileLoc)
             << "--max-seq sets the total length '" << total
             << "' (the cached length plus the sequence) itself; do not "
                "--bind it";
    auto it = bindings.find(sequence);
    if (it != bindings.end())
      bindings[total] = bindings[past] + it->second;
  }
  return success();
}

LogicalResult
GraphImporter::bindInputs(SmallVectorImpl<std::string> &inputNames,
                          SmallVectorImpl<Type> &inputTypes) {
  const onnx::GraphProto &graph = model->graph();
  if (failed(bindCacheLengths()))
    return failure();
  // Every unbound symbolic dimension, with the places it appears.
  llvm::MapVector<StringRef, SmallVector<std::string>> unbound;
  llvm::StringSet<> used, names;
  bool hardError = false;
  auto resolveShape = [&](const onnx::ValueInfoProto &info, StringRef kind,
                          SmallVectorImpl<int64_t> &shape) -> bool {
    bool ok = true;
    const onnx::TensorShapeProto &proto = info.type().tensor_type().shape();
    for (auto [i, dim] : llvm::enumerate(proto.dim())) {
      if (dim.has_dim_value()) {
        shape.push_back(dim.dim_value());
        continue;
      }
      std::string place =
          (kind + " '" + info.name() + "' dimension " + std::to_string(i))
              .str();
      if (dim.dim_param().empty()) {
        ok = false;
        unbound["<unnamed>"].push_back(place);
        continue;
      }
      ResolvedDim r = resolveDimParam(dim.dim_param(), &used);
      if (!r.error.empty()) {
        emitError(fileLoc) << place << " is '" << dim.dim_param() << "', but "
                           << r.error;
        hardError = true;
        ok = false;
        continue;
      }
      if (r.value) {
        shape.push_back(*r.value);
        continue;
      }
      ok = false;
      for (const std::string &symbol : r.unbound)
        unbound[names.insert(symbol).first->getKey()].push_back(
            r.isExpression ? place + " in '" + dim.dim_param() + "'" : place);
    }
    return ok;
  };

  for (const onnx::ValueInfoProto &input : graph.input()) {
    Location loc =
        NameLoc::get(StringAttr::get(context, input.name()), fileLoc);
    // IR versions before 4 list initializers among the inputs too; the
    // declaration must then describe the initializer (onnxruntime refuses
    // a model where it does not).
    if (ValueInfo *initializer = lookup(input.name())) {
      if (!input.type().has_tensor_type())
        continue;
      const onnx::TypeProto::Tensor &declared = input.type().tensor_type();
      ArrayRef<int64_t> held = initializer->constant
                                   ? ArrayRef(initializer->constant->shape)
                                   : typeOf(*initializer).getShape();
      bool sameType = declared.elem_type() == initializer->dataType;
      bool sameShape =
          !declared.has_shape() ||
          declared.shape().dim_size() == static_cast<int>(held.size());
      for (int d = 0;
           sameShape && declared.has_shape() && d < declared.shape().dim_size();
           ++d)
        if (declared.shape().dim(d).has_dim_value())
          sameShape = declared.shape().dim(d).dim_value() == held[d];
      if (!sameType || !sameShape) {
        SmallVector<std::string> dims;
        for (const auto &dim : declared.shape().dim())
          dims.push_back(
              dim.has_dim_value()
                  ? std::to_string(dim.dim_value())
                  : (dim.dim_param().empty() ? "?" : dim.dim_param()));
        return emitError(loc)
               << "initializer '" << input.name()
               << "' is also a graph input, declared as "
               << dataTypeName(declared.elem_type()) << " ["
               << llvm::join(dims, ", ") << "], but it holds "
               << dataTypeName(initializer->dataType) << " " << shapeText(held);
      }
      continue;
    }
    if (!input.type().has_tensor_type())
      return emitError(loc) << "input '" << input.name() << "' is not a tensor";
    int dataType = input.type().tensor_type().elem_type();
    Type element = getElementType(context, dataType);
    if (!element)
      return emitError(loc)
             << "input '" << input.name() << "' has type "
             << dataTypeName(dataType) << ", which Partita does not support";
    if (!input.type().tensor_type().has_shape())
      return emitError(loc) << "input '" << input.name()
                            << "' has no shape; Partita needs static shapes";
    SmallVector<int64_t> shape;
    if (resolveShape(input, "input", shape)) {
      for (auto [d, dim] : llvm::enumerate(shape))
        if (dim < 0)
          return emitError(loc)
                 << "input '" << input.name() << "' dimension " << d << " is "
                 << dim << "; dimensions must be 0 or more";
      if (!getElementCount(shape))
        return emitError(loc)
               << "input '" << input.name() << "' has shape "
               << shapeText(shape) << ", whose element count overflows int64";
      inputNames.push_back(input.name());
      inputTypes.push_back(RankedTensorType::get(shape, element));
    }
  }
  // Outputs' symbolic dimensions are checked too, so one message lists them
  // all; the importer computes output shapes itself.
  for (const onnx::ValueInfoProto &output : graph.output()) {
    SmallVector<int64_t> shape;
    (void)resolveShape(output, "output", shape);
  }
  if (hardError)
    return failure();
  // Output dims not named by any input are inferred: only inputs' matter.
  SmallVector<StringRef> missing;
  for (auto &[param, places] : unbound) {
    bool onInput = llvm::any_of(places, [](const std::string &p) {
      return StringRef(p).starts_with("input");
    });
    if (onInput)
      missing.push_back(param);
  }
  if (!missing.empty()) {
    InFlightDiagnostic diag = emitError(fileLoc)
                              << "unbound symbolic dimensions: ";
    llvm::interleave(
        missing,
        [&](StringRef param) {
          diag << param << " (";
          llvm::interleaveComma(unbound[param], diag);
          diag << ")";
        },
        [&] { diag << "; "; });
    return diag << "; give their values with --bind name=value,...";
  }
  for (const auto &binding : options.bindings)
    if (!used.contains(binding.getKey()))
      emitWarning(fileLoc) << "--bind " << binding.getKey()
                           << " names no symbolic dimension of the model";
  return success();
}

/// An If of the default domain.
static bool isIf(const onnx::NodeProto &node) {
  return node.op_type() == "If" &&
         (node.domain().empty() || node.domain() == "ai.onnx");
}

/// An If's then and else branches; null where the attribute is missing or
/// not a graph (its signature check reports it).
static std::pair<const onnx::GraphProto *, const onnx::GraphProto *>
getBranches(const onnx::NodeProto &node) {
  const onnx::GraphProto *then = nullptr, *otherwise = nullptr;
  for (const onnx::AttributeProto &attr : node.attribute()) {
    if (attr.type() != onnx::AttributeProto::GRAPH || !attr.has_g())
      continue;
    if (attr.name() == "then_branch")
      then = &attr.g();
    else if (attr.name() == "else_branch")
      otherwise = &attr.g();
  }
  return {then, otherwise};
}

/// The names `graph`'s nodes read that it does not define (by a node, an
/// initializer or an input): the outer values an If's branch captures,
/// through nested branches too.
static void collectOuterReads(const onnx::GraphProto &graph,
                              llvm::StringSet<> &reads) {
  llvm::StringSet<> defined;
  for (const onnx::ValueInfoProto &input : graph.input())
    defined.insert(input.name());
  for (const onnx::TensorProto &init : graph.initializer())
    defined.insert(init.name());
  for (const onnx::NodeProto &node : graph.node())
    for (const std::string &out : node.output())
      defined.insert(out);
  auto read = [&](const std::string &name) {
    if (!name.empty() && !defined.contains(name))
      reads.insert(name);
  };
  for (const onnx::NodeProto &node : graph.node()) {
    for (const std::string &in : node.input())
      read(in);
    if (!isIf(node))
      continue;
    auto [then, otherwise] = getBranches(node);
    for (const onnx::GraphProto *branch : {then, otherwise})
      if (branch) {
        llvm::StringSet<> inner;
        collectOuterReads(*branch, inner);
        for (const auto &name : inner)
          read(name.getKey().str());
      }
  }
  for (const onnx::ValueInfoProto &output : graph.output())
    read(output.name());
}

/// `order` with each If's branch nodes after it, recursively: every node
/// the importer checks.
static SmallVector<const onnx::NodeProto *>
withBranchNodes(ArrayRef<const onnx::NodeProto *> order) {
  SmallVector<const onnx::NodeProto *> all;
  std::function<void(const onnx::NodeProto &)> add =
      [&](const onnx::NodeProto &node) {
        all.push_back(&node);
        if (!isIf(node))
          return;
        auto [then, otherwise] = getBranches(node);
        for (const onnx::GraphProto *branch : {then, otherwise})
          if (branch)
            for (const onnx::NodeProto &inner : branch->node())
              add(inner);
      };
  for (const onnx::NodeProto *node : order)
    add(*node);
  return all;
}

LogicalResult
GraphImporter::sortNodes(SmallVectorImpl<const onnx::NodeProto *> &order) {
  const onnx::GraphProto &graph = model->graph();
  int n = graph.node_size();
  // Which node produces each value; duplicates are an error.
  llvm::StringMap<int> producer;
  for (int i = 0; i < n; ++i) {
    for (const std::string &out : graph.node(i).output()) {
      if (out.empty())
        continue;
      if (lookup(out) || !producer.try_emplace(out, i).second)
        return emitError(nodeLoc(graph.node(i), i))
               << "value '" << out << "' is defined more than once";
    }
  }
  llvm::StringSet<> inputs;
  for (const onnx::ValueInfoProto &input : graph.input())
    inputs.insert(input.name());
  // An If's branches are imported in its place: what they define must be
  // new to the graph too (ONNX forbids shadowing an outer name).
  SmallVector<const onnx::NodeProto *> top;
  for (int i = 0; i < n; ++i)
    top.push_back(&graph.node(i));
  // (Sibling branches may reuse names: one of them is imported.)
  llvm::SmallPtrSet<const onnx::NodeProto *, 16> topLevel(top.begin(),
                                                          top.end());
  for (const onnx::NodeProto *node : withBranchNodes(top)) {
    if (topLevel.contains(node))
      continue;
    for (const std::string &out : node->output())
      if (!out.empty() &&
          (lookup(out) || producer.contains(out) || inputs.contains(out)))
        return emitError(fileLoc) << "value '" << out
                                  << "' is defined more than once (in an "
                                     "If's branch)";
  }

  // Kahn's algorithm: a node is ready once every input it reads is defined.
  std::vector<int> pending(n, 0);
  std::vector<SmallVector<int>> users(n);
  for (int i = 0; i < n; ++i) {
    const onnx::NodeProto &node = graph.node(i);
    if (node.op_type() == "Loop" || node.op_type() == "Scan")
      continue; // Reported as unsupported; their subgraphs are not walked.
    // An If reads its condition and what its branches capture.
    SmallVector<std::string> reads(node.input().begin(), node.input().end());
    if (isIf(node)) {
      llvm::StringSet<> captured;
      auto [then, otherwise] = getBranches(node);
      for (const onnx::GraphProto *branch : {then, otherwise})
        if (branch)
          collectOuterReads(*branch, captured);
      for (const auto &name : captured)
        reads.push_back(name.getKey().str());
    }
    for (const std::string &in : reads) {
      if (in.empty() || lookup(in) || inputs.contains(in))
        continue;
      auto it = producer.find(in);
      if (it == producer.end())
        return emitError(nodeLoc(node, i))
               << "node reads '" << in
               << "', which no node, graph input or initializer defines";
      ++pending[i];
      users[it->second].push_back(i);
    }
  }
  SmallVector<int> ready;
  for (int i = n - 1; i >= 0; --i)
    if (pending[i] == 0)
      ready.push_back(i);
  while (!ready.empty()) {
    int i = ready.pop_back_val();
    order.push_back(&graph.node(i));
    for (int user : llvm::reverse(users[i]))
      if (--pending[user] == 0)
        ready.push_back(user);
  }
  if (static_cast<int>(order.size()) != n) {
    InFlightDiagnostic diag = emitError(fileLoc)
                              << "the graph has a cycle through nodes: ";
    SmallVector<std::string> names;
    for (int i = 0; i < n; ++i)
      if (pending[i] > 0)
        names.push_back(graph.node(i).name().empty()
                            ? graph.node(i).op_type() + "_" + std::to_string(i)
                            : graph.node(i).name());
    llvm::interleaveComma(names, diag);
    return diag;
  }
  return success();
}

LogicalResult
GraphImporter::checkSupported(ArrayRef<const onnx::NodeProto *> order) {
  const OpRegistry &registry = OpRegistry::get();
  // Op type (with its domain when not the default one) -> node names, in
  // order of first appearance.
  std::vector<std::pair<std::string, SmallVector<std::string>>> unsupported;
  llvm::StringMap<size_t> slot;
  Location first = fileLoc;
  SmallVector<const onnx::NodeProto *> all = withBranchNodes(order);
  for (auto [i, node] : llvm::enumerate(all)) {
    auto [key, version] = opKey(*node);
    if (registry.lookup(key, version) || isIf(*node) || isExpertLoop(*node))
      continue;
    if (unsupported.empty())
      first = nodeLoc(*node, i);
    auto [it, inserted] = slot.try_emplace(key, unsupported.size());
    if (inserted)
      unsupported.push_back({key, {}});
    unsupported[it->second].second.push_back(
        node->name().empty() ? node->op_type() + "_" + std::to_string(i)
                             : node->name());
  }
  if (unsupported.empty())
    return success();
  InFlightDiagnostic diag = emitError(first) << "unsupported ONNX ops at opset "
                                             << opset << ": ";
  llvm::interleave(
      unsupported,
      [&](auto &entry) {
        diag << entry.first << " (";
        llvm::interleaveComma(entry.second, diag);
        diag << ")";
      },
      [&] { diag << "; "; });
  // transformers' eager per-expert loop (NonZero of each expert's routing
  // mask, then the tokens it selects): its shapes depend on the routing.
  for (auto &[key, nodes] : unsupported)
    if (key == "NonZero" && llvm::any_of(nodes, [](const std::string &name) {
          return name.find("experts") != std::string::npos ||
                 name.find("moe") != std::string::npos;
        }))
      diag.attachNote()
          << "this looks like transformers' eager mixture-of-experts loop, "
             "but not one Partita recognizes (docs/frontend.md): its shapes "
             "depend on the routing; export the model after "
             "model.set_experts_implementation(\"batched_mm\"), or use "
             "onnxruntime-genai's export (com.microsoft.MoE)";
  return diag;
}

LogicalResult
GraphImporter::checkNodes(ArrayRef<const onnx::NodeProto *> order) {
  bool ok = true;
  SmallVector<const onnx::NodeProto *> all = withBranchNodes(order);
  for (auto [i, node] : llvm::enumerate(all)) {
    // Made by the importer itself, checked when imported.
    if (isExpertLoop(*node))
      continue;
    auto [key, version] = opKey(*node);
    const OpSchema *schema = lookupOpSchema(key, version);
    if (!schema) {
      emitError(nodeLoc(*node, i)) << "internal error: no ONNX schema for "
                                   << key << " at opset " << version;
      ok = false;
      continue;
    }
    if (failed(verifyNodeSignature(*node, *schema, nodeLoc(*node, i)))) {
      ok = false;
      continue;
    }
    if (!isIf(*node))
      continue;
    // Both branches give every output of the If.
    auto [then, otherwise] = getBranches(*node);
    for (const onnx::GraphProto *branch : {then, otherwise})
      if (branch && branch->output_size() != node->output_size()) {
        emitError(nodeLoc(*node, i))
            << "If has " << node->output_size() << " outputs but its "
            << (branch == then ? "then" : "else") << " branch gives "
            << branch->output_size();
        ok = false;
      }
  }
  return success(ok);
}

LogicalResult GraphImporter::runHandlers(const OpEntry &entry,
                                         NodeContext &ctx) {
  const onnx::NodeProto &node = ctx.getNode();
  // Inputs' types are known once their producers are imported: check them
  // against the schema's type constraints before any handler reads them.
  auto [key, version] = opKey(node);
  const OpSchema *schema = lookupOpSchema(key, version);
  if (failed(verifyNodeInputTypes(
          node, *schema, [&](unsigned i) { return ctx.getInputDataType(i); },
          ctx.getLoc())))
    return failure();

  bool allConstant = true;
  for (unsigned i = 0; i < ctx.getNumInputs(); ++i)
    if (ctx.hasInput(i) && !ctx.getConstant(i))
      allConstant = false;
  bool folded = false;
  if (entry.evaluate && (allConstant || entry.evaluatesFromTypes)) {
    if (succeeded(entry.evaluate(ctx))) {
      for (unsigned i = 0; i < ctx.getNumOutputs(); ++i)
        if (ctx.hasOutput(i) && !lookup(node.output(i)))
          return ctx.emitError()
                 << "internal error: output " << i << " was not folded";
      folded = true;
    }
  }
  if (!folded) {
    if (!entry.build)
      return ctx.emitError()
             << node.op_type() << " is supported only on constant inputs";
    Block *block = builder.getInsertionBlock();
    Operation *last = block->empty() ? nullptr : &block->back();
    if (failed(entry.build(ctx)))
      return failure();
    // Verify what the handler built, so that a malformed model is reported
    // at its node rather than as a broken module later.
    Operation *op = last             ? last->getNextNode()
                    : block->empty() ? nullptr
                                     : &block->front();
    for (; op; op = op->getNextNode())
      if (failed(mlir::verify(op, /*verifyRecursively=*/false)))
        return failure();
    for (unsigned i = 0; i < ctx.getNumOutputs(); ++i)
      if (ctx.hasOutput(i) && !lookup(node.output(i)))
        return ctx.emitError() << "output " << i << " of " << node.op_type()
                               << " is not supported";
  }
  // Whatever a node computes must be a shape later stages can count.
  for (unsigned i = 0; i < ctx.getNumOutputs(); ++i) {
    if (!ctx.hasOutput(i))
      continue;
    ValueInfo *info = lookup(node.output(i));
    ArrayRef<int64_t> shape =
        info->value ? info->type.getShape() : info->constant->shape;
    if (failed(ctx.checkShape(shape, "output " + std::to_string(i))))
      return failure();
  }
  return success();
}

LogicalResult GraphImporter::importIf(const onnx::NodeProto &node,
                                      unsigned index) {
  Location loc = nodeLoc(node, index);
  ValueInfo *condition = lookup(node.input(0));
  if (!condition || condition->value || !condition->constant ||
      condition->constant->getNumElements() != 1)
    return emitError(loc)
           << "If whose condition '" << node.input(0)
           << "' is not a constant once dimensions are bound is not "
              "supported (a branch chosen at run time)";
  auto [then, otherwise] = getBranches(node);
  bool pickThen = condition->constant->getAsInt(0) != 0;
  const onnx::GraphProto *branch = pickThen ? then : otherwise;
  // Keyed by the node's name, made unique where two Ifs share one.
  std::string key = cast<NameLoc>(loc).getName().str();
  if (llvm::any_of(ifBranches, [&](NamedAttribute entry) {
        return entry.getName() == key;
      }))
    key += "#" + std::to_string(index);
  ifBranches.push_back(
      builder.getNamedAttr(key, builder.getBoolAttr(pickThen)));
  for (const onnx::TensorProto &init : branch->initializer()) {
    if (lookup(init.name()))
      return emitError(loc) << "If's branch defines '" << init.name()
                            << "', which the graph defines already";
    onnx::TensorProto proto = init;
    FailureOr<HostTensor> tensor = tensorFromProto(proto, loc, std::nullopt);
    if (failed(tensor))
      return failure();
    define(init.name(), std::move(*tensor));
  }
  for (const onnx::NodeProto &inner : branch->node()) {
    for (const std::string &out : inner.output())
      if (!out.empty() && lookup(out))
        return emitError(loc) << "If's branch defines '" << out
                              << "', which the graph defines already";
    if (failed(importNode(inner, index)))
      return failure();
  }
  for (int i = 0; i < node.output_size(); ++i) {
    ValueInfo *result = lookup(branch->output(i).name());
    if (!result)
      return emitError(loc)
             << "If's branch output '" << branch->output(i).name()
             << "' is not defined in the branch";
    if (!node.output(i).empty())
      values[node.output(i)] = *result;
  }
  return success();
}

LogicalResult GraphImporter::foldEagerExperts() {
  // Only small constants are read: Split sizes, axes, fills.
  constexpr int64_t kMaxElements = int64_t(1) << 26;
  auto elements =
      [](const HostTensor &t) -> std::optional<std::vector<double>> {
    if (t.getNumElements() > kMaxElements)
      return std::nullopt;
    if (t.isFloat())
      return t.getFloats();
    const std::vector<int64_t> &ints = t.getInts();
    return std::vector<double>(ints.begin(), ints.end());
  };
  ConstantReader reader;
  reader.tensor = [&](const onnx::TensorProto &proto)
      -> std::optional<std::vector<double>> {
    onnx::TensorProto copy = proto;
    FailureOr<HostTensor> tensor = failure();
    {
      // A tensor the matcher cannot read is simply not matched; the
      // import proper reports it.
      ScopedDiagnosticHandler quiet(context,
                                    [](Diagnostic &) { return success(); });
      tensor = tensorFromProto(copy, fileLoc);
    }
    if (failed(tensor) ||
        copy.data_location() == onnx::TensorProto_DataLocation_EXTERNAL)
      return std::nullopt;
    return elements(*tensor);
  };
  reader.initializer =
      [&](const std::string &name) -> std::optional<std::vector<double>> {
    ValueInfo *info = lookup(name);
    if (!info || !info->constant)
      return std::nullopt;
    return elements(*info->constant);
  };
  // A node the fold removes is checked first: its schema's signature where
  // the table has one (NonZero and ScatterElements have none; the matcher
  // reads their attributes typed).
  auto check = [&](const onnx::NodeProto &node, int index) -> LogicalResult {
    auto [key, version] = opKey(node);
    const OpSchema *schema = lookupOpSchema(key, version);
    Location loc = nodeLoc(node, index);
    if (schema && failed(verifyNodeSignature(node, *schema, loc)))
      return failure();
    // A Constant's tensor must read as its import would read it.
    if (node.op_type() == "Constant")
      for (const onnx::AttributeProto &a : node.attribute())
        if (a.has_t()) {
          onnx::TensorProto copy = a.t();
          if (failed(tensorFromProto(copy, loc)))
            return failure();
        }
    return success();
  };
  return foldExpertLoops(*model->mutable_graph(), reader, check, fileLoc);
}

LogicalResult GraphImporter::importExpertLoop(const onnx::NodeProto &node,
                                              unsigned index) {
  Location loc = nodeLoc(node, index);
  SmallVector<Value> operands;
  for (const std::string &name : node.input()) {
    Value value = materialize(name, loc);
    if (!value)
      return emitError(loc)
             << "the expert loop's input '" << name << "' is not defined";
    operands.push_back(value);
  }
  auto type = [](Value v) { return cast<RankedTensorType>(v.getType()); };
  int64_t traced = 0, depth = 0;
  SmallVector<int64_t> modules;
  for (const onnx::AttributeProto &a : node.attribute()) {
    if (a.name() == "traced")
      traced = a.i();
    else if (a.name() == "depth")
      depth = a.i();
    else if (a.name() == "experts")
      modules.assign(a.ints().begin(), a.ints().end());
  }
  Value hidden = operands[0], ids = operands[1], weights = operands[2];
  auto h = type(hidden), i = type(ids), w = type(weights);
  if (h.getRank() != 2 || i.getRank() != 2 || w.getShape() != i.getShape() ||
      i.getDimSize(0) != h.getDimSize(0) ||
      !isa<FloatType>(h.getElementType()) ||
      w.getElementType() != h.getElementType() ||
      !i.getElementType().isSignlessInteger())
    return emitError(loc) << "transformers' eager expert loop has hidden "
                             "states "
                          << shapeText(h.getShape()) << ", expert ids "
                          << shapeText(i.getShape()) << " and routing weights "
                          << shapeText(w.getShape())
                          << " (rows of [tokens, hidden] and [tokens, k])";
  int64_t hiddenSize = h.getDimSize(1);
  Type element = h.getElementType();
  Value fc1, fc2, fc3;
  int64_t experts;
  SmallVector<int64_t> missing;
  if (modules.empty()) {
    fc1 = operands[3];
    fc2 = operands[4];
    auto w1 = type(fc1), w2 = type(fc2);
    experts = w1.getRank() == 3 ? w1.getDimSize(0) : 0;
    if (w1.getRank() != 3 || w2.getRank() != 3 ||
        w1.getDimSize(2) != hiddenSize || w2.getDimSize(0) != experts ||
        w2.getDimSize(1) != hiddenSize ||
        w1.getDimSize(1) != 2 * w2.getDimSize(2) ||
        w1.getElementType() != element || w2.getElementType() != element)
      return emitError(loc) << "transformers' eager expert loop's "
                               "gate_up_proj "
                            << shapeText(w1.getShape()) << " and down_proj "
                            << shapeText(w2.getShape())
                            << " do not fit hidden states of " << hiddenSize;
    if (depth != experts && depth != experts + 1)
      return emitError(loc)
             << "transformers' eager expert loop's one-hot "
                "has "
             << depth << " classes for " << experts << " experts";
  } else {
    // transformers 4: one module per body, [in, out] weights, stacked
    // [E, out, in] for nn.moe (each transposed, an expert the loop lacks
    // zeros).
    experts = depth;
    auto first = type(operands[3]);
    int64_t ffn = first.getRank() == 2 ? first.getDimSize(1) : 0;
    SmallVector<int64_t> gateShape = {hiddenSize, ffn},
                         downShape = {ffn, hiddenSize};
    for (auto [j, value] : llvm::enumerate(ArrayRef(operands).drop_front(3))) {
      auto t = type(value);
      ArrayRef<int64_t> want = j % 3 == 2 ? downShape : gateShape;
      if (t.getShape() != want || t.getElementType() != element)
        return emitError(loc)
               << "transformers' eager expert loop's expert " << modules[j / 3]
               << " has a weight of shape " << shapeText(t.getShape())
               << ", not " << shapeText(want);
    }
    SmallVector<Value> stacks[3];
    size_t next = 0;
    for (int64_t e = 0; e < experts; ++e) {
      bool present = next < modules.size() && modules[next] == e;
      if (!present)
        missing.push_back(e);
      for (int p = 0; p < 3; ++p) {
        ArrayRef<int64_t> in = p == 2 ? downShape : gateShape;
        auto expertType = RankedTensorType::get({1, in[1], in[0]}, element);
        if (!present) {
          stacks[p].push_back(nn::ConstantOp::create(
              builder, loc,
              cast<ElementsAttr>(DenseElementsAttr::get(
                  expertType, builder.getFloatAttr(element, 0.0)))));
          continue;
        }
        Value transposed = nn::TransposeOp::create(
            builder, loc, RankedTensorType::get({in[1], in[0]}, element),
            operands[3 + 3 * next + p], ArrayRef<int64_t>{1, 0});
        stacks[p].push_back(
            reshape(builder, loc, transposed, expertType.getShape()));
      }
      next += present;
    }
    auto stack = [&](ArrayRef<Value> parts, ArrayRef<int64_t> each) {
      return nn::ConcatOp::create(
                 builder, loc,
                 RankedTensorType::get({experts, each[0], each[1]}, element),
                 parts, int64_t(0))
          .getResult();
    };
    fc1 = stack(stacks[0], {ffn, hiddenSize});
    fc3 = stack(stacks[1], {ffn, hiddenSize});
    fc2 = stack(stacks[2], {hiddenSize, ffn});
  }
  if (traced > experts)
    return emitError(loc) << "transformers' eager expert loop holds " << traced
                          << " expert bodies for " << experts << " experts";
  if (traced < experts) {
    InFlightDiagnostic warning = emitWarning(loc);
    warning << "transformers' eager expert loop holds " << traced << " of "
            << experts
            << " experts (the export's example input reached only those)";
    if (missing.empty()) {
      warning << ": onnxruntime refuses an input that reaches another "
                 "number of experts; Partita computes every expert the "
                 "router chooses, as the model does";
    } else {
      warning << ": the graph has no weights for experts ";
      llvm::interleaveComma(missing, warning);
      warning << ", which add nothing here (onnxruntime refuses an input "
                 "that reaches another number of experts, and gives an "
                 "input that reaches as many, other ones, the example's "
                 "experts' weights)";
    }
  }
  auto moe =
      nn::MoeOp::create(builder, loc, h, hidden, ids, weights, fc1, fc2, fc3,
                        Value(), Value(), Value(), nn::MoeActivation::Swiglu,
                        false, FloatAttr(), FloatAttr(), FloatAttr());
  define(node.output(0), moe.getResult());
  return success();
}

LogicalResult GraphImporter::importNode(const onnx::NodeProto &node,
                                        unsigned index) {
  if (isIf(node))
    return importIf(node, index);
  if (isExpertLoop(node))
    return importExpertLoop(node, index);
  auto [key, version] = opKey(node);
  const OpEntry *entry = OpRegistry::get().lookup(key, version);
  Location loc = nodeLoc(node, index);
  NodeContext ctx(*this, node, version, loc, builder);

  // Every failure must leave a diagnostic at the node: count the errors the
  // handlers emit (passing each on to the caller's handler).
  unsigned errors = 0;
  LogicalResult result = failure();
  {
    ScopedDiagnosticHandler counter(context, [&](Diagnostic &diag) {
      if (diag.getSeverity() == DiagnosticSeverity::Error)
        ++errors;
      return failure();
    });
    result = runHandlers(*entry, ctx);
  }
  if (failed(result) && errors == 0)
    return ctx.emitError() << "internal error: importing " << node.op_type()
                           << " failed without a diagnostic";
  return result;
}

OwningOpRef<ModuleOp> GraphImporter::run() {
  if (failed(checkModel()) || failed(checkOpsets()) ||
      failed(selectMergedBranch(*model->mutable_graph(), options.kvCache,
                                fileLoc)) ||
      failed(importInitializers()))
    return nullptr;
  declareMaskOverCache(*model->mutable_graph());
  if (failed(foldEagerExperts()))
    return nullptr;
  SmallVector<std::string> inputNames;
  SmallVector<Type> inputTypes;
  if (failed(bindInputs(inputNames, inputTypes)))
    return nullptr;
  SmallVector<const onnx::NodeProto *> order;
  if (failed(sortNodes(order)) || failed(checkSupported(order)) ||
      failed(checkNodes(order)))
    return nullptr;

  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  const onnx::GraphProto &graph = model->graph();
  if (!graph.name().empty())
    (*module)->setAttr("partita.model_name",
                       StringAttr::get(context, graph.name()));
  builder.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(builder, fileLoc, "main",
                                   builder.getFunctionType(inputTypes, {}));
  Block *body = func.addEntryBlock();
  for (auto [i, name] : llvm::enumerate(inputNames)) {
    define(name, body->getArgument(i));
    func.setArgAttr(i, "onnx.name", builder.getStringAttr(name));
  }
  builder.setInsertionPointToEnd(body);
  if (options.train && failed(makeParameters(func, inputTypes)))
    return nullptr;

  for (auto [i, node] : llvm::enumerate(order))
    if (failed(importNode(*node, i)))
      return nullptr;
  if (!ifBranches.empty())
    (*module)->setAttr(kIfBranchesAttrName,
                       builder.getDictionaryAttr(ifBranches));

  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  // Output dimensions declared as expressions that the graph does not
  // compute: the first, and how many.
  std::string misdeclared;
  unsigned misdeclaredCount = 0;
  for (const onnx::ValueInfoProto &output : graph.output()) {
    Location loc =
        NameLoc::get(StringAttr::get(context, output.name()), fileLoc);
    Value value = materialize(output.name(), loc);
    if (!value) {
      if (!lookup(output.name()))
        emitError(loc) << "graph output '" << output.name()
                       << "' is never defined";
      return nullptr;
    }
    // The declared element type and static dimensions must agree with what
    // the graph computes.
    auto type = cast<RankedTensorType>(value.getType());
    if (output.type().value_case() != onnx::TypeProto::kTensorType &&
        output.type().value_case() != onnx::TypeProto::VALUE_NOT_SET)
      return emitError(loc) << "graph output '" << output.name()
                            << "' is declared as something else than a tensor",
             nullptr;
    int declaredType = output.type().tensor_type().elem_type();
    int computedType = getDataType(type.getElementType());
    // An output may leave its type out, but a tensor type without an
    // element type is invalid (onnxruntime refuses it: "Invalid tensor data
    // type 0").
    if (output.type().has_tensor_type() &&
        declaredType == onnx::TensorProto_DataType_UNDEFINED)
      return emitError(loc) << "graph output '" << output.name()
                            << "' is declared a tensor of undefined element "
                               "type (0)",
             nullptr;
    if (declaredType != onnx::TensorProto_DataType_UNDEFINED &&
        declaredType != computedType)
      return emitError(loc)
                 << "graph output '" << output.name() << "' is declared "
                 << dataTypeName(declaredType) << " but the graph computes "
                 << dataTypeName(computedType),
             nullptr;
    const onnx::TensorShapeProto &declared =
        output.type().tensor_type().shape();
    bool mismatch = output.type().tensor_type().has_shape() &&
                    declared.dim_size() != type.getRank();
    for (int d = 0; !mismatch && d < declared.dim_size(); ++d)
      mismatch = declared.dim(d).has_dim_value() &&
                 declared.dim(d).dim_value() != type.getDimSize(d);
    if (mismatch)
      return emitError(loc) << "graph output '" << output.name()
                            << "' is declared with another shape than the "
                            << type << " the graph computes",
             nullptr;
    // A dimension declared as an expression of bound symbols is checked
    // against what the graph computes. ONNX makes a dim_param a name, not
    // arithmetic, and onnxruntime runs the graph whatever an output's
    // dim_param says; exporters' expressions are hints that can be wrong
    // (optimum 1.16 declares every present 'past_sequence_length + 1',
    // true for one new token only). The graph's shape is used, with a
    // warning; a declaration no shape can have is an error.
    for (int d = 0; d < declared.dim_size(); ++d) {
      if (!declared.dim(d).has_dim_param())
        continue;
      ResolvedDim r = resolveDimParam(declared.dim(d).dim_param(), nullptr);
      if (!r.isExpression || !r.value || *r.value == type.getDimSize(d))
        continue;
      if (*r.value < 0)
        return emitError(loc)
                   << "graph output '" << output.name() << "' dimension " << d
                   << " is declared '" << declared.dim(d).dim_param()
                   << "' = " << *r.value
                   << " with the bound values, which no dimension can be",
               nullptr;
      if (misdeclaredCount++ == 0)
        llvm::raw_string_ostream(misdeclared)
            << "graph output '" << output.name() << "' dimension " << d
            << " is declared '" << declared.dim(d).dim_param()
            << "' = " << *r.value
            << " with the bound values, but the graph computes "
            << type.getDimSize(d);
    }
    results.push_back(value);
    resultTypes.push_back(type);
  }
  if (misdeclaredCount) {
    InFlightDiagnostic warning = emitWarning(fileLoc) << misdeclared;
    if (unsigned others = misdeclaredCount - 1)
      warning << " (and " << others << " other output dimension"
              << (others > 1 ? "s" : "") << ")";
    warning << "; the graph's shapes are used, as onnxruntime uses them";
  }
  func::ReturnOp::create(builder, fileLoc, results);
  func.setFunctionType(builder.getFunctionType(inputTypes, resultTypes));
  for (auto [i, output] : llvm::enumerate(graph.output()))
    func.setResultAttr(i, "onnx.name", builder.getStringAttr(output.name()));
  return module;
}

//===----------------------------------------------------------------------===//
// NodeContext
//===----------------------------------------------------------------------===//

RankedTensorType mlir::partita::onnx_import::typeOf(Value value) {
  return cast<RankedTensorType>(value.getType());
}

Value mlir::partita::onnx_import::reshape(OpBuilder &b, Location loc,
                                          Value value,
                                          ArrayRef<int64_t> shape) {
  auto type = typeOf(value).clone(shape);
  if (type == value.getType())
    return value;
  return nn::ReshapeOp::create(b, loc, type, value);
}

Value NodeContext::getInput(unsigned i) {
  if (!hasInput(i))
    return {};
  return importer.materialize(node.input(i), loc);
}

const HostTensor *NodeContext::getConstant(unsigned i) const {
  if (!hasInput(i))
    return nullptr;
  // A constant stays one after a node read it as a value (the same
  // initializer can be CumSum's axis and an operand of Equal).
  GraphImporter::ValueInfo *info = importer.lookup(node.input(i));
  return info ? info->constant.get() : nullptr;
}

Value NodeContext::createConstant(const HostTensor &tensor, StringRef name) {
  return importer.createConstant(tensor, name, loc);
}

bool NodeContext::isTraining() const { return importer.isTraining(); }

KvCacheForm NodeContext::getKvCacheForm() const {
  return importer.getKvCacheForm();
}

Value NodeContext::createConstantView(unsigned i, const HostTensor &view) {
  std::string key;
  llvm::raw_string_ostream os(key);
  os << node.input(i) << '|' << view.dataType << '|'
     << builder.getInsertionBlock();
  for (int64_t d : view.shape)
    os << 'x' << d;
  Value &cached = importer.constantViews[key];
  if (!cached)
    cached = createConstant(view, node.input(i));
  return cached;
}

RankedTensorType NodeContext::getInputType(unsigned i) {
  GraphImporter::ValueInfo *info = importer.lookup(node.input(i));
  return info ? importer.typeOf(*info) : RankedTensorType();
}

int NodeContext::getInputDataType(unsigned i) const {
  GraphImporter::ValueInfo *info = importer.lookup(node.input(i));
  return info ? info->dataType : onnx::TensorProto_DataType_UNDEFINED;
}

ArrayRef<int64_t> NodeContext::getInputShape(unsigned i) {
  GraphImporter::ValueInfo *info = importer.lookup(node.input(i));
  if (!info)
    return {};
  if (info->value)
    return info->type.getShape();
  return info->constant->shape;
}

FailureOr<HostTensor> NodeContext::readTensor(const onnx::TensorProto &proto) {
  onnx::TensorProto copy = proto;
  return importer.tensorFromProto(copy, loc);
}

FailureOr<SmallVector<int64_t>>
NodeContext::getConstantInts(unsigned i, StringRef what, bool allowScalar) {
  const HostTensor *tensor = getConstant(i);
  if (!tensor)
    return emitError() << "the " << what << " input of " << node.op_type()
                       << " must be a constant once shapes are bound";
  size_t rank = tensor->shape.size();
  if (rank != 1 && !(allowScalar && rank == 0))
    return emitError() << "the " << what << " input of " << node.op_type()
                       << " must be a 1-D tensor"
                       << (allowScalar ? " or a scalar" : "") << ", not rank "
                       << rank;
  return SmallVector<int64_t>(tensor->getInts().begin(),
                              tensor->getInts().end());
}

void NodeContext::setOutput(unsigned i, Value value) {
  if (hasOutput(i))
    importer.define(node.output(i), value);
}

void NodeContext::setOutput(unsigned i, HostTensor value) {
  if (hasOutput(i))
    importer.define(node.output(i), std::move(value));
}

const onnx::AttributeProto *NodeContext::getAttr(StringRef name) const {
  for (const onnx::AttributeProto &attr : node.attribute())
    if (attr.name() == name)
      return &attr;
  return nullptr;
}

int64_t NodeContext::getAttrInt(StringRef name, int64_t defaultValue) const {
  const onnx::AttributeProto *attr = getAttr(name);
  return attr ? attr->i() : defaultValue;
}

float NodeContext::getAttrFloat(StringRef name, float defaultValue) const {
  const onnx::AttributeProto *attr = getAttr(name);
  return attr ? attr->f() : defaultValue;
}

std::string NodeContext::getAttrString(StringRef name,
                                       StringRef defaultValue) const {
  const onnx::AttributeProto *attr = getAttr(name);
  return attr ? attr->s() : defaultValue.str();
}

std::optional<SmallVector<int64_t>>
NodeContext::getAttrInts(StringRef name) const {
  const onnx::AttributeProto *attr = getAttr(name);
  if (!attr)
    return std::nullopt;
  return SmallVector<int64_t>(attr->ints().begin(), attr->ints().end());
}

InFlightDiagnostic NodeContext::emitError() { return mlir::emitError(loc); }

FailureOr<int64_t> NodeContext::normalizeAxis(int64_t axis, int64_t rank,
                                              StringRef what) {
  if (axis < -rank || axis >= rank)
    return emitError() << node.op_type() << " " << what << " " << axis
                       << " is out of range for rank " << rank;
  return axis < 0 ? axis + rank : axis;
}

LogicalResult NodeContext::checkShape(ArrayRef<int64_t> shape, StringRef what) {
  for (auto [d, dim] : llvm::enumerate(shape))
    if (dim < 0)
      return emitError() << what << " of " << node.op_type()
                         << " would have a negative dimension " << dim
                         << " (dimension " << d << ")";
  if (!getElementCount(shape))
    return emitError() << what << " of " << node.op_type() << " has shape "
                       << shapeText(shape)
                       << ", whose element count overflows int64";
  return success();
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

void mlir::partita::registerOnnxImportDialects(DialectRegistry &registry) {
  registry.insert<nn::NNDialect, func::FuncDialect>();
}

static OwningOpRef<ModuleOp>
importModel(MLIRContext *context, std::unique_ptr<onnx::ModelProto> model,
            ::partita::onnx_reader::MappedInitializers mapped, StringRef name,
            StringRef modelDir, const OnnxImportOptions &options) {
  context->loadDialect<nn::NNDialect, func::FuncDialect>();
  GraphImporter importer(context, std::move(model), std::move(mapped), name,
                         modelDir, options);
  return importer.run();
}

OwningOpRef<ModuleOp>
mlir::partita::importOnnxFile(MLIRContext *context, StringRef path,
                              const OnnxImportOptions &options) {
  // A directory: onnxruntime-genai's builder output (genai_config.json
  // names the model file and the head size its past inputs leave as the
  // symbol kv_cache_dim) or an optimum export's.
  std::string file = path.str();
  OnnxImportOptions withConfig = options;
  int64_t headSize = 0;
  if (llvm::sys::fs::is_directory(path)) {
    Location loc = FileLineColLoc::get(context, path, 0, 0);
    FailureOr<std::optional<GenaiConfig>> genai = readGenaiConfig(path, loc);
    if (failed(genai))
      return nullptr;
    if (*genai) {
      file = (*genai)->model;
      headSize = (*genai)->headSize;
    } else {
      FailureOr<std::string> found =
          findDirectoryModel(path, options.kvCache, loc);
      if (failed(found))
        return nullptr;
      file = std::move(*found);
    }
  }
  path = file;
  auto model = std::make_unique<onnx::ModelProto>();
  ::partita::onnx_reader::MappedInitializers mapped;
  std::string error;
  if (!::partita::onnx_reader::readModelFile(file, *model, mapped, error)) {
    emitError(FileLineColLoc::get(context, path, 0, 0)) << error;
    return nullptr;
  }
  // The head size binds the symbol the builder's past inputs leave for it,
  // where they have it and --bind does not give it.
  if (headSize > 0)
    for (const onnx::ValueInfoProto &input : model->graph().input())
      for (const onnx::TensorShapeProto::Dimension &dim :
           input.type().tensor_type().shape().dim())
        if (dim.dim_param() == kGenaiHeadSizeSymbol)
          withConfig.bindings.try_emplace(kGenaiHeadSizeSymbol, headSize);
  SmallString<256> dir(path);
  llvm::sys::path::remove_filename(dir);
  if (dir.empty())
    dir = ".";
  return importModel(context, std::move(model), std::move(mapped), path, dir,
                     withConfig);
}

OwningOpRef<ModuleOp>
mlir::partita::importOnnxBuffer(MLIRContext *context, StringRef bytes,
                                StringRef bufferName, StringRef modelDir,
                                const OnnxImportOptions &options) {
  auto model = std::make_unique<onnx::ModelProto>();
  std::string error;
  if (!::partita::onnx_reader::readModelBuffer(bytes.data(), bytes.size(),
                                               *model, error)) {
    emitError(FileLineColLoc::get(context, bufferName, 0, 0)) << error;
    return nullptr;
  }
  return importModel(context, std::move(model), {}, bufferName, modelDir,
                     options);
}
