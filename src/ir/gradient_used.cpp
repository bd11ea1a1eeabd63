// Which gradients a backward step reads matter to its results: the rule of spikejit/ir.h.
#include <vector>

#include "spikejit/ir.h"

namespace spikejit::ir {

std::vector<bool> gradient_used(const Step& backward, Op leaf, int count) {
  std::vector<bool> needed(backward.nodes.size(), false);
  for (const std::vector<ValueId>* results : {&backward.grad_inputs, &backward.grad_prev_states, &backward.grad_params})
    for (ValueId v : *results) needed[static_cast<size_t>(v)] = true;
  std::vector<bool> used(static_cast<size_t>(count), false);
  for (size_t i = backward.nodes.size(); i-- > 0;) {  // users come after their arguments
    if (!needed[i]) continue;
    const Node& n = backward.nodes[i];
    if (n.op == leaf && n.index >= 0 && n.index < count) used[static_cast<size_t>(n.index)] = true;
    for (int k = 0; k < op_info(n.op).arity; ++k)
      if (n.args[k] >= 0) needed[static_cast<size_t>(n.args[k])] = true;
  }
  return used;
}

}  // namespace spikejit::ir
