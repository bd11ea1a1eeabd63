// Reverse-mode differentiation of a forward Step: one reverse sweep applying the rule table,
// then the save plan, then the backward Step (recomputation + gradients) simplified.
#include <string>
#include <vector>

#include "autodiff/emitter.h"
#include "autodiff/rules.h"
#include "autodiff/save_plan.h"
#include "autodiff/sweep.h"
#include "spikejit/autodiff.h"
#include "spikejit/error.h"

namespace spikejit::autodiff {
namespace {

using ir::Op;
using ir::ValueId;

void check_forward(const ir::Step& f) {
  const ValueId n = static_cast<ValueId>(f.nodes.size());
  for (ValueId i = 0; i < n; ++i) {
    const ir::Node& node = f.nodes[i];
    switch (node.op) {
      case Op::Constant:
      case Op::Saved:
      case Op::GradOutput:
      case Op::GradState:
        throw ArgumentError(
            "forward", "a lowered forward step (leaves: input, state, param, literal)",
            std::string("a '") + ir::op_info(node.op).name + "' leaf at %" + std::to_string(i));
      default: break;
    }
    for (int a = 0; a < ir::op_info(node.op).arity; ++a)
      if (node.args[a] < 0 || node.args[a] >= i)
        throw ArgumentError(
            "forward", "nodes in topological order",
            "%" + std::to_string(i) + " refers to %" + std::to_string(node.args[a]));
  }
  if (f.outputs.size() != static_cast<size_t>(f.num_outputs) ||
      f.next_states.size() != static_cast<size_t>(f.num_states))
    throw ArgumentError("forward", "one result per output and per state",
                        std::to_string(f.outputs.size()) + " outputs and " +
                            std::to_string(f.next_states.size()) + " next states");
  for (const std::vector<ValueId>* results : {&f.outputs, &f.next_states})
    for (ValueId r : *results)
      if (r < 0 || r >= n)
        throw ArgumentError("forward", "results that are nodes", "%" + std::to_string(r));
}

// The gradient sweep over a copy of the forward nodes; gradient nodes are appended after them.
class Sweep {
 public:
  explicit Sweep(const ir::Step& f)
      : forward_(f),
        nodes_(f.nodes),
        e_(nodes_),
        grad_(f.nodes.size(), -1),
        differentiable_(f.nodes.size(), 0) {
    for (size_t i = 0; i < f.nodes.size(); ++i) {
      const ir::Node& node = f.nodes[i];
      if (node.type == ir::Type::Bool) continue;
      differentiable_[i] = node.op == Op::Input || node.op == Op::State || node.op == Op::Param;
      for (int a = 0; a < ir::op_info(node.op).arity; ++a)
        differentiable_[i] |= differentiable_[node.args[a]];
    }
  }

  void run() {
    for (int i = 0; i < forward_.num_outputs; ++i) seed(forward_.outputs[i], Op::GradOutput, i);
    for (int i = 0; i < forward_.num_states; ++i) seed(forward_.next_states[i], Op::GradState, i);
    for (ValueId y = static_cast<ValueId>(forward_.nodes.size()); y-- > 0;) {
      const ir::Node node = forward_.nodes[y];
      if (grad_[y] < 0 || ir::is_leaf(node.op)) continue;
      const ArgGrads contrib = grad_rule(node.op)(e_, y, grad_[y]);
      for (int a = 0; a < ir::op_info(node.op).arity; ++a)
        if (contrib.of[a] >= 0 && differentiable_[node.args[a]])
          accumulate(node.args[a], contrib.of[a]);
    }
  }

  // The summed gradient of every leaf `op` with slot `index` (a literal 0 if none).
  ValueId leaf_grad(Op op, int index) {
    ValueId sum = -1;
    for (size_t i = 0; i < forward_.nodes.size(); ++i) {
      const ir::Node& node = forward_.nodes[i];
      if (node.op != op || node.index != index || grad_[i] < 0) continue;
      sum = sum < 0 ? grad_[i] : e_.add(sum, grad_[i]);
    }
    return sum < 0 ? e_.literal(0.0) : sum;
  }

  std::vector<ir::Node>& nodes() { return nodes_; }

 private:
  void seed(ValueId y, Op leaf_op, int index) {
    if (!differentiable_[y]) return;
    ir::Node leaf;
    leaf.op = leaf_op;
    leaf.index = index;
    nodes_.push_back(leaf);
    accumulate(y, static_cast<ValueId>(nodes_.size() - 1));
  }

  void accumulate(ValueId y, ValueId g) { grad_[y] = grad_[y] < 0 ? g : e_.add(grad_[y], g); }

  const ir::Step& forward_;
  std::vector<ir::Node> nodes_;
  Emitter e_;
  std::vector<ValueId> grad_;
  std::vector<char> differentiable_;
};

// Forward nodes the gradient nodes read (directly), given the backward results.
std::vector<ValueId> forward_values_needed(const std::vector<ir::Node>& nodes, size_t forward_size,
                                           const ir::Step& b) {
  std::vector<char> live(nodes.size(), 0);
  for (const std::vector<ValueId>* r : {&b.grad_inputs, &b.grad_prev_states, &b.grad_params})
    for (ValueId id : *r) live[id] = 1;
  std::vector<char> needed(forward_size, 0);
  for (size_t i = nodes.size(); i-- > 0;) {
    if (!live[i]) continue;
    if (i < forward_size) {
      needed[i] = 1;  // a result that is a forward value
      continue;
    }
    for (int a = 0; a < ir::op_info(nodes[i].op).arity; ++a) {
      const ValueId arg = nodes[i].args[a];
      live[arg] = 1;
      if (static_cast<size_t>(arg) < forward_size) needed[arg] = 1;
    }
  }
  std::vector<ValueId> out;
  for (size_t i = 0; i < forward_size; ++i)
    if (needed[i]) out.push_back(static_cast<ValueId>(i));
  return out;
}

// Drops saved slots that simplification left unused and renumbers the rest.
void compact_saved(ir::Step& b) {
  std::vector<ValueId> slot(b.saved.size(), -1);
  std::vector<ValueId> kept;
  for (const ir::Node& node : b.nodes)
    if (node.op == Op::Saved) slot[node.index] = 0;
  for (size_t k = 0; k < b.saved.size(); ++k)
    if (slot[k] == 0) {
      slot[k] = static_cast<ValueId>(kept.size());
      kept.push_back(b.saved[k]);
    }
  for (ir::Node& node : b.nodes)
    if (node.op == Op::Saved) node.index = slot[node.index];
  b.saved = kept;
}

}  // namespace

SweptStep sweep(const ir::Step& forward) {
  check_forward(forward);
  Sweep sweep(forward);
  sweep.run();
  SweptStep out;
  for (int i = 0; i < forward.num_inputs; ++i) out.grad_inputs.push_back(sweep.leaf_grad(Op::Input, i));
  for (int i = 0; i < forward.num_states; ++i) out.grad_prev_states.push_back(sweep.leaf_grad(Op::State, i));
  for (size_t i = 0; i < forward.params.size(); ++i)
    out.grad_params.push_back(sweep.leaf_grad(Op::Param, static_cast<int>(i)));
  out.nodes = std::move(sweep.nodes());
  return out;
}

ir::Step differentiate(const ir::Step& forward, bool pack_spikes) {
  SweptStep swept = sweep(forward);
  ir::Step b;
  b.num_inputs = forward.num_inputs;
  b.num_states = forward.num_states;
  b.num_outputs = forward.num_outputs;
  b.params = forward.params;
  b.grad_inputs = std::move(swept.grad_inputs);
  b.grad_prev_states = std::move(swept.grad_prev_states);
  b.grad_params = std::move(swept.grad_params);
  b.nodes = std::move(swept.nodes);
  const std::vector<ValueId> needed = forward_values_needed(b.nodes, forward.nodes.size(), b);
  b.saved = choose_saved(forward.nodes, needed, pack_spikes);
  for (size_t k = 0; k < b.saved.size(); ++k) {
    ir::Node leaf;
    leaf.op = Op::Saved;
    leaf.type = b.nodes[b.saved[k]].type;
    leaf.index = static_cast<int32_t>(k);
    b.nodes[b.saved[k]] = leaf;
  }
  ir::simplify(b);
  compact_saved(b);
  if (pack_spikes) {
    const std::vector<bool> binary = ir::spike_valued(forward.nodes);
    for (ValueId v : b.saved) b.saved_packed.push_back(binary[static_cast<size_t>(v)]);
  }
  for (const ir::Node& node : b.nodes)
    if (node.op == Op::Input || node.op == Op::State || node.op == Op::Uniform)
      throw Error("autodiff: the backward step still reads a forward " +
                  std::string(ir::op_info(node.op).name) + " (save plan is incomplete)");
  return b;
}

}  // namespace spikejit::autodiff
