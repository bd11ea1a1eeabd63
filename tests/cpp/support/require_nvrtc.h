// Tests that compile with NVRTC skip where no NVRTC library can be opened, unless the
// environment says it must be there: SPIKEJIT_REQUIRE_NVRTC=1 (set by CI, whose machines carry
// the CUDA toolkit) or SPIKEJIT_REQUIRE_CUDA=1 (the GPU machine). Then its absence fails.
#pragma once

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "spikejit/error.h"
#include "spikejit/runtime.h"

namespace spikejit::testing {

inline bool env_says_one(const char* name) {
  const char* value = std::getenv(name);
  return value && std::string(value) == "1";
}

inline bool nvrtc_required() {
  return env_says_one("SPIKEJIT_REQUIRE_NVRTC") || env_says_one("SPIKEJIT_REQUIRE_CUDA");
}

// Empty when NVRTC opens, else why not.
inline std::string nvrtc_missing() {
  try {
    runtime::nvrtc_version();
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace spikejit::testing

#define REQUIRE_NVRTC()                                                     \
  do {                                                                      \
    const std::string why_nvrtc = ::spikejit::testing::nvrtc_missing();     \
    if (!why_nvrtc.empty()) {                                               \
      if (::spikejit::testing::nvrtc_required()) FAIL() << why_nvrtc;       \
      GTEST_SKIP() << why_nvrtc;                                            \
    }                                                                       \
  } while (0)
