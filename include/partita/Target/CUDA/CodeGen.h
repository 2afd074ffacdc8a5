//===- CodeGen.h - CUDA kernels for exec programs ---------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// The CUDA code generator: turns the Kernel instructions of a rank's exec
// program (proto/program.proto, docs/exec-program.md) into the launches the
// runtime makes on a CUDA device (Kernel.cuda) and the CUDA C++ source of
// the one module that defines every function those launches name. Shapes
// are static, so every shape, stride and attribute is a constant of the
// generated code and kernels take only device pointers. Matmuls become
// cuBLASLt calls; everything else is a generated kernel with the
// instruction's fused elementwise epilogue applied at its store.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_TARGET_CUDA_CODEGEN_H
#define PARTITA_TARGET_CUDA_CODEGEN_H

#include "partita/proto/program.pb.h"

#include "llvm/Support/Error.h"

#include <string>

namespace partita::target::cuda {

/// Knobs of the generator: the output depends only on the program and
/// these.
struct CodeGenOptions {
  /// The start of every generated function's name (`<prefix><op>_<n>`): a
  /// serving artifact's decode module uses `partita_decode_`, so that it
  /// loads beside the prefill module into one device.
  std::string functionPrefix = "partita_";
  /// Decode attention (one query row): keys per block of the split key
  /// range (flash-decoding, docs/cuda.md). Positive.
  int64_t decodeKeySplit = 256;
};

/// Fills Kernel.cuda (the CudaStep list) of every Kernel instruction of
/// `program` and returns the CUDA C++ source of one translation unit that
/// defines every extern "C" __global__ function those launches name.
///
/// Kernels with identical generated bodies share one function (the layers
/// of a model repeat), named `partita_<op>_<n>` (the options' prefix) in
/// order of first use; a
/// comment above each lists what it computes and the locations of the
/// instructions that launch it. Equal programs give byte-equal source.
///
/// Buffers are assumed to start at 16-byte aligned device addresses (arena
/// offsets are checked): rows whose byte length is a multiple of 16 are
/// loaded with 16-byte vector loads.
///
/// Fails, naming the op, the instruction's location and why, on an op,
/// shape or element type combination it cannot generate; it never emits
/// code that would compute something else.
llvm::Expected<std::string> generateCudaSource(program::Program &program,
                                               const CodeGenOptions &options);

} // namespace partita::target::cuda

#endif // PARTITA_TARGET_CUDA_CODEGEN_H
