// The adjoint neuron: a neuron's backward step as a neuron of its own, which runs backward in
// time. Its kernels are then ordinary neuron kernels, so its own gradients (a second derivative
// of the first neuron) come from differentiating it like any neuron.
#include <algorithm>
#include <string>
#include <vector>

#include "autodiff/emitter.h"
#include "autodiff/fresh_names.h"
#include "autodiff/sweep.h"
#include "spikejit/autodiff.h"

namespace spikejit::autodiff {

using ir::Op;
using ir::ValueId;

ir::Neuron adjoint(const ir::Neuron& n) {
  const SweptStep swept = sweep(ir::lower(n));
  const int ni = static_cast<int>(n.inputs.size()), ns = static_cast<int>(n.states.size());
  const int no = static_cast<int>(n.outputs.size()), np = static_cast<int>(n.params.size());

  ir::Neuron a;
  a.name = n.name + "_adjoint";
  FreshNames names(n);
  for (const auto& d : n.inputs) a.inputs.push_back({d.name});
  for (const auto& d : n.states) a.inputs.push_back({d.name});  // the state before the step
  for (const auto& d : n.outputs) a.inputs.push_back({names.fresh("grad_" + d.name)});
  for (const auto& d : n.states) a.inputs.push_back({names.fresh("grad_" + d.name + "_seq")});
  a.params = n.params;

  // The swept nodes with their leaves moved: the forward's inputs and states become inputs, the
  // gradient of a state (all paths) is the carried one plus its sequence's.
  std::vector<ValueId> moved(swept.nodes.size(), -1);
  Emitter e(a.nodes);
  // The draws of the recomputed step are the forward's: the same stream of the call's seed, at
  // the same row and neuron (the kernels key them by the row, in whatever order the steps run).
  int32_t streams = 0;
  for (const ir::Node& node : n.nodes)
    if (node.op == Op::Uniform) streams = std::max(streams, node.index + 1);
  std::vector<ValueId> draw(static_cast<size_t>(streams), -1);
  for (size_t i = 0; i < swept.nodes.size(); ++i) {
    const ir::Node& node = swept.nodes[i];
    switch (node.op) {
      case Op::Input: moved[i] = e.leaf(Op::Input, node.index); continue;
      case Op::State: moved[i] = e.leaf(Op::Input, ni + node.index); continue;
      case Op::Param: moved[i] = e.leaf(Op::Param, node.index); continue;
      case Op::GradOutput: moved[i] = e.leaf(Op::Input, ni + ns + node.index); continue;
      case Op::GradState:
        moved[i] = e.add(e.leaf(Op::State, node.index),
                         e.leaf(Op::Input, ni + ns + no + node.index));
        continue;
      default: break;
    }
    ir::Node copy = node;
    for (int k = 0; k < ir::op_info(node.op).arity; ++k) copy.args[k] = moved[node.args[k]];
    a.nodes.push_back(copy);
    moved[i] = static_cast<ValueId>(a.nodes.size() - 1);
    if (node.op == Op::Uniform) draw[node.index] = moved[i];
  }
  // Every stream bound to a name first, in stream order, as the text format numbers them (also
  // those the step does not use, so that the numbers stay).
  for (int32_t k = 0; k < streams; ++k) {
    if (draw[k] < 0) draw[k] = e.leaf(Op::Uniform, k);
    a.body.push_back({names.fresh("draw" + std::to_string(k)), draw[k]});
  }

  for (int i = 0; i < ni; ++i) {
    const std::string name = names.fresh("grad_" + n.inputs[i].name);
    a.outputs.push_back({name});
    a.body.push_back({name, moved[swept.grad_inputs[i]]});
  }
  // The states' next values, each computed from the states' old values: bound to locals first,
  // since the text format reads a state's latest binding.
  std::vector<ValueId> next;
  for (int j = 0; j < ns; ++j) {
    a.states.push_back({names.fresh("grad_" + n.states[j].name), 0.0, -1});
    next.push_back(moved[swept.grad_prev_states[j]]);
  }
  for (int k = 0; k < np; ++k) {  // summed over the steps
    a.states.push_back({names.fresh("grad_" + n.params[k].name), 0.0, -1});
    next.push_back(e.add(e.leaf(Op::State, ns + k), moved[swept.grad_params[k]]));
  }
  for (size_t j = 0; j < next.size(); ++j) a.body.push_back({names.fresh(a.states[j].name + "_next"), next[j]});
  for (size_t j = 0; j < next.size(); ++j) a.body.push_back({a.states[j].name, next[j]});
  ir::verify(a);
  return a;
}

}  // namespace spikejit::autodiff
