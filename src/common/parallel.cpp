// A small persistent thread pool. Every parallel_for call is a job; the calling thread works on
// its own job too, so a call always makes progress even when every worker is busy (nested or
// concurrent calls from several threads are safe).
//
// When the process has an OpenMP runtime loaded (PyTorch's libgomp; libiomp5 exports the same
// GOMP_ entry points), a job runs on that runtime's threads instead. Its workers spin for a while
// after each parallel region of the host (libgomp's default: about 300 000 spins, milliseconds):
// a pool of our own would share the cores with them, and on a machine with few cores lose a third
// or more of every call interleaved with PyTorch ops. SPIKEJIT_OPENMP=0 keeps the own pool.
#include "common/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#endif
#if defined(__linux__)
#include <dlfcn.h>
#include <link.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <string>
#endif

namespace spikejit {
namespace {

struct Job {
  const std::function<void(int64_t)>* body = nullptr;
  int64_t count = 0;
  // Indices claimed at a time: a thread runs neighbouring indices (the CPU executor's blocks of
  // neurons: its accesses to each step's rows stay contiguous instead of interleaving with the
  // other threads'), while about four claims per thread keep the load balanced.
  int64_t run = 1;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> finished{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // the first exception, guarded by `mutex`
  std::mutex mutex;
  std::condition_variable done;

  // Claims runs of indices until none is left. After a failure the remaining indices are skipped.
  void work() {
    for (;;) {
      const int64_t first = next.fetch_add(run);
      if (first >= count) return;
      const int64_t end = std::min(count, first + run);
      for (int64_t i = first; i < end && !failed.load(); ++i) {
        try {
          (*body)(i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex);
          if (!error) error = std::current_exception();
          failed.store(true);
        }
      }
      if (finished.fetch_add(end - first) + (end - first) == count) {
        std::lock_guard<std::mutex> lock(mutex);
        done.notify_all();
      }
    }
  }

  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, [&] { return finished.load() == count; });
  }
};

class ThreadPool {
 public:
  // Offers `job` to `helpers` workers (started on demand); each takes one ticket.
  void submit(const std::shared_ptr<Job>& job, int helpers) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(workers_.size()) < helpers) workers_.emplace_back([this] { run(); });
      for (int i = 0; i < helpers; ++i) tickets_.push_back(job);
    }
    wake_.notify_all();
  }

 private:
  [[noreturn]] void run() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return !tickets_.empty(); });
        job = std::move(tickets_.front());
        tickets_.pop_front();
      }
      job->work();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> tickets_;
  std::vector<std::thread> workers_;
};

constexpr int kMaxThreads = 256;

// The CPUs this process may run on (a container's cpuset, `taskset`), not every CPU of the host.
int default_threads() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// The pool lives as long as the process and is never destroyed, so idle workers may still wait on
// it while the process exits. A forked child starts a fresh pool: the parent's workers do not
// exist there and the old pool's lock may have been held at the fork.
ThreadPool* g_pool = nullptr;

ThreadPool& pool() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_pool = new ThreadPool;
#if defined(__unix__) || defined(__APPLE__)
    pthread_atfork(nullptr, nullptr, [] { g_pool = new ThreadPool; });
#endif
  });
  return *g_pool;
}

// GOMP_parallel(fn, data, num_threads, flags): runs fn(data) on a team of num_threads threads,
// the caller included, and returns when all are done.
using OpenMpParallel = void (*)(void (*)(void*), void*, unsigned, unsigned);
OpenMpParallel g_openmp = nullptr;

#if defined(__linux__)
// GOMP_parallel of an OpenMP runtime already loaded into the process, or null.
OpenMpParallel loaded_openmp() {
  const char* setting = std::getenv("SPIKEJIT_OPENMP");
  if (setting != nullptr && std::strcmp(setting, "0") == 0) return nullptr;
  std::string path;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) -> int {
        const char* name = info->dlpi_name;
        if (name == nullptr || (std::strstr(name, "libgomp") == nullptr && std::strstr(name, "libiomp") == nullptr))
          return 0;
        *static_cast<std::string*>(out) = name;
        return 1;
      },
      &path);
  if (path.empty()) return nullptr;
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);  // a reference to the loaded copy
  return handle == nullptr ? nullptr : reinterpret_cast<OpenMpParallel>(dlsym(handle, "GOMP_parallel"));
}
#else
OpenMpParallel loaded_openmp() { return nullptr; }
#endif

// A process forked after this library was loaded never uses the OpenMP runtime: libgomp may
// hang in a child whose parent ran a parallel region.
std::atomic<bool> g_forked{false};
#if defined(__unix__) || defined(__APPLE__)
const bool g_fork_handler = (pthread_atfork(nullptr, nullptr, [] { g_forked.store(true); }), true);
#endif

// The runtime to run jobs on, looked up on the first parallel call (by then the host has loaded
// its libraries).
OpenMpParallel openmp() {
  static std::once_flag once;
  std::call_once(once, [] { g_openmp = loaded_openmp(); });
  return g_forked.load() ? nullptr : g_openmp;
}

}  // namespace

void parallel_for(int64_t count, int threads, const std::function<void(int64_t)>& body) {
  if (count <= 0) return;
  if (threads <= 0) {
    static const int available = default_threads();
    threads = available;
  }
  const int helpers = static_cast<int>(std::min<int64_t>(std::min(threads, kMaxThreads), count)) - 1;
  if (helpers <= 0) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  auto job = std::make_shared<Job>();
  job->body = &body;
  job->count = count;
  job->run = std::max<int64_t>(1, count / (4 * static_cast<int64_t>(helpers + 1)));
  if (OpenMpParallel parallel = openmp()) {
    parallel([](void* j) { static_cast<Job*>(j)->work(); }, job.get(), static_cast<unsigned>(helpers + 1), 0);
    if (job->error) std::rethrow_exception(job->error);
    return;
  }
  pool().submit(job, helpers);
  job->work();
  job->wait();
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace spikejit
