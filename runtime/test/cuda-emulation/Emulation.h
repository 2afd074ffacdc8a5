//===- Emulation.h - run generated CUDA as host C++ -------------*- C++ -*-===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// Force-included (`g++ -include Emulation.h -x c++`) into a module that
// lib/Target/CUDA generated, so that the module builds as a host shared
// library whose kernels the emulated device (EmulatedDevice.h) runs. The
// CUDA keywords become host C++; the threads of a block are cooperative
// fibers (ucontext) run one at a time on the calling OS thread, so a
// `static` is the block's shared memory. __syncthreads and the warp
// operations switch back to the scheduler, which releases a barrier only
// when every thread it needs has arrived and reports divergent use
// (a thread that exited, a lane missing from a shuffle's mask) as an error
// instead of hanging. Blocks run one after another in (x, y, z) order.
//
// The module's only entry point is partita_emu_launch; the kernels keep
// their extern "C" names, looked up with dlsym. Everything else is hidden
// (-fvisibility=hidden) so two modules loaded together share nothing.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_CUDA_EMULATION_H
#define PARTITA_CUDA_EMULATION_H

// The toolkit's half-precision headers compile as host code; include them
// before the keywords below are redefined.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <ucontext.h>
#include <vector>

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#undef __restrict__
#define __global__ __attribute__((visibility("default")))
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
// The run-time error record of a module (Prelude.cuh) is read with dlsym.
#define PT_EXPORT __attribute__((visibility("default")))
// One block runs at a time, so a static is the block's shared memory. (It
// keeps the previous block's contents: GCC ignores section attributes on
// the statics of template instances, so there is no cheap way to poison.)
#define __shared__ static

namespace ptemu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

/// What a fiber is doing when it hands control back to the scheduler.
enum class State { Runnable, BlockBarrier, WarpOp, Exited };
enum class WarpOpKind { Sync, ShflXor, Shfl, ShflDown, ShflUp };

struct Thread {
  ucontext_t context;
  std::vector<char> stack;
  Dim3 index;
  unsigned linear = 0;
  State state = State::Runnable;
  // The pending warp operation.
  WarpOpKind op = WarpOpKind::Sync;
  unsigned mask = 0;
  int operand = 0; // Lane mask, source lane or delta.
  int width = 32;
  uint64_t value = 0;  // This lane's contribution.
  uint64_t result = 0; // What the shuffle returns.
};

struct Scheduler {
  Dim3 grid, block, blockIndex;
  std::vector<Thread> threads;
  Thread *current = nullptr;
  ucontext_t main;
  void *function = nullptr;
  unsigned arity = 0;
  void *const *args = nullptr;
  char *error = nullptr;
  size_t errorSize = 0;
  const char *kernel = "";
};

// Hidden, so one per module.
inline Scheduler scheduler;

inline Thread &self() { return *scheduler.current; }

/// Hands control back to the scheduler until this thread may continue.
inline void yieldToScheduler() {
  Thread &t = self();
  swapcontext(&t.context, &scheduler.main);
}

inline void syncthreads() {
  self().state = State::BlockBarrier;
  yieldToScheduler();
}

template <typename T>
inline T warpOp(WarpOpKind op, unsigned mask, T value, int operand, int width) {
  static_assert(sizeof(T) <= 8, "shuffle of a value wider than 8 bytes");
  Thread &t = self();
  t.state = State::WarpOp;
  t.op = op;
  t.mask = mask;
  t.operand = operand;
  t.width = width;
  t.value = 0;
  std::memcpy(&t.value, &value, sizeof(T));
  yieldToScheduler();
  T result;
  std::memcpy(&result, &self().result, sizeof(T));
  return result;
}

} // namespace ptemu

#define threadIdx (::ptemu::self().index)
#define blockIdx (::ptemu::scheduler.blockIndex)
#define blockDim (::ptemu::scheduler.block)
#define gridDim (::ptemu::scheduler.grid)

inline void __syncthreads() { ::ptemu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::ptemu::warpOp<int>(::ptemu::WarpOpKind::Sync, mask, 0, 0, 32);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = 32) {
  return ::ptemu::warpOp<T>(::ptemu::WarpOpKind::ShflXor, mask, v, laneMask,
                            width);
}
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int srcLane, int width = 32) {
  return ::ptemu::warpOp<T>(::ptemu::WarpOpKind::Shfl, mask, v, srcLane, width);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::ptemu::warpOp<T>(::ptemu::WarpOpKind::ShflDown, mask, v, int(delta),
                            width);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::ptemu::warpOp<T>(::ptemu::WarpOpKind::ShflUp, mask, v, int(delta),
                            width);
}

inline float __int_as_float(int v) {
  float f;
  std::memcpy(&f, &v, 4);
  return f;
}
inline int __float_as_int(float v) {
  int i;
  std::memcpy(&i, &v, 4);
  return i;
}
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
template <typename T> inline T __ldg(const T *p) { return *p; }
// One thread runs at a time: atomics are plain reads and writes, fences
// nothing.
inline void __threadfence() {}
template <typename T> inline T atomicAdd(T *p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
template <typename T> inline T atomicCAS(T *p, T compare, T v) {
  T old = *p;
  if (old == compare)
    *p = v;
  return old;
}

// CUDA's integer and float min/max overloads (mixed types promote).
template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) {
  typedef std::common_type_t<A, B> C;
  return C(b) < C(a) ? C(b) : C(a);
}
template <typename A, typename B>
inline std::common_type_t<A, B> max(A a, B b) {
  typedef std::common_type_t<A, B> C;
  return C(a) < C(b) ? C(b) : C(a);
}

namespace ptemu {

__attribute__((format(printf, 1, 2))) inline void fail(const char *format,
                                                       ...) {
  if (scheduler.error[0])
    return;
  char message[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(message, sizeof(message), format, args);
  va_end(args);
  std::snprintf(scheduler.error, scheduler.errorSize, "%s (block %u,%u,%u): %s",
                scheduler.kernel, scheduler.blockIndex.x,
                scheduler.blockIndex.y, scheduler.blockIndex.z, message);
}

// Every parameter of a generated kernel is a pointer, so a kernel of N
// parameters is called as a function of N void pointers (the same ABI).
#define PTEMU_A1 a[0]
#define PTEMU_A2 PTEMU_A1, a[1]
#define PTEMU_A3 PTEMU_A2, a[2]
#define PTEMU_A4 PTEMU_A3, a[3]
#define PTEMU_A5 PTEMU_A4, a[4]
#define PTEMU_A6 PTEMU_A5, a[5]
#define PTEMU_A7 PTEMU_A6, a[6]
#define PTEMU_A8 PTEMU_A7, a[7]
#define PTEMU_A9 PTEMU_A8, a[8]
#define PTEMU_A10 PTEMU_A9, a[9]
#define PTEMU_A11 PTEMU_A10, a[10]
#define PTEMU_A12 PTEMU_A11, a[11]
#define PTEMU_A13 PTEMU_A12, a[12]
#define PTEMU_A14 PTEMU_A13, a[13]
#define PTEMU_A15 PTEMU_A14, a[14]
#define PTEMU_A16 PTEMU_A15, a[15]
#define PTEMU_CALL(N)                                                          \
  case N: {                                                                    \
    typedef void (*F)(PTEMU_V##N);                                             \
    reinterpret_cast<F>(f)(PTEMU_A##N);                                        \
    return true;                                                               \
  }
#define PTEMU_V1 void *
#define PTEMU_V2 PTEMU_V1, void *
#define PTEMU_V3 PTEMU_V2, void *
#define PTEMU_V4 PTEMU_V3, void *
#define PTEMU_V5 PTEMU_V4, void *
#define PTEMU_V6 PTEMU_V5, void *
#define PTEMU_V7 PTEMU_V6, void *
#define PTEMU_V8 PTEMU_V7, void *
#define PTEMU_V9 PTEMU_V8, void *
#define PTEMU_V10 PTEMU_V9, void *
#define PTEMU_V11 PTEMU_V10, void *
#define PTEMU_V12 PTEMU_V11, void *
#define PTEMU_V13 PTEMU_V12, void *
#define PTEMU_V14 PTEMU_V13, void *
#define PTEMU_V15 PTEMU_V14, void *
#define PTEMU_V16 PTEMU_V15, void *

inline bool callKernel(void *f, unsigned arity, void *const *a) {
  switch (arity) {
  case 0:
    reinterpret_cast<void (*)()>(f)();
    return true;
    PTEMU_CALL(1)
    PTEMU_CALL(2)
    PTEMU_CALL(3)
    PTEMU_CALL(4)
    PTEMU_CALL(5)
    PTEMU_CALL(6)
    PTEMU_CALL(7)
    PTEMU_CALL(8)
    PTEMU_CALL(9)
    PTEMU_CALL(10)
    PTEMU_CALL(11)
    PTEMU_CALL(12)
    PTEMU_CALL(13)
    PTEMU_CALL(14)
    PTEMU_CALL(15)
    PTEMU_CALL(16)
  default:
    return false;
  }
}

inline void threadEntry() {
  callKernel(scheduler.function, scheduler.arity, scheduler.args);
  self().state = State::Exited;
  swapcontext(&self().context, &scheduler.main);
}

/// Releases warp `w`'s pending operation when every lane it names has
/// arrived. Returns whether it did; sets the error on misuse.
inline bool resolveWarp(unsigned w, unsigned lanes) {
  std::vector<Thread> &ts = scheduler.threads;
  unsigned base = w * 32;
  unsigned waiting = 0, live = 0;
  for (unsigned l = 0; l < lanes; ++l) {
    if (ts[base + l].state == State::WarpOp)
      waiting |= 1u << l;
    if (ts[base + l].state != State::Exited)
      live |= 1u << l;
  }
  if (!waiting)
    return false;
  unsigned mask = 0;
  for (unsigned l = 0; l < lanes; ++l)
    if (waiting & (1u << l)) {
      const Thread &t = ts[base + l];
      if (!(t.mask & (1u << l))) {
        fail("lane %u of warp %u is not in its own shuffle mask", l, w);
        return false;
      }
      mask |= t.mask;
    }
  // Every lane of a waiting lane's mask must be a waiting lane with the
  // same mask and operation, or the warp is divergent.
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask & (1u << l)))
      continue;
    if (l >= lanes) {
      fail("warp %u: a shuffle mask names lane %u beyond the block", w, l);
      return false;
    }
    if (!(live & (1u << l))) {
      fail("warp %u: a shuffle mask names lane %u, which has exited", w, l);
      return false;
    }
    if (!(waiting & (1u << l)))
      return false; // Not there yet (or at __syncthreads: found later).
    const Thread &t = ts[base + l];
    if (t.mask != mask || t.op != ts[base + __builtin_ctz(waiting)].op) {
      fail("warp %u: lane %u runs a different warp operation or mask", w, l);
      return false;
    }
  }
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask & (1u << l)))
      continue;
    Thread &t = ts[base + l];
    int width = t.width;
    if (width <= 0 || width > 32 || (width & (width - 1))) {
      fail("warp %u: shuffle width of lane %u is not a power of two <= "
           "32",
           w, l);
      return false;
    }
    int segment = int(l) & ~(width - 1);
    int source = int(l);
    switch (t.op) {
    case WarpOpKind::Sync:
      break;
    case WarpOpKind::ShflXor:
      source = int(l) ^ t.operand;
      if (source >= segment + width)
        source = int(l);
      break;
    case WarpOpKind::Shfl:
      source = segment + (t.operand & (width - 1));
      break;
    case WarpOpKind::ShflDown:
      if (int(l) + t.operand < segment + width)
        source = int(l) + t.operand;
      break;
    case WarpOpKind::ShflUp:
      if (int(l) - t.operand >= segment)
        source = int(l) - t.operand;
      break;
    }
    if (source < 0 || source >= 32 || !(mask & (1u << source))) {
      fail("warp %u: lane %u reads a lane outside the shuffle mask", w, l);
      return false;
    }
    t.result = ts[base + unsigned(source)].value;
  }
  for (unsigned l = 0; l < 32; ++l)
    if (mask & (1u << l))
      ts[base + l].state = State::Runnable;
  return true;
}

/// Runs one block to completion; false on error.
inline bool runBlock() {
  std::vector<Thread> &ts = scheduler.threads;
  unsigned count = unsigned(ts.size());
  for (Thread &t : ts) {
    t.state = State::Runnable;
    getcontext(&t.context);
    t.context.uc_stack.ss_sp = t.stack.data();
    t.context.uc_stack.ss_size = t.stack.size();
    t.context.uc_link = nullptr;
    makecontext(&t.context, threadEntry, 0);
  }
  for (;;) {
    bool ran = false;
    for (Thread &t : ts)
      if (t.state == State::Runnable) {
        scheduler.current = &t;
        swapcontext(&scheduler.main, &t.context);
        ran = true;
      }
    scheduler.current = nullptr;
    if (scheduler.error[0])
      return false;
    if (ran)
      continue;
    unsigned exited = 0, atBarrier = 0;
    for (Thread &t : ts) {
      exited += t.state == State::Exited;
      atBarrier += t.state == State::BlockBarrier;
    }
    if (exited == count)
      return true;
    bool released = false;
    for (unsigned w = 0; w * 32 < count; ++w)
      released |= resolveWarp(w, std::min(32u, count - w * 32));
    if (scheduler.error[0])
      return false;
    if (released)
      continue;
    if (atBarrier + exited == count) {
      if (exited) {
        fail("__syncthreads waits for %u threads, but %u threads of the "
             "block have exited (divergent barrier)",
             atBarrier, exited);
        return false;
      }
      for (Thread &t : ts)
        t.state = State::Runnable;
      continue;
    }
    fail("deadlock: %u threads wait at __syncthreads while others wait at "
         "a warp operation that cannot complete (divergent warp)",
         atBarrier);
    return false;
  }
}

} // namespace ptemu

/// Runs `function` (the kernel named `kernel`, taking `arity` pointers,
/// `args`) over `grid` x `block`. Returns 0, or 1 with a message in `error`.
extern "C" __attribute__((visibility("default"))) int
partita_emu_launch(const char *kernel, void *function, unsigned arity,
                   void *const *args, const unsigned grid[3],
                   const unsigned block[3], char *error, size_t errorSize) {
  using namespace ptemu;
  scheduler.kernel = kernel;
  scheduler.function = function;
  scheduler.arity = arity;
  scheduler.args = args;
  scheduler.error = error;
  scheduler.errorSize = errorSize;
  error[0] = 0;
  scheduler.grid = {grid[0], grid[1], grid[2]};
  scheduler.block = {block[0], block[1], block[2]};
  unsigned count = block[0] * block[1] * block[2];
  if (count == 0 || count > 1024 || grid[0] * grid[1] * grid[2] == 0) {
    std::snprintf(error, errorSize, "%s: bad launch shape", kernel);
    return 1;
  }
  if (arity > 16) {
    std::snprintf(error, errorSize,
                  "%s: %u parameters (the emulator "
                  "calls at most 16)",
                  kernel, arity);
    return 1;
  }
  if (scheduler.threads.size() != count)
    scheduler.threads.resize(count);
  for (unsigned i = 0; i < count; ++i) {
    Thread &t = scheduler.threads[i];
    if (t.stack.empty())
      t.stack.resize(256 * 1024);
    t.linear = i;
    t.index = {i % block[0], i / block[0] % block[1], i / block[0] / block[1]};
  }
  for (unsigned z = 0; z < grid[2]; ++z)
    for (unsigned y = 0; y < grid[1]; ++y)
      for (unsigned x = 0; x < grid[0]; ++x) {
        scheduler.blockIndex = {x, y, z};
        if (!runBlock())
          return 1;
      }
  return 0;
}

#endif // PARTITA_CUDA_EMULATION_H
