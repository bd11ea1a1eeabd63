// A Step compiled for lane-wise interpretation: every node value lives in a slot (an array of
// block-size lanes). Leaves that do not change over time (literals, parameters) and the carried
// values (forward states, backward gradient carries) have their own slots; the slots of other
// values are reused once their last reader has run.
#pragma once

#include <cstdint>
#include <vector>

#include "spikejit/ir.h"

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
  std::vector<LaneLeaf> step_leaves;  // Input, Saved, GradOutput, GradState: filled every step
  std::vector<LaneLeaf> draws;        // Uniform (`index`: the stream): drawn every step
  std::vector<int32_t> carry_slot;    // per state: forward state value / backward gradient carry
  std::vector<LaneInstr> instrs;
  // Forward: some next state is another state's previous value, so states are updated through
  // a copy (a plain in-place update would overwrite a value still to be read).
  bool states_need_staging = false;
};

enum class StepKind : uint8_t { Forward, Backward };

// Compiles `step` (`forward` itself, or the backward step derived from `forward`, which gives the
// slot counts). `kept` are extra node ids whose values must survive the whole step (the saved
// values of a training forward). Throws Error on a malformed step or a leaf of the wrong kind.
LaneProgram compile_lane_program(const ir::Step& step, const ir::Step& forward, StepKind kind,
                                 const std::vector<ir::ValueId>& kept);

}  // namespace spikejit::cpu
