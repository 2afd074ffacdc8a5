//===- Tensor.cpp - element types and shapes ------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Tensor.h"

#include <cstring>

namespace partita::runtime {

std::string dtypeName(DType dtype) {
  switch (dtype) {
  case program::F32:
    return "f32";
  case program::F16:
    return "f16";
  case program::BF16:
    return "bf16";
  case program::I64:
    return "i64";
  case program::I32:
    return "i32";
  case program::I8:
    return "i8";
  case program::BOOL:
    return "bool";
  default:
    return "unspecified";
  }
}

DType dtypeFromName(const std::string &name) {
  for (DType d : {program::F32, program::F16, program::BF16, program::I64,
                  program::I32, program::I8, program::BOOL})
    if (dtypeName(d) == name)
      return d;
  return program::DTYPE_UNSPECIFIED;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

bool broadcastsTo(const int64_t *from, size_t fromRank, const int64_t *to,
                  size_t toRank) {
  if (fromRank > toRank)
    return false;
  size_t lead = toRank - fromRank;
  for (size_t d = 0; d < fromRank; ++d)
    if (from[d] != 1 && from[d] != to[lead + d])
      return false;
  return true;
}

Status HostTensor::allocate(DType dtype, std::vector<int64_t> shape) {
  size_t elementSize = dtypeSize(dtype);
  if (elementSize == 0)
    return Status::error("no element type");
  uint64_t bytes = elementSize;
  for (int64_t dim : shape)
    if (dim < 0 || __builtin_mul_overflow(bytes, uint64_t(dim), &bytes))
      return Status::error("invalid shape " + shapeString(shape));
  // Rounded up so aligned_alloc accepts the size; never zero bytes, so an
  // empty tensor still has an address.
  uint64_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0)
    rounded = 64;
  void *allocated = std::aligned_alloc(64, rounded);
  if (!allocated)
    return Status::error("cannot allocate " + std::to_string(bytes) + " bytes");
  std::memset(allocated, 0, rounded);
  memory.reset(allocated);
  view = Tensor{allocated, dtype, std::move(shape)};
  return Status::ok();
}

Status bufferBytes(const std::string &name, DType dtype,
                   const std::vector<int64_t> &shape, uint64_t &bytes) {
  size_t elementSize = dtypeSize(dtype);
  if (dtype == program::DTYPE_UNSPECIFIED || elementSize == 0)
    return Status::error(name + " has no element type");
  uint64_t elements = 1;
  for (int64_t dim : shape)
    if (dim < 0 || __builtin_mul_overflow(elements, uint64_t(dim), &elements))
      return Status::error(name + " has an invalid shape " +
                           shapeString(shape));
  if (__builtin_mul_overflow(elements, uint64_t(elementSize), &bytes))
    return Status::error(name + " is too large");
  return Status::ok();
}

} // namespace partita::runtime
