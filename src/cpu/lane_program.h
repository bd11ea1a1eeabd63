// A Step compiled for lane-wise interpretation: every node value lives in a slot (an array of
// block-size lanes). Values that do not change over time (literals, parameters and what is
// computed from them alone) and the carried values (forward states, backward gradient carries)
// have their own slots; the slots of other values are reused once their last reader has run.
#pragma once

#include <cstdint>
#include <vector>

#include "spikejit/ir.h"
#include "spikejit/program.h"

namespace spikejit::cpu {

struct LaneInstr {
  ir::Op op;
  int32_t dst;
  int32_t args[3];  // slots; unused arguments repeat args[0]
};

// A leaf that fills a slot: `index` is the input / state / parameter / saved / output index.
struct LaneLeaf {
  ir::Op op;
  int32_t index;
  int32_t slot;
};

struct LaneLiteral {
  int32_t slot;
  double value;
};

struct LaneProgram {
  int32_t num_slots = 0;
  std::vector<int32_t> node_slot;     // slot holding each node's value
  std::vector<LaneLiteral> literals;  // filled once per block
  std::vector<LaneLeaf> params;       // filled once per block
  // Computed once per block, after the literals and parameters: the instructions whose
  // arguments are all literals, parameters or earlier invariants (PLIF's sigmoid(w)), except
  // the step's results, which `instrs` computes each step.
  std::vector<LaneInstr> invariants;
  std::vector<LaneLeaf> step_leaves;  // Input, Saved, GradOutput, GradState: filled every step
  std::vector<LaneLeaf> draws;        // Uniform (`index`: the stream): drawn every step
  std::vector<int32_t> carry_slot;    // per state: forward state value / backward gradient carry
  std::vector<LaneInstr> instrs;
  // Slots the instructions write that are read after the step (its results and `kept` values).
  std::vector<int32_t> result_slots;
  // Some next state (backward: some gradient carry) is another state's previous value (carry),
  // so the carries are updated through a copy (a plain in-place update would overwrite a value
  // still to be read).
  bool states_need_staging = false;
  // Per state: the new carry (next state / gradient carry) is an instruction's value in a slot
  // of its own, so the executor moves it into the carry by exchanging the two slots' arrays.
  std::vector<bool> swap_carry;
};

enum class StepKind : uint8_t { Forward, Backward };

// Compiles `step` (`forward` itself, or the backward step derived from `forward`, which gives the
// slot counts). `kept` are extra node ids whose values must survive the whole step (the saved
// values of a training forward). Throws Error on a malformed step or a leaf of the wrong kind.
LaneProgram compile_lane_program(const ir::Step& step, const ir::Step& forward, StepKind kind,
                                 const std::vector<ir::ValueId>& kept);

// The lane programs a program's calls run, compiled once per program and kept with it
// (Program::derived): the forward step, keeping the saved values of the backward of
// `pack_spikes` when `saving`; the backward step of `pack_spikes`.
enum class LaneVariant : int { Forward, ForwardSaving, ForwardSavingPacked, Backward, BackwardPacked };
constexpr int kLaneVariants = 5;
LaneVariant forward_variant(bool saving, bool pack_spikes);
LaneVariant backward_variant(bool pack_spikes);
const LaneProgram& lane_program(const Program& program, LaneVariant variant);

}  // namespace spikejit::cpu
