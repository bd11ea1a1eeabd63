// The buffers of one kernel call, for every backend (CPU pointers for spikejit::cpu, device
// pointers for spikejit::cuda). Sequences are [T, *S] (N = prod(S) neurons); states and
// per-neuron parameters are [*S]; scalar parameters are [] or [1].
#pragma once

#include <cstdint>
#include <vector>

#include "spikejit/tensor.h"

namespace spikejit {

// Inference:                 outputs (+ state_seqs and/or final_states when present).
// Training forward:          the same plus `saved` (one [T,*S] buffer per backward().saved).
struct ForwardBuffers {
  int64_t steps = 0;                     // T
  std::vector<int64_t> neuron_shape;     // S
  std::vector<TensorView> inputs;        // num_inputs x [T,*S]
  std::vector<TensorView> initial_states;  // empty, or num_states entries; absent -> default
  std::vector<TensorView> params;        // one per parameter declaration
  std::vector<TensorView> outputs;       // num_outputs x [T,*S]; written
  std::vector<TensorView> state_seqs;    // empty, or num_states entries; present -> written
  std::vector<TensorView> final_states;  // empty, or num_states entries; present -> written
  std::vector<TensorView> saved;         // empty (inference) or backward().saved.size() entries
};

struct BackwardBuffers {
  int64_t steps = 0;
  std::vector<int64_t> neuron_shape;
  std::vector<TensorView> saved;              // what the training forward wrote
  std::vector<TensorView> params;
  std::vector<TensorView> grad_outputs;       // empty or num_outputs; absent -> zero
  std::vector<TensorView> grad_state_seqs;    // empty or num_states; absent -> zero
  std::vector<TensorView> grad_final_states;  // empty or num_states; absent -> zero
  std::vector<TensorView> grad_inputs;        // empty or num_inputs; present -> written
  std::vector<TensorView> grad_initial_states;  // empty or num_states; present -> written
  std::vector<TensorView> grad_params;        // empty or one per parameter; present -> written
};

// A read-only [T, *S] view whose elements repeat: the same row for every step (stride 0 over T)
// and/or one value for every neuron (stride 0 over every dimension of S), like the expanded
// gradient of `y.sum()` in PyTorch. Row-major contiguous views have both flags false.
struct SequenceLayout {
  bool same_each_step = false;
  bool same_each_neuron = false;
};

// The layout of `v` (a [T, *S] view), or false when it is neither contiguous nor such a broadcast.
bool sequence_layout(const TensorView& v, SequenceLayout* layout);

// Checks every buffer against the program (counts, shapes, dtypes, contiguity, overlap of written
// buffers with anything else) and throws ArgumentError naming the first bad argument.
// `broadcast_grads` (the CPU executor reads them): grad_outputs and grad_state_seqs may also be
// broadcast views (SequenceLayout); otherwise every buffer must be contiguous.
class Program;
void validate(const Program& program, const ForwardBuffers& b);
void validate(const Program& program, const BackwardBuffers& b, bool broadcast_grads = false);

}  // namespace spikejit
