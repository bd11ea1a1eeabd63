// The reverse sweep shared by the backward step (differentiate) and the adjoint neuron.
#pragma once

#include <vector>

#include "spikejit/ir.h"

namespace spikejit::autodiff {

// A forward step's nodes followed by the gradient nodes of one reverse sweep over them. The
// gradient nodes read GradOutput(i) (dL/d outputs[i][t]) and GradState(i) (dL/d states[i][t],
// all paths) leaves and forward values; `grad_*` hold the gradient of each input, state and
// parameter leaf (a literal 0 where none reaches it).
struct SweptStep {
  std::vector<ir::Node> nodes;
  std::vector<ir::ValueId> grad_inputs, grad_prev_states, grad_params;
};

// Throws ArgumentError when `forward` is not a lowered forward step.
SweptStep sweep(const ir::Step& forward);

}  // namespace spikejit::autodiff
