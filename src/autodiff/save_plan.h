// What the training forward stores per step so that the backward runs in one pass.
#pragma once

#include <vector>

#include "spikejit/ir.h"

namespace spikejit::autodiff {

// Returns, in increasing id order, the cheapest set of forward nodes whose values let every node
// of `needed` be recomputed from them, parameters and literals alone: a minimum-cost vertex cut
// between the per-step sources (Input and State leaves) and `needed`. A saved Input leaf costs
// half of any other value: it is never written, the backward reads the input sequence itself.
// With `pack_spikes` a spike-valued value (ir::spike_valued) costs 1/16 of a value: it is saved
// as bits. Among the cheapest cuts it returns the one nearest to `needed` (the fewest nodes to
// recompute).
std::vector<ir::ValueId> choose_saved(const std::vector<ir::Node>& forward,
                                      const std::vector<ir::ValueId>& needed, bool pack_spikes);

}  // namespace spikejit::autodiff
