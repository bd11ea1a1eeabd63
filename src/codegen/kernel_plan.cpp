// Buffer slot order per kernel kind (the ABI the runtime fills):
//   forward kinds: inputs, initial states, params, outputs, [packed outputs], [state seqs],
//                  [final states], [saved]
//   backward:      saved (or checkpoints + inputs), params, grad outputs, [grad state seqs],
//                  [grad final states], grad inputs, grad initial states, grad params, [workspace]
//   then, when the kernel runs forward steps that draw random numbers: the seed
#include "codegen/kernel_plan.h"

#include <algorithm>
#include <string>

#include "spikejit/buffers.h"
#include "spikejit/error.h"

namespace spikejit::codegen {
namespace {

void add_slots(std::vector<BufferSlot>& slots, BufferRole role, int count, bool per_step,
               bool checkpoint = false) {
  for (int i = 0; i < count; ++i) slots.push_back({role, i, per_step, false, checkpoint, {}, false});
}

// Per-step saved values; bit-packed where the plan says so.
void add_saved_slots(std::vector<BufferSlot>& slots, const std::vector<bool>& packed) {
  for (size_t i = 0; i < packed.size(); ++i) {
    slots.push_back({BufferRole::Saved, static_cast<int>(i), true, false, false, {}, packed[i]});
  }
}

void add_grad_sequence_slots(std::vector<BufferSlot>& slots, BufferRole role, int count,
                             const std::vector<SequenceLayout>& layouts) {
  for (int i = 0; i < count; ++i) {
    const size_t k = static_cast<size_t>(i);
    slots.push_back({role, i, true, false, false, k < layouts.size() ? layouts[k] : SequenceLayout(), false});
  }
}

bool repeats(const SequenceLayout& l) { return l.same_each_step || l.same_each_neuron; }

// Trailing plain sequences dropped, so that equal kernels have equal specs.
void trim_layouts(std::vector<SequenceLayout>& layouts) {
  while (!layouts.empty() && !repeats(layouts.back())) layouts.pop_back();
}

void trim_flags(std::vector<bool>& flags) {
  while (!flags.empty() && !flags.back()) flags.pop_back();
}

void add_param_slots(std::vector<BufferSlot>& slots, BufferRole role,
                     const std::vector<ir::ParamKind>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    slots.push_back({role, static_cast<int>(i), false, params[i] == ir::ParamKind::Scalar, false, {}, false});
  }
}

void check_spec(const KernelSpec& spec) {
  switch (spec.kind) {
    case KernelKind::Inference:
    case KernelKind::InferenceFinalState:
    case KernelKind::TrainingForward:
    case KernelKind::Backward:
      break;
    default:
      throw ArgumentError("spec.kind", "a KernelKind", std::to_string(static_cast<int>(spec.kind)));
  }
  switch (spec.storage) {
    case DType::F32: case DType::F64: case DType::F16: case DType::BF16: break;
    default:
      throw ArgumentError("spec.storage", "a DType", std::to_string(static_cast<int>(spec.storage)));
  }
  const bool uses_checkpoints =
      spec.kind == KernelKind::TrainingForward || spec.kind == KernelKind::Backward;
  if (uses_checkpoints && (spec.checkpoint_every < 0 || spec.checkpoint_every > kMaxCheckpointEvery)) {
    throw ArgumentError("spec.checkpoint_every",
                        "0 (save per step) or a segment length from 1 to " +
                            std::to_string(kMaxCheckpointEvery),
                        std::to_string(spec.checkpoint_every));
  }
  if (uses_checkpoints && spec.pack_spikes && spec.checkpoint_every > 0) {
    throw ArgumentError("spec.pack_spikes", "false with checkpoints (packed spikes are a per-step policy)",
                        "true with checkpoint_every = " + std::to_string(spec.checkpoint_every));
  }
}

// Packed outputs: at most one flag per output, set only on spike-valued ones.
void check_packed_outputs(const ir::Step& forward, const std::vector<bool>& packed) {
  if (packed.size() > forward.outputs.size()) {
    throw ArgumentError("spec.packed_outputs", "at most one flag per output (" +
                                                   std::to_string(forward.outputs.size()) + ")",
                        std::to_string(packed.size()) + " flags");
  }
  const std::vector<bool> binary = ir::spike_valued(forward.nodes);
  for (size_t i = 0; i < packed.size(); ++i) {
    if (packed[i] && !binary[static_cast<size_t>(forward.outputs[i])]) {
      throw ArgumentError("spec.packed_outputs", "flags on spike-valued outputs only (ir::spike_valued)",
                          "output " + std::to_string(i) + " flagged, whose value is not spike-valued");
    }
  }
}

// Marks the slots of the spec's strided views; each mask must name existing buffers (per-neuron
// parameters only), kMaxStridedReads at most.
void mark_strided(KernelPlan& p) {
  struct Group {
    const char* name;
    uint64_t mask;
    BufferRole role;
    int count;
  };
  const KernelSpec& spec = p.spec;
  const int params = static_cast<int>(p.params.size());
  const Group groups[] = {{"spec.strided_inputs", spec.strided_inputs, BufferRole::Input, p.inputs},
                          {"spec.strided_states", spec.strided_states, BufferRole::InitialState, p.states},
                          {"spec.strided_params", spec.strided_params, BufferRole::Param, params},
                          {"spec.strided_saved", spec.strided_saved, BufferRole::Saved, p.saved}};
  int strided = 0;
  for (const Group& g : groups) {
    if (g.count < 64 && (g.mask >> g.count) != 0) {
      throw ArgumentError(g.name, "bits of existing buffers only (" + std::to_string(g.count) + ")",
                          "mask " + std::to_string(g.mask));
    }
    for (BufferSlot& slot : p.slots) {
      if (slot.role != g.role || slot.index >= 64 || ((g.mask >> slot.index) & 1u) == 0) continue;
      if (slot.scalar_param || slot.packed) {
        throw ArgumentError(g.name, "strided views of per-neuron buffers only",
                            "bit " + std::to_string(slot.index) + ", a scalar parameter or packed value");
      }
      slot.strided = true;
      ++strided;
    }
  }
  if (strided > kMaxStridedReads) {
    throw ArgumentError("spec", "at most " + std::to_string(kMaxStridedReads) + " strided views (kMaxStridedReads)",
                        std::to_string(strided));
  }
}

// One letter per gradient sequence: '-' a sequence, 's' the same each step, 'n' the same for
// every neuron, 'a' one value.
std::string layout_letters(const std::vector<SequenceLayout>& layouts) {
  std::string s;
  for (const SequenceLayout& l : layouts) {
    s += l.same_each_step ? (l.same_each_neuron ? 'a' : 's') : (l.same_each_neuron ? 'n' : '-');
  }
  return s;
}

}  // namespace

KernelSpec normalized(const KernelSpec& spec) {
  KernelSpec s = spec;
  const bool forward_kind = spec.kind != KernelKind::Backward;
  const bool training = spec.kind == KernelKind::TrainingForward || spec.kind == KernelKind::Backward;
  if (forward_kind) s.grad_state_seqs = s.grad_final_states = false;
  if (!forward_kind) s.store_state_seqs = false;
  if (!training) s.checkpoint_every = 0;
  if (!training) s.pack_spikes = false;
  if (training) s.reverse = false;
  if (!forward_kind) s.packed_outputs.clear();
  trim_flags(s.packed_outputs);
  if (forward_kind) s.grad_output_layouts.clear();
  if (forward_kind || !s.grad_state_seqs) s.grad_state_seq_layouts.clear();
  trim_layouts(s.grad_output_layouts);
  trim_layouts(s.grad_state_seq_layouts);
  const bool checkpointed_backward = !forward_kind && s.checkpoint_every > 0;
  if (!forward_kind && !checkpointed_backward) s.strided_inputs = 0;
  if (!forward_kind) s.strided_states = 0;
  if (forward_kind || checkpointed_backward) s.strided_saved = 0;
  return s;
}

std::string layout_tag(const KernelSpec& spec) {
  const KernelSpec s = normalized(spec);
  if (s.grad_output_layouts.empty() && s.grad_state_seq_layouts.empty()) return "";
  return layout_letters(s.grad_output_layouts) + "/" + layout_letters(s.grad_state_seq_layouts);
}

int KernelPlan::first_slot(BufferRole role) const {
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].role == role) return static_cast<int>(i);
  }
  return -1;
}

KernelPlan plan_kernel(const ir::Step& forward, const ir::Step* backward, const KernelSpec& spec) {
  check_spec(spec);
  KernelPlan p;
  p.inputs = forward.num_inputs;
  p.states = forward.num_states;
  p.outputs = forward.num_outputs;
  p.params = forward.params;
  for (ir::ParamKind k : p.params) p.scalar_params += k == ir::ParamKind::Scalar;

  p.spec = normalized(spec);
  const bool forward_kind = spec.kind != KernelKind::Backward;
  const bool training = spec.kind == KernelKind::TrainingForward || spec.kind == KernelKind::Backward;
  if (forward_kind) check_packed_outputs(forward, p.spec.packed_outputs);
  if (training) {
    if (backward == nullptr) throw ArgumentError("backward", "the backward step", "none");
    p.saved = static_cast<int>(backward->saved.size());
    for (size_t i = 0; i < backward->saved.size(); ++i) {
      p.saved_packed.push_back(!p.checkpointed() && p.spec.pack_spikes && backward->is_saved_packed(i));
    }
    // Per-step saving writes them; checkpoint recomputation needs them in the backward.
    p.forward_saves = spec.kind == KernelKind::TrainingForward ? !p.checkpointed() : p.checkpointed();
  }

  std::vector<BufferSlot>& s = p.slots;
  if (forward_kind) {
    add_slots(s, BufferRole::Input, p.inputs, true);
    add_slots(s, BufferRole::InitialState, p.states, false);
    add_param_slots(s, BufferRole::Param, p.params);
    add_slots(s, BufferRole::Output, p.outputs, true);
    for (size_t i = 0; i < p.spec.packed_outputs.size(); ++i) {
      if (p.spec.packed_outputs[i]) s.push_back({BufferRole::PackedOutput, static_cast<int>(i), true, false, false, {}, true});
    }
    if (p.spec.store_state_seqs) add_slots(s, BufferRole::StateSeq, p.states, true);
    if (spec.kind != KernelKind::Inference) add_slots(s, BufferRole::FinalState, p.states, false);
    if (spec.kind == KernelKind::TrainingForward) {
      if (p.checkpointed()) {
        add_slots(s, BufferRole::Saved, p.states, true, true);
      } else {
        add_saved_slots(s, p.saved_packed);
      }
    }
  } else {
    if (p.checkpointed()) {
      add_slots(s, BufferRole::Saved, p.states, true, true);
      add_slots(s, BufferRole::Input, p.inputs, true);
    } else {
      add_saved_slots(s, p.saved_packed);
    }
    add_param_slots(s, BufferRole::Param, p.params);
    add_grad_sequence_slots(s, BufferRole::GradOutput, p.outputs, p.spec.grad_output_layouts);
    if (p.spec.grad_state_seqs) {
      add_grad_sequence_slots(s, BufferRole::GradStateSeq, p.states, p.spec.grad_state_seq_layouts);
    }
    if (p.spec.grad_final_states) add_slots(s, BufferRole::GradFinalState, p.states, false);
    add_slots(s, BufferRole::GradInput, p.inputs, true);
    add_slots(s, BufferRole::GradInitialState, p.states, false);
    add_param_slots(s, BufferRole::GradParam, p.params);
    if (p.scalar_params > 0) add_slots(s, BufferRole::Workspace, 1, false);
  }
  for (const ir::Node& node : forward.nodes) {
    if (node.op == ir::Op::Uniform) p.streams = std::max(p.streams, node.index + 1);
  }
  p.reads_seed = p.streams > 0 && (forward_kind || p.checkpointed());
  if (p.reads_seed) add_slots(s, BufferRole::Seed, 1, false);
  if (p.spec.grad_output_layouts.size() > static_cast<size_t>(p.outputs)) {
    throw ArgumentError("spec.grad_output_layouts", "at most one layout per output (" +
                                                        std::to_string(p.outputs) + ")",
                        std::to_string(p.spec.grad_output_layouts.size()) + " layouts");
  }
  if (p.spec.grad_state_seq_layouts.size() > static_cast<size_t>(p.states)) {
    throw ArgumentError("spec.grad_state_seq_layouts", "at most one layout per state (" +
                                                           std::to_string(p.states) + ")",
                        std::to_string(p.spec.grad_state_seq_layouts.size()) + " layouts");
  }
  mark_strided(p);
  if (s.size() > static_cast<size_t>(kMaxBuffers)) {
    throw ArgumentError("program", "a neuron whose kernel needs at most " + std::to_string(kMaxBuffers) +
                                       " buffers",
                        std::to_string(s.size()) + " buffers for kernel " + kernel_kind_name(spec.kind));
  }
  return p;
}

bool accessed_as_rows(const BufferSlot& s) {
  return !s.scalar_param && !s.checkpoint && !s.packed && !s.layout.same_each_neuron && !s.strided &&
         s.role != BufferRole::Workspace && s.role != BufferRole::Seed;
}

const char* buffer_role_name(BufferRole role) {
  switch (role) {
    case BufferRole::Input: return "input";
    case BufferRole::InitialState: return "initial_state";
    case BufferRole::Param: return "param";
    case BufferRole::Output: return "output";
    case BufferRole::StateSeq: return "state_seq";
    case BufferRole::FinalState: return "final_state";
    case BufferRole::Saved: return "saved";
    case BufferRole::GradOutput: return "grad_output";
    case BufferRole::GradStateSeq: return "grad_state_seq";
    case BufferRole::GradFinalState: return "grad_final_state";
    case BufferRole::GradInput: return "grad_input";
    case BufferRole::GradInitialState: return "grad_initial_state";
    case BufferRole::GradParam: return "grad_param";
    case BufferRole::Workspace: return "workspace";
    case BufferRole::PackedOutput: return "packed_output";
    case BufferRole::Seed: return "seed";
  }
  return "?";
}

}  // namespace spikejit::codegen
