// The scalar semantics of every non-leaf IR op: the single definition the CPU executor, constant
// folding and the tests share. Bool values are carried as 0 or 1 in the float type F.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ir/float_math.h"
#include "spikejit/ir.h"

namespace spikejit::ir {

// Rounds half to even, like torch.round (std::nearbyint under the default rounding mode).
template <class F>
inline F round_half_even(F x) {
  return std::nearbyint(x);
}

// `float32(x)`, a branch-free form of float_math.h that the executor's lane loops vectorize, for
// float; `libm(x)` for double.
template <class F, class Float32, class Libm>
inline F by_precision(F x, Float32 float32, Libm libm) {
  if constexpr (std::is_same_v<F, float>) {
    return float32(x);
  } else {
    return libm(x);
  }
}

template <class F>
inline F sigmoid(F x) {
  return F(1) / (F(1) + by_precision(-x, exp_f32, [](F v) { return std::exp(v); }));
}

// The ops apply_op<float> computes by a call to the C library for every lane. A call inside a
// loop leaves the whole loop scalar. These two have no branch-free form here: fmod is exact, by a
// reduction whose length grows with the difference of the exponents (a loop); pow within a few
// ulp needs y log2(x) to about 32 bits (its error is multiplied by up to 88 in the result's), and
// C's cases for a negative x and an integer y.
constexpr bool calls_libm_per_lane(Op op) { return op == Op::Fmod || op == Op::Pow; }

// The ops whose apply_op<float> is a branch-free form where that form holds and a call (libm's,
// or a float64 version) on the rest of the domain: sin, cos and tan beyond kTrigFastLimit, ndtri
// in its far tails. A loop over lanes runs the form for every lane (it vectorizes), then apply_op
// again for the rare lanes where it does not hold: the results are apply_op's.
constexpr bool has_fast_form(Op op) { return op == Op::Sin || op == Op::Cos || op == Op::Tan || op == Op::Ndtri; }

inline float fast_form(Op op, float a) {
  if (op == Op::Ndtri) return ndtri_fast(a);
  return op == Op::Tan ? tan_reduced(a) : sin_cos_reduced(a, op == Op::Cos ? 1 : 0);
}

inline bool fast_form_holds(Op op, float a) {
  return op == Op::Ndtri ? ndtri_fast_holds(a) : trig_reduced_holds(a);
}

// Applies `op` to a, b, c (unused ones ignored). `op` must not be a leaf or Spike's surrogate
// (Spike here is only the forward Heaviside).
template <class F>
inline F apply_op(Op op, F a, F b, F c) {
  switch (op) {
    case Op::Add: return a + b;
    case Op::Sub: return a - b;
    case Op::Mul: return a * b;
    case Op::Div: return a / b;
    case Op::Neg: return -a;
    case Op::Reciprocal: return F(1) / a;
    case Op::Fmod: return std::fmod(a, b);
    case Op::Pow: return std::pow(a, b);
    // NaN propagates like torch.minimum / torch.maximum.
    case Op::Min: return (std::isnan(a) || std::isnan(b)) ? a + b : (a < b ? a : b);
    case Op::Max: return (std::isnan(a) || std::isnan(b)) ? a + b : (a > b ? a : b);
    // Like torch.clamp: min(max(x, lo), hi), so hi wins when lo > hi.
    case Op::Clamp: return std::isnan(a) ? a : std::min(std::max(a, b), c);
    case Op::Exp: return by_precision(a, exp_f32, [](F v) { return std::exp(v); });
    case Op::Log: return by_precision(a, log_f32, [](F v) { return std::log(v); });
    case Op::Log2: return by_precision(a, log2_f32, [](F v) { return std::log2(v); });
    case Op::Sqrt: return std::sqrt(a);
    case Op::Rsqrt: return F(1) / std::sqrt(a);
    case Op::Sigmoid: return sigmoid(a);
    case Op::Tanh: return by_precision(a, tanh_f32, [](F v) { return std::tanh(v); });
    case Op::Sin: return by_precision(a, sin_f32, [](F v) { return std::sin(v); });
    case Op::Cos: return by_precision(a, cos_f32, [](F v) { return std::cos(v); });
    case Op::Erf: return by_precision(a, erf_f32, [](F v) { return std::erf(v); });
    case Op::Abs: return std::fabs(a);
    case Op::Relu: return std::isnan(a) ? a : (a > F(0) ? a : F(0));
    case Op::Sign: return std::isnan(a) ? a : F((a > F(0)) - (a < F(0)));
    case Op::Round: return round_half_even(a);
    case Op::Floor: return std::floor(a);
    case Op::Ceil: return std::ceil(a);
    case Op::Log1p: return by_precision(a, log1p_f32, [](F v) { return std::log1p(v); });
    case Op::Expm1: return by_precision(a, expm1_f32, [](F v) { return std::expm1(v); });
    case Op::Exp2: return by_precision(a, exp2_f32, [](F v) { return std::exp2(v); });
    case Op::Log10: return by_precision(a, log10_f32, [](F v) { return std::log10(v); });
    case Op::Tan: return by_precision(a, tan_f32, [](F v) { return std::tan(v); });
    case Op::Atan: return by_precision(a, atan_f32, [](F v) { return std::atan(v); });
    case Op::Asin: return by_precision(a, asin_f32, [](F v) { return std::asin(v); });
    case Op::Acos: return by_precision(a, acos_f32, [](F v) { return std::acos(v); });
    case Op::Sinh: return by_precision(a, sinh_f32, [](F v) { return std::sinh(v); });
    case Op::Cosh: return by_precision(a, cosh_f32, [](F v) { return std::cosh(v); });
    case Op::Asinh: return by_precision(a, asinh_f32, [](F v) { return std::asinh(v); });
    case Op::Acosh: return by_precision(a, acosh_f32, [](F v) { return std::acosh(v); });
    case Op::Atanh: return by_precision(a, atanh_f32, [](F v) { return std::atanh(v); });
    case Op::Erfc: return by_precision(a, erfc_f32, [](F v) { return std::erfc(v); });
    case Op::Erfinv: return by_precision(a, erfinv_f32, erfinv_f64);
    case Op::Ndtri: return by_precision(a, ndtri_f32, ndtri_f64);
    case Op::Atan2:
      if constexpr (std::is_same_v<F, float>) return atan2_f32(a, b);
      return std::atan2(a, b);
    case Op::Hypot:
      if constexpr (std::is_same_v<F, float>) return hypot_f32(a, b);
      return std::hypot(a, b);
    case Op::Eq: return F(a == b);
    case Op::Ne: return F(a != b);
    case Op::Lt: return F(a < b);
    case Op::Le: return F(a <= b);
    case Op::Gt: return F(a > b);
    case Op::Ge: return F(a >= b);
    case Op::And: return F(a != F(0) && b != F(0));
    case Op::Or: return F(a != F(0) || b != F(0));
    case Op::Not: return F(a == F(0));
    case Op::Where: return a != F(0) ? b : c;
    case Op::ToFloat: return a;
    case Op::ToBool: return F(a != F(0));
    case Op::Spike: return F(a >= F(0));
    case Op::Detach: return a;
    default: return F(0);  // leaves are never applied
  }
}

}  // namespace spikejit::ir
