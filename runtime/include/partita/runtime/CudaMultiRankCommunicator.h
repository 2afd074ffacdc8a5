//===- CudaMultiRankCommunicator.h - ranks on one GPU -----------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Several ranks as threads of one process sharing one GPU, each with a
// CudaDevice of its own (its own streams), so a sharded CUDA program can be
// checked on a single GPU. Data movement (all_gather, all_to_all,
// collective_permute) copies device to device from the other members'
// operands, after waiting on the events they recorded; reductions and
// point-to-point transfers are staged through host memory and go through a
// HostWorld, so they give the host backend's bits (group order, fp32
// accumulation) and its mismatch checks, deadlines and abort.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_CUDAMULTIRANKCOMMUNICATOR_H
#define PARTITA_RUNTIME_CUDAMULTIRANKCOMMUNICATOR_H

#include "partita/runtime/Communicator.h"

#include <chrono>
#include <memory>
#include <vector>

namespace partita::runtime {

class CudaDevice;

/// The shared state of N ranks on one GPU; hands out one Communicator per
/// rank. It must outlive the communicators' use.
class CudaRankWorld {
public:
  /// `devices[r]` is rank r's device; all must be the same GPU.
  static Status create(const std::vector<CudaDevice *> &devices,
                       std::chrono::milliseconds timeout,
                       std::unique_ptr<CudaRankWorld> &world);
  virtual ~CudaRankWorld();
  virtual Communicator &communicator(int32_t rank) = 0;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_CUDAMULTIRANKCOMMUNICATOR_H
