// The random numbers of `uniform()` (ir::Op::Uniform): a counter-based generator, so that a
// draw is a pure function of (seed, neuron, step, stream). Any thread computes any draw in any
// order, the backward recomputes the forward's draws exactly, and the CPU executor and the CUDA
// kernels (whose prelude spells out the same arithmetic) give the same bits.
//
// The generator is Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as
// easy as 1, 2, 3", SC 2011): the key is the 64-bit seed, the counter is (neuron low word,
// neuron high word, step, stream). A draw takes the first output word's top 24 bits, k * 2^-24:
// every value in [0, 1) on a grid of 2^-24, exact in float32 (and in float64).
#pragma once

#include <cstdint>

namespace spikejit::ir {

struct PhiloxBlock {
  uint32_t w[4];
};

inline PhiloxBlock philox4x32_10(PhiloxBlock counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // the round multipliers
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // the key schedule's increments
  PhiloxBlock c = counter;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c.w[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c.w[2];
    c = {{static_cast<uint32_t>(p1 >> 32) ^ c.w[1] ^ key0, static_cast<uint32_t>(p1),
          static_cast<uint32_t>(p0 >> 32) ^ c.w[3] ^ key1, static_cast<uint32_t>(p0)}};
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return c;
}

// The draw of stream `stream` for neuron `neuron` at step `step`, in [0, 1).
inline float uniform_draw(uint64_t seed, int64_t neuron, int64_t step, int32_t stream) {
  const uint64_t n = static_cast<uint64_t>(neuron);
  const PhiloxBlock out = philox4x32_10(
      {{static_cast<uint32_t>(n), static_cast<uint32_t>(n >> 32), static_cast<uint32_t>(step),
        static_cast<uint32_t>(stream)}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<float>(out.w[0] >> 8) * 0x1p-24f;
}

}  // namespace spikejit::ir
