// Bit-packed spikes: 8 spikes a byte, for spike tensors kept (for backward) or sent at 1/8 to
// 1/64 of their size.
//
// Format: the spike tensor is flattened row-major (n elements); element 8j+i is bit i of byte j
// (LSB first), and the last byte's unused high bits are zero. No shape is stored: decompress is
// given the spike tensor to write, whose shape says n. A value counts as a spike when it is
// nonzero: for floating types every value but +0.0 and -0.0 (NaN and Inf are spikes), for integer
// and bool types every value but 0. The CPU and the CUDA kernels write identical bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "spikejit/tensor.h"

namespace spikejit {

// Element types of spike tensors. (`DType` holds the neuron storage types only; spikes are often
// kept as uint8, bool or integers too.)
enum class SpikeDType : uint8_t { Bool, U8, I8, I16, I32, I64, F16, BF16, F32, F64 };
constexpr int kSpikeDTypeCount = 10;

size_t spike_dtype_size(SpikeDType d);
const char* spike_dtype_name(SpikeDType d);  // PyTorch's names: "bool", "uint8", ..., "float64"
SpikeDType spike_dtype(DType d);             // the same type as a SpikeDType

// A contiguous tensor in caller memory (host pointers for cpu::, device pointers for cuda::):
// spikes of any shape, or packed bits (SpikeDType::U8 of shape [ceil(n / 8)]). `strides` are in
// elements, empty meaning contiguous; a view that is not contiguous is rejected.
struct SpikeView {
  void* data = nullptr;
  SpikeDType dtype = SpikeDType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;

  SpikeView() = default;
  SpikeView(void* d, SpikeDType t, std::vector<int64_t> s, std::vector<int64_t> st = {})
      : data(d), dtype(t), shape(std::move(s)), strides(std::move(st)) {}
  SpikeView(const TensorView& v)  // NOLINT: a float tensor of the neuron API, as it is
      : data(v.data), dtype(spike_dtype(v.dtype)), shape(v.shape), strides(v.strides) {}

  int64_t numel() const;
  bool is_contiguous() const;
  std::string describe() const;  // "float32[4, 16]"
};

// Bytes of the packed form of n spikes: ceil(n / 8).
int64_t packed_bytes(int64_t numel);

// Argument checks shared by both backends (ArgumentError naming `spikes` or `packed`): shapes
// with dimensions >= 0, contiguous views, packed of dtype uint8 and shape [ceil(n / 8)], non-null
// data when there is anything to read or write, and no overlap between the two buffers.
void validate_compress(const SpikeView& spikes, const SpikeView& packed);
void validate_decompress(const SpikeView& packed, const SpikeView& spikes);

namespace cpu {

// spikes (n elements, any dtype) -> packed (uint8 [ceil(n / 8)], written). `threads`: 0 uses
// every CPU this process may run on.
void bit_spike_compress(const SpikeView& spikes, const SpikeView& packed, int threads = 0);

// packed (uint8 [ceil(n / 8)]) -> spikes (written: 1 where the bit is set, else 0, in the dtype
// of `spikes`, whose shape gives n). The padding bits of the last byte are not read.
void bit_spike_decompress(const SpikeView& packed, const SpikeView& spikes, int threads = 0);

}  // namespace cpu

namespace cuda {

// The same on device memory, launched on `stream` (a CUstream; nullptr: the legacy default
// stream) in the context that `device` uses (see cuda::forward). No synchronisation.
void bit_spike_compress(const SpikeView& spikes, const SpikeView& packed, void* stream, int device);
void bit_spike_decompress(const SpikeView& packed, const SpikeView& spikes, void* stream, int device);

}  // namespace cuda

}  // namespace spikejit
