//===- float_convert_bench.cpp - fp32 -> bf16/fp16 weight conversion ------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// What `--dtype bf16|fp16` costs per weight byte: the bit-operation
// conversions of partita/runtime/Float16.h against the element-by-element
// llvm::APFloat conversion they replaced, on one core, over a 64 MiB fp32
// buffer of random normal-range values. Prints a Markdown table (GB/s of
// fp32 input, 10^9 bytes per second, best of five runs).
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/Float16.h"

#include "llvm/ADT/APFloat.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

template <typename F> double bestSeconds(F &&run, int repeats) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    auto start = Clock::now();
    run();
    best = std::min(
        best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

void apfloatConvert(const float *in, uint16_t *out, size_t n,
                    const llvm::fltSemantics &semantics) {
  for (size_t i = 0; i < n; ++i) {
    llvm::APFloat value(in[i]);
    bool losesInfo = false;
    value.convert(semantics, llvm::APFloat::rmNearestTiesToEven, &losesInfo);
    out[i] = static_cast<uint16_t>(value.bitcastToAPInt().getZExtValue());
  }
}

} // namespace

int main() {
  const size_t n = (64u << 20) / sizeof(float);
  std::vector<float> in(n);
  std::mt19937 random(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float &x : in)
    x = normal(random);
  std::vector<uint16_t> out(n);
  double bytes = static_cast<double>(n * sizeof(float));
  // APFloat is slow: time it on a sixteenth of the buffer.
  size_t slowN = n / 16;
  double slowBytes = static_cast<double>(slowN * sizeof(float));

  std::printf("| conversion | bit operations (GB/s) | APFloat per element "
              "(GB/s) | ns per element (APFloat) |\n|---|---:|---:|---:|\n");
  struct Case {
    const char *name;
    void (*fast)(const void *, uint16_t *, size_t);
    const llvm::fltSemantics &semantics;
  } cases[] = {
      {"fp32 -> bf16", partita::runtime::convertFloatsToBf16,
       llvm::APFloat::BFloat()},
      {"fp32 -> fp16", partita::runtime::convertFloatsToF16,
       llvm::APFloat::IEEEhalf()},
  };
  for (const Case &c : cases) {
    double fast = bestSeconds([&] { c.fast(in.data(), out.data(), n); }, 5);
    double slow = bestSeconds(
        [&] { apfloatConvert(in.data(), out.data(), slowN, c.semantics); }, 3);
    std::printf("| %s | %.2f | %.3f | %.1f |\n", c.name, bytes / fast / 1e9,
                slowBytes / slow / 1e9, slow / slowN * 1e9);
  }
  return 0;
}
