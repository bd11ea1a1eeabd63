// Which values of a step are the same at every step of a call: the rule of spikejit/ir.h.
#include <vector>

#include "spikejit/ir.h"

namespace spikejit::ir {

std::vector<bool> step_invariant(const std::vector<Node>& nodes) {
  std::vector<bool> invariant(nodes.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (is_leaf(n.op)) {
      invariant[i] = n.op == Op::Literal || n.op == Op::Param;
      continue;
    }
    bool from_invariants = true;
    for (int k = 0; k < op_info(n.op).arity; ++k) {
      const int32_t arg = n.args[k];
      from_invariants = from_invariants && arg >= 0 && static_cast<size_t>(arg) < i && invariant[static_cast<size_t>(arg)];
    }
    invariant[i] = from_invariants;
  }
  return invariant;
}

}  // namespace spikejit::ir
