// cuda::bit_spike_compress / bit_spike_decompress: validate, get the bit-spike module of the
// context (memory cache in front of the disk cache and NVRTC), launch on the caller's stream.
// No synchronisation and no host<->device copies.
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "codegen/compress_source.h"
#include "common/spike_bits.h"
#include "runtime/driver_api.h"
#include "runtime/kernel_cache.h"
#include "runtime/nvrtc_compiler.h"
#include "spikejit/codegen.h"
#include "spikejit/compress.h"
#include "spikejit/error.h"
#include "spikejit/runtime.h"

namespace spikejit::cuda {
namespace {

using runtime::CUcontext;
using runtime::CUfunction;

constexpr int kWidths = 4;  // 1, 2, 4, 8 bytes

int width_index(size_t width) { return width == 1 ? 0 : width == 2 ? 1 : width == 4 ? 2 : 3; }

// The loaded module of one context: compress[i] / decompress[i] for width 1 << i.
struct BitSpikeKernels {
  runtime::CUmodule module = nullptr;
  CUfunction compress[kWidths] = {};
  CUfunction decompress[kWidths] = {};
};

std::string target_of(int device) {
  const runtime::DriverApi& api = runtime::driver();
  runtime::CUdevice handle = 0;
  runtime::check_cuda(api.cuDeviceGet(&handle, device), "cuDeviceGet");
  int major = 0, minor = 0;
  runtime::check_cuda(api.cuDeviceGetAttribute(&major, runtime::kAttrComputeCapabilityMajor, handle),
                      "cuDeviceGetAttribute");
  runtime::check_cuda(api.cuDeviceGetAttribute(&minor, runtime::kAttrComputeCapabilityMinor, handle),
                      "cuDeviceGetAttribute");
  return runtime::target_for_device(major, minor);
}

CUfunction function_of(runtime::CUmodule module, const std::string& entry, const std::string& label) {
  const runtime::DriverApi& api = runtime::driver();
  CUfunction f = nullptr;
  const runtime::CUresult found = api.cuModuleGetFunction(&f, module, entry.c_str());
  if (found != runtime::kCudaSuccess) {
    throw runtime::CudaError("cuModuleGetFunction(" + entry + ") failed for " + label + ": " +
                                 runtime::describe_result(api, found),
                             found);
  }
  return f;
}

std::shared_ptr<const BitSpikeKernels> load(int device) {
  codegen::KernelSource source;
  source.entry = codegen::bit_spike_compress_entry(1);
  source.source = codegen::bit_spike_source();
  const std::string target = target_of(device);
  const std::string label = "bit-spike compression kernels (" + target + ")";
  const std::string binary = runtime::binary_for(source, target, label);
  const runtime::DriverApi& api = runtime::driver();
  auto kernels = std::make_shared<BitSpikeKernels>();
  const runtime::CUresult loaded = api.cuModuleLoadData(&kernels->module, binary.data());
  if (loaded != runtime::kCudaSuccess) {
    throw runtime::CudaError(
        "cuModuleLoadData failed for " + label + ": " + runtime::describe_result(api, loaded), loaded);
  }
  try {
    for (int i = 0; i < kWidths; ++i) {
      kernels->compress[i] = function_of(kernels->module, codegen::bit_spike_compress_entry(1 << i), label);
      kernels->decompress[i] =
          function_of(kernels->module, codegen::bit_spike_decompress_entry(1 << i), label);
    }
  } catch (...) {
    api.cuModuleUnload(kernels->module);
    throw;
  }
  return kernels;
}

// One module per (device, context), loaded once and kept for the life of the process. The lock
// is held while a miss compiles: the first call of a process waits for it, later calls find it.
std::shared_ptr<const BitSpikeKernels> kernels_for(int device, CUcontext context) {
  static std::mutex mutex;
  static std::map<std::pair<int, CUcontext>, std::shared_ptr<const BitSpikeKernels>> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<const BitSpikeKernels>& slot = loaded[{device, context}];
  if (!slot) slot = load(device);
  return slot;
}

void launch(CUfunction function, int64_t blocks, void* stream, const void* in, void* out, int64_t n,
            uint64_t bits, const char* what, SpikeDType dtype) {
  if (blocks > 0x7fffffff) {
    throw ArgumentError("spikes", "at most 2^31 - 1 blocks per launch",
                        std::to_string(n) + " " + spike_dtype_name(dtype) + " spikes (" +
                            std::to_string(blocks) + " blocks)");
  }
  long long count = n;
  unsigned long long pattern = bits;
  void* params[] = {&in, &out, &count, &pattern};
  const runtime::CUresult result = runtime::driver().cuLaunchKernel(
      function, static_cast<unsigned>(blocks), 1, 1, codegen::kBitSpikeBlockSize, 1, 1, 0,
      static_cast<runtime::CUstream>(stream), params, nullptr);
  if (result != runtime::kCudaSuccess) {
    runtime::check_cuda(
        result, "cuLaunchKernel",
        std::string(what) + " of " + std::to_string(n) + " " + spike_dtype_name(dtype) + " spikes");
  }
}

}  // namespace

void bit_spike_compress(const SpikeView& spikes, const SpikeView& packed, void* stream, int device) {
  validate_compress(spikes, packed);
  const int64_t n = spikes.numel();
  if (n == 0) return;
  runtime::ContextGuard guard(device);
  const size_t width = spike_dtype_size(spikes.dtype);
  std::shared_ptr<const BitSpikeKernels> kernels = kernels_for(device, guard.context());
  launch(kernels->compress[width_index(width)], codegen::bit_spike_blocks(n, static_cast<int>(width)), stream,
         spikes.data, packed.data, n, detail::spike_value_mask(spikes.dtype), "bit_spike_compress",
         spikes.dtype);
}

void bit_spike_decompress(const SpikeView& packed, const SpikeView& spikes, void* stream, int device) {
  validate_decompress(packed, spikes);
  const int64_t n = spikes.numel();
  if (n == 0) return;
  runtime::ContextGuard guard(device);
  const size_t width = spike_dtype_size(spikes.dtype);
  std::shared_ptr<const BitSpikeKernels> kernels = kernels_for(device, guard.context());
  launch(kernels->decompress[width_index(width)], codegen::bit_spike_blocks(n, static_cast<int>(width)),
         stream, packed.data, spikes.data, n, detail::spike_one_bits(spikes.dtype), "bit_spike_decompress",
         spikes.dtype);
}

}  // namespace spikejit::cuda
