// What a spike is, bit by bit, for each SpikeDType: shared by the CPU kernels and the CUDA launch
// (which passes these values to the generated kernels).
#pragma once

#include <cstdint>

#include "spikejit/compress.h"

namespace spikejit::detail {

// An element (read as an unsigned integer of its width) is a spike when (bits & mask) != 0:
// floating types ignore the sign bit, so -0.0 is no spike and NaN is one.
inline uint64_t spike_value_mask(SpikeDType d) {
  switch (d) {
    case SpikeDType::Bool:
    case SpikeDType::U8:
    case SpikeDType::I8: return 0xffu;
    case SpikeDType::I16: return 0xffffu;
    case SpikeDType::F16:
    case SpikeDType::BF16: return 0x7fffu;
    case SpikeDType::I32: return 0xffffffffu;
    case SpikeDType::F32: return 0x7fffffffu;
    case SpikeDType::I64: return ~uint64_t(0);
    case SpikeDType::F64: return ~uint64_t(0) >> 1;
  }
  return 0;
}

// The bits of the value 1 (what decompress writes for a set bit).
inline uint64_t spike_one_bits(SpikeDType d) {
  switch (d) {
    case SpikeDType::Bool:
    case SpikeDType::U8:
    case SpikeDType::I8:
    case SpikeDType::I16:
    case SpikeDType::I32:
    case SpikeDType::I64: return 1;
    case SpikeDType::F16: return 0x3c00u;
    case SpikeDType::BF16: return 0x3f80u;
    case SpikeDType::F32: return 0x3f800000u;
    case SpikeDType::F64: return uint64_t(0x3ff) << 52;
  }
  return 0;
}

}  // namespace spikejit::detail
