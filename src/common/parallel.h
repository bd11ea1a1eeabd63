#pragma once

#include <cstdint>
#include <functional>

namespace spikejit {

// Runs body(i) for i in [0, count) on up to `threads` threads (0: hardware concurrency).
// Which thread runs which index is unspecified; results must not depend on it.
void parallel_for(int64_t count, int threads, const std::function<void(int64_t)>& body);

}  // namespace spikejit
