// The buffers of one kernel call, for every backend (CPU pointers for spikejit::cpu, device
// pointers for spikejit::cuda). Sequences are [T, *S] (N = prod(S) neurons); states and
// per-neuron parameters are [*S]; scalar parameters are [] or [1].
#pragma once

#include <cstdint>
#include <vector>

#include "spikejit/tensor.h"

namespace spikejit {

// Inference:                 outputs (+ state_seqs and/or final_states when present).
// Training forward:          the same plus `saved` (one [T,*S] buffer per backward().saved; one
//                            that is an input, see Program::saved_inputs(), may be absent and is
//                            then not written: the backward's `saved` entry is the input itself).
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

// Checks every buffer against the program (counts, shapes, dtypes, contiguity, overlap of written
// buffers with anything else) and throws ArgumentError naming the first bad argument.
class Program;
void validate(const Program& program, const ForwardBuffers& b);
void validate(const Program& program, const BackwardBuffers& b);

}  // namespace spikejit
