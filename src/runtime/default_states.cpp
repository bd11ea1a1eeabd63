// Constant-valued device buffers for default initial states.
#include "runtime/default_states.h"

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "spikejit/error.h"

namespace spikejit::runtime {
namespace {

constexpr int64_t kMinElements = 1 << 16;

struct Buffer {
  CUdeviceptr pointer = 0;
  int64_t count = 0;
};

}  // namespace

uint32_t storage_bits(DType storage, double value) {
  const float f = static_cast<float>(value);
  switch (storage) {
    case DType::F16: return float_to_half(f);
    case DType::BF16: return float_to_bfloat16(f);
    case DType::F32:
    case DType::F64: break;
  }
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

CUdeviceptr constant_buffer(CUcontext context, DType storage, double value, int64_t count, CUstream stream) {
  static std::mutex mutex;
  static std::map<std::tuple<CUcontext, DType, uint32_t>, Buffer> buffers;
  static std::vector<CUdeviceptr> outgrown;
  const uint32_t bits = storage_bits(storage, value);
  std::lock_guard<std::mutex> lock(mutex);
  Buffer& buffer = buffers[{context, storage, bits}];
  if (buffer.count >= count) return buffer.pointer;
  if (stream_is_capturing(stream)) {
    throw ArgumentError("initial_states",
                        "tensors while the stream captures a CUDA graph (or an uncaptured call of at least " +
                            std::to_string(count) + " neurons before it)",
                        "none: the default initial state " + std::to_string(value) +
                            " needs a device buffer, which cannot be allocated during a capture");
  }
  int64_t size = kMinElements;
  while (size < count) size *= 2;
  const DriverApi& api = driver();
  CUdeviceptr pointer = 0;
  const size_t element = storage == DType::F32 ? 4 : 2;
  const std::string what = "default initial state buffer of " + std::to_string(size) + " elements";
  check_cuda(api.cuMemAlloc(&pointer, static_cast<size_t>(size) * element), "cuMemAlloc", what);
  CUresult filled = element == 4
      ? api.cuMemsetD32Async(pointer, bits, static_cast<size_t>(size), nullptr)
      : api.cuMemsetD16Async(pointer, static_cast<unsigned short>(bits), static_cast<size_t>(size), nullptr);
  if (filled == kCudaSuccess) filled = api.cuStreamSynchronize(nullptr);
  if (filled != kCudaSuccess) {
    api.cuMemFree(pointer);
    check_cuda(filled, "filling", what);
  }
  if (buffer.pointer) outgrown.push_back(buffer.pointer);
  buffer = {pointer, size};
  return pointer;
}

}  // namespace spikejit::runtime
