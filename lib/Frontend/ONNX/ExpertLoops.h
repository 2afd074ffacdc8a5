//===- ExpertLoops.h - transformers' eager expert loops ---------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// transformers' "eager" experts compute a mixture of experts as a Python
// loop over the experts any token reached, which the legacy exporter traces
// into the graph once per expert the example input reached:
//
//   hit      = NonZero(ReduceSum(OneHot(ids)^T) > 0), Split into N rows
//   for each row i: e = the row's expert id (a value, not a constant)
//     pos, tok = NonZero(OneHot(ids)^T[e])       the slots that chose e
//     g, u     = chunk(hidden[tok] @ gate_up_proj[e]^T, 2)
//     y        = (silu(g) * u) @ down_proj[e]^T * weights.flat[tok * k + pos]
//     acc     += ScatterElements(zeros, tok, y)  (index_add_)
//
// Every NonZero has a shape that depends on the routing, and the number of
// traced bodies is the number of experts the example reached: onnxruntime
// refuses an input that reaches another number (Split's sizes no longer
// fit). On every input it accepts, the loop computes each reached expert
// for its tokens, which is nn.moe over the stacked weights; on the inputs
// it refuses, nn.moe computes what the model computes.
//
// transformers 4 (optimum-onnx's) wrote the experts as a ModuleList of
// w1/w3/w2 Linears, and the loop picked the module by the row's id, which
// the trace turned into a constant: body i multiplies the tokens of the
// i-th expert an input reaches by the weights of the i-th expert the
// example reached. Where the example reached every expert that is the
// model; where it reached fewer, onnxruntime pairs another input's experts
// with the wrong weights whenever the counts agree, and Partita computes
// the experts the graph holds, the others adding nothing (with a warning
// that names them).
//
// foldExpertLoops recognizes each loop (every link of the value path, and a
// region that reads nothing but the hidden states, the router's ids and
// weights, the two stacked weights and constants) and replaces its nodes by
// one node of the internal op kExpertLoopOpType, which the importer makes an
// nn.moe. A loop that does not match is left alone, and its NonZero refused
// with a hint.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_LIB_FRONTEND_ONNX_EXPERTLOOPS_H
#define PARTITA_LIB_FRONTEND_ONNX_EXPERTLOOPS_H

#include "mlir/IR/Location.h"
#include "mlir/Support/LLVM.h"
#include "onnx/onnx_pb.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace mlir::partita::onnx_import {

/// The node a folded loop becomes: inputs hidden [T, H], expert ids
/// [T, k], routing weights [T, k], then gate_up_proj [E, 2F, H] and
/// down_proj [E, H, F] (transformers 5), or each body's module's w1, w3
/// ([H, F]) and w2 ([F, H]) with attribute `experts`, the expert each is
/// (transformers 4); one output; attributes `traced` (the experts the
/// export holds bodies for) and `depth` (the one-hot's classes). A model
/// may not use the domain itself.
constexpr llvm::StringLiteral kInternalDomain = "ai.partita.internal";
constexpr llvm::StringLiteral kExpertLoopOpType = "ExpertLoop";

bool isExpertLoop(const onnx::NodeProto &node);

/// Reads the elements of a constant for the matcher: a tensor proto (a
/// Constant's or ConstantOfShape's value) or an initializer by name;
/// nullopt when it cannot (or is not one).
struct ConstantReader {
  std::function<std::optional<std::vector<double>>(const onnx::TensorProto &)>
      tensor;
  std::function<std::optional<std::vector<double>>(const std::string &)>
      initializer;
};

/// Checks a node of the graph (its index) as the import checks every node:
/// its signature against its schema, where the table has one; fails with
/// the diagnostic emitted.
using NodeChecker =
    std::function<LogicalResult(const onnx::NodeProto &, int index)>;

/// Replaces every recognized eager expert loop of `graph`'s top level.
/// Fails (with an error at `loc`) on a model that uses the internal domain,
/// and where `check` refuses a node of a loop it would fold away.
LogicalResult foldExpertLoops(onnx::GraphProto &graph,
                              const ConstantReader &constants,
                              const NodeChecker &check, Location loc);

} // namespace mlir::partita::onnx_import

#endif // PARTITA_LIB_FRONTEND_ONNX_EXPERTLOOPS_H
