//===- Executor.h - runs one rank's exec program ----------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The executor interprets a Program (proto/program.proto) for one rank: it
// owns the activation arena, binds every buffer to memory, and runs the
// instructions in order: kernels on the calling thread (spread over a
// ThreadPool), collectives and point-to-point transfers on a communication
// thread of its own, so asynchronous ones overlap the kernels that follow
// them until their Wait.
//
// On a device with memory and queues of its own (CUDA), weights and
// constants are uploaded once at load, inputs and outputs are staged
// through device copies around each run, and the device's events order the
// communication queue after the kernels that produce its operands and the
// kernels after a Wait after the communication.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_EXECUTOR_H
#define PARTITA_RUNTIME_EXECUTOR_H

#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"

#include <memory>
#include <string>
#include <vector>

namespace partita::runtime {

class Communicator;
class Device;
class ThreadPool;
class WeightStore;

/// The Program `format_version` this runtime executes.
constexpr uint32_t kProgramFormatVersion = 1;

/// A program input or output and the caller's memory for it.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

class Executor {
public:
  /// Checks `program` against the weights and the communicator (rank, world
  /// size, every buffer's type, bounds and kind, every instruction's buffer
  /// ids and async tokens) and allocates its arena. The program, weights,
  /// communicator and pool must outlive the executor.
  ///
  /// `resident` names bindings whose memory is fixed for the executor's
  /// life, in `device`'s memory (a serving artifact's KV cache): the input
  /// and the output binding of such a name both use the tensor's memory
  /// (checked against each buffer's type here), run() takes neither, and a
  /// device with memory of its own never stages them. The memory must
  /// outlive the executor.
  static Status create(const program::Program &program,
                       const WeightStore &weights, Communicator &communicator,
                       Device &device, std::unique_ptr<Executor> &executor,
                       const std::vector<NamedTensor> &resident = {});
  /// The same on the host device, with kernels on `pool`.
  static Status create(const program::Program &program,
                       const WeightStore &weights, Communicator &communicator,
                       ThreadPool &pool, std::unique_ptr<Executor> &executor,
                       const std::vector<NamedTensor> &resident = {});
  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  /// Runs the program once. `inputs` and `outputs` name every binding of
  /// the program but the resident ones exactly once, with its dtype and
  /// shape; the caller owns
  /// their memory. An error in an instruction is prefixed with the rank and
  /// the instruction's location, and aborts the communicator so peers fail
  /// fast instead of waiting for this rank. One run at a time.
  Status run(const std::vector<NamedTensor> &inputs,
             const std::vector<NamedTensor> &outputs);

  /// What the program's token dispatches (dist.dispatch and its return)
  /// moved on this rank, summed over the executor's runs.
  struct DispatchStats {
    /// Exchanges of rows run (the dispatches that send one set of rows'
    /// data count once).
    int64_t exchanges = 0;
    /// Rows that arrived for the rank's experts (one per token and chosen
    /// expert), its own included.
    int64_t rowsReceived = 0;
    /// Bytes of rows the rank sent to other ranks, there and back.
    int64_t bytesSent = 0;
  };
  const DispatchStats &dispatchStats() const;

private:
  Executor();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_EXECUTOR_H
