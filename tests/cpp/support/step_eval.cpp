#include "support/step_eval.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "ir/scalar_ops.h"

namespace spikejit::testing {
namespace {

double slot(const std::vector<double>& v, int32_t i, const char* what) {
  if (i < 0 || i >= static_cast<int32_t>(v.size()))
    throw std::out_of_range(std::string("step_eval: no value for ") + what + " " +
                            std::to_string(i));
  return v[i];
}

}  // namespace

std::vector<double> eval_step(const ir::Step& s, const StepLeaves& leaves, bool smooth_spikes,
                              const std::vector<double>* detached) {
  std::vector<double> val(s.nodes.size());
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const ir::Node& n = s.nodes[i];
    auto arg = [&](int a) { return val[n.args[a]]; };
    switch (n.op) {
      case ir::Op::Literal: val[i] = n.value; break;
      case ir::Op::Input: val[i] = slot(leaves.inputs, n.index, "input"); break;
      case ir::Op::State: val[i] = slot(leaves.states, n.index, "state"); break;
      case ir::Op::Param: val[i] = slot(leaves.params, n.index, "param"); break;
      case ir::Op::Saved: val[i] = slot(leaves.saved, n.index, "saved"); break;
      case ir::Op::GradOutput: val[i] = slot(leaves.grad_outputs, n.index, "grad_output"); break;
      case ir::Op::GradState: val[i] = slot(leaves.grad_states, n.index, "grad_state"); break;
      case ir::Op::Constant: throw std::invalid_argument("step_eval: constant leaf in a step");
      case ir::Op::Detach: val[i] = detached ? detached->at(i) : arg(0); break;
      case ir::Op::Spike:
        if (smooth_spikes) {
          if (n.surrogate.kind != ir::SurrogateKind::Sigmoid)
            throw std::invalid_argument("step_eval: smooth spikes need a sigmoid surrogate");
          val[i] = 1.0 / (1.0 + std::exp(-n.surrogate.params.at(0) * arg(0)));
          break;
        }
        [[fallthrough]];
      default: {
        const int arity = ir::op_info(n.op).arity;
        val[i] =
            ir::apply_op<double>(n.op, arg(0), arity > 1 ? arg(1) : 0.0, arity > 2 ? arg(2) : 0.0);
      }
    }
  }
  return val;
}

ForwardTrace run_forward(const ir::Step& forward, const Sequence& seq, bool smooth_spikes,
                         const ForwardTrace* detached) {
  ForwardTrace tr;
  StepLeaves leaves;
  leaves.states = seq.init_states;
  leaves.params = seq.params;
  for (size_t t = 0; t < seq.inputs.size(); ++t) {
    leaves.inputs = seq.inputs[t];
    std::vector<double> val =
        eval_step(forward, leaves, smooth_spikes, detached ? &detached->values.at(t) : nullptr);
    std::vector<double> out, next;
    for (ir::ValueId id : forward.outputs) out.push_back(val[id]);
    for (ir::ValueId id : forward.next_states) next.push_back(val[id]);
    tr.outputs.push_back(out);
    tr.states.push_back(next);
    tr.values.push_back(std::move(val));
    leaves.states = std::move(next);
  }
  return tr;
}

SequenceGrads run_backward(const ir::Step& forward, const ir::Step& backward, const Sequence& seq,
                           const Matrix& grad_outputs, const Matrix& grad_states,
                           bool smooth_spikes) {
  const ForwardTrace tr = run_forward(forward, seq, smooth_spikes);
  const size_t T = seq.inputs.size();
  SequenceGrads g;
  g.inputs.resize(T);
  g.params.assign(backward.grad_params.size(), 0.0);
  std::vector<double> carry(forward.num_states, 0.0);
  for (size_t t = T; t-- > 0;) {
    StepLeaves leaves;
    leaves.params = seq.params;
    for (ir::ValueId id : backward.saved) leaves.saved.push_back(tr.values[t].at(id));
    leaves.grad_outputs = grad_outputs[t];
    for (int i = 0; i < forward.num_states; ++i)
      leaves.grad_states.push_back(grad_states[t][i] + carry[i]);
    std::vector<double> val = eval_step(backward, leaves, smooth_spikes);
    for (ir::ValueId id : backward.grad_inputs) g.inputs[t].push_back(val[id]);
    for (size_t i = 0; i < backward.grad_params.size(); ++i)
      g.params[i] += val[backward.grad_params[i]];
    for (size_t i = 0; i < backward.grad_prev_states.size(); ++i)
      carry[i] = val[backward.grad_prev_states[i]];
  }
  g.init_states = carry;
  return g;
}

}  // namespace spikejit::testing
