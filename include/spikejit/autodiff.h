// Reverse-mode differentiation of a forward step (a rule per op, one reverse sweep).
#pragma once

#include "spikejit/ir.h"

namespace spikejit::autodiff {

// From the lowered forward step, derives the backward step:
//   leaves   Saved(i)       the forward value `saved[i]` at step t (chosen as the fewest values per
//                           step from which everything the backward needs is recomputed),
//            GradOutput(i)  dL/d outputs[i][t],   GradState(i)  dL/d states[i][t],   Param(i)
//   results  grad_inputs (dL/d inputs[t]), grad_prev_states (dL/d states[t-1]), grad_params
//            (this step's contribution). spike(x) gives grad * surrogate'(x); detach gives zero.
// `pack_spikes` (the save policy of spikejit/buffers.h): spike-valued values (ir::spike_valued)
// are saved as bits, at 1/16 of the cost of a value in the choice of what to save; the result's
// `saved_packed` then has one flag per saved value (without it: empty).
ir::Step differentiate(const ir::Step& forward, bool pack_spikes = false);

// Forward mode: the tangent neuron of `n`. It declares n's inputs, states, parameters and outputs,
// then one tangent per input, state, parameter and output, in that order (named `<name>_tangent`;
// tangent states start at 0), and computes n's step followed by its Jacobian-vector product:
// each output's and next state's tangent from the tangents of the inputs, states and parameters.
// spike(x)'s tangent is surrogate'(x) times x's tangent, detach's is zero: the transpose of what
// `differentiate` computes. Inference of this neuron is the JVP of n over a whole sequence.
ir::Neuron tangent(const ir::Neuron& n);

// The adjoint neuron of `n`: n's backward step as a neuron that runs backward in time, so that
// its own gradients (n's second derivatives) come from differentiating it like any neuron.
//   inputs   n's inputs at step t, n's states before step t (at t - 1), the gradients of n's
//            outputs at t, the gradients of n's state sequences at t (`grad_<name>_seq`)
//   states   the gradient of each of n's states (`grad_<name>`: dL/d states[t-1] after the step,
//            start: the final states' gradients), then each parameter's gradient summed over
//            the steps so far (start: 0; a scalar parameter's still per neuron)
//   outputs  the gradient of each input at t (`grad_<name>`)
// Run over n's sequences with its steps last to first (ForwardBuffers::reverse), its final states
// are the gradients of n's initial states and of its parameters (summed over the neurons for a
// scalar one). The backward step's math, recomputing the forward step from the inputs and
// states instead of reading saved values.
// A neuron's uniform() draws are the adjoint's too (same streams): with the forward's seed, the
// recomputed step draws the forward's numbers.
ir::Neuron adjoint(const ir::Neuron& n);

// The surrogate derivative g'(x) as IR nodes appended to `nodes` (used by `differentiate`,
// exposed for tests). Returns the id of the result.
ir::ValueId append_surrogate_derivative(std::vector<ir::Node>& nodes, const ir::Surrogate& s,
                                        ir::ValueId x);

}  // namespace spikejit::autodiff
