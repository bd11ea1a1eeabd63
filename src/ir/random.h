// The random numbers of `uniform()` (ir::Op::Uniform): a counter-based generator, so that a
// draw is a pure function of (seed, neuron, step, stream). Any thread computes any draw in any
// order, the backward recomputes the forward's draws exactly, and the CPU executor and the CUDA
// kernels (whose prelude spells out the same arithmetic) give the same bits.
//
// The generator is Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as
// easy as 1, 2, 3", SC 2011): the key is the 64-bit seed, the counter is (group low word, group
// high word, step, stream) for the group of four neurons n / 4, and neuron n takes output word
// n % 4: one block of the generator serves four neighbouring neurons. A draw is that word's top
// 24 bits times 2^-24: every value in [0, 1) on a grid of 2^-24, exact in float32 and float64.
#pragma once

#include <algorithm>
#include <cstdint>

namespace spikejit::ir {

struct PhiloxBlock {
  uint32_t w[4];
};

constexpr uint32_t kPhiloxMul0 = 0xD2511F53u, kPhiloxMul1 = 0xCD9E8D57u;    // the round multipliers
constexpr uint32_t kPhiloxWeyl0 = 0x9E3779B9u, kPhiloxWeyl1 = 0xBB67AE85u;  // the key schedule's steps
constexpr int kPhiloxRounds = 10;

// One round on the counter words c0..c3 with the round's keys (the one definition both the
// scalar generator and the vectorized uniform_draws run).
inline void philox_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t key0, uint32_t key1) {
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxMul0) * c0;
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxMul1) * c2;
  c0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ key0;
  c1 = static_cast<uint32_t>(p1);
  c2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ key1;
  c3 = static_cast<uint32_t>(p0);
}

inline PhiloxBlock philox4x32_10(PhiloxBlock counter, uint32_t key0, uint32_t key1) {
  PhiloxBlock c = counter;
  for (int round = 0; round < kPhiloxRounds; ++round) {
    philox_round(c.w[0], c.w[1], c.w[2], c.w[3], key0, key1);
    key0 += kPhiloxWeyl0;
    key1 += kPhiloxWeyl1;
  }
  return c;
}

inline float draw_of_word(uint32_t word) { return static_cast<float>(word >> 8) * 0x1p-24f; }

// The draw of stream `stream` for neuron `neuron` at step `step`, in [0, 1).
inline float uniform_draw(uint64_t seed, int64_t neuron, int64_t step, int32_t stream) {
  const uint64_t group = static_cast<uint64_t>(neuron) >> 2;
  const PhiloxBlock out = philox4x32_10(
      {{static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32), static_cast<uint32_t>(step),
        static_cast<uint32_t>(stream)}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return draw_of_word(out.w[neuron & 3]);
}

// uniform_draw for neurons first .. first + count - 1, into dst. From a multiple of 4, the rounds
// run over a chunk of groups at a time, in arrays the compiler vectorizes.
template <class F>
inline void uniform_draws(F* __restrict dst, uint64_t seed, int64_t step, int32_t stream, int64_t first,
                          int64_t count) {
  if (first % 4 != 0) {
    for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<F>(uniform_draw(seed, first + i, step, stream));
    return;
  }
  constexpr int kGroups = 32;
  for (int64_t done = 0; done < count; done += 4 * kGroups) {
    const int groups = static_cast<int>(std::min<int64_t>(kGroups, (count - done + 3) / 4));
    uint32_t c0[kGroups], c1[kGroups], c2[kGroups], c3[kGroups];
    for (int g = 0; g < groups; ++g) {
      const uint64_t group = static_cast<uint64_t>(first + done) / 4 + static_cast<uint64_t>(g);
      c0[g] = static_cast<uint32_t>(group);
      c1[g] = static_cast<uint32_t>(group >> 32);
      c2[g] = static_cast<uint32_t>(step);
      c3[g] = static_cast<uint32_t>(stream);
    }
    uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < kPhiloxRounds; ++round) {
      for (int g = 0; g < groups; ++g) philox_round(c0[g], c1[g], c2[g], c3[g], key0, key1);
      key0 += kPhiloxWeyl0;
      key1 += kPhiloxWeyl1;
    }
    const int64_t left = std::min<int64_t>(4 * kGroups, count - done);
    F* out = dst + done;
    if (left == 4 * groups) {  // whole groups: no test per element, so that the stores vectorize
      for (int g = 0; g < groups; ++g) {
        out[4 * g] = static_cast<F>(draw_of_word(c0[g]));
        out[4 * g + 1] = static_cast<F>(draw_of_word(c1[g]));
        out[4 * g + 2] = static_cast<F>(draw_of_word(c2[g]));
        out[4 * g + 3] = static_cast<F>(draw_of_word(c3[g]));
      }
      continue;
    }
    for (int g = 0; g < groups; ++g) {
      const uint32_t words[4] = {c0[g], c1[g], c2[g], c3[g]};
      for (int w = 0; w < 4; ++w) {
        if (4 * g + w < left) out[4 * g + w] = static_cast<F>(draw_of_word(words[w]));
      }
    }
  }
}

}  // namespace spikejit::ir
