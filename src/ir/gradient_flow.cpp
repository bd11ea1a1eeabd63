// Which values of a step carry a gradient, by PyTorch's requires_grad rule: see spikejit/ir.h.
#include <string>
#include <vector>

#include "spikejit/error.h"
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
    flow.sources.push_back(from[static_cast<size_t>(v)]);
    return any;
  };
  for (ValueId v : forward.outputs) flow.outputs.push_back(result(v));
  for (ValueId v : forward.next_states) flow.states.push_back(result(v));
  // Over several steps a result also carries what reaches the states it reads: close the
  // sources over the states (a fixed point; each pass adds at least one source or stops).
  const size_t no = forward.outputs.size();
  for (bool changed = true; changed;) {
    changed = false;
    for (std::vector<bool>& reaching : flow.sources) {
      for (size_t j = 0; j < ns; ++j) {
        if (!reaching[ni + j]) continue;
        const std::vector<bool>& state = flow.sources[no + j];
        for (size_t a = 0; a < arguments; ++a) {
          if (state[a] && !reaching[a]) reaching[a] = changed = true;
        }
      }
    }
  }
  return flow;
}

std::vector<bool> GradientFlow::requires_grad(const std::vector<bool>& requiring) const {
  if (requiring.size() != arguments.size()) {
    throw ArgumentError("requiring", std::to_string(arguments.size()) + " flags (one per input, state and parameter)",
                        std::to_string(requiring.size()));
  }
  std::vector<bool> result;
  for (const std::vector<bool>& reaching : sources) {
    bool any = false;
    for (size_t a = 0; a < requiring.size(); ++a) any = any || (reaching[a] && requiring[a]);
    result.push_back(any);
  }
  return result;
}

}  // namespace spikejit::ir
