// The bit-spike kernels' CUDA source: one template per direction, instantiated per width.
#include "codegen/compress_source.h"

namespace spikejit::codegen {
namespace {

constexpr int kWidths[] = {1, 2, 4, 8};

const char* kTemplates = R"(
// Bit-spike compression (spikejit): spike 8j+i is bit i of packed byte j. See
// src/codegen/compress_source.h for the launch contract.

template <int W> struct SjWord;
template <> struct SjWord<1> { typedef unsigned char type; };
template <> struct SjWord<2> { typedef unsigned short type; };
template <> struct SjWord<4> { typedef unsigned int type; };
template <> struct SjWord<8> { typedef unsigned long long type; };

// Packed word w holds spikes 32w .. 32w+31 (bit p = spike 32w+p; little-endian bytes).
__device__ __forceinline__ unsigned sj_load_word(const unsigned char* packed, long long w, bool aligned) {
  if (aligned) return __ldg(reinterpret_cast<const unsigned*>(packed) + w);
  unsigned bits = 0;
#pragma unroll
  for (int b = 0; b < 4; ++b) bits |= (unsigned)__ldg(packed + 4 * w + b) << (8 * b);
  return bits;
}

__device__ __forceinline__ void sj_store_word(unsigned char* packed, long long w, unsigned bits, bool aligned) {
  if (aligned) {
    reinterpret_cast<unsigned*>(packed)[w] = bits;
    return;
  }
#pragma unroll
  for (int b = 0; b < 4; ++b) packed[4 * w + b] = (unsigned char)(bits >> (8 * b));
}

template <int W>
__device__ __forceinline__ void sj_compress(const void* spikes, unsigned char* packed, long long n,
                                            unsigned long long mask_bits) {
  typedef typename SjWord<W>::type U;
  constexpr int E = 16 / W;  // spikes per 16-byte vector
  constexpr int G = 32 / E;  // vectors (lanes) per packed word
  const U mask = (U)mask_bits;
  const U* x = static_cast<const U*>(spikes);
  const long long words = n >> 5;
  const long long vectors = words * G;
  const bool vector_loads = ((unsigned long long)spikes & 15) == 0;
  const bool word_stores = ((unsigned long long)packed & 3) == 0;
  const int lane = threadIdx.x & 31;
  const long long first = (long long)blockIdx.x * (SJ_BLOCK * SJ_VECTORS) + threadIdx.x;
  U v[SJ_VECTORS][E];
#pragma unroll
  for (int k = 0; k < SJ_VECTORS; ++k) {  // every load in flight before the first is used
    const long long i = first + (long long)k * SJ_BLOCK;
    if (i < vectors && vector_loads) {
      const uint4 q = __ldg(reinterpret_cast<const uint4*>(x + i * E));
      memcpy(v[k], &q, 16);
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) v[k][e] = i < vectors ? __ldg(x + i * E + e) : (U)0;
    }
  }
#pragma unroll
  for (int k = 0; k < SJ_VECTORS; ++k) {
    unsigned bits = 0;
#pragma unroll
    for (int e = 0; e < E; ++e) bits |= (unsigned)((v[k][e] & mask) != 0) << e;
    bits <<= E * (lane % G);
    // The G lanes of a word are aligned and all in range or all out: every lane shuffles.
#pragma unroll
    for (int offset = 1; offset < G; offset <<= 1) bits |= __shfl_xor_sync(0xffffffffu, bits, offset);
    const long long i = first + (long long)k * SJ_BLOCK;
    if (i < vectors && lane % G == 0) sj_store_word(packed, i / G, bits, word_stores);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {  // the last, partial word: bytes 4 * words ..
    for (long long j = words * 4; j * 8 < n; ++j) {
      unsigned byte = 0;
      for (int i = 0; i < 8 && j * 8 + i < n; ++i) byte |= (unsigned)((x[j * 8 + i] & mask) != 0) << i;
      packed[j] = (unsigned char)byte;
    }
  }
}

template <int W>
__device__ __forceinline__ void sj_decompress(const unsigned char* packed, void* spikes, long long n,
                                              unsigned long long one_bits) {
  typedef typename SjWord<W>::type U;
  constexpr int E = 16 / W;
  constexpr int G = 32 / E;
  const U one = (U)one_bits;
  U* y = static_cast<U*>(spikes);
  const long long words = n >> 5;
  const long long vectors = words * G;
  const bool vector_stores = ((unsigned long long)spikes & 15) == 0;
  const bool word_loads = ((unsigned long long)packed & 3) == 0;
  const int lane = threadIdx.x & 31;
  const long long first = (long long)blockIdx.x * (SJ_BLOCK * SJ_VECTORS) + threadIdx.x;
  unsigned bits[SJ_VECTORS];
#pragma unroll
  for (int k = 0; k < SJ_VECTORS; ++k) {
    const long long i = first + (long long)k * SJ_BLOCK;
    bits[k] = i < vectors ? sj_load_word(packed, i / G, word_loads) >> (E * (lane % G)) : 0u;
  }
#pragma unroll
  for (int k = 0; k < SJ_VECTORS; ++k) {
    const long long i = first + (long long)k * SJ_BLOCK;
    if (i >= vectors) continue;
    U r[E];
#pragma unroll
    for (int e = 0; e < E; ++e) r[e] = (bits[k] >> e) & 1u ? one : (U)0;
    if (vector_stores) {
      uint4 q;
      memcpy(&q, r, 16);
      *reinterpret_cast<uint4*>(y + i * E) = q;
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) y[i * E + e] = r[e];
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (long long s = words * 32; s < n; ++s) y[s] = (packed[s >> 3] >> (s & 7)) & 1 ? one : (U)0;
  }
}
)";

std::string kernel_text(const std::string& entry, const std::string& params, const std::string& call) {
  return "\nextern \"C\" __global__ void __launch_bounds__(SJ_BLOCK) " + entry + "(" + params + ") {\n  " +
         call + ";\n}\n";
}

std::string build_source() {
  std::string s = "#define SJ_BLOCK " + std::to_string(kBitSpikeBlockSize) + "\n#define SJ_VECTORS " +
                  std::to_string(kBitSpikeVectorsPerThread) + "\n";
  s += kTemplates;
  for (int w : kWidths) {
    const std::string width = std::to_string(w);
    s += kernel_text(bit_spike_compress_entry(w),
                     "const void* spikes, unsigned char* packed, long long n, unsigned long long mask",
                     "sj_compress<" + width + ">(spikes, packed, n, mask)");
    s += kernel_text(bit_spike_decompress_entry(w),
                     "const unsigned char* packed, void* spikes, long long n, unsigned long long one",
                     "sj_decompress<" + width + ">(packed, spikes, n, one)");
  }
  return s;
}

}  // namespace

const std::string& bit_spike_source() {
  static const std::string source = build_source();
  return source;
}

std::string bit_spike_compress_entry(int width) {
  return "spikejit_bit_spike_compress_w" + std::to_string(width);
}

std::string bit_spike_decompress_entry(int width) {
  return "spikejit_bit_spike_decompress_w" + std::to_string(width);
}

int64_t bit_spike_blocks(int64_t n, int width) {
  if (n <= 0) return 0;
  const int64_t vectors = (n / 32) * (2 * width);  // 32 spikes a word, 16 / width a vector
  const int64_t per_block = int64_t(kBitSpikeBlockSize) * kBitSpikeVectorsPerThread;
  const int64_t blocks = (vectors + per_block - 1) / per_block;
  return blocks > 0 ? blocks : 1;  // a partial word alone still needs thread 0 of block 0
}

}  // namespace spikejit::codegen
