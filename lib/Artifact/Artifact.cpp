//===- Artifact.cpp - writing the sharded binary and its report -----------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/Artifact/Artifact.h"

#include "partita/Dialect/NN/IR/NNOps.h"
#include "partita/runtime/Artifact.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::partita;
namespace rt = ::partita::runtime;

namespace {

std::string modelName(func::FuncOp global) {
  if (auto module = global->getParentOfType<ModuleOp>())
    if (auto name = module->getAttrOfType<StringAttr>("partita.model_name"))
      return name.str();
  return "model";
}

/// The global inputs or outputs of the model, replicated on every rank
/// until sharding places them.
std::vector<rt::TensorSpec> tensorSpecs(func::FuncOp global, bool results) {
  std::vector<rt::TensorSpec> specs;
  ArrayRef<Type> types = results ? global.getFunctionType().getResults()
                                 : global.getFunctionType().getInputs();
  for (auto [i, type] : llvm::enumerate(types)) {
    auto tensor = cast<RankedTensorType>(type);
    StringAttr name =
        results ? global.getResultAttrOfType<StringAttr>(i, "onnx.name")
                : global.getArgAttrOfType<StringAttr>(i, "onnx.name");
    rt::TensorSpec spec;
    spec.name =
        name ? name.str() : (results ? "output" : "input") + std::to_string(i);
    spec.dtype = getExecDType(tensor.getElementType());
    spec.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
    spec.sharding.dims.resize(tensor.getRank());
    specs.push_back(std::move(spec));
  }
  return specs;
}

} // namespace

LogicalResult mlir::partita::writeArtifact(func::FuncOp global,
                                           ArrayRef<ExecProgram> programs,
                                           const ArtifactOptions &options,
                                           StringRef path) {
  rt::ArtifactWriter writer;
  rt::Manifest &manifest = writer.manifest();
  manifest.modelName = modelName(global);
  manifest.target = options.target;
  manifest.worldSize = programs.size();
  manifest.inputs = tensorSpecs(global, /*results=*/false);
  manifest.outputs = tensorSpecs(global, /*results=*/true);
  manifest.compileOptions = options.compileOptions;
  for (auto [rank, exec] : llvm::enumerate(programs)) {
    rt::RankEntry entry;
    entry.rank = rank;
    manifest.ranks.push_back(entry);
    for (const ExecWeight &w : exec.weights) {
      rt::Status status = writer.addWeight(
          w.name, w.dtype, std::vector<int64_t>(w.shape.begin(), w.shape.end()),
          w.bytes.data(), w.bytes.size());
      if (!status)
        return global.emitError() << status.message();
    }
    if (rt::Status status = writer.addProgram(rank, exec.program); !status)
      return global.emitError() << status.message();
  }
  if (rt::Status status = writer.commit(path.str()); !status)
    return global.emitError()
           << "cannot write the artifact: " << status.message();
  return success();
}

LogicalResult mlir::partita::writeReport(func::FuncOp global,
                                         ArrayRef<ExecProgram> programs,
                                         StringRef path) {
  // The model's size as the global function states it: parameters are the
  // elements of floating-point constants, flops 2mnk per matmul.
  int64_t nnOps = 0, params = 0, flops = 0;
  global.walk([&](Operation *op) {
    if (!isa<nn::NNDialect>(op->getDialect()))
      return;
    if (auto constant = dyn_cast<nn::ConstantOp>(op)) {
      auto type = cast<RankedTensorType>(constant.getType());
      if (isa<FloatType>(type.getElementType()))
        params += type.getNumElements();
      return;
    }
    ++nnOps;
    if (auto matmul = dyn_cast<nn::MatmulOp>(op)) {
      auto result = cast<RankedTensorType>(matmul.getType());
      flops += 2 * result.getNumElements() *
               matmul.getLhs().getType().getShape().back();
    }
  });

  llvm::json::Array ranks;
  for (auto [rank, exec] : llvm::enumerate(programs)) {
    int64_t weightBytes = 0;
    for (const ExecWeight &w : exec.weights)
      weightBytes += w.bytes.size();
    ranks.push_back(llvm::json::Object{
        {"rank", static_cast<int64_t>(rank)},
        {"coords", llvm::json::Object{}},
        {"stage", 0},
        {"weight_bytes", weightBytes},
        {"peak_activation_bytes", exec.peakActivationBytes},
        {"activation_bytes_without_reuse", exec.totalActivationBytes},
        {"kernels", exec.numKernels},
        {"fused_elementwise_ops", exec.numFusedOps},
        {"collectives", llvm::json::Array{}},
        {"p2p", llvm::json::Array{}},
    });
  }
  llvm::json::Object report{
      {"format", "partita-report/1"},
      {"model", llvm::json::Object{{"name", modelName(global)},
                                   {"nn_ops", nnOps},
                                   {"params", params},
                                   {"flops", flops}}},
      {"mesh", llvm::json::Object{{"axes", llvm::json::Array{}},
                                  {"world_size",
                                   static_cast<int64_t>(programs.size())}}},
      {"ranks", std::move(ranks)},
      {"pipeline", llvm::json::Object{{"stages", 1},
                                      {"microbatches", 1},
                                      {"schedule", "none"},
                                      {"bubble_fraction", 0.0}}},
  };
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (ec)
    return global.emitError()
           << "cannot write the report '" << path << "': " << ec.message();
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(report))) << "\n";
  return success();
}
