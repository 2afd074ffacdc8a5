//===- CudaModule.cpp - a rank's CUDA module in an artifact ---------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Artifact.h"
#include "partita/runtime/CudaDevice.h"

#include <fstream>
#include <sstream>

using namespace partita::runtime;

Status partita::runtime::readCudaModule(const Artifact &artifact, int32_t rank,
                                        std::string &image) {
  const Manifest &manifest = artifact.manifest();
  if (rank < 0 || size_t(rank) >= manifest.ranks.size())
    return Status::error(artifact.path() + ": no rank " + std::to_string(rank));
  const std::string &relative = manifest.ranks[size_t(rank)].cudaFatbin;
  if (relative.empty())
    return Status::error(artifact.path() + ": rank " + std::to_string(rank) +
                         " has no CUDA module (compiled for host?)");
  std::string path = artifact.path() + "/" + relative;
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return Status::error(path + ": cannot open");
  std::ostringstream bytes;
  bytes << file.rdbuf();
  if (file.bad())
    return Status::error(path + ": cannot read");
  image = bytes.str();
  return Status::ok();
}
