//===- CudaUnavailable.cpp - the CUDA API of a build without CUDA ---------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Built instead of the CUDA device and communicators when CMake found no
// CUDA toolkit headers: every entry point says so.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/CudaDevice.h"
#include "partita/runtime/CudaMultiRankCommunicator.h"
#include "partita/runtime/NcclCommunicator.h"

using namespace partita::runtime;

namespace {
Status unavailable() {
  return Status::error("CUDA is unavailable in this build of the runtime (it "
                       "was configured without the CUDA toolkit's headers)");
}
} // namespace

std::chrono::milliseconds partita::runtime::defaultCudaTimeout() {
  return std::chrono::seconds(120);
}

bool CudaDevice::available() { return false; }

Status CudaDevice::deviceCount(int32_t &count) {
  count = 0;
  return unavailable();
}

Status CudaDevice::create(int32_t, const CudaDeviceOptions &,
                          std::unique_ptr<CudaDevice> &) {
  return unavailable();
}

Status NcclCommunicator::create(CudaDevice &, TcpStore &, int32_t, int32_t,
                                const std::vector<Group> &,
                                std::chrono::milliseconds,
                                std::unique_ptr<NcclCommunicator> &) {
  return unavailable();
}

CudaRankWorld::~CudaRankWorld() = default;

Status CudaRankWorld::create(const std::vector<CudaDevice *> &,
                             std::chrono::milliseconds,
                             std::unique_ptr<CudaRankWorld> &) {
  return unavailable();
}
