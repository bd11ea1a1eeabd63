// The CUDA runtime layer without a GPU: library discovery, NVRTC compilation and its errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/dynamic_library.h"
#include "runtime/library_search.h"
#include "runtime/nvrtc_api.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/driver_api.h"
#include "spikejit/cuda.h"
#include "spikejit/runtime.h"
#include "support/require_nvrtc.h"
#include "support/scoped_env.h"

namespace spikejit::runtime {
namespace {

using testing::ScopedEnv;

uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t index_of(const std::vector<std::string>& list, const std::string& item) {
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] == item) return i;
  }
  return std::string::npos;
}


std::string random_kernel(uint64_t seed, std::string* entry) {
  *entry = "spikejit_test_kernel_" + std::to_string(seed % 100000);
  return "extern \"C\" __global__ void " + *entry +
         "(float* out, const float* in, long long n) {\n"
         "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (i < n) out[i] = in[i] * " + std::to_string(seed % 1000) + ".5f + 1.0f;\n"
         "}\n";
}

TEST(LibrarySearch, NvrtcOverrideIsTheOnlyCandidateAndNamedInTheError) {
  const std::string bogus = "/nonexistent-" + std::to_string(fresh_seed()) + "/libnvrtc.so.13";
  ScopedEnv env("SPIKEJIT_NVRTC_PATH", bogus.c_str());
  EXPECT_EQ(nvrtc_candidates(), std::vector<std::string>{bogus});
  try {
    load_nvrtc();
    FAIL() << "opening a bogus SPIKEJIT_NVRTC_PATH did not throw";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), bogus)) << e.what();
    EXPECT_TRUE(contains(e.what(), "NVRTC")) << e.what();
  }
}

TEST(LibrarySearch, DriverOverrideIsTheOnlyCandidateAndNamedInTheError) {
  const std::string bogus = "/nonexistent-" + std::to_string(fresh_seed()) + "/libcuda.so.1";
  ScopedEnv env("SPIKEJIT_CUDA_DRIVER_PATH", bogus.c_str());
  EXPECT_EQ(driver_candidates(), std::vector<std::string>{bogus});
  try {
    load_driver();
    FAIL() << "opening a bogus SPIKEJIT_CUDA_DRIVER_PATH did not throw";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), bogus)) << e.what();
    EXPECT_TRUE(contains(e.what(), "libcuda")) << e.what();
  }
}

TEST(LibrarySearch, NvrtcOrderIsSonamesThenToolkitsThenWheels) {
  const std::string home = "/opt/cuda-" + std::to_string(fresh_seed() % 1000);
  char site_template[] = "/tmp/spikejit-site-XXXXXX";
  ASSERT_NE(mkdtemp(site_template), nullptr);
  const std::string site = site_template;
  ScopedEnv no_override("SPIKEJIT_NVRTC_PATH", nullptr);
  ScopedEnv cuda_home("CUDA_HOME", home.c_str());
  ScopedEnv sites("SPIKEJIT_PYTHON_SITE_PACKAGES", site.c_str());
  const std::vector<std::string> c = nvrtc_candidates();
  ASSERT_GE(c.size(), 3u);
  EXPECT_EQ(c[0], "libnvrtc.so.13");
  EXPECT_EQ(c[1], "libnvrtc.so.12");
  EXPECT_EQ(c[2], "libnvrtc.so");
  const size_t toolkit = index_of(c, home + "/lib64/libnvrtc.so.13");
  const size_t usr_local = index_of(c, "/usr/local/cuda/lib64/libnvrtc.so.12");
  const size_t cu13 = index_of(c, site + "/nvidia/cu13/lib/libnvrtc.so.13");
  const size_t cu12 = index_of(c, site + "/nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
  ASSERT_NE(toolkit, std::string::npos);
  ASSERT_NE(usr_local, std::string::npos);
  ASSERT_NE(cu13, std::string::npos);
  ASSERT_NE(cu12, std::string::npos);
  EXPECT_LT(toolkit, usr_local);
  EXPECT_LT(usr_local, cu13);
  EXPECT_LT(cu13, cu12);
  rmdir(site.c_str());
}

TEST(LibrarySearch, OpenFirstListsEveryCandidateInOrder) {
  const std::string tag = std::to_string(fresh_seed());
  const std::vector<std::string> candidates = {"libspikejit-missing-" + tag + ".so",
                                               "/nowhere/" + tag + "/libfoo.so"};
  try {
    DynamicLibrary::open_first("the test library", candidates);
    FAIL() << "missing libraries opened";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_TRUE(contains(message, "the test library")) << message;
    const size_t first = message.find(candidates[0]);
    const size_t second = message.find(candidates[1]);
    ASSERT_NE(first, std::string::npos) << message;
    ASSERT_NE(second, std::string::npos) << message;
    EXPECT_LT(first, second);
  }
}

TEST(CudaAvailable, ExplainsWhyNot) {
  std::string why;
  if (cuda::available(&why)) {
    EXPECT_TRUE(why.empty()) << why;
    EXPECT_GT(device_count(), 0);
  } else {
    EXPECT_FALSE(why.empty());
    EXPECT_TRUE(contains(why, "libcuda") || contains(why, "cuInit") || contains(why, "NVRTC") ||
                contains(why, "device"))
        << why;
  }
}

TEST(Nvrtc, CompilesForSm80AndSm90) {
  REQUIRE_NVRTC();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::string entry;
  const std::string source = random_kernel(seed, &entry);
  for (const char* arch : {"sm_80", "sm_90"}) {
    const std::string cubin = compile_for_arch(source, entry, arch);
    ASSERT_GT(cubin.size(), 4u) << arch;
    EXPECT_EQ(cubin.substr(0, 4), std::string("\x7f" "ELF")) << arch;
    EXPECT_TRUE(contains(cubin, entry)) << arch << ": the cubin lacks the entry's symbol";
  }
}

TEST(Nvrtc, CompilesPtxForComputeTargets) {
  REQUIRE_NVRTC();
  std::string entry;
  const std::string ptx = compile_cuda(random_kernel(fresh_seed(), &entry), "compute_80", "test");
  EXPECT_TRUE(contains(ptx, ".entry " + entry)) << ptx;
  EXPECT_EQ(ptx.back(), '\0');  // cuModuleLoadData takes PTX as a C string
}

TEST(Nvrtc, FindsTheHalfPrecisionHeaders) {
  REQUIRE_NVRTC();
  const std::string source =
      "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
      "extern \"C\" __global__ void convert(const __half* h, __nv_bfloat16* b) {\n"
      "  b[threadIdx.x] = __float2bfloat16(__half2float(h[threadIdx.x]) * 2.0f);\n}\n";
  const std::string cubin = compile_for_arch(source, "convert", "sm_90");
  EXPECT_EQ(cubin.substr(0, 4), std::string("\x7f" "ELF"));
  bool has_include = false;
  for (const std::string& o : compile_options("sm_90", source)) {
    has_include = has_include || o.rfind("--include-path=", 0) == 0;
  }
  EXPECT_TRUE(has_include);
}

TEST(Nvrtc, OptionsAreExactAndHaveNoFastMath) {
  REQUIRE_NVRTC();
  const std::vector<std::string> plain = compile_options("sm_86", "__global__ void k() {}");
  const std::vector<std::string> expected = {"--gpu-architecture=sm_86", "-std=c++17",
                                             "--fmad=false"};
  EXPECT_EQ(plain, expected);
}

TEST(Nvrtc, CompileErrorCarriesKernelLogAndNumberedSource) {
  REQUIRE_NVRTC();
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const std::string undefined = "undefined_name_" + std::to_string(seed % 100000);
  const std::string source =
      "// line one\n"
      "extern \"C\" __global__ void broken(float* out) {\n"
      "  out[0] = " + undefined + ";\n"
      "}\n";
  try {
    compile_for_arch(source, "broken", "sm_90");
    FAIL() << "a kernel using an undefined name compiled";
  } catch (const CompileError& e) {
    const std::string message = e.what();
    EXPECT_TRUE(contains(message, "broken")) << message;
    EXPECT_TRUE(contains(e.log(), undefined)) << e.log();
    EXPECT_TRUE(contains(e.log(), "(3)")) << "the log should point at line 3: " << e.log();
    EXPECT_TRUE(contains(message, e.log()));
    EXPECT_TRUE(contains(message, "    3 |   out[0] = " + undefined)) << message;
    EXPECT_TRUE(contains(message, "--gpu-architecture=sm_90")) << message;
  }
}

TEST(Nvrtc, RejectsMalformedArch) {
  for (const char* arch : {"", "90", "sm_", "sm_x9", "gfx90a"}) {
    EXPECT_THROW(compile_for_arch("__global__ void k() {}", "k", arch), ArgumentError) << arch;
  }
}

TEST(Nvrtc, TargetForDevicePrefersCubinThenPtxOfTheNewestOlderArch) {
  REQUIRE_NVRTC();
  const std::vector<int> archs = nvrtc().supported_archs();
  ASSERT_FALSE(archs.empty());
  const int newest = archs.back();
  EXPECT_EQ(target_for_device(newest / 10, newest % 10), "sm_" + std::to_string(newest));
  EXPECT_EQ(target_for_device(99, 9), "compute_" + std::to_string(newest));
  EXPECT_THROW(target_for_device(1, 0), Error);
}

TEST(Nvrtc, VersionIsMajorDotMinor) {
  REQUIRE_NVRTC();
  const std::string v = nvrtc_version();
  const size_t dot = v.find('.');
  ASSERT_NE(dot, std::string::npos) << v;
  EXPECT_GE(std::stoi(v.substr(0, dot)), 11) << v;
}

TEST(Nvrtc, NumberedSourceNumbersEveryLine) {
  EXPECT_EQ(numbered_source("a\n\nb"), "    1 | a\n    2 | \n    3 | b\n");
  EXPECT_EQ(numbered_source(""), "");
}

}  // namespace
}  // namespace spikejit::runtime
