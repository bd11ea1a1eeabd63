// What the CUDA benchmarks share: device buffers, CUDA-event timing and the copy bandwidth they
// report against. Through spikejit's own driver API (no link-time CUDA).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <vector>

#include "runtime/driver_api.h"

namespace spikejit::bench {

// Device memory filled with one byte value (0x3c: finite, small floats in every dtype).
struct DeviceBuffer {
  runtime::CUdeviceptr ptr = 0;
  explicit DeviceBuffer(size_t n, unsigned char fill = 0x3c) {
    runtime::check_cuda(runtime::driver().cuMemAlloc(&ptr, std::max<size_t>(n, 1)), "cuMemAlloc");
    runtime::check_cuda(runtime::driver().cuMemsetD8(ptr, fill, std::max<size_t>(n, 1)), "cuMemsetD8");
  }
  ~DeviceBuffer() { runtime::driver().cuMemFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return reinterpret_cast<void*>(ptr); }
};

// Median milliseconds of `body` over `reps` runs on the default stream, after warm-up.
template <class Body>
double median_ms(int reps, Body body) {
  const runtime::DriverApi& api = runtime::driver();
  runtime::CUevent start = nullptr, stop = nullptr;
  runtime::check_cuda(api.cuEventCreate(&start, 0), "cuEventCreate");
  runtime::check_cuda(api.cuEventCreate(&stop, 0), "cuEventCreate");
  for (int i = 0; i < 3; ++i) body();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    runtime::check_cuda(api.cuEventRecord(start, nullptr), "cuEventRecord");
    body();
    runtime::check_cuda(api.cuEventRecord(stop, nullptr), "cuEventRecord");
    runtime::check_cuda(api.cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    runtime::check_cuda(api.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    times.push_back(ms);
  }
  api.cuEventDestroy(start);
  api.cuEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Device copy bandwidth (bytes read + written per second) of a device-to-device copy that moves
// `moved` bytes in all: 1 GiB copied for the headline figure, or the size of a workload for a
// like-for-like figure (a small copy pays the same launch and ramp costs).
inline double copy_bandwidth(size_t moved = size_t(2) << 30) {
  const size_t bytes = moved / 2;
  DeviceBuffer a(bytes), b(bytes);
  const double ms = median_ms(20, [&] {
    runtime::check_cuda(runtime::driver().cuMemcpyDtoDAsync(b.ptr, a.ptr, bytes, nullptr), "cuMemcpyDtoDAsync");
  });
  return 2.0 * double(bytes) / (ms * 1e-3);
}

// Prints the header line every CUDA benchmark starts with (device 0's name and the headline copy
// bandwidth); returns that bandwidth.
inline double print_device_and_bandwidth() {
  char name[256] = {0};
  runtime::CUdevice dev = 0;
  runtime::check_cuda(runtime::driver().cuDeviceGet(&dev, 0), "cuDeviceGet");
  runtime::check_cuda(runtime::driver().cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
  const double bandwidth = copy_bandwidth();
  std::printf("device: %s; copy bandwidth (1 GiB device copy, read + write): %.2f TB/s\n\n", name,
              bandwidth * 1e-12);
  return bandwidth;
}

}  // namespace spikejit::bench
