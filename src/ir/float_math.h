// Branch-free float32 transcendentals for the CPU executor: no calls and no branches (selects
// only), so that its lane loops vectorize them (libm's float functions are a scalar call per
// lane, 5-10x slower there). Each is within 1-5 ulp of the exact value, as its comment says
// (tests/cpp/test_scalar_ops.cpp sweeps its range), and keeps the special values of libm's.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "common/float16.h"

namespace spikejit::ir {

using detail::bits_float;
using detail::float_bits;

// c = n ln 2 + r with n = round(c / ln 2) and r in [-ln2/2, ln2/2]; ln 2 is split in two so that
// n * kLn2Hi is exact. The reduction of exp_f32 and expm1_reduced. `e` is n as an int32, read off
// the low bits of the rounding sum (which lies in [2^23, 2^24), where floats are the integers):
// cheaper in the lane loops than a conversion. For a NaN c it is meaningless, and the caller's
// polynomial carries the NaN.
struct Ln2Reduced {
  float n, r;
  int32_t e;
};

inline Ln2Reduced reduce_by_ln2(float c) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693145751953125f,
                  kLn2Lo = 1.42860682030941723212e-6f, kRound = 12582912.0f;  // 1.5 * 2^23
  const float shifted = c * kLog2e + kRound;  // round to nearest under the default mode
  const float n = shifted - kRound;
  const auto e = static_cast<int32_t>(float_bits(shifted) - float_bits(kRound));
  return {n, (c - n * kLn2Hi) - n * kLn2Lo, e};
}

// 2^e as two factors 2^half and 2^(e - half), each a normal float for e in [-252, 254]; `>>` is
// floor division by 2 (an arithmetic shift in GCC and Clang), one instruction in the lane loops.
struct Pow2Factors {
  float first, second;
};

inline Pow2Factors pow2_factors(int32_t e) {
  const int32_t half = e >> 1;
  return {bits_float(static_cast<uint32_t>(half + 127) << 23), bits_float(static_cast<uint32_t>(e - half + 127) << 23)};
}

// exp(x) = 2^n * exp(r) (reduce_by_ln2); exp(r) by its Taylor polynomial of degree 7 (truncation
// error below 2^-27 relative); 2^n applied in two factors so that results in the subnormal range
// round once. Within 2 ulp of the exact value; NaN stays NaN, +inf gives +inf and -inf gives 0.
inline float exp_f32(float x) {
  float c = x > 89.0f ? 89.0f : x;  // NaN compares false and passes through
  c = c < -104.0f ? -104.0f : c;
  const auto [n, r, e] = reduce_by_ln2(c);  // e in [-150, 129]
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const auto [scale1, scale2] = pow2_factors(e);
  return p * scale1 * scale2;
}

// exp2(x) = 2^n 2^r with n = round(x) and r = x - n in [-1/2, 1/2] (both exact, the rounding as
// in reduce_by_ln2); 2^r = exp(r ln 2) by its Taylor polynomial of degree 7 in r (truncation below
// 2^-27 relative); 2^n applied in two factors as in exp_f32, so that subnormal results round
// once. Within 1.5 ulp (1.15 measured over every float in (-160, 128)), exact for integer x; inf
// from 128 on, 0 from -150 down, NaN stays NaN.
inline float exp2_f32(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  float c = x > 129.0f ? 129.0f : x;      // NaN compares false and passes through
  c = c < -152.0f ? -152.0f : c;
  const float shifted = c + kRound;
  const float n = shifted - kRound;
  const auto e = static_cast<int32_t>(float_bits(shifted) - float_bits(kRound));  // in [-152, 129]
  const float r = c - n;
  float p = 1.52527338e-5f;  // (ln 2)^k / k!
  p = p * r + 1.54035304e-4f;
  p = p * r + 1.33335582e-3f;
  p = p * r + 9.61812911e-3f;
  p = p * r + 5.55041087e-2f;
  p = p * r + 0.240226507f;
  p = p * r + 0.693147181f;
  p = p * r + 1.0f;
  const auto [scale1, scale2] = pow2_factors(e);
  return p * scale1 * scale2;
}

// expm1 of c in [-30, 89] (the callers clamp): 2^n expm1(r) + (2^n - 1) (reduce_by_ln2), which
// keeps expm1's relative accuracy near 0 (exp(c) - 1 would cancel there); expm1(r) by its Taylor
// polynomial of degree 9 (|r| <= ln2/2: truncation below 2^-36 relative). From n = 25 on the -1 is
// below half an ulp: (expm1(r) + 1) 2^n, with 2^n in two factors as in exp_f32, so that it
// overflows only where expm1 does.
inline float expm1_reduced(float c) {
  const auto [n, r, e] = reduce_by_ln2(c);  // e in [-44, 129]
  float p = 1.0f / 362880.0f;
  p = p * r + 1.0f / 40320.0f;
  p = p * r + 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = (p * r) * r + r;
  const auto [scale1, scale2] = pow2_factors(e);
  const float scale = scale1 * scale2;
  const float large = ((p + 1.0f) * scale1) * scale2;
  return e == 0 ? p : (e > 24 ? large : p * scale + (scale - 1.0f));  // (n = 0: expm1(r), -0 kept)
}

// expm1: -1 below -30 (in float32), inf above 88.72. NaN stays NaN.
inline float expm1_f32(float x) {
  float c = x > 89.0f ? 89.0f : x;  // NaN compares false and passes through
  c = c < -30.0f ? -30.0f : c;
  const float out = expm1_reduced(c);
  return x == 0.0f ? x : out;  // expm1(-0) = -0
}

// tanh(x) = sign(x) u / (u + 2) with u = expm1(2|x|), accurate near 0 too; beyond |x| = 9.01 it
// is +-1 in float32. NaN stays NaN; tanh(-0) = -0.
inline float tanh_f32(float x) {
  const float a = std::fabs(x);
  const float c = a < 10.0f ? a : 10.0f;
  const float u = expm1_reduced(2.0f * c);
  const float t = std::copysign(u / (u + 2.0f), x);
  return x != x ? x : t;
}

// (2 atanh(s) - 2s) / s for |s| <= 0.1716 as a function of z = s^2: 2z/3 + 2z^2/5 + ... to z^5
// (its series: truncation below 2^-33 relative).
inline float two_atanh_tail(float z) {
  float p = 2.0f / 11.0f;
  p = p * z + 2.0f / 9.0f;
  p = p * z + 2.0f / 7.0f;
  p = p * z + 2.0f / 5.0f;
  p = p * z + 2.0f / 3.0f;
  return p * z;
}

// 2 atanh(s) = log((1 + s) / (1 - s)) for |s| <= 0.1716.
inline float two_atanh_small(float s) { return two_atanh_tail(s * s) * s + 2.0f * s; }

// x = (1 + f) 2^e with 1 + f in [sqrt(1/2), sqrt(2)): the reduction of log_f32, log2_f32 and
// log10_f32; f is exact. Subnormal x is scaled by 2^23 first. For x zero, negative, infinite or
// NaN it is meaningless, and log_special replaces the result.
struct LogReduced {
  float e, f;
};

inline LogReduced reduce_log(float x) {
  const bool subnormal = x < std::numeric_limits<float>::min();
  const uint32_t bits = float_bits(subnormal ? x * 8388608.0f : x);
  int32_t e = static_cast<int32_t>((bits >> 23) & 0xffu) - (subnormal ? 150 : 127);
  float m = bits_float((bits & 0x007fffffu) | 0x3f800000u);  // [1, 2)
  const bool high = m > 1.41421356f;
  m = high ? m * 0.5f : m;
  e = high ? e + 1 : e;
  return {static_cast<float>(e), m - 1.0f};  // exact (Sterbenz)
}

// A logarithm's special values: log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, NaN stays NaN;
// `result` elsewhere.
inline float log_special(float x, float result) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float out = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : result;
  out = x == 0.0f ? -kInf : out;
  out = x == kInf ? kInf : out;
  return x != x ? x : out;
}

// log(x) = e ln 2 + log(1 + f) (reduce_log), log(1 + f) = 2 atanh(s) with s = f / (2 + f); ln 2
// split in two so that e times its first part is exact.
inline float log_f32(float x) {
  constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860682030941723212e-6f;
  const auto [fe, f] = reduce_log(x);
  const float log_m = two_atanh_small(f / (f + 2.0f));
  return log_special(x, fe * kLn2Hi + (log_m + fe * kLn2Lo));
}

// log(1 + f) for f from reduce_log as hi + lo, hi of 12 bits (so that its product with a constant
// of 12 bits is exact): log(1 + f) = f - f^2/2 + s (f^2/2 + R), s = f / (2 + f), R = 2 atanh(s) /
// s - 2, whose small terms lose no bits to the rounding of s (FreeBSD's log2f and log10f).
struct LogSplit {
  float hi, lo;
};

inline LogSplit log1p_split(float f) {
  const float s = f / (2.0f + f);
  const float hfsq = 0.5f * f * f;
  const float r = s * (hfsq + two_atanh_tail(s * s));
  const float hi = bits_float(float_bits(f - hfsq) & 0xfffff000u);
  return {hi, ((f - hi) - hfsq) + r};  // f - hi exact
}

// log2(x) = e + log(1 + f) / ln 2 (reduce_log, log1p_split), 1 / ln 2 split in two, its first
// part of 12 bits: within 1 ulp (0.87 measured over every positive float), exact for the powers of
// two.
inline float log2_f32(float x) {
  constexpr float kLog2eHi = 1.44287109375f, kLog2eLo = -1.7605285393e-4f;  // 1 / ln 2 = hi + lo
  const auto [fe, f] = reduce_log(x);
  const auto [hi, lo] = log1p_split(f);
  return log_special(x, (((lo + hi) * kLog2eLo + lo * kLog2eHi) + hi * kLog2eHi) + fe);
}

// log10(x) = e log10(2) + log(1 + f) / ln 10 (reduce_log, log1p_split), with log10(2) and 1 / ln 10
// split in two so that the products with their first parts are exact: within 1 ulp (0.84 measured
// over every positive float), exact for the powers of ten up to 1e10.
inline float log10_f32(float x) {
  constexpr float kLg2Hi = 0.301025390625f, kLg2Lo = 4.6050390665e-6f;            // log10(2) = hi + lo
  constexpr float kLog10eHi = 0.434326171875f, kLog10eLo = -3.1689971365e-5f;    // 1 / ln 10 = hi + lo
  const auto [fe, f] = reduce_log(x);
  const auto [hi, lo] = log1p_split(f);
  return log_special(x, (((fe * kLg2Lo + (lo + hi) * kLog10eLo) + lo * kLog10eHi) + hi * kLog10eHi) + fe * kLg2Hi);
}

// log1p(x): where 1 + x is in log_f32's reduced range, 2 atanh(x / (2 + x)) straight from x (no
// rounding of 1 + x); elsewhere log(u) + (x - (u - 1)) / u, u = 1 + x rounded, the second term
// correcting that rounding (u - 1 and the difference are exact there). log1p(-1) = -inf, below
// -1 NaN, log1p(inf) = inf.
inline float log1p_f32(float x) {
  const float near = two_atanh_small(x / (2.0f + x));
  const float u = 1.0f + x;
  const float far = log_f32(u) + (u == 0.0f ? 0.0f : (x - (u - 1.0f)) / u);
  const float out = (x > -0.29289322f && x < 0.41421356f) ? near : far;
  return x == std::numeric_limits<float>::infinity() ? x : out;
}

// erf: below |x| = 0.875 its Taylor series x P(x^2) to x^21 (truncation below 2^-30 relative);
// above, 1 - exp(-x^2) G(1/|x|), where G, a degree-10 polynomial least-squares fitted to
// erfc(x) exp(x^2) on [0.875, 3.95] (relative error 1.3e-8), makes erfc. erf is +-1 in float32
// beyond |x| = 3.92. NaN stays NaN; erf(-0) = -0.
inline float erf_f32(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = 1.48071928e-08f;
  p = p * z - 1.63658447e-07f;
  p = p * z + 1.64621144e-06f;
  p = p * z - 1.49256504e-05f;
  p = p * z + 0.00012055333f;
  p = p * z - 0.000854832702f;
  p = p * z + 0.00522397763f;
  p = p * z - 0.0268661706f;
  p = p * z + 0.112837917f;
  p = p * z - 0.376126389f;
  p = p * z + 1.12837917f;
  const float series = a * p;
  const float c = a < 3.95f ? a : 3.95f;
  const float u = 1.0f / c;
  float g = -0.018898173f;
  g = g * u + 0.142979403f;
  g = g * u - 0.4728507f;
  g = g * u + 0.880661513f;
  g = g * u - 0.963780069f;
  g = g * u + 0.513023999f;
  g = g * u + 0.111111214f;
  g = g * u - 0.341384213f;
  g = g * u + 0.0141918176f;
  g = g * u + 0.56243864f;
  g = g * u + 9.01472503e-05f;
  const float tail = 1.0f - exp_f32(-(c * c)) * g;
  const float r = std::copysign(a < 0.875f ? series : tail, x);
  return x != x ? x : r;
}

// The polynomial with `coefficients` (highest degree first) at x, by Horner's rule in F.
template <class F, size_t N>
inline F horner(const double (&coefficients)[N], F x) {
  F p = static_cast<F>(coefficients[0]);
  for (size_t i = 1; i < N; ++i) p = p * x + static_cast<F>(coefficients[i]);
  return p;
}

// erfc's P (see erfc_f32), and the Taylor polynomial of exp of degree 8, highest degree first.
constexpr double kErfcP[] = {8.00341815964795e-05,  0.00017085901599753553, -0.0004002467879261783,
                             -0.0014219693625555608, 0.0012518846291028145, 0.008709364672968683,
                             -0.008030582362063075,  -0.054217839440674404, 0.16405100577145246,
                             -0.1660305227278468,   -0.09276381959555112,  0.27697838270336816};
constexpr double kExpTaylor8[] = {1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0,
                                  1.0 / 6.0,     0.5,          1.0,         1.0};

// erfc(a), a = |x| up to 10.5, in double and rounded once to float (in float the roundings of its
// parts added up to 4 ulp): exp(-a^2), a^2 exact in double, reduced as in reduce_by_ln2, by its
// Taylor polynomial of degree 8 (truncation below 2^-32 relative) and 2^n from n's bits; times
// erfc(a) exp(a^2) = (1 + P(q)) / (1 + 2a), q = (a - 2) / (a + 2) in [-1, 0.68] (N. Juffa's form),
// P of degree 11 fitted to 1e-9 relative. erfc(x) = 2 - erfc(-x) below 0. Within 1 ulp (0.52
// measured over every float in (-11, 11)), relative in the tail too, to the subnormal results from
// 9.19 (0 in float32 beyond 10.055). NaN stays NaN, erfc(inf) = 0, erfc(-inf) = 2.
inline float erfc_f32(float x) {
  const double abs_x = std::fabs(static_cast<double>(x));
  const double a = abs_x < 10.5 ? abs_x : 10.5;  // NaN compares false: 10.5, fixed below
  const double q = (a - 2.0) / (a + 2.0);
  const double p = horner(kErfcP, q);
  constexpr double kLog2e = 1.4426950408889634, kLn2 = 0.6931471805599453, kRound = 6755399441055744.0;  // 1.5 * 2^52
  const double c = -(a * a);
  const double shifted = c * kLog2e + kRound;  // n + 1.5 * 2^52: n in the low bits
  const double n = shifted - kRound;
  const double r = c - n * kLn2;
  const double e = horner(kExpTaylor8, r);
  const uint64_t n_bits = detail::bit_copy<uint64_t>(shifted) - detail::bit_copy<uint64_t>(kRound);
  const double scale = detail::bit_copy<double>((n_bits + 1023) << 52);  // 2^n, n in [-160, 0]
  const double tail = (e * scale) * ((p + 1.0) / (2.0 * a + 1.0));
  const float out = static_cast<float>(x < 0.0f ? 2.0 - tail : tail);
  return x != x ? x : out;
}

// Giles' polynomials for erfinv(x) / x (M. Giles, "Approximating the erfinv function", GPU
// Computing Gems, 2011), highest degree first: in w - 2.5 below w = 5, in sqrt(w) - 3 above, where
// w = -log((1 - x)(1 + x)).
constexpr double kErfinvCentre[] = {2.81022636e-08,  3.43273939e-07, -3.5233877e-06,
                                    -4.39150654e-06, 0.00021858087,  -0.00125372503,
                                    -0.00417768164,  0.246640727,    1.50140941};
constexpr double kErfinvTail[] = {-0.000200214257, 0.000100950558, 0.00134934322,
                                  -0.00367342844,  0.00573950773,  -0.0076224613,
                                  0.00943887047,   1.00167406,     2.83297682};

// erfinv(x) / x by Giles' polynomials from their w = -log((1 - x)(1 + x)), for erfinv and ndtri in
// float and as the start of the float64 versions: both evaluated, one selected (a select, which
// the lane loops vectorize).
template <class F>
inline F erfinv_over_x(F w) {
  const F centre = horner(kErfinvCentre, w - F(2.5)), tail = horner(kErfinvTail, std::sqrt(w) - F(3));
  return w < F(5) ? centre : tail;
}

// erfinv by Giles' polynomials. Within 4 ulp of the exact value
// over (-1, 1) (the polynomials' own error); +-1 gives +-inf, |x| > 1 and NaN give NaN,
// erfinv(-0) = -0.
inline float erfinv_f32(float x) {
  const float out = erfinv_over_x(-log_f32((1.0f - x) * (1.0f + x))) * x;
  return std::fabs(x) == 1.0f ? std::copysign(std::numeric_limits<float>::infinity(), x) : out;
}

// erfinv in double (the C library has none): Giles' polynomials evaluated in double as the start,
// then four Newton steps, on erf(x) = |y| below |y| = 0.5 and on log(erfc(x)) = log(1 - |y|)
// above (nearly quadratic in x, so the steps converge from the start's error in the far tail
// too; 1 - |y| is exact there). Converged to within 3e-16 relative, up to |y| = 1 - 2^-53.
inline double erfinv_f64(double y) {
  const double a = std::fabs(y);
  if (!(a < 1.0)) {  // +-1, beyond, NaN
    constexpr double kInf = std::numeric_limits<double>::infinity();
    return a == 1.0 ? std::copysign(kInf, y) : std::numeric_limits<double>::quiet_NaN();
  }
  double x = erfinv_over_x(-std::log((1.0 - a) * (1.0 + a))) * a;
  constexpr double kTwoOverSqrtPi = 1.1283791670955126;
  for (int step = 0; step < 4; ++step) {
    if (a < 0.5) {
      x -= (std::erf(x) - a) / (kTwoOverSqrtPi * std::exp(-x * x));
    } else {
      const double tail = std::erfc(x);
      x += (std::log(tail) - std::log1p(-a)) * tail / (kTwoOverSqrtPi * std::exp(-x * x));
    }
  }
  return std::copysign(x, y);
}

// ndtri, the inverse of the standard normal CDF Phi, in double: by symmetry from q = min(p, 1 - p)
// (1 - p is exact for p >= 1/2), negated above p = 1/2. From q = 1/4 on, sqrt(2) erfinv(2q - 1)
// (2q - 1 exact); below, a start within 4.5e-4 (Abramowitz and Stegun 26.2.23), then three Newton
// steps on log Phi(y) = log q (nearly quadratic in y, so they converge in the far tail too), with
// Phi / phi taken from log Phi so that the density phi cannot underflow. Converged to within
// 4e-16 relative down to p = 1e-300 (for subnormal p, erfc's result keeps fewer bits);
// ndtri(0) = -inf, ndtri(1) = inf, p outside [0, 1] and NaN give NaN.
inline double ndtri_f64(double p) {
  if (!(p > 0.0 && p < 1.0)) {  // 0, 1, beyond, NaN
    constexpr double kInf = std::numeric_limits<double>::infinity();
    return p == 0.0 ? -kInf : (p == 1.0 ? kInf : std::numeric_limits<double>::quiet_NaN());
  }
  const double q = p < 0.5 ? p : 1.0 - p;
  constexpr double kSqrt2 = 1.4142135623730951, kSqrt2Pi = 2.5066282746310002;
  double y;
  if (q >= 0.25) {
    y = kSqrt2 * erfinv_f64(2.0 * q - 1.0);
  } else {
    const double log_q = std::log(q), t = std::sqrt(-2.0 * log_q);
    y = (2.515517 + t * (0.802853 + t * 0.010328)) / (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308))) - t;
    for (int step = 0; step < 3; ++step) {
      const double log_cdf = std::log(0.5 * std::erfc(-y / kSqrt2));
      y -= (log_cdf - log_q) * kSqrt2Pi * std::exp(log_cdf + 0.5 * y * y);
    }
  }
  return p > 0.5 ? -y : y;
}

// ndtri by Giles' erfinv polynomials, branch-free: sqrt(2) erfinv(x) with x = 2p - 1, and their
// w = -log((1 - x)(1 + x)) taken as -log(2p * 2(1 - p)), so that a small p keeps the precision
// that x has lost. The polynomials hold up to w = 16: within 5 ulp of the exact value (4.8
// measured) where ndtri_fast_holds, p from about 4.5e-8 (w = 15.5) to below 1. That test is one
// comparison, like sin and cos's: a test of two bounds left GCC's lane loops scalar.
constexpr float kNdtriFastHalfWidth = 0.49999997f;  // 0.5 - 2^-25

inline bool ndtri_fast_holds(float p) { return std::fabs(p - 0.5f) < kNdtriFastHalfWidth; }

inline float ndtri_fast(float p) {
  return erfinv_over_x(-log_f32((2.0f * p) * (2.0f * (1.0f - p)))) * (1.41421356f * (2.0f * p - 1.0f));
}

// ndtri in float32: ndtri_fast where it holds; elsewhere (p below 4.5e-8, 1, outside [0, 1), NaN)
// the float64 version, rounded.
inline float ndtri_f32(float p) { return ndtri_fast_holds(p) ? ndtri_fast(p) : static_cast<float>(ndtri_f64(p)); }

// atan(t) - t for |t| <= 1/2 by the Taylor series of atan, -t^3/3 + t^5/5 - ... to t^23
// (truncation below 2^-28 relative at 1/2, 2^-33 up to tan(pi/8)).
inline float atan_series_tail(float t) {
  const float z = t * t;
  float p = -0.0434782609f;
  p = p * z + 0.0476190476f;
  p = p * z - 0.0526315789f;
  p = p * z + 0.0588235294f;
  p = p * z - 0.0666666667f;
  p = p * z + 0.0769230769f;
  p = p * z - 0.0909090909f;
  p = p * z + 0.111111111f;
  p = p * z - 0.142857143f;
  p = p * z + 0.2f;
  p = p * z - 0.333333333f;
  return (p * z) * t;
}

// atan: |x| reduced to |t| <= tan(pi/8) (atan x = pi/4 + atan((x - 1) / (x + 1)) up to tan(3pi/8),
// pi/2 - atan(1 / x) above), then t + atan_series_tail(t); pi/4 and pi/2 split in two so that
// their rounding does not add up. NaN stays NaN, atan(+-inf) = +-pi/2, atan(-0) = -0.
inline float atan_f32(float x) {
  constexpr float kPi2Hi = 1.57079637f, kPi2Lo = -4.37113883e-8f;  // pi/2 = kPi2Hi + kPi2Lo
  const float a = std::fabs(x);
  const bool big = a > 2.41421356f, mid = a > 0.41421356f;
  const float t = big ? -1.0f / a : (mid ? (a - 1.0f) / (a + 1.0f) : a);
  const float p = atan_series_tail(t) + t;
  const float hi = big ? kPi2Hi : (mid ? 0.5f * kPi2Hi : 0.0f);
  const float lo = big ? kPi2Lo : (mid ? 0.5f * kPi2Lo : 0.0f);
  const float r = std::copysign(hi + (p + lo), x);
  return x != x ? x : r;
}

// atan2(y, x) = sign(y) (k pi/4 +- atan(t)) by octant: from num = min(|x|, |y|) and den = max,
// t = num / den, or (num - den) / (num + den) with pi/4 added where num / den > 1/2, in double
// (rounded once, no overflow, an underflow only where the result underflows); then k = 2 - k
// where |y| > |x| and k = 4 - k where x is negative (its sign bit, so that atan2(+-0, -0) = +-pi).
// atan(t) = t + atan_series_tail(t) (that small part in float) and the sum with k pi/4 in double,
// rounded once to float: within 1 ulp (0.80 measured over 4e8 random pairs). 0/0 and inf/inf are
// taken as 0/1 and 1/1: C's atan2(+-0, +-0) and atan2(+-inf, +-inf). NaN in either gives NaN.
inline float atan2_f32(float y, float x) {
  constexpr double kPi4 = 0.78539816339744830962;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float ax = std::fabs(x), ay = std::fabs(y);
  const bool swapped = ay > ax, both_inf = (ax == kInf) & (ay == kInf);
  const float num = both_inf ? 1.0f : (swapped ? ax : ay);
  const float den = both_inf ? 1.0f : (swapped ? ay : ax);
  const double n = num, d = den == 0.0f ? 1.0f : den;  // (num is 0 too)
  const bool mid = n > 0.5 * d;
  const double t = (mid ? n - d : n) / (mid ? n + d : d);  // in [-1/3, 1/2]
  const bool negative_x = (float_bits(x) >> 31) != 0;
  double k = mid ? 1.0 : 0.0;
  k = swapped ? 2.0 - k : k;
  k = negative_x ? 4.0 - k : k;
  const double atan_t = t + atan_series_tail(static_cast<float>(t));
  const float r = static_cast<float>(k * kPi4 + (swapped != negative_x ? -atan_t : atan_t));
  return ((x != x) | (y != y)) ? x + y : std::copysign(r, y);
}

// asin(x) = atan(x / sqrt((1 - x)(1 + x))), acos(x) = 2 atan(sqrt((1 - x) / (1 + x))): NaN beyond
// [-1, 1] (a negative square root), asin(+-1) = +-pi/2, acos(-1) = pi.
inline float asin_f32(float x) { return atan_f32(x / std::sqrt((1.0f - x) * (1.0f + x))); }

inline float acos_f32(float x) { return 2.0f * atan_f32(std::sqrt((1.0f - x) / (1.0f + x))); }

// Where exp(|x|) overflows but sinh and cosh do not (|x| in (88, 89.4]): exp(|x|) / 2 as
// (exp(|x| / 2) / 2) exp(|x| / 2).
inline float half_exp_large(float a) {
  const float h = exp_f32(0.5f * a);
  return (0.5f * h) * h;
}

// sinh(x) = sign(x) (E + E / (E + 1)) / 2 with E = expm1(|x|): accurate near 0 too.
inline float sinh_f32(float x) {
  const float a = std::fabs(x);
  const float e = expm1_f32(a);
  const float r = a < 88.0f ? 0.5f * (e + e / (e + 1.0f)) : half_exp_large(a);
  return std::copysign(r, x);  // NaN takes the second branch and stays NaN
}

// cosh(x) = (e + 1 / e) / 2 with e = exp(|x|).
inline float cosh_f32(float x) {
  const float a = std::fabs(x);
  const float e = exp_f32(a);
  return a < 88.0f ? 0.5f * (e + 1.0f / e) : half_exp_large(a);
}

// atanh(x) = sign(x) log1p(2|x| / (1 - |x|)) / 2, the argument written 2a + 2a^2 / (1 - a) below
// 0.5 (its large part exact). atanh(+-1) = +-inf; NaN beyond (a log1p below -1).
inline float atanh_f32(float x) {
  const float a = std::fabs(x);
  const float t = a + a;
  const float arg = a < 0.5f ? t + t * a / (1.0f - a) : t / (1.0f - a);
  return std::copysign(0.5f * log1p_f32(arg), x);
}

// asinh(x) = sign(x) log1p(a + a^2 / (1 + sqrt(1 + a^2))), a = |x|; log(a) + log(2) from 2^12 on,
// where a^2 + 1 rounds to a^2 (and before it overflows).
inline float asinh_f32(float x) {
  constexpr float kLn2 = 0.693147181f;
  const float a = std::fabs(x);
  const float small = log1p_f32(a + a * a / (1.0f + std::sqrt(1.0f + a * a)));
  return std::copysign(a < 4096.0f ? small : log_f32(a) + kLn2, x);
}

// acosh(x) = log1p(t + sqrt(2t + t^2)), t = x - 1; log(x) + log(2) from 2^12 on. NaN below 1.
inline float acosh_f32(float x) {
  constexpr float kLn2 = 0.693147181f;
  const float t = x - 1.0f;
  const float r = x < 4096.0f ? log1p_f32(t + std::sqrt(t + t + t * t)) : log_f32(x) + kLn2;
  return x < 1.0f ? std::numeric_limits<float>::quiet_NaN() : r;
}

// sin (quarter = 0) or cos (quarter = 1) of x for |x| < kTrigFastLimit: r = x - k pi/2 in double
// with k = round(x 2/pi) and pi/2 in two parts, the first of 33 bits, so that k times it is exact
// (k < 2^18); then the Taylor polynomials of sin and cos in r on [-pi/4, pi/4] (to r^11 and r^12:
// truncation below 2^-30 relative) in double, picked and signed by the quadrant k + quarter with
// bit operations (k's low bits are those of the rounding sum), and rounded once to float: within
// 1 ulp. Larger |x|, inf and NaN: sin_f32 / cos_f32 take libm's (the lane loops run this for
// every lane, then fix those lanes; inf and NaN give NaN here).
constexpr float kTrigFastLimit = 262144.0f;  // 2^18

inline bool trig_reduced_holds(float x) { return std::fabs(x) < kTrigFastLimit; }

// x = k pi/2 + r with |r| <= pi/4: sin(r) and cos(r) in double, and k in the low bits of
// `shifted` (see above).
struct QuarterTurns {
  double shifted, sine, cosine;
};

inline QuarterTurns quarter_turns(float x) {
  constexpr double kTwoOverPi = 0.63661977236758134308, kRound = 6755399441055744.0;  // 1.5 * 2^52
  constexpr double kPio2Hi = 1.57079632673412561417e+00, kPio2Lo = 6.07710050650619224932e-11;
  const double d = x;
  const double shifted = d * kTwoOverPi + kRound;  // k + 1.5 * 2^52: k in the low bits
  const double k = shifted - kRound;               // round to nearest under the default mode
  const double r = (d - k * kPio2Hi) - k * kPio2Lo;
  const double r2 = r * r;
  double sp = -1.0 / 39916800.0;
  sp = sp * r2 + 1.0 / 362880.0;
  sp = sp * r2 - 1.0 / 5040.0;
  sp = sp * r2 + 1.0 / 120.0;
  sp = sp * r2 - 1.0 / 6.0;
  double cp = 1.0 / 479001600.0;
  cp = cp * r2 - 1.0 / 3628800.0;
  cp = cp * r2 + 1.0 / 40320.0;
  cp = cp * r2 - 1.0 / 720.0;
  cp = cp * r2 + 1.0 / 24.0;
  cp = cp * r2 - 0.5;
  return {shifted, r * (1.0 + r2 * sp), 1.0 + r2 * cp};  // (a product keeps sin(-0) = -0)
}

inline float sin_cos_reduced(float x, int quarter) {
  const QuarterTurns q = quarter_turns(x);
  const uint64_t quadrant = detail::bit_copy<uint64_t>(q.shifted) + static_cast<uint64_t>(quarter);
  const uint64_t odd = 0 - (quadrant & 1);  // all ones in quadrants 1 and 3: the cosine
  const uint64_t value = (detail::bit_copy<uint64_t>(q.cosine) & odd) | (detail::bit_copy<uint64_t>(q.sine) & ~odd);
  return static_cast<float>(detail::bit_copy<double>(value ^ ((quadrant & 2) << 62)));  // quadrants 2, 3: negated
}

// tan of x for |x| < kTrigFastLimit: sin(r) / cos(r) for even k, -cos(r) / sin(r) for odd k, one
// division in double, rounded once to float: within 1 ulp. tan(-0) = -0.
inline float tan_reduced(float x) {
  const QuarterTurns q = quarter_turns(x);
  const bool odd = (detail::bit_copy<uint64_t>(q.shifted) & 1) != 0;
  return static_cast<float>((odd ? -q.cosine : q.sine) / (odd ? q.sine : q.cosine));
}

inline float sin_f32(float x) { return trig_reduced_holds(x) ? sin_cos_reduced(x, 0) : std::sin(x); }

inline float cos_f32(float x) { return trig_reduced_holds(x) ? sin_cos_reduced(x, 1) : std::cos(x); }

inline float tan_f32(float x) { return trig_reduced_holds(x) ? tan_reduced(x) : std::tan(x); }

// hypot from the exact squares in double (a float squared has 48 bits, and double's range holds
// them): one rounding of the sum, the square root's, and one to float; within 1 ulp, branch-free.
// An infinite argument gives inf, also beside a NaN, as in C.
inline float hypot_f32(float x, float y) {
  const double dx = x, dy = y;
  const float r = static_cast<float>(std::sqrt(dx * dx + dy * dy));
  return (std::isinf(x) | std::isinf(y)) ? std::numeric_limits<float>::infinity() : r;
}

}  // namespace spikejit::ir
