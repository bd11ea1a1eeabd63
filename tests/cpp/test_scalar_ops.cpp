// The branch-free float32 transcendentals of ir/float_math.h (what the CPU executor's Exp,
// Sigmoid, Expm1, Tanh, Log, Log2, Log10, Log1p, Exp2, Erf, Erfc, Erfinv, Ndtri, Atan, Atan2, Asin,
// Acos, Sinh, Cosh, Atanh, Asinh and Acosh use) against libm's double precision, over their ranges
// (a stride through every float), and their special values.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <cstdint>
#include <cstring>
#include <limits>

#include "ir/scalar_ops.h"

namespace spikejit {
namespace {

float float_of_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// |got - exact| in units of the last place of the float nearest to `exact` (subnormal spacing
// below the normal range).
double ulp_error(float got, double exact) {
  const float nearest = static_cast<float>(exact);
  const double spacing = std::max<double>(std::nextafter(std::fabs(nearest), INFINITY) - std::fabs(nearest),
                                          std::numeric_limits<float>::denorm_min());
  return std::fabs(static_cast<double>(got) - exact) / spacing;
}

TEST(ScalarOps, ExpF32IsWithinTwoUlpOfTheExactValue) {
  // Every float in (-104, 89): exp overflows above 88.73 and is below half the smallest
  // subnormal under -103.97. A stride over the bit patterns keeps the run short.
  double worst = 0;
  float worst_x = 0;
  int64_t checked = 0;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 61) {
    const float x = float_of_bits(static_cast<uint32_t>(bits));
    if (!(x > -104.0f && x < 89.0f)) continue;
    const double exact = std::exp(static_cast<double>(x));
    const float got = ir::exp_f32(x);
    if (exact > std::numeric_limits<float>::max()) {
      ASSERT_TRUE(std::isinf(got) && got > 0) << "exp(" << x << ") = " << got;
      continue;
    }
    const double error = ulp_error(got, exact);
    if (error > worst) {
      worst = error;
      worst_x = x;
    }
    ++checked;
  }
  EXPECT_GT(checked, 10'000'000);
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
}

TEST(ScalarOps, ExpF32SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(ir::exp_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(ir::exp_f32(inf), inf);
  EXPECT_EQ(ir::exp_f32(-inf), 0.0f);
  EXPECT_EQ(ir::exp_f32(1000.0f), inf);
  EXPECT_EQ(ir::exp_f32(-1000.0f), 0.0f);
  EXPECT_EQ(ir::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(ir::exp_f32(-0.0f), 1.0f);
  EXPECT_EQ(ir::sigmoid(0.0f), 0.5f);
  EXPECT_EQ(ir::sigmoid(-inf), 0.0f);
  EXPECT_EQ(ir::sigmoid(inf), 1.0f);
  // The smallest subnormal results round like the exact value.
  EXPECT_EQ(ir::exp_f32(-103.5f), static_cast<float>(std::exp(-103.5)));
  EXPECT_EQ(ir::exp_f32(-100.0f), static_cast<float>(std::exp(-100.0)));
}

// The worst ulp error of f against the double-precision `exact` over every 61st float x with
// lo < x < hi; `checked` counts the points.
double worst_ulp_error(float (*f)(float), double (*exact)(double), float lo, float hi, float* worst_x,
                       int64_t* checked) {
  double worst = 0;
  *checked = 0;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFull; bits += 61) {
    const float x = float_of_bits(static_cast<uint32_t>(bits));
    if (!(x > lo && x < hi)) continue;
    const double error = ulp_error(f(x), exact(static_cast<double>(x)));
    if (!(error <= worst)) {  // a NaN result counts as the worst
      worst = error;
      *worst_x = x;
    }
    ++*checked;
  }
  return worst;
}

TEST(ScalarOps, EachFunctionIsWithinItsUlpBound) {
  struct Case {
    const char* name;
    float (*f)(float);
    double (*exact)(double);
    float lo, hi;  // the range swept, open
    double bound;  // ulp: 2 plus what divisions and square roots of their reductions add
  };
  constexpr float kMax = std::numeric_limits<float>::max();
  for (const Case& c : {Case{"expm1", ir::expm1_f32, [](double x) { return std::expm1(x); }, -120.0f, 88.7f, 2.0},
                        Case{"tanh", ir::tanh_f32, [](double x) { return std::tanh(x); }, -50.0f, 50.0f, 3.0},
                        Case{"log", ir::log_f32, [](double x) { return std::log(x); }, 0.0f, kMax, 2.0},
                        Case{"log2", ir::log2_f32, [](double x) { return std::log2(x); }, 0.0f, kMax, 1.0},
                        Case{"log10", ir::log10_f32, [](double x) { return std::log10(x); }, 0.0f, kMax, 1.0},
                        // (below 128: above, inf, checked below)
                        Case{"exp2", ir::exp2_f32, [](double x) { return std::exp2(x); }, -160.0f, 128.0f, 1.5},
                        Case{"log1p", ir::log1p_f32, [](double x) { return std::log1p(x); }, -1.0f, kMax, 2.0},
                        Case{"erf", ir::erf_f32, [](double x) { return std::erf(x); }, -10.0f, 10.0f, 3.0},
                        // relative in the tail too (ulp_error's spacing is the result's), to
                        // the subnormal results from 9.19 and 0 from 10.06
                        Case{"erfc", ir::erfc_f32, [](double x) { return std::erfc(x); }, -11.0f, 11.0f, 1.0},
                        Case{"atan", ir::atan_f32, [](double x) { return std::atan(x); }, -1e30f, 1e30f, 2.5},
                        Case{"asin", ir::asin_f32, [](double x) { return std::asin(x); }, -1.0f, 1.0f, 3.5},
                        Case{"acos", ir::acos_f32, [](double x) { return std::acos(x); }, -1.0f, 1.0f, 3.0},
                        Case{"sinh", ir::sinh_f32, [](double x) { return std::sinh(x); }, -89.4f, 89.4f, 3.0},
                        Case{"cosh", ir::cosh_f32, [](double x) { return std::cosh(x); }, -89.4f, 89.4f, 3.0},
                        Case{"atanh", ir::atanh_f32, [](double x) { return std::atanh(x); }, -1.0f, 1.0f, 3.0},
                        Case{"asinh", ir::asinh_f32, [](double x) { return std::asinh(x); }, -1e30f, 1e30f, 3.0},
                        Case{"acosh", ir::acosh_f32, [](double x) { return std::acosh(x); }, 1.0f, 1e30f, 3.0},
                        Case{"sin", ir::sin_f32, [](double x) { return std::sin(x); }, -1e6f, 1e6f, 1.0},
                        Case{"cos", ir::cos_f32, [](double x) { return std::cos(x); }, -1e6f, 1e6f, 1.0},
                        // (the reduced range only: beyond, libm's tanf, 1.19 ulp at 989886)
                        Case{"tan", ir::tan_f32, [](double x) { return std::tan(x); }, -262144.0f, 262144.0f, 1.0},
                        // against erfinv_f64 (the C library has no erfinv; its own test is below)
                        Case{"erfinv", ir::erfinv_f32, ir::erfinv_f64, -1.0f, 1.0f, 4.0},
                        // 4.8 ulp measured over every float in (0, 1), 4.5 on this stride
                        Case{"ndtri", ir::ndtri_f32, ir::ndtri_f64, 0.0f, 1.0f, 5.0}}) {
    float at = 0;
    int64_t checked = 0;
    const double worst = worst_ulp_error(c.f, c.exact, c.lo, c.hi, &at, &checked);
    EXPECT_GT(checked, 10'000'000) << c.name;
    EXPECT_LE(worst, c.bound) << c.name << " at x = " << at;
  }
}

// exp2 is exact at the integers (subnormal results too) and inf from 128 on; log2 is exact at the
// powers of two (subnormal ones too), log10 at the powers of ten that a float holds.
TEST(ScalarOps, Exp2Log2AndLog10AreExactWhereTheyShouldBe) {
  for (int n = -149; n <= 127; ++n) {
    const float power = std::ldexp(1.0f, n);
    EXPECT_EQ(ir::exp2_f32(static_cast<float>(n)), power) << "n = " << n;
    EXPECT_EQ(ir::log2_f32(power), static_cast<float>(n)) << "n = " << n;
  }
  for (int k = 0; k <= 10; ++k) EXPECT_EQ(ir::log10_f32(static_cast<float>(std::pow(10.0, k))), k) << "k = " << k;
  const float inf = std::numeric_limits<float>::infinity();
  for (float x = 128.0f; x < 130.0f; x = std::nextafter(x, inf)) ASSERT_EQ(ir::exp2_f32(x), inf) << "x = " << x;
  for (float x = -150.0f; x > -160.0f; x = std::nextafter(x, -inf)) ASSERT_EQ(ir::exp2_f32(x), 0.0f) << "x = " << x;
}

// erfc's tail, every float from 4 to 10.1 (the table above takes a stride): relative accuracy
// down to erfc(9.19), the smallest normal float, then the subnormals, then 0.
TEST(ScalarOps, ErfcKeepsItsAccuracyInTheTail) {
  double worst = 0;
  float worst_x = 0;
  for (float x = 4.0f; x < 10.1f; x = std::nextafter(x, 11.0f)) {
    const double error = ulp_error(ir::erfc_f32(x), std::erfc(static_cast<double>(x)));
    if (!(error <= worst)) worst = error, worst_x = x;
  }
  EXPECT_LE(worst, 1.0) << "at x = " << worst_x;
  EXPECT_GT(ir::erfc_f32(9.0f), std::numeric_limits<float>::min());
  EXPECT_EQ(ir::erfc_f32(10.05f), std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(ir::erfc_f32(10.06f), 0.0f);
}

// hypot_f32 against libm's double hypot over random pairs spanning the float range (one
// argument up to 2^60 times the other, both signs, subnormals), and C's special values.
TEST(ScalarOps, HypotIsWithinOneUlp) {
  std::mt19937_64 rng(20261205);
  std::uniform_int_distribution<uint32_t> bits(0, 0x7F7FFFFFu);  // finite, non-negative
  double worst = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float x = float_of_bits(bits(rng)) * (i % 2 ? 1.0f : -1.0f);
    const float y = i % 3 == 0 ? float_of_bits(bits(rng)) : x * std::ldexp(1.0f, -static_cast<int>(rng() % 60));
    const float got = ir::hypot_f32(x, y);
    const double want = std::hypot(static_cast<double>(x), static_cast<double>(y));
    if (std::isinf(want) || want > std::numeric_limits<float>::max()) {
      EXPECT_EQ(got, std::numeric_limits<float>::infinity()) << x << ", " << y;
      continue;
    }
    worst = std::max(worst, ulp_error(got, want));
  }
  EXPECT_LE(worst, 1.0);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(ir::hypot_f32(inf, nan), inf);
  EXPECT_EQ(ir::hypot_f32(nan, -inf), inf);
  EXPECT_TRUE(std::isnan(ir::hypot_f32(nan, 1.0f)));
  EXPECT_EQ(ir::hypot_f32(-3.0f, 4.0f), 5.0f);
  EXPECT_EQ(ir::hypot_f32(0.0f, -0.0f), 0.0f);
  EXPECT_EQ(ir::tan_f32(-0.0f), -0.0f);
  EXPECT_TRUE(std::signbit(ir::tan_f32(-0.0f)));
  EXPECT_EQ(ir::tan_f32(1e30f), std::tan(1e30f));  // beyond the reduced range: libm's
}

// atan2_f32 against libm's double atan2 over random pairs of both signs (all four quadrants):
// both arguments uniform over the finite floats' bits (ratios that overflow and underflow a
// float), ratios from 2^-30 to 2^30, and ratios from 0.3 to 2.8 (the octants' and its reduction's
// boundaries at 1/2, 1 and 2); then C's special values.
TEST(ScalarOps, Atan2IsWithinOneUlp) {
  std::mt19937_64 rng(20261206);
  std::uniform_int_distribution<uint32_t> bits(0, 0x7F7FFFFFu);  // finite, non-negative
  double worst = 0;
  float worst_y = 0, worst_x = 0;
  for (int i = 0; i < 3000000; ++i) {
    const float x = float_of_bits(bits(rng)) * (rng() % 2 ? 1.0f : -1.0f);
    const float u = static_cast<float>(rng() % 1000000) / 1000000.0f;
    const int k = static_cast<int>(rng() % 31);
    float y = x;
    switch (i % 4) {
      case 0: y = float_of_bits(bits(rng)); break;
      case 1: y = x * std::ldexp(1.0f + u, -k); break;
      case 2: y = x * std::ldexp(1.0f + u, k); break;
      default: y = x * (0.3f + 2.5f * u); break;
    }
    y = rng() % 2 ? y : -y;
    const double error = ulp_error(ir::atan2_f32(y, x), std::atan2(static_cast<double>(y), static_cast<double>(x)));
    if (!(error <= worst)) worst = error, worst_y = y, worst_x = x;
  }
  EXPECT_LE(worst, 1.0) << "at y = " << worst_y << ", x = " << worst_x;

  // Signed zeros, infinities, NaN, the extremes: as C's atan2 (in double, rounded).
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min(), big = std::numeric_limits<float>::max();
  for (float y : {0.0f, -0.0f, 1.0f, -1.0f, tiny, -tiny, big, -big, inf, -inf, nan}) {
    for (float x : {0.0f, -0.0f, 1.0f, -1.0f, tiny, -tiny, big, -big, inf, -inf, nan}) {
      const float got = ir::atan2_f32(y, x);
      const float want = static_cast<float>(std::atan2(static_cast<double>(y), static_cast<double>(x)));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << "atan2(" << y << ", " << x << ") = " << got;
      } else {
        EXPECT_TRUE(got == want && std::signbit(got) == std::signbit(want))
            << "atan2(" << y << ", " << x << ") = " << got << ", not " << want;
      }
    }
  }
  const float pi = static_cast<float>(M_PI);
  EXPECT_EQ(ir::atan2_f32(0.0f, -0.0f), pi);
  EXPECT_EQ(ir::atan2_f32(-0.0f, -0.0f), -pi);
  EXPECT_TRUE(std::signbit(ir::atan2_f32(-0.0f, 0.0f)) && ir::atan2_f32(-0.0f, 0.0f) == 0.0f);
  EXPECT_EQ(ir::atan2_f32(inf, inf), static_cast<float>(M_PI / 4));
  EXPECT_EQ(ir::atan2_f32(-inf, -inf), static_cast<float>(-3 * M_PI / 4));
  EXPECT_EQ(ir::atan2_f32(1e-30f, 1e30f), 0.0f);  // 1e-60 underflows
  EXPECT_EQ(ir::atan2_f32(1e30f, 1e-30f), static_cast<float>(M_PI / 2));
  EXPECT_EQ(ir::atan2_f32(1e-30f, -1e30f), pi);
  EXPECT_EQ(ir::atan2_f32(-1e-40f, 1.0f), -1e-40f);  // a subnormal result, rounded once
}

// apply_op<float> takes the branch-free forms, apply_op<double> libm's; only fmod and pow are
// left calling the C library per lane.
TEST(ScalarOps, ApplyOpTakesTheBranchFreeFormsInFloat32) {
  using ir::Op;
  for (float a : {-12.5f, -1.5f, -0.25f, 0.0f, 0.3f, 1.0f, 3.7f, 9.5f, 100.0f, 1e30f}) {
    const float b = 0.75f - a;
    const double da = a, db = b;
    EXPECT_EQ(ir::apply_op<float>(Op::Exp2, a, 0, 0), ir::exp2_f32(a));
    EXPECT_EQ(ir::apply_op<float>(Op::Erfc, a, 0, 0), ir::erfc_f32(a));
    EXPECT_EQ(ir::apply_op<float>(Op::Atan2, a, b, 0), ir::atan2_f32(a, b));
    EXPECT_EQ(ir::apply_op<double>(Op::Exp2, da, 0, 0), std::exp2(da));
    EXPECT_EQ(ir::apply_op<double>(Op::Erfc, da, 0, 0), std::erfc(da));
    EXPECT_EQ(ir::apply_op<double>(Op::Atan2, da, db, 0), std::atan2(da, db));
    if (a > 0) {
      EXPECT_EQ(ir::apply_op<float>(Op::Log2, a, 0, 0), ir::log2_f32(a));
      EXPECT_EQ(ir::apply_op<float>(Op::Log10, a, 0, 0), ir::log10_f32(a));
      EXPECT_EQ(ir::apply_op<double>(Op::Log2, da, 0, 0), std::log2(da));
      EXPECT_EQ(ir::apply_op<double>(Op::Log10, da, 0, 0), std::log10(da));
    }
  }
  for (Op op : {Op::Exp2, Op::Log2, Op::Log10, Op::Erfc, Op::Atan2, Op::Exp, Op::Hypot}) {
    EXPECT_FALSE(ir::calls_libm_per_lane(op)) << ir::op_info(op).name;
  }
  EXPECT_TRUE(ir::calls_libm_per_lane(Op::Fmod));
  EXPECT_TRUE(ir::calls_libm_per_lane(Op::Pow));
}

// erfinv_f64, the reference above and the executor's float64 Erfinv, inverts libm's erf: near 0
// erf(erfinv(y)) = y, in the tails erfc(erfinv(y)) = 1 - y (relative), up to 1 - 2^-53.
TEST(ScalarOps, ErfinvF64InvertsErf) {
  double worst_centre = 0, worst_tail = 0;
  auto check = [&](double y) {
    const double x = ir::erfinv_f64(y), a = std::fabs(y);
    ASSERT_EQ(std::signbit(x), std::signbit(y)) << "y = " << y;
    if (a < 0.5) {
      worst_centre = std::max(worst_centre, std::fabs(std::erf(x) - y) / std::max(a, 1e-300));
    } else {
      worst_tail = std::max(worst_tail, std::fabs(std::erfc(std::fabs(x)) / (1.0 - a) - 1.0));
    }
  };
  for (int i = -100000; i <= 100000; ++i) check(i / 100001.0);
  for (int e = 1; e <= 53; ++e) {
    check(1.0 - std::ldexp(1.0, -e));
    check(-(1.0 - std::ldexp(1.0, -e)));
    check(std::ldexp(1.0, -20 * e));
  }
  EXPECT_LE(worst_centre, 4e-16);
  EXPECT_LE(worst_tail, 1e-14);  // erfc's own rounding, relative to a tail as small as 2^-53
  EXPECT_NEAR(ir::erfinv_f64(0.5), 0.47693627620446987338, 1e-16);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(ir::erfinv_f64(1.0), inf);
  EXPECT_EQ(ir::erfinv_f64(-1.0), -inf);
  EXPECT_TRUE(std::isnan(ir::erfinv_f64(1.5)) && std::isnan(ir::erfinv_f64(-inf)));
  EXPECT_TRUE(std::isnan(ir::erfinv_f64(std::numeric_limits<double>::quiet_NaN())));
  EXPECT_TRUE(std::signbit(ir::erfinv_f64(-0.0)) && ir::erfinv_f64(-0.0) == 0.0);
}

// ndtri_f64, the reference above and the executor's float64 Ndtri, inverts the normal CDF Phi:
// its result y is within 5e-16 relative of the root of Phi(y) = p, as measured by one Newton
// step from y (on libm's erf near the centre, where p - 1/2 is exact, on the log of libm's erfc
// in the tails), for p log-spaced from 1e-300 to 1/2 and for 1 - p.
TEST(ScalarOps, NdtriF64InvertsPhi) {
  double worst = 0, worst_p = 0;
  auto check = [&](double p) {
    const double y = ir::ndtri_f64(p);
    ASSERT_EQ(y < 0, p < 0.5) << "p = " << p;
    const double q = std::min(p, 1.0 - p), a = -std::fabs(y);  // Phi(a) = q
    const double density = std::exp(-0.5 * a * a) / std::sqrt(2 * M_PI);
    double step;
    if (q >= 0.25) {
      step = (0.5 * std::erf(a / std::sqrt(2.0)) - (q - 0.5)) / density;
    } else {
      const double cdf = 0.5 * std::erfc(-a / std::sqrt(2.0));
      step = (std::log(cdf) - std::log(q)) * cdf / density;
    }
    if (std::fabs(step / a) > worst) worst = std::fabs(step / a), worst_p = p;
  };
  constexpr int kPoints = 100000;
  for (int i = 0; i < kPoints; ++i) {
    const double p = std::pow(10.0, -300.0 + i * (300.0 - std::log10(2.0)) / kPoints);
    check(p);
    check(1.0 - p);  // rounded: a p of its own, 1 - (1 - p) exact
  }
  EXPECT_LE(worst, 5e-16) << "at p = " << worst_p;
  EXPECT_NEAR(ir::ndtri_f64(0.975), 1.9599639845400538556, 1e-15);
  EXPECT_NEAR(ir::ndtri_f64(1e-10), -6.3613409024040561991, 4e-15);
  EXPECT_NEAR(ir::ndtri_f64(1e-300), -37.047096299361199237, 2e-14);
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(ir::ndtri_f64(0.5) == 0.0 && !std::signbit(ir::ndtri_f64(0.5)));
  EXPECT_EQ(ir::ndtri_f64(0.0), -inf);
  EXPECT_EQ(ir::ndtri_f64(-0.0), -inf);
  EXPECT_EQ(ir::ndtri_f64(1.0), inf);
  for (double p : {-0.1, 1.1, -inf, inf, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_TRUE(std::isnan(ir::ndtri_f64(p))) << "p = " << p;
  }
}

TEST(ScalarOps, SpecialValuesOfTheOtherFunctions) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (auto f : {ir::expm1_f32, ir::tanh_f32, ir::log_f32, ir::log1p_f32, ir::erf_f32, ir::exp2_f32, ir::log2_f32,
                 ir::log10_f32, ir::erfc_f32}) {
    EXPECT_TRUE(std::isnan(f(nan)));
  }
  EXPECT_EQ(ir::exp2_f32(inf), inf);
  EXPECT_EQ(ir::exp2_f32(-inf), 0.0f);
  EXPECT_EQ(ir::exp2_f32(-0.0f), 1.0f);
  EXPECT_EQ(ir::exp2_f32(-149.5f), std::numeric_limits<float>::denorm_min());  // 2^-149.5 rounded once
  EXPECT_EQ(ir::exp2_f32(0.5f), static_cast<float>(M_SQRT2));
  for (auto f : {ir::log2_f32, ir::log10_f32}) {
    EXPECT_EQ(f(0.0f), -inf);
    EXPECT_EQ(f(-0.0f), -inf);
    EXPECT_EQ(f(inf), inf);
    EXPECT_TRUE(std::isnan(f(-1.0f)) && std::isnan(f(-inf)));
    EXPECT_TRUE(std::isnan(f(-std::numeric_limits<float>::denorm_min())));
    EXPECT_EQ(f(1.0f), 0.0f);
  }
  EXPECT_EQ(ir::log2_f32(std::numeric_limits<float>::denorm_min()), -149.0f);
  EXPECT_EQ(ir::log10_f32(std::numeric_limits<float>::max()), static_cast<float>(std::log10(3.4028234663852886e38)));
  EXPECT_EQ(ir::erfc_f32(0.0f), 1.0f);
  EXPECT_EQ(ir::erfc_f32(-0.0f), 1.0f);
  EXPECT_EQ(ir::erfc_f32(inf), 0.0f);
  EXPECT_EQ(ir::erfc_f32(-inf), 2.0f);
  EXPECT_EQ(ir::erfc_f32(-11.0f), 2.0f);
  EXPECT_EQ(ir::erfc_f32(1e-30f), 1.0f);
  for (auto f : {ir::atan_f32, ir::asin_f32, ir::acos_f32}) EXPECT_TRUE(std::isnan(f(nan)));
  EXPECT_EQ(ir::atan_f32(inf), static_cast<float>(M_PI / 2));
  EXPECT_EQ(ir::atan_f32(-inf), static_cast<float>(-M_PI / 2));
  EXPECT_TRUE(std::signbit(ir::atan_f32(-0.0f)) && ir::atan_f32(-0.0f) == 0.0f);
  EXPECT_EQ(ir::asin_f32(1.0f), static_cast<float>(M_PI / 2));
  EXPECT_EQ(ir::asin_f32(-1.0f), static_cast<float>(-M_PI / 2));
  EXPECT_EQ(ir::acos_f32(-1.0f), static_cast<float>(M_PI));
  EXPECT_EQ(ir::acos_f32(1.0f), 0.0f);
  EXPECT_TRUE(std::isnan(ir::asin_f32(1.5f)) && std::isnan(ir::acos_f32(-1.5f)));
  for (float x : {nan, inf, -inf}) EXPECT_TRUE(std::isnan(ir::sin_f32(x)) && std::isnan(ir::cos_f32(x)));
  for (int quarter : {0, 1}) EXPECT_TRUE(std::isnan(ir::sin_cos_reduced(inf, quarter)));  // before the lanes' fix-up
  EXPECT_TRUE(std::signbit(ir::sin_f32(-0.0f)) && ir::sin_f32(-0.0f) == 0.0f);
  EXPECT_EQ(ir::cos_f32(0.0f), 1.0f);
  EXPECT_EQ(ir::sin_f32(1e30f), std::sin(1e30f));  // beyond the reduced range: libm's
  for (auto f : {ir::sinh_f32, ir::cosh_f32, ir::atanh_f32, ir::asinh_f32, ir::acosh_f32}) {
    EXPECT_TRUE(std::isnan(f(nan)));
  }
  EXPECT_EQ(ir::sinh_f32(inf), inf);
  EXPECT_EQ(ir::sinh_f32(-inf), -inf);
  EXPECT_EQ(ir::sinh_f32(100.0f), inf);
  EXPECT_TRUE(std::signbit(ir::sinh_f32(-0.0f)) && ir::sinh_f32(-0.0f) == 0.0f);
  EXPECT_EQ(ir::cosh_f32(0.0f), 1.0f);
  EXPECT_EQ(ir::cosh_f32(-inf), inf);
  EXPECT_EQ(ir::atanh_f32(1.0f), inf);
  EXPECT_EQ(ir::atanh_f32(-1.0f), -inf);
  EXPECT_TRUE(std::isnan(ir::atanh_f32(1.5f)));
  EXPECT_EQ(ir::asinh_f32(-inf), -inf);
  EXPECT_TRUE(std::signbit(ir::asinh_f32(-0.0f)));
  EXPECT_EQ(ir::acosh_f32(1.0f), 0.0f);
  EXPECT_EQ(ir::acosh_f32(inf), inf);
  EXPECT_TRUE(std::isnan(ir::acosh_f32(0.5f)) && std::isnan(ir::acosh_f32(-1e6f)));
  EXPECT_EQ(ir::erf_f32(inf), 1.0f);
  EXPECT_EQ(ir::erfinv_f32(1.0f), inf);
  EXPECT_EQ(ir::erfinv_f32(-1.0f), -inf);
  EXPECT_TRUE(std::isnan(ir::erfinv_f32(1.5f)) && std::isnan(ir::erfinv_f32(-inf)) && std::isnan(ir::erfinv_f32(nan)));
  EXPECT_TRUE(std::signbit(ir::erfinv_f32(-0.0f)) && ir::erfinv_f32(-0.0f) == 0.0f);
  EXPECT_TRUE(ir::ndtri_f32(0.5f) == 0.0f && !std::signbit(ir::ndtri_f32(0.5f)));
  EXPECT_EQ(ir::ndtri_f32(0.0f), -inf);
  EXPECT_EQ(ir::ndtri_f32(-0.0f), -inf);
  EXPECT_EQ(ir::ndtri_f32(1.0f), inf);
  for (float p : {-0.1f, 1.1f, -inf, inf, nan}) EXPECT_TRUE(std::isnan(ir::ndtri_f32(p))) << "p = " << p;
  EXPECT_EQ(ir::erf_f32(-inf), -1.0f);
  EXPECT_TRUE(std::signbit(ir::erf_f32(-0.0f)) && ir::erf_f32(-0.0f) == 0.0f);
  EXPECT_EQ(ir::expm1_f32(inf), inf);
  EXPECT_EQ(ir::expm1_f32(-inf), -1.0f);
  EXPECT_EQ(ir::expm1_f32(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(ir::expm1_f32(-0.0f)));
  EXPECT_EQ(ir::expm1_f32(1e-30f), 1e-30f);
  EXPECT_EQ(ir::tanh_f32(inf), 1.0f);
  EXPECT_EQ(ir::tanh_f32(-inf), -1.0f);
  EXPECT_TRUE(std::signbit(ir::tanh_f32(-0.0f)) && ir::tanh_f32(-0.0f) == 0.0f);
  EXPECT_EQ(ir::tanh_f32(1e-30f), 1e-30f);
  EXPECT_EQ(ir::log_f32(1.0f), 0.0f);
  EXPECT_EQ(ir::log_f32(0.0f), -inf);
  EXPECT_EQ(ir::log_f32(-0.0f), -inf);
  EXPECT_TRUE(std::isnan(ir::log_f32(-1.0f)));
  EXPECT_EQ(ir::log_f32(inf), inf);
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_LE(ulp_error(ir::log_f32(tiny), std::log(static_cast<double>(tiny))), 2.0);
  EXPECT_EQ(ir::log1p_f32(0.0f), 0.0f);
  EXPECT_EQ(ir::log1p_f32(-1.0f), -inf);
  EXPECT_TRUE(std::isnan(ir::log1p_f32(-2.0f)));
  EXPECT_EQ(ir::log1p_f32(inf), inf);
  EXPECT_EQ(ir::log1p_f32(1e-30f), 1e-30f);
}

}  // namespace
}  // namespace spikejit
