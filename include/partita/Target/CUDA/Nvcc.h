//===- Nvcc.h - Building fatbins of generated CUDA --------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Runs the CUDA toolkit's nvcc on a generated translation unit and returns
// the fatbin: SASS for every requested architecture, plus PTX of the lowest
// portable one so GPUs newer than all of them can still JIT it. Builds are
// cached on disk by the hash of everything that decides their bytes, so the
// ranks of one stage (which share their source) and repeated compiles of a
// model pay nvcc once.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TARGET_CUDA_NVCC_H
#define PARTITA_TARGET_CUDA_NVCC_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace partita::target::cuda {

struct NvccOptions {
  /// The nvcc executable; empty: $PARTITA_NVCC, else the toolkit CMake found
  /// when Partita was built, else `nvcc` on PATH.
  std::string nvcc;
  /// `sm_80`, `sm_90a`, ...: SASS for each.
  std::vector<std::string> archs = {"sm_80", "sm_90a"};
  /// Where builds are cached; empty: $PARTITA_CACHE_DIR, else
  /// $XDG_CACHE_HOME/partita, else ~/.cache/partita. "-" disables the cache.
  std::string cacheDir;
};

struct Fatbin {
  std::string bytes;
  /// What ptxas said of every kernel (registers, shared memory, spills).
  std::string ptxasLog;
  /// Whether the cache answered (nvcc did not run).
  bool cached = false;
};

/// Parses `sm_80,sm_90a` (the --cuda-arch syntax) into `archs`; an error
/// names the entry that is not `sm_<digits>[a]`.
llvm::Error parseCudaArchs(llvm::StringRef text,
                           std::vector<std::string> &archs);

/// The nvcc command line after the executable that compiles `input` into
/// the fatbin `output`.
std::vector<std::string> nvccArguments(const NvccOptions &options,
                                       llvm::StringRef input,
                                       llvm::StringRef output);

/// The nvcc this build would run for `options`, or an error saying why there
/// is none.
llvm::Expected<std::string> findNvcc(const NvccOptions &options);

/// Compiles `source` with nvcc into a fatbin. A failure of nvcc on generated
/// code is a compiler bug: the error says so and carries nvcc's first
/// messages and the path where the failing source was kept.
llvm::Expected<Fatbin> buildFatbin(llvm::StringRef source,
                                   const NvccOptions &options);

} // namespace partita::target::cuda

#endif // PARTITA_TARGET_CUDA_NVCC_H
