// The local gradient rule of every non-leaf op (a rule table in the style of tinygrad).
#pragma once

#include "autodiff/emitter.h"
#include "spikejit/ir.h"

namespace spikejit::autodiff {

// The gradient contribution to each argument of a node; -1 where there is none (Bool arguments,
// ops whose derivative is zero everywhere it exists, detach).
struct ArgGrads {
  ir::ValueId of[3] = {-1, -1, -1};
};

// Appends the nodes computing the contributions of node `id`, given dL/d(node) = `grad`.
// Rules refer to the node's arguments and to the node itself (e.g. exp reuses its result).
using GradRule = ArgGrads (*)(Emitter& e, ir::ValueId id, ir::ValueId grad);

// The rule of a non-leaf op; throws spikejit::Error for a leaf.
GradRule grad_rule(ir::Op op);

}  // namespace spikejit::autodiff
