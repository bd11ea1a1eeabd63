// What one generated kernel reads and writes: the neuron's counts, the slots of
// SpikejitArgs::buffers in order, and the kind's flags. Shared by the emitters of codegen.
#pragma once

#include <string>
#include <vector>

#include "spikejit/codegen.h"
#include "spikejit/ir.h"

namespace spikejit::codegen {

struct KernelPlan {
  KernelSpec spec;
  int inputs = 0, states = 0, outputs = 0;
  std::vector<ir::ParamKind> params;
  int saved = 0;              // backward().saved.size() for the training kinds, else 0
  std::vector<bool> saved_packed;  // per saved value: bit-packed rows (pack_spikes, per step)
  bool forward_saves = false;  // the forward step computes them (per-step save or recompute)
  int scalar_params = 0;
  int streams = 0;          // streams of random draws (uniform()): 1 + the largest stream number
  bool reads_seed = false;  // the kernel runs its forward steps (a Seed slot): random, and not a per-step backward
  std::vector<BufferSlot> slots;

  bool backward() const { return spec.kind == KernelKind::Backward; }
  bool checkpointed() const { return spec.checkpoint_every > 0; }
  // Index of the first slot with `role`, or -1 when the kernel has none.
  int first_slot(BufferRole role) const;
};

// The spec with the fields that do not apply to its kind reset, so that they cannot split caches
// (what key() and the generator see).
KernelSpec normalized(const KernelSpec& spec);

// The repeating gradient sequences of a backward spec as text ("" when there are none), e.g.
// "a/-s": output 0 one value, state 0 a sequence, state 1 the same each step.
std::string layout_tag(const KernelSpec& spec);

// `backward` is the program's backward step of the spec's save policy (Program::backward(
// spec.pack_spikes)); it is read (and must be given) only for TrainingForward and Backward.
// Throws ArgumentError for a bad spec or too many buffers.
KernelPlan plan_kernel(const ir::Step& forward, const ir::Step* backward, const KernelSpec& spec);

const char* buffer_role_name(BufferRole role);

}  // namespace spikejit::codegen
