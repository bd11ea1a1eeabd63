// Which values of a step are spike-valued (only +0 or 1): the rule of spikejit/ir.h.
#include <cmath>
#include <vector>

#include "spikejit/ir.h"

namespace spikejit::ir {

std::vector<bool> spike_valued(const std::vector<Node>& nodes) {
  std::vector<bool> binary(nodes.size(), false);
  auto arg = [&](const Node& n, int a) {
    const int32_t id = n.args[a];
    return id >= 0 && static_cast<size_t>(id) < binary.size() && binary[static_cast<size_t>(id)];
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.type == Type::Bool) {
      binary[i] = true;
      continue;
    }
    switch (n.op) {
      case Op::Spike:
      case Op::ToFloat: binary[i] = true; break;
      case Op::Literal: binary[i] = (n.value == 0.0 && !std::signbit(n.value)) || n.value == 1.0; break;
      case Op::Detach: binary[i] = arg(n, 0); break;
      case Op::Mul:
      case Op::Min:
      case Op::Max: binary[i] = arg(n, 0) && arg(n, 1); break;
      case Op::Sub: {
        const int32_t a = n.args[0];
        const bool one = a >= 0 && static_cast<size_t>(a) < i && nodes[static_cast<size_t>(a)].op == Op::Literal &&
                         nodes[static_cast<size_t>(a)].value == 1.0;
        binary[i] = one && arg(n, 1);
        break;
      }
      case Op::Where: binary[i] = arg(n, 1) && arg(n, 2); break;
      default: break;
    }
  }
  return binary;
}

}  // namespace spikejit::ir
