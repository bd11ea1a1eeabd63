// Bit-spike compression on caller-owned memory. Each tensor is described from Python as
// (data_ptr: int, spike dtype code: int, shape: list[int]) of a contiguous tensor; the codes
// follow spikejit::SpikeDType: 0 bool, 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float16,
// 7 bfloat16, 8 float32, 9 float64. The GIL is released while a kernel runs.
#include "spikejit/compress.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.h"
#include "spikejit/error.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace spikejit::python {
namespace {

using Buffer = std::tuple<uintptr_t, int, std::vector<int64_t>>;

SpikeView to_view(const Buffer& b, const char* argument) {
  const auto& [data, code, shape] = b;
  if (code < 0 || code >= kSpikeDTypeCount) {
    throw ArgumentError(argument, "a spike dtype code 0.." + std::to_string(kSpikeDTypeCount - 1),
                        std::to_string(code));
  }
  return SpikeView(reinterpret_cast<void*>(data), static_cast<SpikeDType>(code), shape);
}

void check_threads(int threads) {
  if (threads < 0)
    throw ArgumentError("threads", "a count >= 0 (0: all hardware threads)", std::to_string(threads));
}

}  // namespace

void bind_compress(nb::module_& m) {
  m.def(
      "cpu_bit_spike_compress",
      [](const Buffer& spikes, const Buffer& packed, int threads) {
        const SpikeView s = to_view(spikes, "spikes"), p = to_view(packed, "packed");
        check_threads(threads);
        nb::gil_scoped_release release;
        cpu::bit_spike_compress(s, p, threads);
      },
      "spikes"_a, "packed"_a, "threads"_a = 0, "Spikes -> packed uint8[ceil(n / 8)] (CPU buffers).");
  m.def(
      "cpu_bit_spike_decompress",
      [](const Buffer& packed, const Buffer& spikes, int threads) {
        const SpikeView p = to_view(packed, "packed"), s = to_view(spikes, "spikes");
        check_threads(threads);
        nb::gil_scoped_release release;
        cpu::bit_spike_decompress(p, s, threads);
      },
      "packed"_a, "spikes"_a, "threads"_a = 0,
      "Packed bits -> 0 / 1 spikes of the dtype of `spikes` (CPU buffers).");
  m.def(
      "cuda_bit_spike_compress",
      [](const Buffer& spikes, const Buffer& packed, uintptr_t stream, int device) {
        const SpikeView s = to_view(spikes, "spikes"), p = to_view(packed, "packed");
        nb::gil_scoped_release release;
        cuda::bit_spike_compress(s, p, reinterpret_cast<void*>(stream), device);
      },
      "spikes"_a, "packed"_a, "stream"_a, "device"_a,
      "The same on device buffers, launched on `stream` (a CUstream).");
  m.def(
      "cuda_bit_spike_decompress",
      [](const Buffer& packed, const Buffer& spikes, uintptr_t stream, int device) {
        const SpikeView p = to_view(packed, "packed"), s = to_view(spikes, "spikes");
        nb::gil_scoped_release release;
        cuda::bit_spike_decompress(p, s, reinterpret_cast<void*>(stream), device);
      },
      "packed"_a, "spikes"_a, "stream"_a, "device"_a,
      "The same on device buffers, launched on `stream` (a CUstream).");
}

}  // namespace spikejit::python
