//===- Tensor.h - typed views of memory -------------------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_TENSOR_H
#define PARTITA_RUNTIME_TENSOR_H

#include "partita/proto/DType.h"
#include "partita/proto/program.pb.h"
#include "partita/runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace partita::runtime {

using DType = program::DType;

/// Bytes per element (bool: 1): the schema's program::dtypeBytes, under the
/// name the runtime's callers use.
inline size_t dtypeSize(DType dtype) { return program::dtypeBytes(dtype); }
/// `f32`, `bf16`, `i64`, `bool`, ... as manifests and messages spell them.
std::string dtypeName(DType dtype);
/// The inverse of dtypeName; DTYPE_UNSPECIFIED for an unknown name.
DType dtypeFromName(const std::string &name);

/// A row-major tensor in memory the view does not own.
struct Tensor {
  void *data = nullptr;
  DType dtype = program::DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape;

  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  size_t byteSize() const {
    return static_cast<size_t>(numElements()) * dtypeSize(dtype);
  }
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

/// A tensor that owns its memory (64-byte aligned).
class HostTensor {
public:
  /// Replaces the contents with zero-filled memory for `dtype` `shape`.
  Status allocate(DType dtype, std::vector<int64_t> shape);

  DType dtype() const { return view.dtype; }
  const std::vector<int64_t> &shape() const { return view.shape; }
  size_t byteSize() const { return view.byteSize(); }
  void *data() const { return view.data; }
  /// A view of the memory, valid while this tensor lives.
  const Tensor &tensor() const { return view; }

private:
  struct FreeDeleter {
    void operator()(void *memory) const { std::free(memory); }
  };
  std::unique_ptr<void, FreeDeleter> memory;
  Tensor view;
};

/// `[2, 16, 64]`, for messages.
std::string shapeString(const std::vector<int64_t> &shape);

/// numpy broadcasting: whether `from` (rank `fromRank`), right-aligned
/// against `to`, matches it in each dimension or is 1 there. The runtime's
/// verifier and the CUDA generator both ask this.
bool broadcastsTo(const int64_t *from, size_t fromRank, const int64_t *to,
                  size_t toRank);
inline bool broadcastsTo(const std::vector<int64_t> &from,
                         const std::vector<int64_t> &to) {
  return broadcastsTo(from.data(), from.size(), to.data(), to.size());
}

/// The bytes a buffer called `name` of `dtype` and `shape` holds; an error
/// naming it when the type has no size, a dimension is negative or the
/// count overflows 64 bits.
Status bufferBytes(const std::string &name, DType dtype,
                   const std::vector<int64_t> &shape, uint64_t &bytes);

} // namespace partita::runtime

#endif // PARTITA_RUNTIME_TENSOR_H
