//===- sha256_bench.cpp - SHA-256 throughput of the artifact hashing ------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Times the SHA-256 the artifact writer and loader use (Sha256.h) and prints
// a Markdown table in MB/s (10^6 bytes per second): one-shot digests of
// in-memory buffers of several sizes, and sha256File on a warm file of
// 256 MiB (what loading a weight file costs). Each number is the best of
// several runs.
//
//   ninja -C build sha256-bench && build/bin/sha256-bench
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Sha256.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

using namespace partita::runtime;

namespace {

/// Best wall time of `fn` in seconds over at least 3 runs and ~0.5 s.
template <typename F> double bestSeconds(F fn) {
  using Clock = std::chrono::steady_clock;
  fn();
  double best = 1e30, total = 0;
  for (int rep = 0; rep < 100 && (rep < 3 || total < 0.5); ++rep) {
    auto start = Clock::now();
    fn();
    double seconds =
        std::chrono::duration<double>(Clock::now() - start).count();
    best = std::min(best, seconds);
    total += seconds;
  }
  return best;
}

std::vector<uint8_t> patternBytes(size_t bytes) {
  std::vector<uint8_t> data(bytes);
  uint32_t state = 12345;
  for (uint8_t &byte : data) {
    state = state * 1664525u + 1013904223u;
    byte = uint8_t(state >> 24);
  }
  return data;
}

} // namespace

int main() {
  std::printf("| input | bytes | MB/s |\n|---|---:|---:|\n");
  for (size_t bytes : {size_t(4) << 10, size_t(1) << 20, size_t(64) << 20}) {
    std::vector<uint8_t> data = patternBytes(bytes);
    std::string digest;
    double seconds =
        bestSeconds([&] { digest = Sha256::hexDigest(data.data(), bytes); });
    std::printf("| memory | %zu | %.0f |\n", bytes,
                double(bytes) / seconds / 1e6);
  }

  size_t fileBytes = size_t(256) << 20;
  std::string path = "/tmp/partita-sha256-bench." + std::to_string(::getpid());
  {
    std::vector<uint8_t> data = patternBytes(fileBytes);
    FILE *file = std::fopen(path.c_str(), "wb");
    if (!file ||
        std::fwrite(data.data(), 1, data.size(), file) != data.size()) {
      std::fprintf(stderr, "sha256-bench: cannot write %s\n", path.c_str());
      return 1;
    }
    std::fclose(file);
  }
  std::string digest;
  Status status = Status::ok();
  double seconds = bestSeconds([&] { status = sha256File(path, digest); });
  std::remove(path.c_str());
  if (!status) {
    std::fprintf(stderr, "sha256-bench: %s\n", status.message().c_str());
    return 1;
  }
  std::printf("| sha256File (warm) | %zu | %.0f |\n", fileBytes,
              double(fileBytes) / seconds / 1e6);
  return 0;
}
