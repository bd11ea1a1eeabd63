// Which values of a step carry a gradient, by PyTorch's requires_grad rule: see spikejit/ir.h.
#include <algorithm>
#include <string>
#include <vector>

#include "spikejit/error.h"
#include "spikejit/ir.h"

namespace spikejit::ir {
namespace {

using Flags = std::vector<bool>;

// into |= from, elementwise; returns whether `into` changed.
bool merge(Flags& into, const Flags& from) {
  bool changed = false;
  for (size_t a = 0; a < into.size(); ++a) {
    if (from[a] && !into[a]) into[a] = changed = true;
  }
  return changed;
}

// Per node of the step: the arguments (inputs, states, parameters) whose gradient reaches it.
std::vector<Flags> sources_per_node(const Step& forward) {
  const size_t ni = static_cast<size_t>(forward.num_inputs);
  const size_t ns = static_cast<size_t>(forward.num_states);
  std::vector<Flags> from(forward.nodes.size(), Flags(ni + ns + forward.params.size(), false));
  for (size_t i = 0; i < forward.nodes.size(); ++i) {
    const Node& n = forward.nodes[i];
    if (n.type != Type::Float || n.op == Op::Detach) continue;  // Bool values carry none
    if (n.op == Op::Input) from[i][static_cast<size_t>(n.index)] = true;
    if (n.op == Op::State) from[i][ni + static_cast<size_t>(n.index)] = true;
    if (n.op == Op::Param) from[i][ni + ns + static_cast<size_t>(n.index)] = true;
    for (int k = 0; k < op_info(n.op).arity; ++k) {
      if (n.args[k] >= 0) merge(from[i], from[static_cast<size_t>(n.args[k])]);
    }
  }
  return from;
}

// Over several steps a result also carries what reaches the states it reads: closes the
// sources of the step's results (outputs, then next states) over the states, to a fixed point.
void close_over_states(std::vector<Flags>& sources, const Step& forward) {
  const size_t ni = static_cast<size_t>(forward.num_inputs);
  const size_t no = forward.outputs.size();
  for (bool changed = true; changed;) {
    changed = false;
    for (Flags& reaching : sources) {
      for (size_t j = 0; j < static_cast<size_t>(forward.num_states); ++j) {
        if (reaching[ni + j]) changed = merge(reaching, sources[no + j]) || changed;
      }
    }
  }
}

}  // namespace

GradientFlow gradient_flow(const Step& forward) {
  const std::vector<Flags> from = sources_per_node(forward);
  GradientFlow flow;
  flow.arguments.assign(static_cast<size_t>(forward.num_inputs + forward.num_states) + forward.params.size(), false);
  auto record = [&](ValueId v, Flags& carries) {
    const Flags& reaching = from[static_cast<size_t>(v)];
    carries.push_back(std::any_of(reaching.begin(), reaching.end(), [](bool r) { return r; }));
    merge(flow.arguments, reaching);
    flow.sources.push_back(reaching);
  };
  for (ValueId v : forward.outputs) record(v, flow.outputs);
  for (ValueId v : forward.next_states) record(v, flow.states);
  close_over_states(flow.sources, forward);
  return flow;
}

std::vector<bool> GradientFlow::requires_grad(const std::vector<bool>& requiring) const {
  if (requiring.size() != arguments.size()) {
    throw ArgumentError("requiring", std::to_string(arguments.size()) + " flags (one per input, state and parameter)",
                        std::to_string(requiring.size()));
  }
  std::vector<bool> result;
  for (const Flags& reaching : sources) {
    bool carries = false;
    for (size_t a = 0; a < requiring.size(); ++a) carries = carries || (reaching[a] && requiring[a]);
    result.push_back(carries);
  }
  return result;
}

}  // namespace spikejit::ir
