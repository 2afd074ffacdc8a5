//===- OpSchema.cpp - the ONNX signature of each supported op -------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "OpSchema.h"

#include "ImportContext.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <map>

using namespace mlir;
using namespace mlir::partita::onnx_import;

namespace {

const std::vector<OpSchema> &allSchemas() {
  static const std::vector<OpSchema> schemas = {
#include "OpSchemas.inc"
  };
  return schemas;
}

/// Op type -> its schemas by increasing since-version.
const llvm::StringMap<std::vector<const OpSchema *>> &schemasByOp() {
  static const auto *map = [] {
    auto *m = new llvm::StringMap<std::vector<const OpSchema *>>();
    for (const OpSchema &schema : allSchemas())
      (*m)[schema.opType].push_back(&schema);
    for (auto &entry : *m)
      llvm::sort(entry.second, [](const OpSchema *a, const OpSchema *b) {
        return a->sinceVersion < b->sinceVersion;
      });
    return m;
  }();
  return *map;
}

std::string attrTypeName(int type) {
  if (!onnx::AttributeProto_AttributeType_IsValid(type))
    return "type " + std::to_string(type);
  return onnx::AttributeProto_AttributeType_Name(
      static_cast<onnx::AttributeProto_AttributeType>(type));
}

/// The value fields an attribute sets, as the attribute type each belongs
/// to.
SmallVector<onnx::AttributeProto_AttributeType>
valueFields(const onnx::AttributeProto &attr) {
  using A = onnx::AttributeProto;
  SmallVector<onnx::AttributeProto_AttributeType> fields;
  auto add = [&](bool set, onnx::AttributeProto_AttributeType type) {
    if (set)
      fields.push_back(type);
  };
  add(attr.has_f(), A::FLOAT);
  add(attr.has_i(), A::INT);
  add(attr.has_s(), A::STRING);
  add(attr.has_t(), A::TENSOR);
  add(attr.has_g(), A::GRAPH);
  add(attr.has_sparse_tensor(), A::SPARSE_TENSOR);
  add(attr.has_tp(), A::TYPE_PROTO);
  add(attr.floats_size() > 0, A::FLOATS);
  add(attr.ints_size() > 0, A::INTS);
  add(attr.strings_size() > 0, A::STRINGS);
  add(attr.tensors_size() > 0, A::TENSORS);
  add(attr.graphs_size() > 0, A::GRAPHS);
  add(attr.sparse_tensors_size() > 0, A::SPARSE_TENSORS);
  add(attr.type_protos_size() > 0, A::TYPE_PROTOS);
  return fields;
}

/// "2 inputs", "1 to 3 inputs", "at least 1 input".
std::string countText(int min, int max, StringRef what) {
  std::string text;
  if (max == kUnbounded)
    text = "at least " + std::to_string(min);
  else if (min == max)
    text = std::to_string(min);
  else
    text = std::to_string(min) + " to " + std::to_string(max);
  int last = max == kUnbounded ? min : max;
  return text + " " + what.str() + (last == 1 ? "" : "s");
}

LogicalResult checkCount(const onnx::NodeProto &node, int have, int min,
                         int max, StringRef what, Location loc) {
  if (have < min)
    return emitError(loc) << node.op_type() << " needs "
                          << countText(min, max, what) << ", node has " << have;
  if (have > max)
    return emitError(loc) << node.op_type() << " takes at most "
                          << countText(max, max, what) << ", node has " << have;
  return success();
}

LogicalResult checkAttribute(const onnx::NodeProto &node,
                             const onnx::AttributeProto &attr,
                             const OpAttribute &expected, Location loc) {
  auto error = [&]() {
    return emitError(loc) << "attribute '" << attr.name() << "' of "
                          << node.op_type() << " ";
  };
  if (!attr.ref_attr_name().empty())
    return error() << "refers to the function attribute '"
                   << attr.ref_attr_name()
                   << "', which only a function body may";
  if (attr.type() != expected.type)
    return error() << "must be " << attrTypeName(expected.type) << ", found "
                   << (attr.type() == onnx::AttributeProto::UNDEFINED
                           ? "no type"
                           : attrTypeName(attr.type()));
  SmallVector<onnx::AttributeProto_AttributeType> fields = valueFields(attr);
  if (fields.size() > 1)
    return error() << "holds more than one value (" << attrTypeName(fields[0])
                   << " and " << attrTypeName(fields[1]) << ")";
  if (fields.size() == 1 && fields[0] != expected.type)
    return error() << "is declared " << attrTypeName(expected.type)
                   << " but holds " << attrTypeName(fields[0]);
  // A scalar number or string left out reads as its default (as proto3
  // writers leave it out); a tensor or graph must be there.
  bool defaultable = expected.type != onnx::AttributeProto::TENSOR &&
                     expected.type != onnx::AttributeProto::GRAPH &&
                     expected.type != onnx::AttributeProto::SPARSE_TENSOR &&
                     expected.type != onnx::AttributeProto::TYPE_PROTO;
  if (fields.empty() && !defaultable)
    return error() << "holds no value";
  if (expected.boolean && attr.i() != 0 && attr.i() != 1)
    return error() << "must be 0 or 1, found " << attr.i();
  return success();
}

} // namespace

const OpParam &OpSchema::input(unsigned i) const {
  return i < inputs.size() ? inputs[i] : inputs.back();
}

const OpParam &OpSchema::output(unsigned i) const {
  return i < outputs.size() ? outputs[i] : outputs.back();
}

const OpAttribute *OpSchema::findAttribute(StringRef name) const {
  for (const OpAttribute &attr : attributes)
    if (name == attr.name)
      return &attr;
  return nullptr;
}

const OpSchema *mlir::partita::onnx_import::lookupOpSchema(StringRef opType,
                                                           int64_t opset) {
  const auto &map = schemasByOp();
  auto it = map.find(opType);
  if (it == map.end())
    return nullptr;
  const OpSchema *best = nullptr;
  for (const OpSchema *schema : it->second)
    if (schema->sinceVersion <= opset)
      best = schema;
  return best;
}

LogicalResult mlir::partita::onnx_import::verifyNodeSignature(
    const onnx::NodeProto &node, const OpSchema &schema, Location loc) {
  if (failed(checkCount(node, node.input_size(), schema.minInputs,
                        schema.maxInputs, "input", loc)) ||
      failed(checkCount(node, node.output_size(), schema.minOutputs,
                        schema.maxOutputs, "output", loc)))
    return failure();
  // Only optional parameters may be left out with an empty name.
  for (int i = 0; i < node.input_size(); ++i) {
    const OpParam &param = schema.input(i);
    if (node.input(i).empty() && param.kind != ParamKind::Optional)
      return emitError(loc)
             << "input " << i << " ('" << param.name << "') of "
             << node.op_type() << " is required but its name is empty";
  }
  for (int i = 0; i < node.output_size(); ++i) {
    const OpParam &param = schema.output(i);
    if (node.output(i).empty() && param.kind == ParamKind::Single)
      return emitError(loc)
             << "output " << i << " ('" << param.name << "') of "
             << node.op_type() << " is required but its name is empty";
  }

  llvm::StringSet<> seen;
  for (const onnx::AttributeProto &attr : node.attribute()) {
    if (!seen.insert(attr.name()).second)
      return emitError(loc) << "attribute '" << attr.name() << "' of "
                            << node.op_type() << " is given twice";
    // Names starting with two underscores are ONNX's internal symbols,
    // which checkers ignore.
    if (StringRef(attr.name()).starts_with("__"))
      continue;
    const OpAttribute *expected = schema.findAttribute(attr.name());
    if (!expected)
      return emitError(loc)
             << node.op_type() << " (version " << schema.sinceVersion
             << ") has no attribute '" << attr.name() << "'";
    if (failed(checkAttribute(node, attr, *expected, loc)))
      return failure();
  }
  for (const OpAttribute &attr : schema.attributes)
    if (attr.required && !seen.contains(attr.name))
      return emitError(loc)
             << node.op_type() << " needs attribute '" << attr.name << "'";
  return success();
}

LogicalResult mlir::partita::onnx_import::verifyNodeInputTypes(
    const onnx::NodeProto &node, const OpSchema &schema,
    llvm::function_ref<int(unsigned)> dataTypeOf, Location loc) {
  // Type constraint -> the first input bound to it.
  llvm::StringMap<unsigned> first;
  for (int i = 0; i < node.input_size(); ++i) {
    if (node.input(i).empty())
      continue;
    const OpParam &param = schema.input(i);
    int dataType = dataTypeOf(i);
    if (dataType == onnx::TensorProto_DataType_UNDEFINED)
      continue;
    if (dataType < 0 || dataType >= 32 || !(param.types & (1u << dataType))) {
      InFlightDiagnostic diag = emitError(loc)
                                << "input " << i << " ('" << param.name
                                << "') of " << node.op_type() << " has type "
                                << dataTypeName(dataType) << "; "
                                << node.op_type() << " allows ";
      SmallVector<std::string> allowed;
      for (int t = 0; t < 32; ++t)
        if (param.types & (1u << t))
          allowed.push_back(dataTypeName(t));
      llvm::interleaveComma(allowed, diag);
      return diag << " there";
    }
    if (!*param.group)
      continue;
    auto [it, inserted] = first.try_emplace(param.group, i);
    if (inserted)
      continue;
    int firstType = dataTypeOf(it->second);
    if (firstType != dataType)
      return emitError(loc)
             << "input " << i << " ('" << param.name << "') of "
             << node.op_type() << " has type " << dataTypeName(dataType)
             << " but input " << it->second << " ('"
             << schema.input(it->second).name << "') has type "
             << dataTypeName(firstType) << "; both are of type " << param.group
             << " and must agree";
  }
  return success();
}
