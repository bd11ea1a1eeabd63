// A fresh random generator per test case, with its seed for SCOPED_TRACE. SPIKEJIT_TEST_SEED
// replays a failure's seed.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace spikejit::testing {

// A fresh seed from the OS, or SPIKEJIT_TEST_SEED's when it is set.
inline uint64_t test_seed() {
  if (const char* fixed = std::getenv("SPIKEJIT_TEST_SEED")) return std::strtoull(fixed, nullptr, 10);
  return (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
}

class SeededRng {
 public:
  SeededRng() : seed_(test_seed()), gen_(seed_) {}

  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(gen_);
  }
  int integer(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen_); }
  std::string trace() const { return "random seed " + std::to_string(seed_); }

 private:
  uint64_t seed_;
  std::mt19937_64 gen_;
};

}  // namespace spikejit::testing
