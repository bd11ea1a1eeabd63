// Bit-spike compression: the CPU kernels against a scalar reference that reads each element as its
// real type (every dtype, lengths around byte, word and chunk boundaries, misaligned buffers,
// thread counts), round trips into every dtype, the argument errors; the CUDA kernels (skipped
// without a GPU, failing instead under SPIKEJIT_REQUIRE_CUDA=1) byte for byte against the CPU ones
// with poisoned outputs; and the CUDA source compiling with NVRTC.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/compress_source.h"
#include "runtime/driver_api.h"
#include "spikejit/compress.h"
#include "spikejit/cuda.h"
#include "spikejit/error.h"
#include "spikejit/runtime.h"
#include "support/random_seed.h"
#include "support/require_nvrtc.h"

namespace spikejit {
namespace {

const SpikeDType kAll[] = {SpikeDType::Bool, SpikeDType::U8,  SpikeDType::I8,  SpikeDType::I16,
                           SpikeDType::I32,  SpikeDType::I64, SpikeDType::F16, SpikeDType::BF16,
                           SpikeDType::F32,  SpikeDType::F64};
const int64_t kLengths[] = {0, 1, 7, 8, 9, 31, 32, 33, 63, 65, 4097, 64 * 1024 + 13, (1 << 20) + 3};

// The element as a double, read through its real type (the reference semantics: != 0 is a spike).
double value_at(const unsigned char* data, SpikeDType d, int64_t i) {
  const unsigned char* p = data + static_cast<size_t>(i) * spike_dtype_size(d);
  int8_t i8;
  int16_t i16;
  int32_t i32;
  int64_t i64;
  uint16_t h;
  float f;
  double x;
  switch (d) {
    case SpikeDType::Bool:
    case SpikeDType::U8: return *p;
    case SpikeDType::I8: std::memcpy(&i8, p, 1); return i8;
    case SpikeDType::I16: std::memcpy(&i16, p, 2); return i16;
    case SpikeDType::I32: std::memcpy(&i32, p, 4); return i32;
    case SpikeDType::I64: std::memcpy(&i64, p, 8); return static_cast<double>(i64);
    case SpikeDType::F16: std::memcpy(&h, p, 2); return half_to_float(h);
    case SpikeDType::BF16: std::memcpy(&h, p, 2); return bfloat16_to_float(h);
    case SpikeDType::F32: std::memcpy(&f, p, 4); return f;
    case SpikeDType::F64: std::memcpy(&x, p, 8); return x;
  }
  return NAN;
}

std::vector<uint8_t> reference_pack(const unsigned char* data, SpikeDType d, int64_t n) {
  std::vector<uint8_t> out(static_cast<size_t>(packed_bytes(n)), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (value_at(data, d, i) != 0.0) out[static_cast<size_t>(i / 8)] |= static_cast<uint8_t>(1u << (i % 8));
  }
  return out;
}

void put_bits(unsigned char* p, size_t width, uint64_t bits) {
  for (size_t b = 0; b < width; ++b) p[b] = static_cast<unsigned char>(bits >> (8 * b));
}

// n random elements: zeros, ones, the sign bit alone (-0.0 for floats: no spike; the most
// negative integer: a spike), and random bit patterns (NaN, Inf, denormals, negatives).
std::vector<unsigned char> random_spikes(SpikeDType d, int64_t n, std::mt19937_64& rng) {
  const size_t w = spike_dtype_size(d);
  std::vector<unsigned char> out(static_cast<size_t>(n) * w + 16, 0);
  const uint64_t sign = uint64_t(1) << (8 * w - 1);
  const uint64_t one = d == SpikeDType::F16    ? 0x3c00
                       : d == SpikeDType::BF16 ? 0x3f80
                       : d == SpikeDType::F32  ? 0x3f800000
                       : d == SpikeDType::F64  ? uint64_t(0x3ff) << 52
                                               : 1;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = rng();
    uint64_t bits = 0;
    switch (r % 10) {
      case 0:
      case 1:
      case 2:
      case 3: bits = 0; break;
      case 4:
      case 5:
      case 6: bits = one; break;
      case 7: bits = sign; break;
      default: bits = rng(); break;
    }
    if (d == SpikeDType::Bool) bits = r % 3 == 0;  // torch bools are 0 / 1
    put_bits(out.data() + static_cast<size_t>(i) * w, w, bits);
  }
  return out;
}

class Compress : public ::testing::Test {
 protected:
  testing::SeededRng seed_;
  std::mt19937_64 rng_{static_cast<uint64_t>(seed_.integer(0, 1 << 30))};
};

TEST_F(Compress, EveryDTypeAndLengthMatchesTheScalarReference) {
  SCOPED_TRACE(seed_.trace());
  for (SpikeDType d : kAll) {
    for (int64_t n : kLengths) {
      SCOPED_TRACE(std::string(spike_dtype_name(d)) + " n=" + std::to_string(n));
      std::vector<unsigned char> x = random_spikes(d, n, rng_);
      const std::vector<uint8_t> expected = reference_pack(x.data(), d, n);
      std::vector<uint8_t> packed(expected.size() + 1, 0xa5);  // poisoned; the extra byte stays
      cpu::bit_spike_compress(SpikeView(x.data(), d, {n}),
                              SpikeView(packed.data(), SpikeDType::U8, {packed_bytes(n)}));
      EXPECT_EQ(packed[expected.size()], 0xa5) << "wrote past the packed bytes";
      packed.pop_back();
      ASSERT_EQ(packed, expected);
    }
  }
}

TEST_F(Compress, FloatSpecialValues) {
  const float values[] = {0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, 1e-45f, -1e-45f, 1.0f, -1.0f};
  uint8_t packed[2] = {0xff, 0xff};
  cpu::bit_spike_compress(SpikeView(const_cast<float*>(values), SpikeDType::F32, {10}),
                          SpikeView(packed, SpikeDType::U8, {2}));
  EXPECT_EQ(packed[0], 0b11111100);  // only +0 and -0 are no spikes
  EXPECT_EQ(packed[1], 0b00000011);  // padding bits zero
  const int8_t ints[] = {0, -128, 1, -1, 127, 0, 0, 0, 0};
  cpu::bit_spike_compress(SpikeView(const_cast<int8_t*>(ints), SpikeDType::I8, {9}),
                          SpikeView(packed, SpikeDType::U8, {2}));
  EXPECT_EQ(packed[0], 0b00011110);
  EXPECT_EQ(packed[1], 0);
}

TEST_F(Compress, DecompressWritesZeroOrOneInEveryDType) {
  SCOPED_TRACE(seed_.trace());
  for (SpikeDType d : kAll) {
    for (int64_t n :
         {int64_t(0), int64_t(1), int64_t(9), int64_t(33), int64_t(4097), int64_t(64 * 1024 + 13)}) {
      std::vector<unsigned char> x = random_spikes(d, n, rng_);
      std::vector<uint8_t> packed(static_cast<size_t>(packed_bytes(n)));
      cpu::bit_spike_compress(SpikeView(x.data(), d, {n}),
                              SpikeView(packed.data(), SpikeDType::U8, {packed_bytes(n)}));
      for (SpikeDType out : kAll) {
        SCOPED_TRACE(std::string(spike_dtype_name(d)) + " -> " + spike_dtype_name(out) +
                     " n=" + std::to_string(n));
        const size_t w = spike_dtype_size(out);
        std::vector<unsigned char> y(static_cast<size_t>(n) * w + w, 0xff);  // poisoned: NaN / -1
        cpu::bit_spike_decompress(SpikeView(packed.data(), SpikeDType::U8, {packed_bytes(n)}),
                                  SpikeView(y.data(), out, {n}));
        for (int64_t i = 0; i < n; ++i) {
          const double want = value_at(x.data(), d, i) != 0.0 ? 1.0 : 0.0;
          ASSERT_EQ(value_at(y.data(), out, i), want) << "element " << i;
        }
        for (size_t b = 0; b < w; ++b)
          ASSERT_EQ(y[static_cast<size_t>(n) * w + b], 0xff) << "wrote past the end";
      }
    }
  }
}

TEST_F(Compress, RoundTripOfSpikesIsExactAndPaddingBitsAreNotRead) {
  SCOPED_TRACE(seed_.trace());
  for (int64_t n : kLengths) {
    std::vector<float> s(static_cast<size_t>(n));
    for (float& v : s) v = static_cast<float>(rng_() % 2);
    std::vector<uint8_t> packed(static_cast<size_t>(packed_bytes(n)));
    cpu::bit_spike_compress(SpikeView(s.data(), SpikeDType::F32, {n}),
                            SpikeView(packed.data(), SpikeDType::U8, {packed_bytes(n)}));
    if (n % 8 != 0)
      packed.back() = static_cast<uint8_t>(packed.back() | (0xff << (n % 8)));  // garbage padding
    std::vector<float> back(static_cast<size_t>(n), NAN);
    cpu::bit_spike_decompress(SpikeView(packed.data(), SpikeDType::U8, {packed_bytes(n)}),
                              SpikeView(back.data(), SpikeDType::F32, {n}));
    ASSERT_EQ(back, s) << "n=" << n;
  }
}

TEST_F(Compress, ShapesThreadsAndMisalignedBuffersGiveTheSameBytes) {
  SCOPED_TRACE(seed_.trace());
  const int64_t n = 3 * 64 * 1024 + 77;  // 5 * 39337, as a [5, 39337] tensor
  for (SpikeDType d : {SpikeDType::F32, SpikeDType::F16, SpikeDType::U8, SpikeDType::F64}) {
    const size_t w = spike_dtype_size(d);
    std::vector<unsigned char> x = random_spikes(d, n + 1, rng_);  // element 0 skipped: misaligned
    unsigned char* data = x.data() + w;
    const std::vector<uint8_t> expected = reference_pack(data, d, n);
    for (int threads : {1, 2, 3, 0}) {
      std::vector<uint8_t> buffer(expected.size() + 1);
      uint8_t* packed = buffer.data() + 1;
      cpu::bit_spike_compress(SpikeView(data, d, {5, n / 5}),
                              SpikeView(packed, SpikeDType::U8, {packed_bytes(n)}), threads);
      ASSERT_EQ(std::vector<uint8_t>(packed, packed + expected.size()), expected) << "threads " << threads;
      std::vector<unsigned char> y(static_cast<size_t>(n + 1) * w);
      cpu::bit_spike_decompress(SpikeView(packed, SpikeDType::U8, {packed_bytes(n)}),
                                SpikeView(y.data() + w, d, {n}), threads);
      for (int64_t i = 0; i < n; i += 997) {
        ASSERT_EQ(value_at(y.data() + w, d, i), value_at(data, d, i) != 0.0 ? 1.0 : 0.0);
      }
    }
  }
}

void expect_argument_error(const std::string& argument, const std::function<void()>& call) {
  try {
    call();
    ADD_FAILURE() << "no ArgumentError for " << argument;
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
  }
}

TEST(CompressErrors, NameTheArgument) {
  std::vector<float> s(20, 1.0f);
  std::vector<uint8_t> p(8, 0);
  const SpikeView spikes(s.data(), SpikeDType::F32, {4, 5});
  expect_argument_error("packed",
                        [&] { cpu::bit_spike_compress(spikes, SpikeView(p.data(), SpikeDType::U8, {2})); });
  expect_argument_error("packed",
                        [&] { cpu::bit_spike_compress(spikes, SpikeView(p.data(), SpikeDType::I8, {3})); });
  expect_argument_error("packed", [&] {
    cpu::bit_spike_compress(spikes, SpikeView(p.data(), SpikeDType::U8, {1, 3}));
  });
  expect_argument_error("packed",
                        [&] { cpu::bit_spike_decompress(SpikeView(p.data(), SpikeDType::U8, {4}), spikes); });
  expect_argument_error("spikes", [&] {
    cpu::bit_spike_compress(SpikeView(s.data(), SpikeDType::F32, {-4, 5}),
                            SpikeView(p.data(), SpikeDType::U8, {3}));
  });
  expect_argument_error("spikes", [&] {
    cpu::bit_spike_compress(SpikeView(s.data(), SpikeDType::F32, {4, 5}, {1, 4}),
                            SpikeView(p.data(), SpikeDType::U8, {3}));
  });
  expect_argument_error("spikes", [&] {
    cpu::bit_spike_compress(SpikeView(nullptr, SpikeDType::F32, {4}),
                            SpikeView(p.data(), SpikeDType::U8, {1}));
  });
  expect_argument_error("spikes", [&] {
    cpu::bit_spike_compress(SpikeView(s.data(), static_cast<SpikeDType>(77), {4}),
                            SpikeView(p.data(), SpikeDType::U8, {1}));
  });
  expect_argument_error("threads",
                        [&] { cpu::bit_spike_compress(spikes, SpikeView(p.data(), SpikeDType::U8, {3}), -5); });
  expect_argument_error("threads",
                        [&] { cpu::bit_spike_decompress(SpikeView(p.data(), SpikeDType::U8, {3}), spikes, -1); });
  // Packed bytes inside the spike tensor: written over what is read.
  expect_argument_error("packed", [&] {
    cpu::bit_spike_compress(spikes, SpikeView(reinterpret_cast<uint8_t*>(s.data()) + 4, SpikeDType::U8, {3}));
  });
  expect_argument_error("spikes", [&] {
    cpu::bit_spike_decompress(SpikeView(reinterpret_cast<uint8_t*>(s.data()) + 4, SpikeDType::U8, {3}),
                              spikes);
  });
  // A float TensorView converts; a non-contiguous one is rejected.
  const TensorView view(s.data(), DType::F32, {5, 4});
  cpu::bit_spike_compress(view, SpikeView(p.data(), SpikeDType::U8, {3}));
  EXPECT_EQ(p[0], 0xff);
  EXPECT_EQ(p[2], 0x0f);
  expect_argument_error("spikes", [&] {
    cpu::bit_spike_compress(TensorView(s.data(), DType::F32, {5, 4}, {1, 5}),
                            SpikeView(p.data(), SpikeDType::U8, {3}));
  });
  // Empty tensors need no memory.
  cpu::bit_spike_compress(SpikeView(nullptr, SpikeDType::F32, {0, 3}),
                          SpikeView(nullptr, SpikeDType::U8, {0}));
  cpu::bit_spike_decompress(SpikeView(nullptr, SpikeDType::U8, {0}),
                            SpikeView(nullptr, SpikeDType::Bool, {3, 0}));
}

TEST(CompressSource, GridCoversEveryVector) {
  for (int w : {1, 2, 4, 8}) {
    for (int64_t n : kLengths) {
      const int64_t vectors = (n / 32) * 32 * w / 16;
      const int64_t blocks = codegen::bit_spike_blocks(n, w);
      EXPECT_GE(blocks * codegen::kBitSpikeBlockSize * codegen::kBitSpikeVectorsPerThread, vectors);
      EXPECT_EQ(blocks == 0, n == 0);
    }
  }
}

// The shipped kernels compile for the GPUs the project targets.
TEST(CodegenCompile, BitSpikeKernels) {
  REQUIRE_NVRTC();
  for (const char* arch : {"sm_90", "sm_80"}) {
    const std::string cubin =
        runtime::compile_for_arch(codegen::bit_spike_source(), codegen::bit_spike_compress_entry(1), arch);
    EXPECT_GT(cubin.size(), 1000u) << arch;
    for (int w : {1, 2, 4, 8}) {
      EXPECT_NE(cubin.find(codegen::bit_spike_compress_entry(w)), std::string::npos) << arch << " w" << w;
      EXPECT_NE(cubin.find(codegen::bit_spike_decompress_entry(w)), std::string::npos) << arch << " w" << w;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// CUDA: the same bytes as the CPU kernels.

using runtime::check_cuda;
using runtime::CUdeviceptr;
using runtime::driver;

struct DeviceBytes {
  CUdeviceptr ptr = 0;
  explicit DeviceBytes(size_t n) { check_cuda(driver().cuMemAlloc(&ptr, n > 0 ? n : 1), "cuMemAlloc"); }
  ~DeviceBytes() { driver().cuMemFree(ptr); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
};

class CudaCompress : public Compress {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::available(&why)) {
      if (testing::env_says_one("SPIKEJIT_REQUIRE_CUDA"))
        FAIL() << "SPIKEJIT_REQUIRE_CUDA=1 but CUDA is not available: " << why;
      GTEST_SKIP() << "no CUDA: " << why;
    }
    guard_ = std::make_unique<runtime::ContextGuard>(0);
    check_cuda(driver().cuStreamCreate(&stream_, 0), "cuStreamCreate");
  }
  void TearDown() override {
    if (stream_) driver().cuStreamDestroy(stream_);
    guard_.reset();
  }

  // Compresses on the GPU with the spikes `offset` elements and the packed bytes `offset` bytes
  // into their allocations (offset 1: misaligned), checks the bytes against the CPU's, then
  // decompresses into `out` and checks every element against the CPU's decompression.
  void check_case(SpikeDType d, int64_t n, int64_t offset, SpikeDType out) {
    SCOPED_TRACE(std::string(spike_dtype_name(d)) + " -> " + spike_dtype_name(out) +
                 " n=" + std::to_string(n) + " offset=" + std::to_string(offset));
    const size_t w = spike_dtype_size(d), wo = spike_dtype_size(out);
    const size_t bytes = static_cast<size_t>(packed_bytes(n));
    std::vector<unsigned char> x = random_spikes(d, n, rng_);
    std::vector<uint8_t> cpu_packed(bytes);
    cpu::bit_spike_compress(SpikeView(x.data(), d, {n}),
                            SpikeView(cpu_packed.data(), SpikeDType::U8, {packed_bytes(n)}));
    std::vector<unsigned char> cpu_y(static_cast<size_t>(n) * wo);
    cpu::bit_spike_decompress(SpikeView(cpu_packed.data(), SpikeDType::U8, {packed_bytes(n)}),
                              SpikeView(cpu_y.data(), out, {n}));

    const size_t off = static_cast<size_t>(offset);
    DeviceBytes dx(static_cast<size_t>(n) * w + off * w), dp(bytes + off + 4),
        dy(static_cast<size_t>(n) * wo + off * wo + 16);
    const runtime::DriverApi& api = driver();
    check_cuda(api.cuMemcpyHtoD(dx.ptr + off * w, x.data(), static_cast<size_t>(n) * w), "cuMemcpyHtoD");
    check_cuda(api.cuMemsetD8(dp.ptr, 0xa5, bytes + off + 4), "cuMemsetD8");  // poison
    check_cuda(api.cuMemsetD8(dy.ptr, 0xff, static_cast<size_t>(n) * wo + off * wo + 16), "cuMemsetD8");
    void* spikes = reinterpret_cast<void*>(dx.ptr + off * w);
    void* packed = reinterpret_cast<void*>(dp.ptr + off);
    void* y = reinterpret_cast<void*>(dy.ptr + off * wo);
    cuda::bit_spike_compress(SpikeView(spikes, d, {n}), SpikeView(packed, SpikeDType::U8, {packed_bytes(n)}),
                             stream_, 0);
    cuda::bit_spike_decompress(SpikeView(packed, SpikeDType::U8, {packed_bytes(n)}), SpikeView(y, out, {n}),
                               stream_, 0);
    check_cuda(api.cuStreamSynchronize(stream_), "cuStreamSynchronize");

    std::vector<uint8_t> gpu_packed(bytes + off + 4);
    check_cuda(api.cuMemcpyDtoH(gpu_packed.data(), dp.ptr, gpu_packed.size()), "cuMemcpyDtoH");
    for (size_t i = 0; i < off; ++i) ASSERT_EQ(gpu_packed[i], 0xa5) << "wrote before the packed bytes";
    for (size_t i = 0; i < 4; ++i)
      ASSERT_EQ(gpu_packed[off + bytes + i], 0xa5) << "wrote past the packed bytes";
    ASSERT_EQ(std::vector<uint8_t>(gpu_packed.begin() + static_cast<long>(off),
                                   gpu_packed.begin() + static_cast<long>(off + bytes)),
              cpu_packed);
    std::vector<unsigned char> gpu_y(static_cast<size_t>(n) * wo + off * wo + 16);
    check_cuda(api.cuMemcpyDtoH(gpu_y.data(), dy.ptr, gpu_y.size()), "cuMemcpyDtoH");
    for (size_t i = 0; i < 16; ++i)
      ASSERT_EQ(gpu_y[off * wo + static_cast<size_t>(n) * wo + i], 0xff) << "wrote past the end";
    ASSERT_TRUE(std::equal(cpu_y.begin(), cpu_y.end(), gpu_y.begin() + static_cast<long>(off * wo)));
  }

  std::unique_ptr<runtime::ContextGuard> guard_;
  runtime::CUstream stream_ = nullptr;
};

TEST_F(CudaCompress, EveryDTypeAndLengthEqualsTheCpu) {
  SCOPED_TRACE(seed_.trace());
  for (SpikeDType d : kAll) {
    for (int64_t n : kLengths) check_case(d, n, 0, d);
  }
  check_case(SpikeDType::F32, (int64_t(1) << 26) + 5, 0, SpikeDType::F32);  // 64M spikes
}

TEST_F(CudaCompress, MisalignedBuffersAndEveryOutputDType) {
  SCOPED_TRACE(seed_.trace());
  for (SpikeDType d : kAll) {
    for (SpikeDType out : kAll) check_case(d, 4097 + 32 * static_cast<int64_t>(rng_() % 64), 1, out);
    check_case(d, (1 << 20) + 3, 1, d);
  }
}

TEST_F(CudaCompress, RejectsBadArgumentsBeforeLaunching) {
  DeviceBytes a(64), b(8);
  expect_argument_error("packed", [&] {
    cuda::bit_spike_compress(SpikeView(reinterpret_cast<void*>(a.ptr), SpikeDType::F32, {16}),
                             SpikeView(reinterpret_cast<void*>(b.ptr), SpikeDType::U8, {3}), stream_, 0);
  });
  expect_argument_error("device", [&] {
    cuda::bit_spike_compress(SpikeView(reinterpret_cast<void*>(a.ptr), SpikeDType::F32, {16}),
                             SpikeView(reinterpret_cast<void*>(b.ptr), SpikeDType::U8, {2}), stream_,
                             1 << 20);
  });
}

}  // namespace
}  // namespace spikejit
