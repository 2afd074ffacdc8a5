//===- Import.h - ONNX models into the nn dialect ---------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The ONNX front end: reads a model (binary protobuf or ONNX's textual
// syntax), binds its symbolic dimensions, folds what is constant, and builds
// a module with one `func.func @main` of nn ops on static global shapes.
// Weights become dense_resource blobs that share the model's bytes. Errors
// are MLIR diagnostics located at the ONNX node (or input) they concern.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_FRONTEND_ONNX_IMPORT_H
#define PARTITA_FRONTEND_ONNX_IMPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringMap.h"

#include <string>

namespace mlir::partita {

/// On an imported module: each `If` node's name and whether its condition,
/// folded once dimensions were bound, picked the `then` branch.
constexpr llvm::StringLiteral kIfBranchesAttrName = "partita.if_branches";

/// Which program of a decoder export with past key values to import
/// (partita-compile --max-seq).
enum class KvCacheForm {
  /// As bound.
  None,
  /// The prompt: the pasts' length is 0.
  Prefill,
  /// One token after `maxSeq - 1` cached ones: the sequence is 1.
  Decode,
};

struct OnnxImportOptions {
  /// Values of symbolic dimensions (`dim_param`), from `--bind`.
  llvm::StringMap<int64_t> bindings;
  /// With Prefill or Decode, the importer binds the cached length (the
  /// symbol of dimension 2 of the inputs whose names start with `past`)
  /// and, for Decode, the sequence (the symbol of `input_ids` dimension 1)
  /// itself; `bindings` must not give the cached length.
  KvCacheForm kvCache = KvCacheForm::None;
  int64_t maxSeq = 0;
  /// A training step (partita-compile --train): every floating-point
  /// initializer whose name `freeze` (a regular expression, searched in
  /// the name; empty: none) does not match becomes an argument marked
  /// `partita.parameter` with its name, holding the initializer as
  /// `partita.initial_value`, instead of a constant; nothing is folded
  /// through it. Parameters must be f32.
  bool train = false;
  std::string freeze;
};

/// Imports the model at `path`. External data files are looked up next to
/// it. Returns null after emitting diagnostics on failure.
OwningOpRef<ModuleOp> importOnnxFile(MLIRContext *context, llvm::StringRef path,
                                     const OnnxImportOptions &options);

/// Imports a model held in memory; `modelDir` is where external data files
/// are looked up (empty: the model may not use external data).
OwningOpRef<ModuleOp> importOnnxBuffer(MLIRContext *context,
                                       llvm::StringRef bytes,
                                       llvm::StringRef bufferName,
                                       llvm::StringRef modelDir,
                                       const OnnxImportOptions &options);

/// Registers the dialects an imported module uses.
void registerOnnxImportDialects(DialectRegistry &registry);

/// The first and last default-domain opset versions the importer accepts.
constexpr int64_t kMinOnnxOpset = 13;
constexpr int64_t kMaxOnnxOpset = 23;

/// The ONNX IR versions the importer accepts: 3 (the first with opset
/// imports) to 14 (onnx 1.23's, which onnxruntime 1.32 reads).
constexpr int64_t kMinOnnxIrVersion = 3;
constexpr int64_t kMaxOnnxIrVersion = 14;

} // namespace mlir::partita

#endif // PARTITA_FRONTEND_ONNX_IMPORT_H
