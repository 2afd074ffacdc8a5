//===- NcclCommunicator.h - collectives of GPUs over NCCL -------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// One process per GPU: each rank's collectives and transfers are NCCL calls
// on its CudaDevice's communication stream. Rank 0 makes the ncclUniqueId
// and publishes it through the TcpStore; every rank then joins the world
// communicator, and splits one communicator per group (ncclCommSplit with
// key = the rank's position, so NCCL's rank order is the group order).
// libnccl.so.2 is opened with dlopen.
//
// Every call enqueues on the communication stream, then waits (polling the
// stream and ncclCommGetAsyncError) until it completes or the deadline
// passes; a failure aborts the rank's communicators and names the rank and
// the collective. Differences from the host communicator:
// - reductions are NCCL's (every member gets the same bits, but not summed
//   in group order); a bool sum is a logical or, as on the host;
// - transfers between two ranks match in issue order; tags are not sent;
// - abort() fails this rank's later calls only: peers notice at their
//   deadline (partita-run stops every process when one fails).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_NCCLCOMMUNICATOR_H
#define PARTITA_RUNTIME_NCCLCOMMUNICATOR_H

#include "partita/runtime/Communicator.h"

#include <chrono>
#include <memory>

namespace partita::program {
class Program;
} // namespace partita::program

namespace partita::runtime {

class CudaDevice;
class TcpStore;

class NcclCommunicator : public Communicator {
public:
  /// Joins the world as `rank` of `worldSize` on `device`, bootstrapping
  /// through `store` (which must stay up until every rank has joined), and
  /// creates one communicator per group of `groups` (collectGroups of
  /// distributed/Groups.h).
  static Status create(CudaDevice &device, TcpStore &store, int32_t rank,
                       int32_t worldSize, const std::vector<Group> &groups,
                       std::chrono::milliseconds timeout,
                       std::unique_ptr<NcclCommunicator> &communicator);
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_NCCLCOMMUNICATOR_H
