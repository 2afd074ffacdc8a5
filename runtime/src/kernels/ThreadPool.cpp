//===- ThreadPool.cpp - the workers kernels split rows across -------------===//
//
// Part of the Partita project.
//
//===----------------------------------------------------------------------===//
//
// parallelFor publishes a job of equal chunks; workers and the calling
// thread claim chunks from an atomic counter until none is left, so uneven
// chunks (causal attention) balance themselves. A parallelFor issued from
// inside a chunk runs inline: the workers may all be busy with the outer job.
//
// Kernels come back to back, and many take tens of microseconds, about what
// a futex wake-up costs: so a worker that runs out of work spins for a short
// while (kSpin) before it sleeps, and the caller spins likewise for the
// workers' last chunks before it blocks.
//
//===----------------------------------------------------------------------===//

#include "partita/runtime/HostKernels.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <pthread.h>
#include <thread>
#include <vector>

namespace partita::runtime {

namespace {

/// Set while a thread runs chunks of some job, to run nested loops inline.
thread_local bool insideParallelFor = false;

/// How long an idle thread spins for work before it blocks. Between two
/// kernels of a decode step the caller runs the step's serial parts (the
/// argmax, a kernel's own bookkeeping) while the workers wait; at 50 us a
/// batch-1 GPT-2-small decode step slept and woke about 30 times (4600
/// context switches in 150 steps) and took 19.8-20.3 ms, at 500 us 900 and
/// 18.1-19.2 ms (2000 us: no better). A pool with no work left spins at
/// most this long, then sleeps.
constexpr std::chrono::microseconds kSpin(500);

/// Spins until `done()` or kSpin has passed; true if `done()`.
template <typename F> bool spinUntil(F done) {
  auto deadline = std::chrono::steady_clock::now() + kSpin;
  while (!done()) {
    for (int i = 0; i < 64; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() > deadline)
      return done();
  }
  return true;
}

struct Job {
  const std::function<void(int64_t, int64_t)> *fn;
  int64_t n;
  int64_t numChunks;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  int users = 0; // Workers holding a pointer to the job; under the mutex.

  /// Runs chunks until none is left to claim.
  void runChunks() {
    bool wasInside = insideParallelFor;
    insideParallelFor = true;
    for (int64_t c; (c = next.fetch_add(1)) < numChunks;) {
      (*fn)(c *n / numChunks, (c + 1) * n / numChunks);
      done.fetch_add(1);
    }
    insideParallelFor = wasInside;
  }
};

} // namespace

struct ThreadPool::Impl {
  std::mutex mutex;
  std::condition_variable workAvailable;
  std::condition_variable jobFinished;
  std::deque<Job *> jobs;
  /// Counts jobs published, so that spinning workers see a new one without
  /// the mutex. Incremented under the mutex.
  std::atomic<uint64_t> published{0};
  bool stopping = false;
  /// POSIX threads, not std::thread: a thread the system cannot give
  /// (EAGAIN at its thread limit) is an error code, where std::thread
  /// would throw, and the runtime is built without exceptions.
  std::vector<pthread_t> workers;
  unsigned size = 1;

  static void *startWorker(void *pool) {
    static_cast<Impl *>(pool)->workerLoop();
    return nullptr;
  }

  void workerLoop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      if (!stopping && jobs.empty()) {
        uint64_t seen = published.load();
        lock.unlock();
        spinUntil([&] { return published.load() != seen; });
        lock.lock();
      }
      workAvailable.wait(lock, [&] { return stopping || !jobs.empty(); });
      if (jobs.empty())
        return; // Stopping, with nothing left to help with.
      Job *job = jobs.front();
      ++job->users;
      lock.unlock();
      job->runChunks();
      lock.lock();
      // Every chunk is claimed: stop offering the job to other workers.
      auto it = std::find(jobs.begin(), jobs.end(), job);
      if (it != jobs.end())
        jobs.erase(it);
      --job->users;
      jobFinished.notify_all();
    }
  }
};

ThreadPool::ThreadPool(unsigned threads) : impl(std::make_unique<Impl>()) {
  if (threads == 0)
    threads = std::max(1u, std::thread::hardware_concurrency());
  // The calling thread is one of the `threads`: it runs chunks too. Where
  // the system gives fewer threads than asked, the pool runs with those it
  // got (the chunks of a job are claimed by whoever is free).
  for (unsigned i = 1; i < threads; ++i) {
    pthread_t worker;
    if (pthread_create(&worker, nullptr, &Impl::startWorker, impl.get()) != 0)
      break;
    impl->workers.push_back(worker);
  }
  impl->size = unsigned(impl->workers.size()) + 1;
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl->mutex);
    impl->stopping = true;
  }
  impl->workAvailable.notify_all();
  for (pthread_t worker : impl->workers)
    pthread_join(worker, nullptr);
}

unsigned ThreadPool::size() const { return impl->size; }

void ThreadPool::parallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)> &fn) {
  if (n <= 0)
    return;
  grain = std::max<int64_t>(1, grain);
  int64_t maxChunks = n / grain;
  if (impl->workers.empty() || maxChunks <= 1 || insideParallelFor) {
    fn(0, n);
    return;
  }
  // A few chunks per thread, so that a slow chunk does not hold up the end.
  Job job;
  job.fn = &fn;
  job.n = n;
  job.numChunks = std::min<int64_t>(maxChunks, int64_t(impl->size) * 4);
  {
    std::lock_guard<std::mutex> lock(impl->mutex);
    impl->jobs.push_back(&job);
    impl->published.fetch_add(1);
  }
  impl->workAvailable.notify_all();
  job.runChunks();
  spinUntil([&] { return job.done.load() == job.numChunks; });
  std::unique_lock<std::mutex> lock(impl->mutex);
  auto it = std::find(impl->jobs.begin(), impl->jobs.end(), &job);
  if (it != impl->jobs.end())
    impl->jobs.erase(it);
  // The job lives on this stack: wait until no worker can still touch it.
  impl->jobFinished.wait(
      lock, [&] { return job.done.load() == job.numChunks && job.users == 0; });
}

} // namespace partita::runtime
