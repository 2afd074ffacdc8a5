//===- HostCommunicator.h - ranks as threads of one process -----*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The host backend's communicator: N ranks are N threads of one process and
// exchange tensors through shared memory. Each collective is a rendezvous:
// the members post their buffers, every member computes its own result by
// reading the others' inputs directly, then they leave together (so no
// input is reused while another member still reads it).
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_HOSTCOMMUNICATOR_H
#define PARTITA_RUNTIME_HOSTCOMMUNICATOR_H

#include "partita/runtime/Communicator.h"

#include <chrono>
#include <memory>

namespace partita::runtime {

/// The shared state of N host ranks; hands out one Communicator per rank.
/// It must outlive the communicators' use.
class HostWorld {
public:
  /// `timeout` bounds every blocking wait of every rank.
  explicit HostWorld(int32_t worldSize, std::chrono::milliseconds timeout =
                                            std::chrono::seconds(120));
  ~HostWorld();
  HostWorld(const HostWorld &) = delete;
  HostWorld &operator=(const HostWorld &) = delete;

  int32_t worldSize() const;
  /// The communicator of `rank`, 0 <= rank < worldSize().
  Communicator &communicator(int32_t rank);

  /// The ranks' shared state, defined with the communicators that use it.
  struct State;

private:
  std::unique_ptr<State> state;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_HOSTCOMMUNICATOR_H
