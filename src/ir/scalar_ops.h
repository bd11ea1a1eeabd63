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

template <class F>
inline F exp_of(F x) {
  if constexpr (std::is_same_v<F, float>) {
    return exp_f32(x);
  } else {
    return std::exp(x);
  }
}

// The float32 forms of float_math.h (vectorizable); double precision takes libm's.
template <class F>
inline F expm1_of(F x) {
  if constexpr (std::is_same_v<F, float>) return expm1_f32(x);
  else return std::expm1(x);
}

template <class F>
inline F log_of(F x) {
  if constexpr (std::is_same_v<F, float>) return log_f32(x);
  else return std::log(x);
}

template <class F>
inline F log1p_of(F x) {
  if constexpr (std::is_same_v<F, float>) return log1p_f32(x);
  else return std::log1p(x);
}

template <class F>
inline F erf_of(F x) {
  if constexpr (std::is_same_v<F, float>) return erf_f32(x);
  else return std::erf(x);
}

template <class F>
inline F atan_of(F x) {
  if constexpr (std::is_same_v<F, float>) return atan_f32(x);
  else return std::atan(x);
}

template <class F>
inline F asin_of(F x) {
  if constexpr (std::is_same_v<F, float>) return asin_f32(x);
  else return std::asin(x);
}

template <class F>
inline F acos_of(F x) {
  if constexpr (std::is_same_v<F, float>) return acos_f32(x);
  else return std::acos(x);
}

template <class F>
inline F tanh_of(F x) {
  if constexpr (std::is_same_v<F, float>) return tanh_f32(x);
  else return std::tanh(x);
}

template <class F>
inline F sigmoid(F x) {
  return F(1) / (F(1) + exp_of(-x));
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
    case Op::Exp: return exp_of(a);
    case Op::Log: return log_of(a);
    case Op::Log2: return std::log2(a);
    case Op::Sqrt: return std::sqrt(a);
    case Op::Rsqrt: return F(1) / std::sqrt(a);
    case Op::Sigmoid: return sigmoid(a);
    case Op::Tanh: return tanh_of(a);
    case Op::Sin: return std::sin(a);
    case Op::Cos: return std::cos(a);
    case Op::Erf: return erf_of(a);
    case Op::Abs: return std::fabs(a);
    case Op::Relu: return std::isnan(a) ? a : (a > F(0) ? a : F(0));
    case Op::Sign: return std::isnan(a) ? a : F((a > F(0)) - (a < F(0)));
    case Op::Round: return round_half_even(a);
    case Op::Floor: return std::floor(a);
    case Op::Ceil: return std::ceil(a);
    case Op::Log1p: return log1p_of(a);
    case Op::Expm1: return expm1_of(a);
    case Op::Exp2: return std::exp2(a);
    case Op::Log10: return std::log10(a);
    case Op::Tan: return std::tan(a);
    case Op::Atan: return atan_of(a);
    case Op::Asin: return asin_of(a);
    case Op::Acos: return acos_of(a);
    case Op::Sinh: return std::sinh(a);
    case Op::Cosh: return std::cosh(a);
    case Op::Asinh: return std::asinh(a);
    case Op::Acosh: return std::acosh(a);
    case Op::Atanh: return std::atanh(a);
    case Op::Erfc: return std::erfc(a);
    case Op::Atan2: return std::atan2(a, b);
    case Op::Hypot: return std::hypot(a, b);
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
