// The branch-free float32 exp of ir/scalar_ops.h (what the CPU executor's Exp and Sigmoid use)
// against the exactly rounded exp of double precision, over every float of its range, and its
// special values.
#include <gtest/gtest.h>

#include <cmath>
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

}  // namespace
}  // namespace spikejit
