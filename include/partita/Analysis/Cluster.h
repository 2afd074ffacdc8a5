//===- Cluster.h - The machine a program is planned for ---------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The alpha-beta model of communication: a collective over a group on a
// link class costs `latency` per ring step plus its bytes over the link's
// bandwidth. Each mesh axis maps to a link class by its role: by default
// tensor and sequence parallelism stay within a node (NVLink), data and
// pipeline parallelism (and axes without a role) cross nodes (InfiniBand).
// `--cluster FILE.json` overrides any of it, per class or per axis name;
// `--cluster PRESET[:NODESxGPUS]` names a machine whose figures are cited
// in docs/planning.md (a100-80g, h100-80g, h200-141g, and `default`, the
// model used when none is given).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_ANALYSIS_CLUSTER_H
#define PARTITA_ANALYSIS_CLUSTER_H

#include "partita/Analysis/CostModel.h"
#include "partita/Dialect/Dist/IR/DistOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>

namespace mlir::partita {

struct LinkModel {
  double latencySeconds = 0;
  double bytesPerSecond = 1;
};

/// The link of one axis as the cluster file gives it; a field not given
/// comes from the link class of the axis's role.
struct AxisLink {
  std::optional<double> latencySeconds;
  std::optional<double> bytesPerSecond;
};

struct ClusterModel {
  /// What the report calls it: a preset as spelled ("h100-80g:2x8"), the
  /// cluster file's "name", or "custom".
  std::string name = "default";
  DeviceModel device;
  /// The machine's shape: nodes of devicesPerNode devices each.
  int64_t nodes = 1;
  int64_t devicesPerNode = 8;
  /// Memory of one device, in bytes.
  double deviceMemoryBytes = 80e9;
  /// NVLink-class (within a node) and InfiniBand-class (across nodes).
  LinkModel intraNode{5e-6, 300e9};
  LinkModel interNode{20e-6, 25e9};
  /// Links of axes by name, over the class of their role.
  llvm::StringMap<AxisLink> axes;

  /// The link a group over `axes` of `mesh` uses: the slowest of theirs.
  /// Without a mesh an axis has the default role of its name.
  LinkModel linkFor(llvm::ArrayRef<std::string> axes,
                    dist::MeshOp mesh = {}) const;

  /// Seconds for a collective of `kind` ("all_reduce", ...) over a group of
  /// `n` devices sending `bytes` (the ring algorithm's bytes per rank).
  double collectiveSeconds(llvm::StringRef kind, int64_t n, int64_t bytes,
                           llvm::ArrayRef<std::string> axes,
                           dist::MeshOp mesh = {}) const;

  int64_t devices() const { return nodes * devicesPerNode; }
  /// Grown by whole nodes of its kind until it holds `count` devices.
  void growTo(int64_t count) {
    if (count > devices())
      nodes = (count + devicesPerNode - 1) / devicesPerNode;
  }

  /// Reads `{"preset": "h100-80g:2x8", "name", "nodes", "devices_per_node",
  /// "device": {"flops_per_second", "bytes_per_second", "memory_bytes"},
  /// "intra_node": {"latency_us", "bandwidth_gb_per_s"}, "inter_node":
  /// {...}, "axes": {"tp": {...}, ...}}`; every field optional. A preset is
  /// the base the other fields override.
  static llvm::Expected<ClusterModel> fromJson(llvm::StringRef text);

  /// The preset `spec` names: `NAME` or `NAME:NODESxGPUS` (one node of 8
  /// devices when no suffix is given).
  static llvm::Expected<ClusterModel> fromPreset(llvm::StringRef spec);
  /// The preset names, for messages and --help.
  static llvm::ArrayRef<llvm::StringRef> presetNames();

  /// The module attribute that names the cluster a module is compiled for:
  /// its cluster JSON (fromJson's), set by the driver from --cluster. The
  /// passes that weigh communication against compute (the schedule,
  /// collective matmul) read it, so that partita-opt replays them on the
  /// same machine.
  static constexpr llvm::StringLiteral kAttributeName = "partita.cluster";
  /// The cluster of the module that holds `op` (or is `op`): its
  /// kAttributeName, or the default preset where it has none. A cluster
  /// that does not parse is an error at the module.
  static FailureOr<ClusterModel> of(Operation *op);
};

} // namespace mlir::partita

#endif // PARTITA_ANALYSIS_CLUSTER_H
