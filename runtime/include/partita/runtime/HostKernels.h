//===- HostKernels.h - CPU kernels of exec-program instructions -*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The host backend's math: one entry point that runs a Kernel instruction of
// an exec program (proto/program.proto, docs/exec-program.md) on CPU
// threads. Compute is fp32 (f16/bf16 are storage types, converted on load
// and store); matmuls go through OpenBLAS; attention is blockwise with an
// online softmax, so its memory is O(s * d) per head.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_HOSTKERNELS_H
#define PARTITA_RUNTIME_HOSTKERNELS_H

#include "partita/runtime/Status.h"
#include "partita/runtime/Tensor.h"

#include <functional>
#include <memory>

namespace partita::runtime {

/// Maps a buffer id of the program to the memory that holds it now.
using BufferResolver = std::function<Tensor(int32_t bufferId)>;

/// A fixed set of worker threads that kernels split their rows across.
class ThreadPool {
public:
  /// `threads` workers (0: one per hardware thread).
  explicit ThreadPool(unsigned threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  unsigned size() const;
  /// Calls fn(begin, end) on disjoint chunks covering [0, n), in parallel,
  /// and returns when all are done. Chunks hold at least `grain` items.
  void parallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t, int64_t)> &fn);

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

/// Runs `kernel` (operands, results and epilogue operands resolved through
/// `buffers`). Reports an unknown op, a wrong operand count or shape, or an
/// unsupported dtype as an error naming the op; never aborts.
Status runHostKernel(const program::Kernel &kernel,
                     const BufferResolver &buffers, ThreadPool &pool);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_HOSTKERNELS_H
