// parallel_for in a process with an OpenMP runtime loaded (as under PyTorch): the work runs on that
// runtime's threads, every index once, exceptions rethrown, nested calls fine; a forked child
// uses the own pool. (Without an OpenMP runtime: ParallelFor in test_cpu_executor.cpp.)
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/parallel.h"
#include "spikejit/error.h"

namespace spikejit {
namespace {

TEST(ParallelForOpenMp, RunsOnTheRuntimesThreads) {
  ASSERT_GE(omp_get_max_threads(), 1);  // the runtime is loaded: this binary links it
  for (int threads : {2, 3, 0}) {
    const int64_t count = 40;
    std::vector<std::atomic<int>> hits(count);
    std::vector<int> level(count, -1);
    std::vector<int> team(count, 0);
    parallel_for(count, threads, [&](int64_t i) {
      hits[i]++;
      level[i] = omp_get_level();
      team[i] = omp_get_num_threads();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
    for (int64_t i = 0; i < count; ++i) {
      ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " index " << i;
      EXPECT_EQ(level[i], 1) << "index " << i << ": not inside the runtime's parallel region";
      if (threads > 0) {
        EXPECT_EQ(team[i], threads) << "index " << i;
      }
    }
  }
}

TEST(ParallelForOpenMp, SerialForOneThreadAndRethrows) {
  int level = -1;
  parallel_for(3, 1, [&](int64_t) { level = omp_get_level(); });
  EXPECT_EQ(level, 0);  // one thread: the caller's loop, no parallel region
  EXPECT_THROW(parallel_for(100, 4,
                            [&](int64_t i) {
                              if (i == 17) throw Error("index 17");
                            }),
               Error);
  std::atomic<int> after{0};
  parallel_for(50, 4, [&](int64_t) { after++; });
  EXPECT_EQ(after.load(), 50);
}

TEST(ParallelForOpenMp, NestedAndConcurrentCalls) {
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < 10; ++round) {
        parallel_for(8, 3, [&](int64_t) { parallel_for(10, 2, [&](int64_t j) { total += j; }); });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 3 * 10 * 8 * 45);
}

// A forked child (a data-loader worker, say) uses the own pool: libgomp may hang there.
TEST(ParallelForOpenMp, AForkedChildUsesTheOwnPool) {
  parallel_for(64, 4, [&](int64_t) {});
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<int> hits{0}, in_region{0};
    parallel_for(1000, 4, [&](int64_t) {
      hits++;
      if (omp_get_level() > 0) in_region++;
    });
    _exit(hits.load() == 1000 && in_region.load() == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
}  // namespace spikejit
