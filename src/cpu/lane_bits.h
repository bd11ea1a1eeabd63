// Bit-packed lanes of the CPU executor: one bit per lane, lane l at bit l % 8 of byte l / 8 (the
// rows of PackedView in spikejit/buffers.h). A block starts on a multiple of 8 lanes, so its bytes
// are its own; only a row's last block may end inside a byte, whose high bits are then zero.
#pragma once

#include <cstdint>

namespace spikejit::cpu {

// Bits of n lanes (nonzero is 1) into ceil(n / 8) bytes.
template <class F>
inline void pack_lanes(uint8_t* __restrict dst, const F* __restrict src, int64_t n) {
  const int64_t whole = n / 8;
  for (int64_t b = 0; b < whole; ++b) {
    unsigned byte = 0;
    for (int i = 0; i < 8; ++i) byte |= static_cast<unsigned>(src[8 * b + i] != F(0)) << i;
    dst[b] = static_cast<uint8_t>(byte);
  }
  if (n % 8 != 0) {
    unsigned byte = 0;
    for (int64_t i = 0; i < n % 8; ++i) byte |= static_cast<unsigned>(src[8 * whole + i] != F(0)) << i;
    dst[whole] = static_cast<uint8_t>(byte);
  }
}

// n lanes of 1 or 0 from their bits.
template <class F>
inline void unpack_lanes(F* __restrict dst, const uint8_t* __restrict src, int64_t n) {
  for (int64_t l = 0; l < n; ++l) dst[l] = static_cast<F>((src[l >> 3] >> (l & 7)) & 1);
}

}  // namespace spikejit::cpu
