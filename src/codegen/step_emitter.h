// One IR step as straight-line CUDA statements over `real` (float, or double for fp64 storage)
// and `bool` values, with the operation semantics of ir/scalar_ops.h.
#pragma once

#include <string>
#include <vector>

#include "spikejit/ir.h"

namespace spikejit::codegen {

// The array each kind of leaf reads (`x[i]` for Input(i) when input = "x"); null: the leaf may
// not appear in this step.
struct StepLeaves {
  const char* input = nullptr;
  const char* state = nullptr;
  const char* param = nullptr;
  const char* saved = nullptr;
  const char* grad_output = nullptr;
  const char* grad_state = nullptr;
  const char* draw = nullptr;  // Uniform(k): `draw[k]`, the step's draw of stream k
  // Per node id (empty, or as long as the step): where a non-empty entry names an expression,
  // the node reads it instead of computing its value (a value hoisted out of the time loop).
  std::vector<std::string> read_instead;
};

// `array[i] = value of ids[i]` (Bool values become 1 or 0).
struct StepResults {
  std::string array;
  std::vector<ir::ValueId> ids;
};

// The statements (two-space indented, one per line) computing every result; only the nodes the
// results need are emitted, in node order (the CPU executor's order of evaluation).
std::string emit_step_statements(const ir::Step& step, const StepLeaves& leaves,
                                 const std::vector<StepResults>& results, bool f64);

// A rough instruction count of the nodes the results need (transcendentals weigh more; nodes
// read from `leaves.read_instead` cost nothing): decides whether a step function is inlined.
int step_cost(const ir::Step& step, const StepLeaves& leaves, const std::vector<StepResults>& results);

// The values to compute once before the time loop instead of at every step: the nodes of
// ir::step_invariant (not leaves) that the results need, that a result is or a value changing
// over time reads, and that are costly: computed with a transcendental or a division somewhere
// (PLIF's sigmoid(w), 1 - sigmoid(w)). What only such values read is computed with them. Cheap
// arithmetic of parameters (GLIF's 1 - alpha * (1 - tau)) stays in the step: held across the
// loop it costs registers, recomputed a few instructions.
std::vector<ir::ValueId> hoisted_values(const ir::Step& step, const std::vector<StepResults>& results);

// A C++ literal of type `real` with exactly the value the CPU executor uses: the double rounded
// to float (kept as a double when `f64`). Non-finite values use bit patterns.
std::string real_literal(double value, bool f64);

}  // namespace spikejit::codegen
