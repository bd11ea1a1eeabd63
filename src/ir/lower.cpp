// Neuron -> forward Step: named constants become literals, assignments become result slots.
#include <string>

#include "spikejit/error.h"
#include "spikejit/ir.h"

namespace spikejit::ir {
namespace {

// The value last bound to `name` in the body, or -1.
ValueId last_binding(const Neuron& n, const std::string& name) {
  ValueId v = -1;
  for (const Assignment& a : n.body)
    if (a.name == name) v = a.value;
  return v;
}

ValueId required_binding(const Neuron& n, const std::string& name, const char* what) {
  ValueId v = last_binding(n, name);
  if (v < 0 || v >= static_cast<ValueId>(n.nodes.size()))
    throw Error("neuron '" + n.name + "': " + what + " '" + name + "' is never assigned");
  return v;
}

}  // namespace

Step lower(const Neuron& n) {
  Step s;
  s.num_inputs = static_cast<int>(n.inputs.size());
  s.num_states = static_cast<int>(n.states.size());
  s.num_outputs = static_cast<int>(n.outputs.size());
  for (const ParamDecl& p : n.params) s.params.push_back(p.kind);

  s.nodes = n.nodes;
  for (Node& node : s.nodes) {
    if (node.op != Op::Constant) continue;
    if (node.index < 0 || node.index >= static_cast<int32_t>(n.constants.size()))
      throw Error("neuron '" + n.name + "': constant reference " + std::to_string(node.index) +
                  " out of range");
    const ConstDecl& c = n.constants[node.index];
    node.op = Op::Literal;
    node.type = c.type;
    node.value = c.type == Type::Bool ? (c.value != 0.0 ? 1.0 : 0.0) : c.value;
    node.index = -1;
  }

  for (const OutputDecl& o : n.outputs) s.outputs.push_back(required_binding(n, o.name, "output"));
  for (const StateDecl& st : n.states)
    s.next_states.push_back(required_binding(n, st.name, "state"));

  simplify(s);
  return s;
}

}  // namespace spikejit::ir
