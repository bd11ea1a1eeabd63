// SpikeDType helpers, SpikeView queries and the argument checks of compress / decompress.
#include <limits>
#include <string>

#include "spikejit/compress.h"
#include "spikejit/error.h"

namespace spikejit {

size_t spike_dtype_size(SpikeDType d) {
  switch (d) {
    case SpikeDType::Bool:
    case SpikeDType::U8:
    case SpikeDType::I8: return 1;
    case SpikeDType::I16:
    case SpikeDType::F16:
    case SpikeDType::BF16: return 2;
    case SpikeDType::I32:
    case SpikeDType::F32: return 4;
    case SpikeDType::I64:
    case SpikeDType::F64: return 8;
  }
  return 0;
}

const char* spike_dtype_name(SpikeDType d) {
  switch (d) {
    case SpikeDType::Bool: return "bool";
    case SpikeDType::U8: return "uint8";
    case SpikeDType::I8: return "int8";
    case SpikeDType::I16: return "int16";
    case SpikeDType::I32: return "int32";
    case SpikeDType::I64: return "int64";
    case SpikeDType::F16: return "float16";
    case SpikeDType::BF16: return "bfloat16";
    case SpikeDType::F32: return "float32";
    case SpikeDType::F64: return "float64";
  }
  return "unknown dtype";
}

SpikeDType spike_dtype(DType d) {
  switch (d) {
    case DType::F32: return SpikeDType::F32;
    case DType::F64: return SpikeDType::F64;
    case DType::F16: return SpikeDType::F16;
    case DType::BF16: return SpikeDType::BF16;
  }
  // An out-of-range code stays out of range, so that validation rejects it by its number.
  return static_cast<SpikeDType>(kSpikeDTypeCount + static_cast<int>(d));
}

int64_t SpikeView::numel() const { return shape_numel(shape); }
bool SpikeView::is_contiguous() const { return is_contiguous_layout(shape, strides); }
std::string SpikeView::describe() const { return describe_layout(spike_dtype_name(dtype), shape, strides); }

int64_t packed_bytes(int64_t numel) {
  if (numel < 0) throw ArgumentError("numel", "a count >= 0", std::to_string(numel));
  return numel / 8 + (numel % 8 != 0);
}

namespace {

bool known(SpikeDType d) { return static_cast<int>(d) < kSpikeDTypeCount; }

// Checks one view; returns its size in bytes.
int64_t checked_bytes(const char* name, const SpikeView& v) {
  if (!known(v.dtype)) {
    throw ArgumentError(name, "a dtype of spikejit::SpikeDType",
                        "dtype code " + std::to_string(static_cast<int>(v.dtype)));
  }
  const int64_t max = std::numeric_limits<int64_t>::max();
  const int64_t size = static_cast<int64_t>(spike_dtype_size(v.dtype));
  int64_t n = 1;
  for (int64_t d : v.shape) {
    if (d < 0) throw ArgumentError(name, "dimensions >= 0", v.describe());
    if (d != 0 && n > max / size / d)
      throw ArgumentError(name, "a size in bytes that fits in int64", v.describe());
    n *= d;
  }
  if (!v.is_contiguous()) throw ArgumentError(name, "a contiguous tensor", v.describe());
  if (n != 0 && v.data == nullptr) throw ArgumentError(name, "a non-null data pointer", "a null pointer");
  return n * size;
}

void check_pair(const SpikeView& spikes, const SpikeView& packed, bool packed_written) {
  const int64_t spike_bytes = checked_bytes("spikes", spikes);
  const int64_t packed_size = checked_bytes("packed", packed);
  const int64_t n = spikes.numel();
  const std::vector<int64_t> expected{packed_bytes(n)};
  if (packed.dtype != SpikeDType::U8 || packed.shape != expected) {
    throw ArgumentError("packed",
                        "uint8[" + std::to_string(expected[0]) + "] (ceil(n / 8) bytes for the n = " +
                            std::to_string(n) + " spikes of " + spikes.describe() + ")",
                        packed.describe());
  }
  const uintptr_t s = reinterpret_cast<uintptr_t>(spikes.data);
  const uintptr_t p = reinterpret_cast<uintptr_t>(packed.data);
  if (spike_bytes > 0 && packed_size > 0 && s < p + static_cast<uintptr_t>(packed_size) &&
      p < s + static_cast<uintptr_t>(spike_bytes)) {
    throw ArgumentError(packed_written ? "packed" : "spikes", "memory that overlaps no other buffer",
                        std::string("memory that overlaps ") + (packed_written ? "spikes" : "packed"));
  }
}

}  // namespace

void validate_compress(const SpikeView& spikes, const SpikeView& packed) { check_pair(spikes, packed, true); }

void validate_decompress(const SpikeView& packed, const SpikeView& spikes) {
  check_pair(spikes, packed, false);
}

}  // namespace spikejit
