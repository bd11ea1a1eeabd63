// A fresh random generator per test case, with its seed for SCOPED_TRACE.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace spikejit::testing {

class SeededRng {
 public:
  SeededRng()
      : seed_((uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()), gen_(seed_) {}

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
