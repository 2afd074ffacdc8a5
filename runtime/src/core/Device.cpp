//===- Device.cpp - the host device ---------------------------------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Device.h"

#include <cstdlib>
#include <cstring>

using namespace partita::runtime;

Device::~Device() = default;

Status HostDevice::allocate(size_t bytes, size_t alignment, void **memory) {
  *memory = nullptr;
  if (bytes == 0)
    return Status::ok();
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  *memory = std::aligned_alloc(alignment, rounded);
  if (!*memory)
    return Status::error("host: cannot allocate " + std::to_string(bytes) +
                         " bytes");
  return Status::ok();
}

void HostDevice::deallocate(void *memory) { std::free(memory); }

Status HostDevice::copyToDevice(void *device, const void *host, size_t bytes) {
  std::memcpy(device, host, bytes);
  return Status::ok();
}

Status HostDevice::copyToHost(void *host, const void *device, size_t bytes) {
  std::memcpy(host, device, bytes);
  return Status::ok();
}

Status HostDevice::runKernel(const program::Kernel &kernel,
                             const BufferResolver &buffers) {
  return runHostKernel(kernel, buffers, pool);
}
