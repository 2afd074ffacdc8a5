//===- Launcher.h - one process per rank ------------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// A CUDA artifact runs one process per GPU. On one node partita-run starts
// them itself (launchRanks), each with the variables torchrun would set; a
// process started by a launcher (torchrun, mpirun, srun) finds its rank in
// its environment (readRankEnvironment).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_DISTRIBUTED_LAUNCHER_H
#define PARTITA_RUNTIME_DISTRIBUTED_LAUNCHER_H

#include "partita/runtime/Status.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace partita::runtime {

/// Where this process sits in a multi-process run.
struct RankEnvironment {
  int32_t rank = 0;
  int32_t worldSize = 1;
  /// The rank's index on its node: the GPU it uses.
  int32_t localRank = 0;
  /// Rank 0's address and the store's port (MASTER_ADDR, MASTER_PORT).
  std::string masterAddress;
  uint16_t masterPort = 0;
  /// `torchrun` (RANK, WORLD_SIZE, LOCAL_RANK), `mpi`
  /// (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK) or `slurm` (SLURM_PROCID,
  /// SLURM_NTASKS, SLURM_LOCALID), for messages.
  std::string source;
};

/// Reads the rank from the environment: `found` is false when no launcher
/// variables are set; an error when they are set but incomplete or invalid
/// (MASTER_ADDR and MASTER_PORT are required with any of them).
Status readRankEnvironment(RankEnvironment &environment, bool &found);

/// A TCP port that is free on this machine now.
Status findFreePort(uint16_t &port);

struct LaunchOptions {
  /// The program each rank runs, and its arguments (argv[1...]).
  std::string executable;
  std::vector<std::string> arguments;
  int32_t ranks = 1;
  /// After one rank fails, how long the others get between SIGTERM and
  /// SIGKILL.
  std::chrono::milliseconds killGrace = std::chrono::seconds(5);
};

/// Starts `ranks` processes of `executable` with RANK, WORLD_SIZE,
/// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
/// MASTER_PORT, forwards their stderr, and waits for all. When one fails the
/// others are stopped (SIGTERM, then SIGKILL) and the error names the first
/// failing rank, its exit status and its last line on stderr.
Status launchRanks(const LaunchOptions &options);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_DISTRIBUTED_LAUNCHER_H
