//===- ExecProgram.h - planned IR to the exec program -----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The exec program the runtime interprets (proto/program.proto,
// docs/exec-program.md), written from a rank's planned function (after
// buildExecPipeline: --partita-specialize-rank, --partita-fuse,
// --partita-prefetch-receives, --partita-plan-buffers). The translation
// makes no decisions; the timeline estimate is an analysis of the same IR.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TARGET_EXECPROGRAM_EXECPROGRAM_H
#define PARTITA_TARGET_EXECPROGRAM_EXECPROGRAM_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/SmallVector.h"

#include "partita/Analysis/Cluster.h"
#include "partita/proto/program.pb.h"
#include "partita/runtime/WeightView.h"

#include <memory>
#include <string>
#include <vector>

namespace mlir::partita {

/// A weight the program reads, as a view of the bytes it comes from (the
/// module's resource blobs, valid while its context lives, or a serialized
/// inline constant the view owns). Nothing is copied until the artifact
/// writer streams it.
struct ExecWeight {
  std::string name;
  ::partita::runtime::WeightView view;
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

struct ExecProgram {
  ::partita::program::Program program;
  std::vector<ExecWeight> weights;
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

/// Writes the program of the planned function `func` as its attributes say
/// (buffers, groups, peers, arena) and in its op order; fills the report's
/// statistics, not the timeline. Fails with a diagnostic on IR that is not
/// planned.
FailureOr<ExecProgram> translateToExecProgram(func::FuncOp func);

/// The timeline of the planned function `func` on `cluster`: its kernels on
/// one compute stream, its communication on one communication stream, in
/// program order.
ExecTimeline estimateExecTimeline(func::FuncOp func,
                                  const ClusterModel &cluster);

/// What a collective of the planned IR moves, as the report counts it: the
/// kind (without `_start`), the payload and the bytes a rank sends under the
/// ring algorithm, for a group of `groupSize`.
ExecCollectiveStat getCollectiveStat(Operation *op, int64_t groupSize);

/// Registers `--exec-to-proto` with mlir-translate: the textproto of the
/// planned function of a module.
void registerToExecProgramTranslation();

/// Writes into `attributes` those the kernel of nn op `op` takes
/// (docs/exec-program.md; OpVocabulary.def lists them), as the translation
/// gives them to a kernel or an epilogue step.
void setKernelAttributes(
    Operation *op,
    google::protobuf::Map<std::string, ::partita::program::Attribute>
        &attributes);

/// The exec DType of an nn element type, or DTYPE_UNSPECIFIED.
::partita::program::DType getExecDType(Type elementType);

} // namespace mlir::partita

#endif // PARTITA_TARGET_EXECPROGRAM_EXECPROGRAM_H
