// The "auto" save policy (see spikejit/buffers.h for the rule and why).
#include <string>

#include "spikejit/buffers.h"
#include "spikejit/error.h"
#include "spikejit/program.h"

namespace spikejit {
namespace {

// One input, one state, and checkpoints keep no more values per step (inputs + states / k) than
// per-step saving (backward().saved, inputs included).
bool checkpoints_pay(const Program& program) {
  const int64_t inputs = static_cast<int64_t>(program.neuron().inputs.size());
  const int64_t states = static_cast<int64_t>(program.neuron().states.size());
  const int64_t saved_per_step = static_cast<int64_t>(program.backward().saved.size());
  const int64_t k = kAutoCheckpointEvery;
  return inputs == 1 && states == 1 && inputs * k + states <= saved_per_step * k;
}

}  // namespace

int64_t auto_checkpoint_interval(const Program& program, bool on_cuda, DType storage, bool stores_state_seqs,
                                 bool packs_spikes_or_outputs) {
  const bool pays = on_cuda && storage == DType::F32 && !stores_state_seqs && !packs_spikes_or_outputs &&
                    checkpoints_pay(program);
  return pays ? kAutoCheckpointEvery : 0;
}

int64_t auto_checkpoint_every(const Program& program, bool on_cuda, DType storage, int64_t steps, int64_t neurons,
                              bool stores_state_seqs, bool packs_spikes_or_outputs) {
  if (steps < 0) throw ArgumentError("steps", "a count >= 0", std::to_string(steps));
  if (neurons < 0) throw ArgumentError("neurons", "a count >= 0", std::to_string(neurons));
  if (steps < kAutoCheckpointMinSteps || neurons < kAutoCheckpointMinNeurons) return 0;
  return auto_checkpoint_interval(program, on_cuda, storage, stores_state_seqs, packs_spikes_or_outputs);
}

}  // namespace spikejit
