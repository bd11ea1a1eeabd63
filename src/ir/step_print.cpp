// Human-readable listing of a Step.
#include <cstdio>
#include <string>
#include <vector>

#include "spikejit/ir.h"

namespace spikejit::ir {
namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string ref(ValueId id) { return "%" + std::to_string(id); }

std::string surrogate_text(const Surrogate& s) {
  const SurrogateInfo& info = surrogate_info(s.kind);
  std::string out = std::string(info.name) + "(";
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (i) out += ", ";
    if (i < info.param_names.size()) out += std::string(info.param_names[i]) + "=";
    out += number(s.params[i]);
  }
  return out + ")";
}

std::string node_text(const Node& n) {
  std::string out = op_info(n.op).name;
  if (n.op == Op::Literal)
    return out + " " + number(n.value) + (n.type == Type::Bool ? " : bool" : " : float");
  if (is_leaf(n.op)) return out + " " + std::to_string(n.index);
  for (int a = 0; a < op_info(n.op).arity; ++a) out += (a ? ", " : " ") + ref(n.args[a]);
  if (n.op == Op::Spike) out += ", " + surrogate_text(n.surrogate);
  return out + (n.type == Type::Bool ? " : bool" : " : float");
}

void list_results(std::string& out, const char* label, const std::vector<ValueId>& ids,
                  const char* prefix) {
  for (size_t i = 0; i < ids.size(); ++i)
    out += std::string(label) + " " + std::to_string(i) + " = " + prefix + ref(ids[i]) + "\n";
}

}  // namespace

std::string to_string(const Step& s) {
  std::string out = "# " + std::to_string(s.num_inputs) + " inputs, " +
                    std::to_string(s.num_states) + " states, " + std::to_string(s.num_outputs) +
                    " outputs, params [";
  for (size_t i = 0; i < s.params.size(); ++i)
    out +=
        std::string(i ? ", " : "") + (s.params[i] == ParamKind::Scalar ? "scalar" : "per_neuron");
  out += "]\n";
  for (size_t i = 0; i < s.nodes.size(); ++i)
    out += ref(static_cast<ValueId>(i)) + " = " + node_text(s.nodes[i]) + "\n";
  list_results(out, "output", s.outputs, "");
  list_results(out, "next_state", s.next_states, "");
  for (size_t i = 0; i < s.saved.size(); ++i)
    out += "saved " + std::to_string(i) + " = forward " + ref(s.saved[i]) +
           (s.is_saved_packed(i) ? " (packed bits)" : "") + "\n";
  list_results(out, "grad_input", s.grad_inputs, "");
  list_results(out, "grad_prev_state", s.grad_prev_states, "");
  list_results(out, "grad_param", s.grad_params, "");
  return out;
}

}  // namespace spikejit::ir
