// Which values of a step carry a gradient, by PyTorch's requires_grad rule: see spikejit/ir.h.
#include <vector>

#include "spikejit/ir.h"

namespace spikejit::ir {

GradientFlow gradient_flow(const Step& forward) {
  const size_t ni = static_cast<size_t>(forward.num_inputs), ns = static_cast<size_t>(forward.num_states);
  const size_t arguments = ni + ns + forward.params.size();
  // Per node: the arguments (inputs, states, parameters) whose gradient reaches it.
  std::vector<std::vector<bool>> from(forward.nodes.size(), std::vector<bool>(arguments, false));
  for (size_t i = 0; i < forward.nodes.size(); ++i) {
    const Node& n = forward.nodes[i];
    if (n.type != Type::Float || n.op == Op::Detach) continue;  // Bool values carry none
    if (n.op == Op::Input) from[i][static_cast<size_t>(n.index)] = true;
    if (n.op == Op::State) from[i][ni + static_cast<size_t>(n.index)] = true;
    if (n.op == Op::Param) from[i][ni + ns + static_cast<size_t>(n.index)] = true;
    for (int k = 0; k < op_info(n.op).arity; ++k) {
      if (n.args[k] < 0) continue;
      const std::vector<bool>& arg = from[static_cast<size_t>(n.args[k])];
      for (size_t a = 0; a < arguments; ++a) from[i][a] = from[i][a] || arg[a];
    }
  }
  GradientFlow flow;
  flow.arguments.assign(arguments, false);
  auto result = [&](ValueId v) {
    bool any = false;
    for (size_t a = 0; a < arguments; ++a) {
      any = any || from[static_cast<size_t>(v)][a];
      flow.arguments[a] = flow.arguments[a] || from[static_cast<size_t>(v)][a];
    }
    return any;
  };
  for (ValueId v : forward.outputs) flow.outputs.push_back(result(v));
  for (ValueId v : forward.next_states) flow.states.push_back(result(v));
  return flow;
}

}  // namespace spikejit::ir
