// SPIKEJIT_LOG: level parsing, silence by default, and the lines the runtime writes for library
// searches, NVRTC compiles and the memory and disk caches (stderr captured by GoogleTest).
#include <gtest/gtest.h>

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/log.h"
#include "runtime/disk_cache.h"
#include "runtime/driver_api.h"
#include "runtime/dynamic_library.h"
#include "runtime/kernel_cache.h"
#include "spikejit/builtins.h"
#include "spikejit/cuda.h"
#include "spikejit/runtime.h"
#include "support/require_nvrtc.h"
#include "support/scoped_env.h"

namespace spikejit {
namespace {

using log::Level;
using testing::ScopedEnv;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Every line of `text` that is not a spikejit log line.
std::vector<std::string> foreign_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (line.rfind("spikejit: [", 0) != 0) lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

// Sets a log level for one test and restores silence after it.
class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device device;
    seed_ = (static_cast<uint64_t>(device()) << 32) | device();
    char dir[] = "/tmp/spikejit-log-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    root_ = dir;
  }
  void TearDown() override {
    log::set_level(Level::Off);
    nftw(root_.c_str(), [](const char* path, const struct stat*, int, FTW*) { return remove(path); },
         16, FTW_DEPTH | FTW_PHYS);
  }

  // A kernel no earlier run has cached: its text depends on the seed.
  codegen::KernelSource fresh_kernel() const {
    codegen::KernelSource k;
    k.entry = "log_test_" + std::to_string(seed_ % 1000000);
    k.source = "extern \"C\" __global__ void " + k.entry + "(float* x) { x[threadIdx.x] += " +
               std::to_string(seed_ % 9973) + ".0f; }\n";
    return k;
  }

  uint64_t seed_ = 0;
  std::string root_;
};

TEST(LogLevel, ParsesEveryDocumentedSpellingAndRejectsOthers) {
  const std::vector<std::pair<std::string, Level>> known = {
      {"", Level::Off},         {"0", Level::Off},         {"off", Level::Off},
      {"OFF", Level::Off},      {"warning", Level::Warning}, {"warn", Level::Warning},
      {"info", Level::Info},    {"1", Level::Info},        {"Info", Level::Info},
      {"debug", Level::Debug},  {"2", Level::Debug},       {"DEBUG", Level::Debug},
      {"trace", Level::Trace},  {"3", Level::Trace}};
  for (const auto& [text, expected] : known) {
    Level parsed = expected == Level::Off ? Level::Trace : Level::Off;
    EXPECT_TRUE(log::parse_level(text, &parsed)) << "'" << text << "'";
    EXPECT_EQ(parsed, expected) << "'" << text << "'";
  }
  for (const std::string text : {"verbose", "4", "yes", "debug ", "-1"}) {
    Level parsed = Level::Info;
    EXPECT_FALSE(log::parse_level(text, &parsed)) << "'" << text << "'";
  }
}

TEST(LogLevel, LevelsAreOrderedAndFilterMessages) {
  log::set_level(Level::Info);
  EXPECT_TRUE(log::enabled(Level::Warning));
  EXPECT_TRUE(log::enabled(Level::Info));
  EXPECT_FALSE(log::enabled(Level::Debug));
  ::testing::internal::CaptureStderr();
  SPIKEJIT_LOG_AT(Level::Info, "shown " << 42);
  SPIKEJIT_LOG_AT(Level::Debug, "hidden");
  log::set_level(Level::Off);
  SPIKEJIT_LOG_AT(Level::Warning, "hidden too");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "spikejit: [info] shown 42\n");
}

TEST_F(LogTest, LibrarySearchReportsEveryCandidateAndTheOneOpened) {
  const std::string missing = "/nonexistent-" + std::to_string(seed_) + "/libmissing.so";
  log::set_level(Level::Debug);
  ::testing::internal::CaptureStderr();
  // libc is in every process, so the second candidate opens.
  runtime::DynamicLibrary::open_first("the test library", {missing, "libc.so.6"});
  EXPECT_THROW(runtime::DynamicLibrary::open_first("the absent library", {missing}), Error);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "spikejit: [debug] looking for the test library: " + missing + ": ")) << err;
  EXPECT_TRUE(contains(err, "spikejit: [info] opened the test library: ")) << err;
  EXPECT_TRUE(contains(err, "libc.so.6")) << err;
  EXPECT_TRUE(contains(err, "spikejit: [info] cannot open the absent library: tried 1 candidate (SPIKEJIT_LOG=debug")) << err;
  EXPECT_TRUE(foreign_lines(err).empty()) << err;
}

TEST_F(LogTest, SilentByDefaultEvenWhenCompilingAndCaching) {
  REQUIRE_NVRTC();
  ScopedEnv dir("SPIKEJIT_CACHE_DIR", root_.c_str());
  ScopedEnv on("SPIKEJIT_CACHE", nullptr);
  log::set_level(Level::Off);
  ::testing::internal::CaptureStderr();
  const codegen::KernelSource k = fresh_kernel();
  runtime::binary_for(k, "sm_90", "silent kernel");  // compile + write
  runtime::binary_for(k, "sm_90", "silent kernel");  // disk hit
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST_F(LogTest, CompileAndDiskCacheActivityAtDebug) {
  REQUIRE_NVRTC();
  ScopedEnv dir("SPIKEJIT_CACHE_DIR", root_.c_str());
  ScopedEnv on("SPIKEJIT_CACHE", nullptr);
  const codegen::KernelSource k = fresh_kernel();
  const std::string label = "neuron log_test, kernel " + k.entry;
  log::set_level(Level::Debug);

  ::testing::internal::CaptureStderr();
  runtime::binary_for(k, "sm_90", label);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "spikejit: [debug] disk cache miss: " + label)) << err;
  EXPECT_TRUE(contains(err, "spikejit: [info] NVRTC compile started: " + label + " (NVRTC ")) << err;
  EXPECT_TRUE(contains(err, "--gpu-architecture=sm_90")) << err;
  EXPECT_TRUE(contains(err, "spikejit: [info] NVRTC compile finished: " + label + " in ")) << err;
  EXPECT_TRUE(contains(err, " ms (cubin, ")) << err;
  EXPECT_TRUE(contains(err, "spikejit: [debug] disk cache write: " + root_)) << err;
  EXPECT_LT(err.find("compile started"), err.find("compile finished")) << err;
  EXPECT_TRUE(foreign_lines(err).empty()) << err;

  ::testing::internal::CaptureStderr();
  runtime::binary_for(k, "sm_90", label);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "spikejit: [debug] disk cache hit: " + label + " (" + root_)) << err;
  EXPECT_FALSE(contains(err, "NVRTC compile")) << "a warm disk cache compiled: " << err;

  // Damage the entry: the next lookup reports it and compiles again.
  const std::vector<runtime::CacheEntry> entries = runtime::cache_entries();
  ASSERT_EQ(entries.size(), 1u);
  {
    std::ofstream out(entries[0].path, std::ios::binary | std::ios::trunc);
    out << "not a cache entry";
  }
  ::testing::internal::CaptureStderr();
  runtime::binary_for(k, "sm_90", label);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "spikejit: [warning] disk cache entry " + entries[0].path + " is corrupt")) << err;
  EXPECT_TRUE(contains(err, "NVRTC compile finished: " + label)) << err;

  // At info the compile is reported, the cache traffic is not.
  log::set_level(Level::Info);
  ::testing::internal::CaptureStderr();
  runtime::binary_for(k, "sm_80", label);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "NVRTC compile finished: " + label)) << err;
  EXPECT_FALSE(contains(err, "[debug]")) << err;
}

TEST_F(LogTest, UnwritableCacheFolderIsAWarning) {
  REQUIRE_NVRTC();
  {
    std::ofstream out(root_ + "/a-file");
    out << "x";
  }
  const std::string dir = root_ + "/a-file/cache";
  ScopedEnv env("SPIKEJIT_CACHE_DIR", dir.c_str());
  ScopedEnv on("SPIKEJIT_CACHE", nullptr);
  log::set_level(Level::Warning);
  ::testing::internal::CaptureStderr();
  runtime::binary_for(fresh_kernel(), "sm_90", "unwritable kernel");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "spikejit: [warning] disk cache not written: cannot create directory " + root_ +
                     "/a-file/cache: Not a directory\n");
}

TEST_F(LogTest, MemoryCacheMissThenOneLoggedHitOnTheGpu) {
  std::string why;
  if (!cuda::available(&why)) {
    if (::spikejit::testing::env_says_one("SPIKEJIT_REQUIRE_CUDA")) FAIL() << why;
    GTEST_SKIP() << "no CUDA: " << why;
  }
  ScopedEnv dir("SPIKEJIT_CACHE_DIR", root_.c_str());
  builtins::Options options;
  options.v_threshold = 1.0 + static_cast<double>(seed_ % 1000) / 4096.0;  // a fresh neuron
  const Program lif(builtins::lif_neuron(options));
  const int64_t steps = 4, neurons = 256;
  const size_t bytes = static_cast<size_t>(steps * neurons) * sizeof(float);
  runtime::ContextGuard guard(0);
  const runtime::DriverApi& api = runtime::driver();
  runtime::CUdeviceptr x = 0, s = 0;
  runtime::check_cuda(api.cuMemAlloc(&x, bytes), "cuMemAlloc");
  runtime::check_cuda(api.cuMemAlloc(&s, bytes), "cuMemAlloc");
  runtime::check_cuda(api.cuMemsetD8(x, 0, bytes), "cuMemsetD8");
  ForwardBuffers f;
  f.steps = steps;
  f.neuron_shape = {neurons};
  f.inputs = {TensorView(reinterpret_cast<void*>(x), DType::F32, {steps, neurons})};
  f.outputs = {TensorView(reinterpret_cast<void*>(s), DType::F32, {steps, neurons})};

  log::set_level(Level::Debug);
  ::testing::internal::CaptureStderr();
  for (int call = 0; call < 3; ++call) cuda::forward(lif, f, nullptr, 0);
  runtime::check_cuda(api.cuCtxSynchronize(), "cuCtxSynchronize");
  const std::string err = ::testing::internal::GetCapturedStderr();
  api.cuMemFree(x);
  api.cuMemFree(s);
  EXPECT_TRUE(contains(err, "spikejit: [debug] memory cache miss: neuron lif, kernel ")) << err;
  EXPECT_TRUE(contains(err, "NVRTC compile finished: neuron lif, kernel ")) << err;
  const std::string hit = "spikejit: [debug] memory cache hit: neuron lif, kernel ";
  const size_t first_hit = err.find(hit);
  ASSERT_NE(first_hit, std::string::npos) << err;
  EXPECT_EQ(err.find("memory cache hit", first_hit + hit.size()), std::string::npos)
      << "later hits must wait for SPIKEJIT_LOG=trace: " << err;
}

}  // namespace
}  // namespace spikejit
