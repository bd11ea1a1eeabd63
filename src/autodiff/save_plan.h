// What the training forward stores per step so that the backward runs in one pass.
#pragma once

#include <vector>

#include "spikejit/ir.h"

namespace spikejit::autodiff {

// Returns, in increasing id order, the fewest forward nodes whose values let every node of
// `needed` be recomputed from them, parameters and literals alone: a minimum vertex cut between
// the per-step sources (Input and State leaves) and `needed`. Among the minimum cuts it returns
// the one nearest to `needed` (the smallest set of nodes left to recompute).
std::vector<ir::ValueId> choose_saved(const std::vector<ir::Node>& forward,
                                      const std::vector<ir::ValueId>& needed);

}  // namespace spikejit::autodiff
