// Forward-mode differentiation: the tangent neuron, built with the reverse-mode rule table.
//
// Every rule gives an argument's contribution as a linear function of the result's gradient g
// (for scalars: g times the partial derivative). Called with g = the argument's tangent, it gives
// the partial derivative times that tangent, so one forward sweep that sums those terms per node
// gives the node's tangent: the Jacobian-vector product, with spike's derivative the surrogate's
// and detach's zero, exactly as the backward sees them.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "autodiff/emitter.h"
#include "autodiff/fresh_names.h"
#include "autodiff/rules.h"
#include "spikejit/autodiff.h"

namespace spikejit::autodiff {
namespace {

using ir::Op;
using ir::ValueId;

// The tangent's name of each name of the neuron: `name` + "_tangent", with "_" appended until no
// name of the neuron has it. One per name, whatever declares or binds it.
class TangentNames {
 public:
  explicit TangentNames(const ir::Neuron& n) : names_(n) {}

  const std::string& of(const std::string& name) {
    auto found = tangent_.find(name);
    if (found != tangent_.end()) return found->second;
    return tangent_.emplace(name, names_.fresh(name + "_tangent")).first->second;
  }

  std::string fresh(std::string base) { return names_.fresh(std::move(base)); }

 private:
  FreshNames names_;
  std::map<std::string, std::string> tangent_;
};

}  // namespace

ir::Neuron tangent(const ir::Neuron& n) {
  ir::Neuron t = n;
  t.name = n.name + "_tangent";
  TangentNames names(n);
  const int ni = static_cast<int>(n.inputs.size());
  const int ns = static_cast<int>(n.states.size());
  const int np = static_cast<int>(n.params.size());
  for (int i = 0; i < ni; ++i) t.inputs.push_back({names.of(n.inputs[i].name)});
  for (int i = 0; i < ns; ++i) t.states.push_back({names.of(n.states[i].name), 0.0, -1});
  for (int i = 0; i < np; ++i) t.params.push_back({names.of(n.params[i].name), n.params[i].kind, 0.0});
  for (const auto& o : n.outputs) t.outputs.push_back({names.of(o.name)});

  // tangent_of[v]: the node holding the tangent of forward value v, or -1 where it is zero.
  std::vector<ValueId> tangent_of(n.nodes.size(), -1);
  Emitter e(t.nodes);
  for (size_t i = 0; i < n.nodes.size(); ++i) {
    const ir::Node node = n.nodes[i];
    if (node.type == ir::Type::Bool) continue;
    switch (node.op) {
      case Op::Input: tangent_of[i] = e.leaf(Op::Input, ni + node.index); continue;
      case Op::State: tangent_of[i] = e.leaf(Op::State, ns + node.index); continue;
      case Op::Param: tangent_of[i] = e.leaf(Op::Param, np + node.index); continue;
      case Op::Literal:
      case Op::Constant:
      case Op::Uniform: continue;  // a draw does not depend on anything: its tangent is zero
      default: break;
    }
    const GradRule rule = grad_rule(node.op);
    ValueId sum = -1;
    for (int a = 0; a < ir::op_info(node.op).arity; ++a) {
      const ValueId arg_tangent = tangent_of[node.args[a]];
      if (arg_tangent < 0) continue;
      // The rule emits every argument's term; only argument a's is used (the rest is dead code,
      // which lowering removes).
      const ValueId term = rule(e, static_cast<ValueId>(i), arg_tangent).of[a];
      if (term >= 0) sum = sum < 0 ? term : e.add(sum, term);
    }
    tangent_of[i] = sum;
  }

  // Each assignment is preceded by its tangent's (so that the tangent reads the values the
  // assignment reads, before it rebinds a name). Outputs and states always get one (0 where the
  // value is constant); other names only where the tangent is not zero.
  std::set<std::string> results;
  for (const auto& o : n.outputs) results.insert(o.name);
  for (const auto& st : n.states) results.insert(st.name);
  t.body.clear();
  // The draws get names first, in stream order: a tangent may read a draw that the neuron's own
  // assignment reads later, and the text format numbers the draws by their first appearance.
  for (size_t i = 0; i < n.nodes.size(); ++i) {
    const ir::Node& node = n.nodes[i];
    if (node.op == Op::Uniform) t.body.push_back({names.fresh("draw" + std::to_string(node.index)), static_cast<ValueId>(i)});
  }
  for (const ir::Assignment& a : n.body) {
    const ValueId d = tangent_of[a.value];
    if (d >= 0 || results.count(a.name)) t.body.push_back({names.of(a.name), d >= 0 ? d : e.literal(0.0)});
    t.body.push_back(a);
  }
  ir::verify(t);
  return t;
}

}  // namespace spikejit::autodiff
