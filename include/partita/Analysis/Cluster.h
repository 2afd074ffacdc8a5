//===- Cluster.h - The machine a program is planned for ---------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The alpha-beta model of communication: a collective over a group on a
// link class costs `latency` per ring step plus its bytes over the link's
// bandwidth. Each mesh axis maps to a link class: by default tensor and
// sequence parallelism stay within a node (NVLink), data and pipeline
// parallelism cross nodes (InfiniBand). `--cluster FILE.json` overrides any
// of it.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_ANALYSIS_CLUSTER_H
#define PARTITA_ANALYSIS_CLUSTER_H

#include "partita/Analysis/CostModel.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <string>

namespace mlir::partita {

struct LinkModel {
  double latencySeconds = 0;
  double bytesPerSecond = 1;
};

struct ClusterModel {
  DeviceModel device;
  /// NVLink-class (within a node) and InfiniBand-class (across nodes).
  LinkModel intraNode{5e-6, 300e9};
  LinkModel interNode{20e-6, 25e9};
  /// Link class of an axis; axes not listed: tp and sp intra-node, others
  /// inter-node.
  llvm::StringMap<LinkModel> axes;

  /// The link a group over `axes` uses: the slowest of theirs.
  LinkModel linkFor(llvm::ArrayRef<std::string> axes) const;

  /// Seconds for a collective of `kind` ("all_reduce", ...) over a group of
  /// `n` devices sending `bytes` (the ring algorithm's bytes per rank).
  double collectiveSeconds(llvm::StringRef kind, int64_t n, int64_t bytes,
                           llvm::ArrayRef<std::string> axes) const;

  /// Reads `{"device": {"flops_per_second", "bytes_per_second"},
  /// "intra_node": {"latency_us", "bandwidth_gb_per_s"}, "inter_node":
  /// {...}, "axes": {"tp": {...}, ...}}`; every field optional.
  static llvm::Expected<ClusterModel> fromJson(llvm::StringRef text);
};

} // namespace mlir::partita

#endif // PARTITA_ANALYSIS_CLUSTER_H
