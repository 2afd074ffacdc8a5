//===- DistDialect.h - dist dialect -----------------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_DIALECT_DIST_IR_DISTDIALECT_H
#define PARTITA_DIALECT_DIST_IR_DISTDIALECT_H

#include "mlir/IR/Dialect.h"

#include "partita/Dialect/Dist/IR/DistDialect.h.inc"

namespace mlir::partita::dist {

/// The discardable attributes passes exchange; the dialect verifies them
/// (see the dialect documentation for where each may appear).
/// On a function argument or result: its sharding.
constexpr llvm::StringLiteral kShardingAttr = "dist.sharding";
/// On an op: the sharding of each of its results (propagation's output).
constexpr llvm::StringLiteral kResultShardingsAttr = "dist.shardings";
/// On a dist.annotate: a strategy put it there (lower priority than one a
/// person wrote).
constexpr llvm::StringLiteral kStrategyAttr = "dist.strategy";
/// On a dist.annotate: its propagation priority (an i64, lower wins), when
/// not the default of its origin.
constexpr llvm::StringLiteral kPriorityAttr = "dist.priority";
/// On a collective: why partitioning inserted it.
constexpr llvm::StringLiteral kReasonAttr = "dist.reason";
/// On an nn.matmul whose weight the strategy's split search placed: the
/// estimated seconds of a step with each candidate split (a dictionary of
/// f64 by "columns", "rows", "batch", "whole").
constexpr llvm::StringLiteral kSplitCostsAttr = "dist.split_costs";
/// On the module: remarks of the plan for the report (strings).
constexpr llvm::StringLiteral kRemarksAttr = "dist.remarks";
/// On the module, with ring attention: a #dist.sequence_order, the layout
/// of the sequence over the ring axis. On the index constants that apply
/// it: a unit mark, so that partitioning does not reorder them again.
constexpr llvm::StringLiteral kSequenceOrderAttr = "dist.sequence_order";
/// On an nn.attention: run it as ring attention over this axis (a string).
constexpr llvm::StringLiteral kRingAttr = "dist.ring";
/// On the module: a #dist.sequence_parallel, the plan for the report.
constexpr llvm::StringLiteral kSequenceParallelAttr = "dist.sequence_parallel";
/// On the module, after pipeline splitting: a #dist.pipeline.
constexpr llvm::StringLiteral kPipelineAttr = "dist.pipeline";

} // namespace mlir::partita::dist

#endif // PARTITA_DIALECT_DIST_IR_DISTDIALECT_H
