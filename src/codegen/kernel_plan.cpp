// Buffer slot order per kernel kind (the ABI the runtime fills):
//   forward kinds: inputs, initial states, params, outputs, [state seqs], [final states], [saved]
//   backward:      saved (or checkpoints + inputs), params, grad outputs, [grad state seqs],
//                  [grad final states], grad inputs, grad initial states, grad params, [workspace]
#include "codegen/kernel_plan.h"

#include <string>

#include "spikejit/buffers.h"
#include "spikejit/error.h"

namespace spikejit::codegen {
namespace {

void add_slots(std::vector<BufferSlot>& slots, BufferRole role, int count, bool per_step,
               bool checkpoint = false) {
  for (int i = 0; i < count; ++i) slots.push_back({role, i, per_step, false, checkpoint});
}

void add_param_slots(std::vector<BufferSlot>& slots, BufferRole role,
                     const std::vector<ir::ParamKind>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    slots.push_back({role, static_cast<int>(i), false, params[i] == ir::ParamKind::Scalar, false});
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
}

}  // namespace

KernelSpec normalized(const KernelSpec& spec) {
  KernelSpec s = spec;
  const bool forward_kind = spec.kind != KernelKind::Backward;
  const bool training = spec.kind == KernelKind::TrainingForward || spec.kind == KernelKind::Backward;
  if (forward_kind) s.grad_state_seqs = s.grad_final_states = false;
  if (!forward_kind) s.store_state_seqs = false;
  if (!training) s.checkpoint_every = 0;
  return s;
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
  if (training) {
    if (backward == nullptr) throw ArgumentError("backward", "the backward step", "none");
    p.saved = static_cast<int>(backward->saved.size());
    // Per-step saving writes them; checkpoint recomputation needs them in the backward.
    p.forward_saves = spec.kind == KernelKind::TrainingForward ? !p.checkpointed() : p.checkpointed();
  }

  std::vector<BufferSlot>& s = p.slots;
  if (forward_kind) {
    add_slots(s, BufferRole::Input, p.inputs, true);
    add_slots(s, BufferRole::InitialState, p.states, false);
    add_param_slots(s, BufferRole::Param, p.params);
    add_slots(s, BufferRole::Output, p.outputs, true);
    if (p.spec.store_state_seqs) add_slots(s, BufferRole::StateSeq, p.states, true);
    if (spec.kind != KernelKind::Inference) add_slots(s, BufferRole::FinalState, p.states, false);
    if (spec.kind == KernelKind::TrainingForward) {
      if (p.checkpointed()) {
        add_slots(s, BufferRole::Saved, p.states, true, true);
      } else {
        add_slots(s, BufferRole::Saved, p.saved, true);
      }
    }
  } else {
    if (p.checkpointed()) {
      add_slots(s, BufferRole::Saved, p.states, true, true);
      add_slots(s, BufferRole::Input, p.inputs, true);
    } else {
      add_slots(s, BufferRole::Saved, p.saved, true);
    }
    add_param_slots(s, BufferRole::Param, p.params);
    add_slots(s, BufferRole::GradOutput, p.outputs, true);
    if (p.spec.grad_state_seqs) add_slots(s, BufferRole::GradStateSeq, p.states, true);
    if (p.spec.grad_final_states) add_slots(s, BufferRole::GradFinalState, p.states, false);
    add_slots(s, BufferRole::GradInput, p.inputs, true);
    add_slots(s, BufferRole::GradInitialState, p.states, false);
    add_param_slots(s, BufferRole::GradParam, p.params);
    if (p.scalar_params > 0) add_slots(s, BufferRole::Workspace, 1, false);
  }
  if (s.size() > static_cast<size_t>(kMaxBuffers)) {
    throw ArgumentError("program", "a neuron whose kernel needs at most " + std::to_string(kMaxBuffers) +
                                       " buffers",
                        std::to_string(s.size()) + " buffers for kernel " + kernel_kind_name(spec.kind));
  }
  return p;
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
  }
  return "?";
}

}  // namespace spikejit::codegen
