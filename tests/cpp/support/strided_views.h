// Strided read-only views (ReadLayout in spikejit/buffers.h) and their dense copies, for the tests
// that check a call on strided inputs, initial states and per-neuron parameters against the same
// call on contiguous copies. Neuron shapes here are [B, C].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/cpu_runs.h"

namespace spikejit::testing::strided_views {

using cpu_runs::Buffer;
using cpu_runs::Random;

// How a [T, B, C] sequence (or a [B, C] tensor, without the T stride) lies in its storage.
enum class Layout { RepeatedOverSteps, OnePerChannel, Transposed, EveryOtherElement, OneValuePerStep };
constexpr Layout kLayouts[] = {Layout::RepeatedOverSteps, Layout::OnePerChannel, Layout::Transposed,
                               Layout::EveryOtherElement, Layout::OneValuePerStep};

inline std::string layout_name(Layout l) {
  switch (l) {
    case Layout::RepeatedOverSteps: return "repeated over steps";
    case Layout::OnePerChannel: return "one value per channel";
    case Layout::Transposed: return "transposed";
    case Layout::EveryOtherElement: return "every other element";
    case Layout::OneValuePerStep: return "one value per step";
  }
  return "?";
}

// A strided view's storage (random values) and strides, in elements.
struct Strided {
  Buffer storage;
  std::vector<int64_t> strides;
  std::vector<int64_t> shape;
  TensorView view() { return TensorView(storage.data(), storage.dtype(), shape, strides); }
};

// `sequence`: [T, B, C], else [B, C].
inline Strided make_strided(Layout l, bool sequence, int64_t T, int64_t B, int64_t C, DType dtype, Random& rng,
                            double lo, double hi) {
  int64_t elements = 0, st = 0, sb = 0, sc = 0;  // storage size and the strides of T, B and C
  switch (l) {
    case Layout::RepeatedOverSteps: elements = B * C, st = 0, sb = C, sc = 1; break;
    case Layout::OnePerChannel: elements = (sequence ? T : 1) * C, st = C, sb = 0, sc = 1; break;
    case Layout::Transposed: elements = (sequence ? T : 1) * B * C, st = B * C, sb = 1, sc = B; break;
    case Layout::EveryOtherElement:
      elements = 2 * (sequence ? T : 1) * B * C, st = 2 * B * C, sb = 2 * C, sc = 2;
      break;
    case Layout::OneValuePerStep: elements = sequence ? T : 1, st = 1, sb = 0, sc = 0; break;
  }
  Strided s{Buffer(dtype, {elements}), {}, {}};
  s.storage.randomize(rng, lo, hi);
  if (sequence) {
    s.shape = {T, B, C};
    s.strides = {st, sb, sc};
  } else {
    s.shape = {B, C};
    s.strides = {sb, sc};
  }
  return s;
}

// The contiguous copy of a strided view.
inline Buffer dense_copy(const Strided& s) {
  Buffer out(s.storage.dtype(), s.shape);
  const size_t d = s.shape.size();
  std::vector<int64_t> index(d, 0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t at = 0;
    for (size_t k = 0; k < d; ++k) at += index[k] * s.strides[k];
    out.set(i, s.storage.get(at));
    for (size_t k = d; k-- > 0;) {
      if (++index[k] < s.shape[k]) break;
      index[k] = 0;
    }
  }
  return out;
}

}  // namespace spikejit::testing::strided_views
