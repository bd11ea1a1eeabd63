// The autograd node of eager training calls (eager_calls.cpp): its backward builds the gradient
// buffers and runs spikejit's backward kernels without Python or the GIL, on the CPU or on the
// stream autograd chose for it; under create_graph=True it refuses second derivatives.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nanobind/nanobind.h>

#include "spikejit/program.h"

namespace spikejit::python {

// A training call's counts and save policy, as the backward needs them.
struct TrainingCallSpec {
  int num_inputs = 0, num_states = 0, num_outputs = 0;
  bool states_given = false;  // initial states were passed (then they have gradients)
  bool store_state_seqs = false;
  int64_t checkpoint_every = 0;
  bool pack_spikes = false;
  std::vector<bool> saved_packed;  // per saved value: packed bits (empty when none is)
};

// Links `returned` (outputs, final states, state sequences, in that order; those the program
// says are not differentiable stay without requires_grad) to `differentiable`
// (inputs, initial states, params) through a new node that keeps `saved` (what the backward
// reads: per step the saved values with inputs in their places; with checkpoints, the
// checkpoints then the inputs), `params`, `seed` (undefined: none), the CUDA backward's
// `workspace` (undefined: none needed) and a reference to `keep_alive` (released with the GIL).
// A Python exception of a saved-tensor hook propagates as itself.
void attach_training_node(const Program& program, const TrainingCallSpec& spec, const std::vector<at::Tensor>& returned,
                          const std::vector<at::Tensor>& differentiable, const std::vector<at::Tensor>& saved,
                          const std::vector<at::Tensor>& params, const at::Tensor& seed, const at::Tensor& workspace,
                          nanobind::handle keep_alive);

}  // namespace spikejit::python
