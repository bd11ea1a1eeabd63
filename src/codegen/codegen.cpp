// codegen's public entry points: kernel kinds, spec keys, generate(), variant choice.
#include "spikejit/codegen.h"

#include "codegen/kernel_plan.h"
#include "codegen/kernel_source.h"
#include "spikejit/error.h"

namespace spikejit::codegen {

const char* kernel_kind_name(KernelKind k) {
  switch (k) {
    case KernelKind::Inference: return "inference";
    case KernelKind::InferenceFinalState: return "inference_final_state";
    case KernelKind::TrainingForward: return "training_forward";
    case KernelKind::Backward: return "backward";
  }
  return "unknown";
}

namespace {

std::string flag_text(const std::vector<bool>& flags) {
  std::string s;
  for (bool f : flags) s += f ? '1' : '0';
  return s;
}

}  // namespace

std::string KernelSpec::key() const {
  const KernelSpec s = normalized(*this);
  std::string k = std::string("kind=") + kernel_kind_name(s.kind) + " storage=" + dtype_name(s.storage);
  switch (s.kind) {
    case KernelKind::Inference:
    case KernelKind::InferenceFinalState:
      k += std::string(" store_state_seqs=") + (s.store_state_seqs ? "1" : "0");
      if (s.reverse) k += " reverse=1";
      break;
    case KernelKind::TrainingForward:
      k += std::string(" store_state_seqs=") + (s.store_state_seqs ? "1" : "0") +
           " checkpoint_every=" + std::to_string(s.checkpoint_every);
      break;
    case KernelKind::Backward:
      k += std::string(" grad_state_seqs=") + (s.grad_state_seqs ? "1" : "0") +
           " grad_final_states=" + (s.grad_final_states ? "1" : "0") +
           " checkpoint_every=" + std::to_string(s.checkpoint_every);
      if (!layout_tag(s).empty()) k += " grad_repeat=" + layout_tag(s);
      break;
  }
  if (!s.packed_outputs.empty()) k += " packed_outputs=" + flag_text(s.packed_outputs);
  if (s.pack_spikes) k += " pack_spikes=1";
  if (s.strided_inputs | s.strided_states | s.strided_params | s.strided_saved) {
    k += " strided=" + std::to_string(s.strided_inputs) + "/" + std::to_string(s.strided_states) + "/" +
         std::to_string(s.strided_params) + "/" + std::to_string(s.strided_saved);
  }
  return k;
}

int64_t KernelVariant::blocks(int64_t neurons) const {
  const int64_t per_block = static_cast<int64_t>(elements_per_thread) * block_size;
  return neurons <= 0 ? 0 : (neurons + per_block - 1) / per_block;
}

int64_t KernelVariant::workspace_bytes(int64_t neurons) const {
  if (reduce_entry.empty()) return 0;
  return blocks(neurons) * scalar_params * static_cast<int64_t>(sizeof(double));
}

KernelSource generate(const Program& program, const KernelSpec& spec) {
  const bool training = spec.kind == KernelKind::TrainingForward || spec.kind == KernelKind::Backward;
  NeuronIdentity id;
  id.name = program.neuron().name;
  id.hash = program.hash();
  id.canonical = program.canonical();
  id.neuron = &program.neuron();
  return generate_kernel(program.forward(), training ? &program.backward(spec.pack_spikes) : nullptr, id, spec);
}

const KernelVariant& pick_variant(const KernelSource& source, int64_t neurons, int multiprocessors,
                                  bool rows_aligned) {
  if (source.variants.empty()) throw ArgumentError("source", "a generated KernelSource", "no variants");
  if (multiprocessors <= 0) {
    throw ArgumentError("multiprocessors", "a positive count", std::to_string(multiprocessors));
  }
  // The vector variant once it gives every SM scheduler a warp (4 per SM); measured on an H200
  // (LIF, T = 64): at N = 16K the one-per-thread variant is faster, at N = 256K the vector one.
  const KernelVariant& wide = source.variants[0];
  const int64_t wide_threads = (neurons + wide.elements_per_thread - 1) / wide.elements_per_thread;
  const bool vector_rows = rows_aligned && neurons % wide.elements_per_thread == 0;
  if (source.variants.size() == 1) return wide;
  if (vector_rows && wide_threads >= static_cast<int64_t>(multiprocessors) * 128) return wide;
  return source.variants[1];
}

}  // namespace spikejit::codegen
