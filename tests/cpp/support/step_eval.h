// A scalar reference evaluator of lowered Steps in double, for one neuron over T steps.
// Written for the autodiff tests, independently of the CPU executor.
#pragma once

#include <vector>

#include "spikejit/ir.h"

namespace spikejit::testing {

using Matrix = std::vector<std::vector<double>>;  // [T][slot]

// The leaf values of one step. Unused kinds may stay empty.
struct StepLeaves {
  std::vector<double> inputs, states, params, saved, grad_outputs, grad_states;
};

// Values of every node of `s`. With `smooth_spikes`, spike(x) evaluates as sigmoid(alpha * x),
// the function whose derivative a Sigmoid(alpha) surrogate is (other surrogates are rejected).
// With `detached`, every detach node takes its value from there (indexed like the nodes): the
// function whose ordinary derivative is the detached gradient, for finite differences.
std::vector<double> eval_step(const ir::Step& s, const StepLeaves& leaves, bool smooth_spikes,
                              const std::vector<double>* detached = nullptr);

struct Sequence {
  Matrix inputs;                    // [T][num_inputs]
  std::vector<double> init_states;  // [num_states]
  std::vector<double> params;       // [params]
};

struct ForwardTrace {
  Matrix outputs;  // [T][num_outputs]
  Matrix states;   // [T][num_states]: states after step t
  Matrix values;   // [T][nodes]: every forward node
};

// With `detached`, detach nodes at step t take their values from detached->values[t].
ForwardTrace run_forward(const ir::Step& forward, const Sequence& seq, bool smooth_spikes,
                         const ForwardTrace* detached = nullptr);

struct SequenceGrads {
  Matrix inputs;                    // [T][num_inputs]
  std::vector<double> init_states;  // [num_states]
  std::vector<double> params;       // [params], summed over t
};

// BPTT with the backward step: grad_outputs[t] = dL/d outputs[t], grad_states[t] = the direct
// dL/d states[t] (the carry from step t+1 is added here).
SequenceGrads run_backward(const ir::Step& forward, const ir::Step& backward, const Sequence& seq,
                           const Matrix& grad_outputs, const Matrix& grad_states,
                           bool smooth_spikes);

}  // namespace spikejit::testing
