//===- OptimumDecoders.cpp - optimum's legacy decoder exports -------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "OptimumDecoders.h"

#include "DimExpr.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using namespace mlir::partita;
using namespace mlir::partita::onnx_import;

namespace {

constexpr llvm::StringLiteral kCondition = "use_cache_branch";

/// Removes the graph inputs `drop` selects.
template <typename Predicate>
void removeInputs(onnx::GraphProto &graph, Predicate drop) {
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
  for (onnx::ValueInfoProto &input : *graph.mutable_input())
    if (!drop(input))
      *kept.Add() = std::move(input);
  graph.mutable_input()->Swap(&kept);
}

} // namespace

void mlir::partita::onnx_import::declareMaskOverCache(onnx::GraphProto &graph) {
  CacheSymbols symbols = findCacheSymbols(graph);
  const std::string &past = symbols.past, &sequence = symbols.sequence;
  if (past.empty() || sequence.empty())
    return;
  for (onnx::ValueInfoProto &input : *graph.mutable_input()) {
    if (input.name() != "attention_mask")
      continue;
    onnx::TensorShapeProto *shape =
        input.mutable_type()->mutable_tensor_type()->mutable_shape();
    if (shape->dim_size() != 2)
      continue;
    // [batch, sequence] (the merged graph), or an expression of the past
    // alone ('past_sequence_length + 1').
    const std::string &length = shape->dim(1).dim_param();
    std::optional<DimExpr> expr = DimExpr::parse(length);
    bool pastOnly = expr && llvm::is_contained(expr->getSymbols(), past) &&
                    !llvm::is_contained(expr->getSymbols(), sequence);
    if (length == sequence || pastOnly)
      shape->mutable_dim(1)->set_dim_param(past + " + " + sequence);
  }
}

CacheSymbols
mlir::partita::onnx_import::findCacheSymbols(const onnx::GraphProto &graph) {
  CacheSymbols symbols;
  for (const onnx::ValueInfoProto &input : graph.input()) {
    const onnx::TensorShapeProto &shape = input.type().tensor_type().shape();
    if (StringRef(input.name()).starts_with("past") && shape.dim_size() == 4 &&
        !shape.dim(2).dim_param().empty()) {
      const std::string &param = shape.dim(2).dim_param();
      if (symbols.past.empty())
        symbols.past = param;
      else if (param != symbols.past && symbols.otherPast.empty())
        symbols.otherPast = param;
    }
    if (input.name() == "input_ids" && shape.dim_size() == 2)
      symbols.sequence = shape.dim(1).dim_param();
  }
  return symbols;
}

FailureOr<std::string>
mlir::partita::onnx_import::findDirectoryModel(StringRef directory,
                                               KvCacheForm form, Location loc) {
  bool serving = form != KvCacheForm::None;
  SmallVector<StringRef, 3> candidates = {"model.onnx"};
  if (serving)
    candidates.append(
        {"decoder_model_merged.onnx", "decoder_with_past_model.onnx"});
  else
    candidates.append({"decoder_model.onnx", "decoder_model_merged.onnx"});
  for (StringRef name : candidates) {
    SmallString<256> path(directory);
    llvm::sys::path::append(path, name);
    if (llvm::sys::fs::is_regular_file(path))
      return std::string(path);
  }
  InFlightDiagnostic diag = emitError(loc)
                            << "'" << directory
                            << "' is a directory without a model Partita "
                               "reads: an optimum export directory holds ";
  llvm::interleave(
      candidates, diag, [&](StringRef name) { diag << name; }, " or ");
  if (!serving)
    diag << " (with --max-seq: model.onnx, decoder_model_merged.onnx or "
            "decoder_with_past_model.onnx)";
  return diag;
}

FailureOr<std::optional<GenaiConfig>>
mlir::partita::onnx_import::readGenaiConfig(StringRef directory, Location loc) {
  SmallString<256> path(directory);
  llvm::sys::path::append(path, "genai_config.json");
  if (!llvm::sys::fs::exists(path))
    return std::optional<GenaiConfig>();
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return emitError(loc) << "cannot read " << path << ": "
                          << buffer.getError().message();
  llvm::Expected<llvm::json::Value> parsed =
      llvm::json::parse((*buffer)->getBuffer());
  if (!parsed)
    return emitError(loc) << path << " is not JSON: "
                          << llvm::toString(parsed.takeError());
  const llvm::json::Object *root = parsed->getAsObject();
  const llvm::json::Object *model = root ? root->getObject("model") : nullptr;
  const llvm::json::Object *decoder =
      model ? model->getObject("decoder") : nullptr;
  std::optional<StringRef> filename =
      decoder ? decoder->getString("filename") : std::nullopt;
  if (!filename)
    return emitError(loc) << path
                          << " names no model.decoder.filename (an "
                             "onnxruntime-genai config names its model file "
                             "there)";
  // A file of the directory, never a path out of it.
  if (filename->empty() || filename->contains('/') ||
      filename->contains('\\') || *filename == "." || *filename == "..")
    return emitError(loc) << path << ": model.decoder.filename '" << *filename
                          << "' is not a file name in the directory";
  GenaiConfig config;
  SmallString<256> file(directory);
  llvm::sys::path::append(file, *filename);
  if (!llvm::sys::fs::is_regular_file(file))
    return emitError(loc) << path << " names the model file '" << *filename
                          << "', which the directory does not hold";
  config.model = std::string(file);
  if (std::optional<int64_t> head = decoder->getInteger("head_size")) {
    if (*head <= 0)
      return emitError(loc) << path << ": model.decoder.head_size " << *head
                            << " is not positive";
    config.headSize = *head;
  }
  return std::optional<GenaiConfig>(std::move(config));
}

LogicalResult
mlir::partita::onnx_import::selectMergedBranch(onnx::GraphProto &graph,
                                               KvCacheForm form, Location loc) {
  bool conditionIsInput =
      llvm::any_of(graph.input(), [](const onnx::ValueInfoProto &input) {
        return input.name() == kCondition;
      });
  if (!conditionIsInput)
    return success();
  int ifIndex = -1;
  for (auto [i, node] : llvm::enumerate(graph.node())) {
    if (node.op_type() != "If" || node.input_size() != 1 ||
        node.input(0) != kCondition)
      continue;
    if (ifIndex >= 0)
      return emitError(loc) << "a merged decoder has one If on '" << kCondition
                            << "'; this graph has more";
    ifIndex = static_cast<int>(i);
  }
  if (ifIndex < 0)
    return success();

  bool withPast = form != KvCacheForm::None;
  StringRef branchName = withPast ? "then_branch" : "else_branch";
  onnx::NodeProto ifNode = std::move(*graph.mutable_node(ifIndex));
  onnx::GraphProto *branch = nullptr;
  for (onnx::AttributeProto &attr : *ifNode.mutable_attribute())
    if (attr.name() == branchName && attr.has_g())
      branch = attr.mutable_g();
  if (!branch)
    return emitError(loc) << "the If on '" << kCondition << "' has no "
                          << branchName;
  if (branch->output_size() != ifNode.output_size())
    return emitError(loc) << "the If on '" << kCondition << "' has "
                          << ifNode.output_size() << " outputs but its "
                          << branchName << " " << branch->output_size();

  // The branch's nodes in the If's place, then an Identity for each output
  // the branch names otherwise than the If does.
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i = 0; i < graph.node_size(); ++i) {
    if (i != ifIndex) {
      *nodes.Add() = std::move(*graph.mutable_node(i));
      continue;
    }
    for (onnx::NodeProto &node : *branch->mutable_node())
      *nodes.Add() = std::move(node);
    for (int r = 0; r < ifNode.output_size(); ++r) {
      const std::string &from = branch->output(r).name();
      const std::string &to = ifNode.output(r);
      if (to.empty() || from == to)
        continue;
      onnx::NodeProto *identity = nodes.Add();
      identity->set_op_type("Identity");
      identity->set_name(ifNode.name() + "/" + to);
      identity->add_input(from);
      identity->add_output(to);
    }
  }
  graph.mutable_node()->Swap(&nodes);
  for (onnx::TensorProto &initializer : *branch->mutable_initializer())
    *graph.add_initializer() = std::move(initializer);
  for (onnx::ValueInfoProto &info : *branch->mutable_value_info())
    *graph.add_value_info() = std::move(info);

  if (withPast) {
    removeInputs(graph, [](const onnx::ValueInfoProto &input) {
      return input.name() == kCondition;
    });
    return success();
  }
  // The no-past branch reads no past: those inputs go too.
  llvm::StringSet<> read;
  for (const onnx::NodeProto &node : graph.node())
    for (const std::string &input : node.input())
      read.insert(input);
  removeInputs(graph, [&](const onnx::ValueInfoProto &input) {
    return input.name() == kCondition ||
           (StringRef(input.name()).starts_with("past") &&
            !read.contains(input.name()));
  });
  return success();
}
