// Compiles a Step into slot instructions: leaf bindings, liveness and slot reuse.
#include "cpu/lane_program.h"

#include <algorithm>
#include <limits>
#include <string>

#include "spikejit/error.h"

namespace spikejit::cpu {
namespace {

constexpr int32_t kForever = std::numeric_limits<int32_t>::max();

[[noreturn]] void malformed(const std::string& what) { throw Error("cpu executor: malformed step: " + what); }

void check_count(const char* what, size_t got, size_t expected) {
  if (got != expected) {
    malformed(std::string(what) + " has " + std::to_string(got) + " entries, expected " +
              std::to_string(expected));
  }
}

void check_leaf_index(const ir::Node& n, int64_t limit) {
  if (n.index < 0 || n.index >= limit) {
    malformed(std::string(ir::op_info(n.op).name) + " leaf with index " + std::to_string(n.index));
  }
}

}  // namespace

LaneProgram compile_lane_program(const ir::Step& step, const ir::Step& forward, StepKind kind,
                                 const std::vector<ir::ValueId>& kept) {
  const bool is_forward = kind == StepKind::Forward;
  const int32_t count = static_cast<int32_t>(step.nodes.size());
  if (is_forward) {
    check_count("outputs", step.outputs.size(), forward.num_outputs);
    check_count("next_states", step.next_states.size(), forward.num_states);
  } else {
    check_count("grad_inputs", step.grad_inputs.size(), forward.num_inputs);
    check_count("grad_prev_states", step.grad_prev_states.size(), forward.num_states);
    check_count("grad_params", step.grad_params.size(), forward.params.size());
  }

  // The last node reading each value; results are read after the step.
  std::vector<int32_t> last_use(count);
  for (int32_t id = 0; id < count; ++id) {
    last_use[id] = id;
    const ir::Node& n = step.nodes[id];
    if (ir::is_leaf(n.op)) continue;
    for (int k = 0; k < ir::op_info(n.op).arity; ++k) {
      const int32_t arg = n.args[k];
      if (arg < 0 || arg >= id) malformed("node %" + std::to_string(id) + " reads %" + std::to_string(arg));
      last_use[arg] = id;
    }
  }
  auto keep = [&](const std::vector<ir::ValueId>& ids) {
    for (ir::ValueId id : ids) {
      if (id < 0 || id >= count) malformed("result refers to node %" + std::to_string(id));
      last_use[id] = kForever;
    }
  };
  keep(step.outputs);
  keep(step.next_states);
  keep(step.grad_inputs);
  keep(step.grad_prev_states);
  keep(step.grad_params);
  keep(kept);

  LaneProgram p;
  p.node_slot.assign(count, -1);
  for (int i = 0; i < forward.num_states; ++i) p.carry_slot.push_back(p.num_slots++);
  std::vector<int32_t> param_slot(forward.params.size(), -1);

  for (int32_t id = 0; id < count; ++id) {
    const ir::Node& n = step.nodes[id];
    if (!ir::is_leaf(n.op)) continue;
    const bool forward_leaf = n.op == ir::Op::Input || n.op == ir::Op::State || n.op == ir::Op::Uniform;
    const bool backward_leaf =
        n.op == ir::Op::Saved || n.op == ir::Op::GradOutput || n.op == ir::Op::GradState;
    if ((forward_leaf && !is_forward) || (backward_leaf && is_forward) || n.op == ir::Op::Constant) {
      malformed(std::string("unexpected ") + ir::op_info(n.op).name + " leaf in a " +
                (is_forward ? "forward" : "backward") + " step");
    }
    switch (n.op) {
      case ir::Op::Literal:
        p.node_slot[id] = p.num_slots++;
        p.literals.push_back({p.node_slot[id], n.value});
        break;
      case ir::Op::State:
        check_leaf_index(n, forward.num_states);
        p.node_slot[id] = p.carry_slot[n.index];
        break;
      case ir::Op::Param:
        check_leaf_index(n, static_cast<int64_t>(forward.params.size()));
        if (param_slot[n.index] < 0) {
          param_slot[n.index] = p.num_slots++;
          p.params.push_back({n.op, n.index, param_slot[n.index]});
        }
        p.node_slot[id] = param_slot[n.index];
        break;
      case ir::Op::Uniform:
        if (n.index < 0) malformed("uniform leaf with stream " + std::to_string(n.index));
        p.node_slot[id] = p.num_slots++;
        p.draws.push_back({n.op, n.index, p.node_slot[id]});
        break;
      default: {
        const int64_t limit = n.op == ir::Op::Input        ? forward.num_inputs
                              : n.op == ir::Op::Saved      ? static_cast<int64_t>(step.saved.size())
                              : n.op == ir::Op::GradOutput ? forward.num_outputs
                                                           : forward.num_states;
        check_leaf_index(n, limit);
        p.node_slot[id] = p.num_slots++;
        p.step_leaves.push_back({n.op, n.index, p.node_slot[id]});
        break;
      }
    }
  }

  // Invariants (ir::step_invariant), except results: computed once per block into slots that are
  // never reused, as the slots of leaves are not. A result is written each step, so an invariant
  // that is one stays in the step, and so do the values computed from it.
  // (Leaves keep their ir::step_invariant mark: only non-leaves are hoisted.)
  std::vector<bool> hoisted = ir::step_invariant(step.nodes);
  for (int32_t id = 0; id < count; ++id) {
    const ir::Node& n = step.nodes[id];
    if (ir::is_leaf(n.op) || !hoisted[id]) continue;
    bool from_hoisted = last_use[id] != kForever;
    for (int k = 0; k < ir::op_info(n.op).arity; ++k) from_hoisted = from_hoisted && hoisted[n.args[k]];
    hoisted[id] = from_hoisted;
  }
  auto reusable = [&](int32_t id) { return !ir::is_leaf(step.nodes[id].op) && !hoisted[id]; };

  std::vector<int32_t> free_slots;
  for (int32_t id = 0; id < count; ++id) {
    const ir::Node& n = step.nodes[id];
    if (ir::is_leaf(n.op)) continue;
    int32_t dst;
    if (hoisted[id] || free_slots.empty()) {
      dst = p.num_slots++;
    } else {
      dst = free_slots.back();
      free_slots.pop_back();
    }
    p.node_slot[id] = dst;
    const int arity = ir::op_info(n.op).arity;
    LaneInstr instr{n.op, dst, {}};
    for (int k = 0; k < 3; ++k) instr.args[k] = p.node_slot[n.args[k < arity ? k : 0]];
    (hoisted[id] ? p.invariants : p.instrs).push_back(instr);
    // Free the arguments read for the last time (each slot once), then a value nobody reads.
    for (int k = 0; k < arity; ++k) {
      const int32_t arg = n.args[k];
      const bool repeated = std::find(n.args, n.args + k, arg) != n.args + k;
      if (!repeated && last_use[arg] == id && reusable(arg)) free_slots.push_back(p.node_slot[arg]);
    }
    if (last_use[id] == id && reusable(id)) free_slots.push_back(dst);
  }

  for (int32_t id = 0; id < count; ++id) {
    const int32_t slot = p.node_slot[id];
    if (last_use[id] == kForever && !ir::is_leaf(step.nodes[id].op) &&
        std::find(p.result_slots.begin(), p.result_slots.end(), slot) == p.result_slots.end()) {
      p.result_slots.push_back(slot);
    }
  }
  const std::vector<ir::ValueId>& carries = is_forward ? step.next_states : step.grad_prev_states;
  const ir::Op carried = is_forward ? ir::Op::State : ir::Op::GradState;
  for (int i = 0; i < forward.num_states; ++i) {
    const ir::Node& next = step.nodes[carries[i]];
    if (next.op == carried && next.index != i) p.states_need_staging = true;
  }
  for (int i = 0; i < forward.num_states; ++i) {
    const ir::ValueId id = carries[i];
    const bool shared = std::count(carries.begin(), carries.end(), id) > 1;
    p.swap_carry.push_back(!p.states_need_staging && !shared && !ir::is_leaf(step.nodes[id].op));
  }
  return p;
}

LaneVariant forward_variant(bool saving, bool pack_spikes) {
  if (!saving) return LaneVariant::Forward;
  return pack_spikes ? LaneVariant::ForwardSavingPacked : LaneVariant::ForwardSaving;
}

LaneVariant backward_variant(bool pack_spikes) {
  return pack_spikes ? LaneVariant::BackwardPacked : LaneVariant::Backward;
}

namespace {
const char kLaneProgramsOwner = 0;  // its address tags them (Program::derived)
}  // namespace

const LaneProgram& lane_program(const Program& program, LaneVariant variant) {
  return program.derived<LaneProgram>(&kLaneProgramsOwner, static_cast<int>(variant), [&] {
    const ir::Step& forward = program.forward();
    switch (variant) {
      case LaneVariant::Forward:
        return compile_lane_program(forward, forward, StepKind::Forward, {});
      case LaneVariant::ForwardSaving:
      case LaneVariant::ForwardSavingPacked: {
        const bool packed = variant == LaneVariant::ForwardSavingPacked;
        return compile_lane_program(forward, forward, StepKind::Forward, program.backward(packed).saved);
      }
      case LaneVariant::Backward:
      case LaneVariant::BackwardPacked:
        break;
    }
    const bool packed = variant == LaneVariant::BackwardPacked;
    return compile_lane_program(program.backward(packed), forward, StepKind::Backward, {});
  });
}

}  // namespace spikejit::cpu
