// Lane loops of the CPU executor: one loop per op (the op is a template argument, so the switch
// runs once per instruction and the lane loop vectorizes), and loads / stores that convert between
// the storage dtype and the compute type F.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/float16.h"
#include "ir/random.h"
#include "ir/scalar_ops.h"
#include "spikejit/buffers.h"
#include "spikejit/tensor.h"

// On x86-64 the op loops are compiled for AVX-512, AVX2 and the baseline, picked at load time.
// (AVX-512F brings FMA: executor.cpp is compiled with -ffp-contract=off, see CMakeLists.txt, since a
// contracted a * b + c would round differently from the scalar definition.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPIKEJIT_CPU_LANE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SPIKEJIT_CPU_LANE_CLONES
#endif

namespace spikejit::cpu {

// A caller buffer as the lane loops see it; a null `data` is an absent buffer. Read-only
// sequence gradients may repeat their elements (see SequenceLayout in spikejit/buffers.h); other
// read-only buffers may be strided views (`strided`: read through `layout`, see ReadLayout).
struct LaneBuffer {
  void* data = nullptr;
  DType dtype = DType::F32;
  bool same_each_step = false;
  bool same_each_neuron = false;
  bool strided = false;
  ReadLayout layout;
  bool present() const { return data != nullptr; }
};

// A float32 op with a fast form (ir::has_fast_form): the form for every lane (a loop that
// vectorizes), then apply_op for the rare lanes where it does not hold; apply_op's values.
template <ir::Op OP>
inline void fast_form_lanes(float* __restrict d, const float* __restrict a, int64_t n) {
  for (int64_t l = 0; l < n; ++l) d[l] = ir::fast_form(OP, a[l]);
  for (int64_t l = 0; l < n; ++l) {
    if (!ir::fast_form_holds(OP, a[l])) d[l] = ir::apply_op<float>(OP, a[l], 0.0f, 0.0f);
  }
}

template <class F, ir::Op OP>
inline void op_lanes(F* __restrict d, const F* __restrict a, const F* __restrict b, const F* __restrict c,
                     int64_t n) {
  if constexpr (std::is_same_v<F, float> && ir::has_fast_form(OP)) {
    fast_form_lanes<OP>(d, a, n);
  } else {
    for (int64_t l = 0; l < n; ++l) d[l] = ir::apply_op<F>(OP, a[l], b[l], c[l]);
  }
}

// d = op(a, b, c) over n lanes; `d` is never one of the arguments. `flatten` inlines apply_op
// into every case, where its switch folds away for the constant op.
template <class F>
[[gnu::flatten]] SPIKEJIT_CPU_LANE_CLONES void run_op_lanes(ir::Op op, F* d, const F* a, const F* b,
                                                            const F* c, int64_t n) {
  switch (op) {
#define SPIKEJIT_CPU_OP_CASE(name, text, arity)                        \
  case ir::Op::name:                                                   \
    if constexpr (arity > 0) op_lanes<F, ir::Op::name>(d, a, b, c, n); \
    return;
    SPIKEJIT_IR_OPS(SPIKEJIT_CPU_OP_CASE)
#undef SPIKEJIT_CPU_OP_CASE
  }
}

template <class F, class S, class Convert>
inline void load_converted(F* __restrict dst, const void* data, int64_t offset, int64_t n, Convert convert) {
  const S* __restrict src = static_cast<const S*>(data) + offset;
  for (int64_t l = 0; l < n; ++l) dst[l] = static_cast<F>(convert(src[l]));
}

template <class F>
inline void load_lanes(F* dst, const LaneBuffer& b, int64_t offset, int64_t n) {
  switch (b.dtype) {
    case DType::F32:
      load_converted<F, float>(dst, b.data, offset, n, [](float x) { return x; });
      return;
    case DType::F64:
      load_converted<F, double>(dst, b.data, offset, n, [](double x) { return x; });
      return;
    case DType::F16:
      load_converted<F, uint16_t>(dst, b.data, offset, n, detail::half_bits_to_float);
      return;
    case DType::BF16:
      load_converted<F, uint16_t>(dst, b.data, offset, n, detail::bfloat16_bits_to_float);
      return;
  }
}

template <class S, class F, class Convert>
inline void store_converted(void* data, int64_t offset, const F* __restrict src, int64_t n, Convert convert) {
  S* __restrict dst = static_cast<S*>(data) + offset;
  for (int64_t l = 0; l < n; ++l) dst[l] = convert(src[l]);
}

// fp16 / bf16 from fp64 go through fp32 (the executor's fp64 mode is for gradient checks).
template <class F>
inline void store_lanes(const LaneBuffer& b, int64_t offset, const F* src, int64_t n) {
  switch (b.dtype) {
    case DType::F32:
      store_converted<float>(b.data, offset, src, n, [](F x) { return static_cast<float>(x); });
      return;
    case DType::F64:
      store_converted<double>(b.data, offset, src, n, [](F x) { return static_cast<double>(x); });
      return;
    case DType::F16:
      store_converted<uint16_t>(b.data, offset, src, n,
                                [](F x) { return detail::float_to_half_bits(static_cast<float>(x)); });
      return;
    case DType::BF16:
      store_converted<uint16_t>(b.data, offset, src, n,
                                [](F x) { return detail::float_to_bfloat16_bits(static_cast<float>(x)); });
      return;
  }
}

// The draws of `stream` at step t for neurons start .. start + n - 1 (ir/random.h); blocks start
// at multiples of 4.
// (`flatten`: the generator's loops are compiled inside each clone, for its vector width.)
template <class F>
[[gnu::flatten]] SPIKEJIT_CPU_LANE_CLONES void draw_lanes(F* dst, uint64_t seed, int64_t t, int32_t stream,
                                                          int64_t start, int64_t n) {
  ir::uniform_draws(dst, seed, t, stream, start, n);
}

template <class F>
inline void fill_lanes(F* __restrict dst, F value, int64_t n) {
  for (int64_t l = 0; l < n; ++l) dst[l] = value;
}

template <class F>
inline void copy_lanes(F* __restrict dst, const F* __restrict src, int64_t n) {
  for (int64_t l = 0; l < n; ++l) dst[l] = src[l];
}

template <class F>
inline void add_lanes(F* __restrict dst, const F* __restrict src, int64_t n) {
  for (int64_t l = 0; l < n; ++l) dst[l] += src[l];
}

// Row t, lanes [start, start + n) of a [T, N] sequence in any SequenceLayout.
template <class F>
inline void load_sequence_lanes(F* dst, const LaneBuffer& b, int64_t t, int64_t neurons, int64_t start,
                                int64_t n) {
  const int64_t step = b.same_each_step ? 0 : t;
  if (b.same_each_neuron) {
    load_lanes(dst, b, step, 1);
    fill_lanes(dst, dst[0], n);
  } else {
    load_lanes(dst, b, step * neurons + start, n);
  }
}

// Lanes [start, start + n) of step t of a strided view (b.strided), a run along the innermost
// merged dimension at a time.
template <class F>
inline void load_strided_lanes(F* dst, const LaneBuffer& b, int64_t t, int64_t start, int64_t n) {
  const ReadLayout& l = b.layout;
  if (l.dims == 0) {  // one element for every neuron
    load_lanes(dst, b, t * l.step_stride, 1);
    fill_lanes(dst, dst[0], n);
    return;
  }
  const int64_t inner = l.sizes[0], stride = l.strides[0];
  for (int64_t done = 0; done < n;) {
    const int64_t first = start + done, run = std::min(inner - first % inner, n - done);
    const int64_t at = l.offset(t, first);
    if (stride == 1) {
      load_lanes(dst + done, b, at, run);
    } else if (stride == 0) {
      load_lanes(dst + done, b, at, 1);
      fill_lanes(dst + done, dst[done], run);
    } else {
      for (int64_t k = 0; k < run; ++k) load_lanes(dst + done + k, b, at + k * stride, 1);
    }
    done += run;
  }
}

}  // namespace spikejit::cpu
