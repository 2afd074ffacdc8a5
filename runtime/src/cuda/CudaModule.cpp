//===- CudaModule.cpp - a rank's CUDA module in an artifact ---------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/CudaDevice.h"
#include "partita/runtime/LoadedArtifact.h"

#include <fstream>
#include <sstream>

using namespace partita::runtime;

Status partita::runtime::readCudaModule(const LoadedArtifact &artifact,
                                        int32_t rank, std::string &image,
                                        bool decode) {
  const Manifest &manifest = artifact.manifest();
  if (rank < 0 || size_t(rank) >= manifest.ranks.size())
    return Status::error(artifact.path() + ": no rank " + std::to_string(rank));
  const RankEntry &entry = manifest.ranks[size_t(rank)];
  const std::string &relative =
      decode ? entry.decodeCudaFatbin : entry.cudaFatbin;
  if (relative.empty())
    return Status::error(artifact.path() + ": rank " + std::to_string(rank) +
                         " has no " + (decode ? "decode " : "") +
                         "CUDA module (compiled for host?)");
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

std::string
partita::runtime::kernelStatusMessage(const unsigned long long record[4]) {
  auto value = [&](int i) { return std::to_string((long long)record[i]); };
  if (record[0] == 1)
    return "kv_cache_write: writing " + value(1) + " tokens at slot " +
           value(2) + " overflows the cache of " + value(3) +
           " slots (the write was refused on the device)";
  return "a generated kernel reported error " + value(0) + " (" + value(1) +
         ", " + value(2) + ", " + value(3) + ")";
}
