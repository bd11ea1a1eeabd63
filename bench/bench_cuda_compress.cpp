// GPU benchmark of bit-spike compression: compress and decompress of 64M spikes per dtype (the
// float32 and float16 spikes of the issue, and bool/uint8 and float64 for the other widths),
// timed with CUDA events on one stream. Reports the median time, the bytes moved (n * element
// size + n / 8) as GB/s and as a fraction of the device copy bandwidth measured in the same run.
//
//   bench_cuda_compress [--csv FILE]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "cuda_timing.h"
#include "runtime/driver_api.h"
#include "spikejit/compress.h"
#include "spikejit/cuda.h"
#include "spikejit/error.h"

using namespace spikejit;
using runtime::check_cuda;
using runtime::CUdeviceptr;
using runtime::driver;

namespace {

using bench::DeviceBuffer;
using bench::median_ms;
using bench::print_device_and_bandwidth;

struct Result {
  std::string dtype, op;
  int64_t n;
  double ms, bytes, fraction;
};

// Spikes with about one in three set, written on the host once (the kernels' speed does not
// depend on the values, but the bytes are then checked to be what the CPU writes).
std::vector<Result> run_dtype(SpikeDType dtype, int64_t n, double bandwidth) {
  const size_t width = spike_dtype_size(dtype);
  DeviceBuffer spikes(size_t(n) * width), packed(size_t(packed_bytes(n))), back(size_t(n) * width);
  std::vector<uint8_t> pattern(size_t(packed_bytes(n)));
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  check_cuda(driver().cuMemcpyHtoD(packed.ptr, pattern.data(), pattern.size()), "cuMemcpyHtoD");
  const SpikeView s(spikes.data(), dtype, {n}), p(packed.data(), SpikeDType::U8, {packed_bytes(n)});
  const SpikeView b(back.data(), dtype, {n});
  cuda::bit_spike_decompress(p, s, nullptr, 0);  // spikes from the pattern
  check_cuda(driver().cuMemsetD8(packed.ptr, 0, pattern.size()), "cuMemsetD8");

  const int reps = 30;
  const double compress_ms = median_ms(reps, [&] { cuda::bit_spike_compress(s, p, nullptr, 0); });
  const double decompress_ms = median_ms(reps, [&] { cuda::bit_spike_decompress(p, b, nullptr, 0); });
  std::vector<uint8_t> again(pattern.size());
  check_cuda(driver().cuMemcpyDtoH(again.data(), packed.ptr, again.size()), "cuMemcpyDtoH");
  if (n % 8 == 0 && again != pattern) throw Error("compress did not reproduce the packed pattern");

  const double bytes = double(n) * double(width) + double(packed_bytes(n));
  auto fraction = [&](double ms) { return bytes / (ms * 1e-3) / bandwidth; };
  const std::string name = spike_dtype_name(dtype);
  return {{name, "compress", n, compress_ms, bytes, fraction(compress_ms)},
          {name, "decompress", n, decompress_ms, bytes, fraction(decompress_ms)}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string csv;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
      csv = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_cuda_compress [--csv FILE]\n");
      return 2;
    }
  }
  std::string why;
  if (!cuda::available(&why)) {
    std::fprintf(stderr, "bench_cuda_compress: CUDA is not available: %s\n", why.c_str());
    return 1;
  }
  try {
    runtime::ContextGuard guard(0);
    const double bandwidth = print_device_and_bandwidth();
    std::printf(
        "| spikes | op | n | ms | GB/s (n x size + n/8 bytes) | %% of copy BW "
        "|\n|---|---|---|---|---|---|\n");
    const int64_t n = int64_t(64) << 20;
    std::vector<Result> all;
    for (SpikeDType d : {SpikeDType::F32, SpikeDType::F16, SpikeDType::U8, SpikeDType::F64}) {
      for (const Result& r : run_dtype(d, n, bandwidth)) {
        all.push_back(r);
        std::printf("| %s | %s | %lld | %.4f | %.0f | %.1f |\n", r.dtype.c_str(), r.op.c_str(),
                    (long long)r.n, r.ms, r.bytes / (r.ms * 1e-3) * 1e-9, 100.0 * r.fraction);
        std::fflush(stdout);
      }
    }
    if (!csv.empty()) {
      std::ofstream out(csv);
      out << "dtype,op,n,ms,bytes,fraction_of_copy_bw\n";
      for (const Result& r : all) {
        out << r.dtype << ',' << r.op << ',' << r.n << ',' << r.ms << ',' << r.bytes << ',' << r.fraction
            << '\n';
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_compress: %s\n", e.what());
    return 1;
  }
  return 0;
}
