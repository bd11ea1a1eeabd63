// cpu::bit_spike_compress / bit_spike_decompress: chunks of 64K spikes on the thread pool; inside
// a chunk, loops over blocks of 512 spikes that the compiler vectorises (one flag byte per spike),
// with the bits gathered or spread 8 at a time by a multiplication or a table.
#include "spikejit/compress.h"

#include <array>
#include <cstring>
#include <string>

#include "common/parallel.h"
#include "common/spike_bits.h"
#include "spikejit/error.h"

namespace spikejit::cpu {
namespace {

constexpr int64_t kBlock = 512;        // spikes per inner block (64 packed bytes)
constexpr int64_t kChunk = 64 * 1024;  // spikes per thread-pool task (a multiple of kBlock)

// Multiplying 8 flag bytes (each 0 or 1, flag i in byte i) by this puts flag i at bit 56 + i;
// the partial products land on distinct bits, so nothing carries into the top byte.
constexpr uint64_t kGatherFlags = 0x0102040810204080ull;

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gather_flags reads 8 flag bytes as a little-endian word"
#endif
uint8_t gather_flags(const uint8_t* flags) {
  uint64_t w;
  std::memcpy(&w, flags, 8);  // flags[i] in bits 8i .. 8i+7
  return static_cast<uint8_t>((w * kGatherFlags) >> 56);
}

// flags[b]: 8 flag bytes, byte i = bit i of b.
struct SpreadTable {
  std::array<std::array<uint8_t, 8>, 256> flags{};
  constexpr SpreadTable() {
    for (int b = 0; b < 256; ++b) {
      for (int i = 0; i < 8; ++i) {
        flags[static_cast<size_t>(b)][static_cast<size_t>(i)] = static_cast<uint8_t>((b >> i) & 1);
      }
    }
  }
};
constexpr SpreadTable kSpread;

// Spikes [first, first + count) -> their flags (0 / 1 bytes); count <= kBlock.
template <class U>
void flags_of(const U* __restrict x, U mask, int64_t count, uint8_t* __restrict flags) {
  for (int64_t k = 0; k < count; ++k) flags[k] = static_cast<uint8_t>((x[k] & mask) != 0);
}

// Packs spikes [begin, end) into bytes [begin / 8, ceil(end / 8)); begin is a multiple of 8.
template <class U>
void compress_range(const U* x, U mask, int64_t begin, int64_t end, uint8_t* packed) {
  alignas(64) uint8_t flags[kBlock];
  for (int64_t at = begin; at < end; at += kBlock) {
    const int64_t count = end - at < kBlock ? end - at : kBlock;
    flags_of(x + at, mask, count, flags);
    const int64_t whole = count / 8;
    uint8_t* out = packed + at / 8;
    for (int64_t b = 0; b < whole; ++b) out[b] = gather_flags(flags + 8 * b);
    if (count % 8 != 0) {  // the last byte of all: its high bits stay zero
      uint8_t last = 0;
      for (int64_t i = 0; i < count % 8; ++i) last = static_cast<uint8_t>(last | (flags[8 * whole + i] << i));
      out[whole] = last;
    }
  }
}

// Writes spikes [begin, end) from their bits; begin is a multiple of 8.
template <class U>
void decompress_range(const uint8_t* packed, U one, int64_t begin, int64_t end, U* y) {
  alignas(64) uint8_t flags[kBlock];
  for (int64_t at = begin; at < end; at += kBlock) {
    const int64_t count = end - at < kBlock ? end - at : kBlock;
    const uint8_t* in = packed + at / 8;
    const int64_t bytes = (count + 7) / 8;
    for (int64_t b = 0; b < bytes; ++b) std::memcpy(flags + 8 * b, kSpread.flags[in[b]].data(), 8);
    U* __restrict out = y + at;
    for (int64_t k = 0; k < count; ++k) out[k] = static_cast<U>(static_cast<U>(flags[k]) * one);
  }
}

template <class U>
void compress_typed(const SpikeView& spikes, const SpikeView& packed, int threads) {
  const int64_t n = spikes.numel();
  const U* x = static_cast<const U*>(spikes.data);
  const U mask = static_cast<U>(detail::spike_value_mask(spikes.dtype));
  uint8_t* out = static_cast<uint8_t*>(packed.data);
  parallel_for((n + kChunk - 1) / kChunk, threads, [&](int64_t c) {
    const int64_t begin = c * kChunk;
    compress_range(x, mask, begin, begin + kChunk < n ? begin + kChunk : n, out);
  });
}

template <class U>
void decompress_typed(const SpikeView& packed, const SpikeView& spikes, int threads) {
  const int64_t n = spikes.numel();
  const uint8_t* in = static_cast<const uint8_t*>(packed.data);
  const U one = static_cast<U>(detail::spike_one_bits(spikes.dtype));
  U* y = static_cast<U*>(spikes.data);
  parallel_for((n + kChunk - 1) / kChunk, threads, [&](int64_t c) {
    const int64_t begin = c * kChunk;
    decompress_range(in, one, begin, begin + kChunk < n ? begin + kChunk : n, y);
  });
}

void check_threads(int threads) {
  if (threads < 0) throw ArgumentError("threads", "0 (all hardware threads) or more", std::to_string(threads));
}

}  // namespace

void bit_spike_compress(const SpikeView& spikes, const SpikeView& packed, int threads) {
  check_threads(threads);
  validate_compress(spikes, packed);
  switch (spike_dtype_size(spikes.dtype)) {
    case 1: return compress_typed<uint8_t>(spikes, packed, threads);
    case 2: return compress_typed<uint16_t>(spikes, packed, threads);
    case 4: return compress_typed<uint32_t>(spikes, packed, threads);
    default: return compress_typed<uint64_t>(spikes, packed, threads);
  }
}

void bit_spike_decompress(const SpikeView& packed, const SpikeView& spikes, int threads) {
  check_threads(threads);
  validate_decompress(packed, spikes);
  switch (spike_dtype_size(spikes.dtype)) {
    case 1: return decompress_typed<uint8_t>(packed, spikes, threads);
    case 2: return decompress_typed<uint16_t>(packed, spikes, threads);
    case 4: return decompress_typed<uint32_t>(packed, spikes, threads);
    default: return decompress_typed<uint64_t>(packed, spikes, threads);
  }
}

}  // namespace spikejit::cpu
