//===- NNToExec.h - nn functions to exec programs ---------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Lowers a rank's function of (local) nn ops to the exec program the runtime
// interprets (proto/program.proto, docs/exec-program.md): elementwise chains
// fused into their producers, reshapes turned into views, and activations
// placed in one arena by a liveness-based buffer plan.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_CONVERSION_NNTOEXEC_NNTOEXEC_H
#define PARTITA_CONVERSION_NNTOEXEC_NNTOEXEC_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"

#include "partita/Analysis/Cluster.h"
#include "partita/proto/program.pb.h"

#include <memory>
#include <string>
#include <vector>

namespace mlir::partita {

/// A weight the program reads: bytes owned by the module's resource blobs
/// (or by inline constants), valid while the module lives.
struct ExecWeight {
  std::string name;
  ::partita::program::DType dtype;
  SmallVector<int64_t> shape;
  ArrayRef<char> bytes;
};

/// One collective of a rank's program, as the report counts it.
struct ExecCollectiveStat {
  std::string kind; // all_reduce, all_gather, ...
  std::vector<std::string> axes;
  int64_t count = 0;
  /// Bytes of the collective's unsharded-side buffer, and what the rank
  /// sends under the ring algorithm (docs: DESIGN.md, Report).
  int64_t payload = 0;
  int64_t bytes = 0;
  /// Why partitioning inserted it (`dist.reason`), if recorded.
  std::string reason;
};

/// One point-to-point transfer of a rank's program (pipeline stages).
struct ExecTransferStat {
  bool send = false;
  int32_t peer = 0; // Global rank.
  int64_t bytes = 0;
};

/// A rank's program on one compute stream and one communication stream, as
/// the cost model and the cluster's alpha-beta links time it (cross-rank
/// waits for point-to-point transfers are not modelled).
struct ExecTimeline {
  struct Event {
    std::string name;
    bool communication = false;
    double start = 0, end = 0; // Seconds.
  };
  std::vector<Event> events;
  double computeSeconds = 0;
  double communicationSeconds = 0;
  /// Time compute stood waiting for communication.
  double exposedSeconds = 0;
  double stepSeconds = 0;
};

struct ExecLoweringOptions {
  /// Fuse elementwise ops into the kernel that produces their operand.
  bool fuseElementwise = true;
  /// The machine the timeline is estimated for; the defaults when null.
  const ClusterModel *cluster = nullptr;
  /// Inline constants up to this many bytes in the program; larger ones
  /// become weights.
  size_t maxInlineConstantBytes = 1024;
};

struct ExecProgram {
  ::partita::program::Program program;
  std::vector<ExecWeight> weights;
  /// Bytes of weights that came from inline constants rather than blobs.
  std::vector<std::unique_ptr<std::vector<char>>> ownedBytes;
  /// Statistics for the report and the tests.
  int64_t numKernels = 0;
  int64_t numFusedOps = 0;
  /// The arena the buffer plan needs, and what it would need without reuse.
  int64_t peakActivationBytes = 0;
  int64_t totalActivationBytes = 0;
  /// Every collective instruction, in program order.
  std::vector<ExecCollectiveStat> collectives;
  /// Every send and receive, in program order.
  std::vector<ExecTransferStat> transfers;
  ExecTimeline timeline;
};

/// Lowers `func` (nn ops, func.return; for a partitioned function also dist
/// collectives, all_slice and axis_index on the module's dist.mesh) to the
/// program of rank `rank` of `worldSize`. Emits a diagnostic at the offending
/// op and fails on an op the runtime cannot run.
FailureOr<ExecProgram> lowerToExecProgram(func::FuncOp func, int rank,
                                          int worldSize,
                                          const ExecLoweringOptions &options);

/// The exec DType of an nn element type, or DTYPE_UNSPECIFIED.
::partita::program::DType getExecDType(Type elementType);

} // namespace mlir::partita

#endif // PARTITA_CONVERSION_NNTOEXEC_NNTOEXEC_H
