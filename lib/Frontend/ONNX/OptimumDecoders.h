//===- OptimumDecoders.h - optimum's legacy decoder exports -----*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Before its single-graph form (model.onnx, past key values as inputs of
// any length), optimum exported a decoder with past key values as a pair,
// decoder_model.onnx (the prompt: no past inputs) and
// decoder_with_past_model.onnx (a step: the pasts as inputs), and merged
// the two into decoder_model_merged.onnx: one If on the graph input
// `use_cache_branch`, the with-past graph its then branch, the no-past graph
// its else branch, the weights in the outer graph. Many decoder exports on
// the Hugging Face Hub are in these forms.
//
// The with-past graph at past length 0 computes what the no-past graph
// does, so the serving programs (--max-seq) are both imported from the
// with-past form, and a plain forward pass from the no-past form.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_LIB_FRONTEND_ONNX_OPTIMUMDECODERS_H
#define PARTITA_LIB_FRONTEND_ONNX_OPTIMUMDECODERS_H

#include "partita/Frontend/ONNX/Import.h"

#include "mlir/IR/Location.h"
#include "onnx/onnx_pb.h"

#include <string>

namespace mlir::partita::onnx_import {

/// What names a decoder's cache lengths: the symbol of dimension 2 of the
/// inputs whose names start with `past` ([batch, heads, length, head dim])
/// and that of `input_ids`' dimension 1; empty where absent. `otherPast`
/// is a second past symbol, when the pasts name two.
struct CacheSymbols {
  std::string past, sequence, otherPast;
};
CacheSymbols findCacheSymbols(const onnx::GraphProto &graph);

/// The model file of an optimum export directory for `form`: model.onnx,
/// else, for a KV-cache form, decoder_model_merged.onnx or
/// decoder_with_past_model.onnx, and otherwise decoder_model.onnx or
/// decoder_model_merged.onnx. Fails with a diagnostic at `loc` when the
/// directory holds none of them.
FailureOr<std::string> findDirectoryModel(StringRef directory, KvCacheForm form,
                                          Location loc);

/// What an onnxruntime-genai model directory's genai_config.json says of
/// its decoder: the model file's path in the directory and the head size
/// (0 when not given), which the builder's exports leave as the symbol
/// `kv_cache_dim` of their past inputs.
constexpr llvm::StringLiteral kGenaiHeadSizeSymbol = "kv_cache_dim";
struct GenaiConfig {
  std::string model;
  int64_t headSize = 0;
};
/// Reads `directory`/genai_config.json: nullopt when there is none, failure
/// with a diagnostic at `loc` when it is malformed or names a model file
/// that is not a plain file inside the directory.
FailureOr<std::optional<GenaiConfig>> readGenaiConfig(StringRef directory,
                                                      Location loc);

/// Rewrites a merged decoder's graph into the branch `form` imports (the
/// then branch for a KV-cache form, the else branch otherwise): the If on
/// `use_cache_branch` is replaced by the branch's nodes, the branch's
/// initializers join the graph's, and `use_cache_branch` (with, for the
/// else branch, the past inputs it no longer reads) leaves the inputs. The
/// merged graph declares `attention_mask` as the no-past graph does, one
/// position per token; for the then branch it becomes the cached length
/// plus the sequence. A graph without such an If is left as it is.
LogicalResult selectMergedBranch(onnx::GraphProto &graph, KvCacheForm form,
                                 Location loc);

/// A decoder's `attention_mask` covers the cached positions and the new
/// ones, as generation feeds it: [batch, past + sequence]. Graphs with past
/// inputs that declare it otherwise are declared so: a merged decoder's
/// with-past branch, where the merged graph declares [batch, sequence] as
/// its no-past branch reads it; optimum 1.16, which declares [batch,
/// past + 1], as a step of one token reads it. A graph without past inputs
/// is left as it is.
void declareMaskOverCache(onnx::GraphProto &graph);

} // namespace mlir::partita::onnx_import

#endif // PARTITA_LIB_FRONTEND_ONNX_OPTIMUMDECODERS_H
