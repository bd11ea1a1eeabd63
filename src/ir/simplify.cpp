// Step simplification: constant folding, exact algebraic identities, common subexpression
// elimination and dead code removal. Only rewrites that give the same bits in IEEE arithmetic.
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "ir/scalar_ops.h"
#include "spikejit/error.h"
#include "spikejit/ir.h"

namespace spikejit::ir {
namespace {

uint64_t bits_of(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// Everything that makes two nodes compute the same value.
using NodeKey = std::tuple<Op, Type, int32_t, int32_t, int32_t, int32_t, uint64_t, SurrogateKind,
                           std::vector<uint64_t>>;

NodeKey key_of(const Node& n) {
  std::vector<uint64_t> params;
  for (double p : n.surrogate.params) params.push_back(bits_of(p));
  return NodeKey(n.op, n.type, n.args[0], n.args[1], n.args[2], n.index, bits_of(n.value),
                 n.surrogate.kind, params);
}

// Clears the fields `op` does not use, so that equal nodes have equal keys.
Node canonical(const Node& n) {
  Node c;
  c.op = n.op;
  c.type = n.type;
  const int arity = op_info(n.op).arity;
  for (int i = 0; i < arity; ++i) c.args[i] = n.args[i];
  if (n.op == Op::Literal) c.value = n.value;
  if (is_leaf(n.op) && n.op != Op::Literal) c.index = n.index;
  if (n.op == Op::Spike) c.surrogate = n.surrogate;
  return c;
}

// Whether d is a power of two whose reciprocal, like d itself, is a normal float (so that it is
// exact in every compute type: float32 and float64).
bool has_exact_reciprocal(double d) {
  int exponent = 0;
  const double mantissa = std::frexp(d, &exponent);
  return std::isfinite(d) && std::fabs(mantissa) == 0.5 && std::abs(exponent - 1) <= 126;
}

class Simplifier {
 public:
  explicit Simplifier(const std::vector<Node>& nodes) : old_(nodes) {}

  // Rewrites every node in order; returns the new id of each old node.
  std::vector<ValueId> run() {
    std::vector<ValueId> remap(old_.size(), -1);
    for (size_t i = 0; i < old_.size(); ++i) {
      Node n = canonical(old_[i]);
      const int arity = op_info(n.op).arity;
      for (int a = 0; a < arity; ++a) {
        if (n.args[a] < 0 || n.args[a] >= static_cast<ValueId>(i))
          throw Error("step node %" + std::to_string(i) + " refers to %" +
                      std::to_string(n.args[a]) + ", which is not an earlier node");
        n.args[a] = remap[n.args[a]];
      }
      remap[i] = rewrite(n);
    }
    return remap;
  }

  std::vector<Node>& nodes() { return new_; }

 private:
  bool is_literal(ValueId id, double* v = nullptr) const {
    if (new_[id].op != Op::Literal) return false;
    if (v) *v = new_[id].value;
    return true;
  }
  bool is_literal_bits(ValueId id, double want) const {
    double v;
    return is_literal(id, &v) && bits_of(v) == bits_of(want);
  }

  ValueId rewrite(const Node& n) {
    if (!is_leaf(n.op)) {
      if (ValueId folded = fold(n); folded >= 0) return folded;
      if (ValueId same = identity(n); same >= 0) return same;
    }
    return intern(n);
  }

  ValueId fold(const Node& n) {
    const int arity = op_info(n.op).arity;
    double v[3] = {0.0, 0.0, 0.0};
    for (int a = 0; a < arity; ++a)
      if (!is_literal(n.args[a], &v[a])) return -1;
    Node lit;
    lit.op = Op::Literal;
    lit.type = n.type;
    lit.value = apply_op<double>(n.op, v[0], v[1], v[2]);
    if (n.type == Type::Bool) lit.value = lit.value != 0.0 ? 1.0 : 0.0;
    return intern(lit);
  }

  // Rewrites that give the same bits for every argument value (so no `x + 0 -> x`: -0 + 0 = +0).
  ValueId identity(const Node& n) {
    const ValueId a = n.args[0], b = n.args[1], c = n.args[2];
    switch (n.op) {
      case Op::Mul:
        if (is_literal_bits(b, 1.0)) return a;
        if (is_literal_bits(a, 1.0)) return b;
        return -1;
      case Op::Div: {
        if (is_literal_bits(b, 1.0)) return a;
        double divisor;
        if (!is_literal(b, &divisor) || !has_exact_reciprocal(divisor)) return -1;
        // x / 2^k and x * 2^-k are the same real number, so both round to the same bits; the
        // multiplication is several times cheaper (LIF's 1/tau with tau = 2, on the CPU above all).
        Node reciprocal;
        reciprocal.op = Op::Literal;
        reciprocal.type = n.type;
        reciprocal.value = 1.0 / divisor;
        Node product = n;
        product.op = Op::Mul;
        product.args[1] = intern(reciprocal);
        return intern(product);
      }
      case Op::Sub: return is_literal_bits(b, 0.0) ? a : -1;
      case Op::Add:
        if (is_literal_bits(b, -0.0)) return a;
        if (is_literal_bits(a, -0.0)) return b;
        return -1;
      case Op::Neg:
      case Op::Not: return new_[a].op == n.op ? new_[a].args[0] : -1;
      case Op::Detach: return new_[a].op == Op::Detach ? a : -1;
      case Op::Where: {
        double cv;
        if (is_literal(a, &cv)) return cv != 0.0 ? b : c;
        return b == c ? b : -1;
      }
      default: return -1;
    }
  }

  ValueId intern(const Node& n) {
    auto [it, inserted] = ids_.emplace(key_of(n), static_cast<ValueId>(new_.size()));
    if (inserted) new_.push_back(n);
    return it->second;
  }

  const std::vector<Node>& old_;
  std::vector<Node> new_;
  std::map<NodeKey, ValueId> ids_;
};

void remap_results(std::vector<ValueId>& results, const std::vector<ValueId>& remap,
                   const char* what) {
  for (ValueId& r : results) {
    if (r < 0 || r >= static_cast<ValueId>(remap.size()))
      throw Error(std::string("step result ") + what + " refers to %" + std::to_string(r) +
                  ", which is not a node");
    r = remap[r];
  }
}

template <class F>
void for_each_result(Step& s, F f) {
  f(s.outputs, "outputs");
  f(s.next_states, "next_states");
  f(s.grad_inputs, "grad_inputs");
  f(s.grad_prev_states, "grad_prev_states");
  f(s.grad_params, "grad_params");
}

}  // namespace

void simplify(Step& s) {
  Simplifier simplifier(s.nodes);
  const std::vector<ValueId> remap = simplifier.run();
  std::vector<Node>& nodes = simplifier.nodes();
  for_each_result(
      s, [&](std::vector<ValueId>& r, const char* what) { remap_results(r, remap, what); });

  // Dead code: keep what some result uses. Nodes only refer to earlier ones, so one backward pass.
  std::vector<char> live(nodes.size(), 0);
  for_each_result(s, [&](std::vector<ValueId>& r, const char*) {
    for (ValueId id : r) live[id] = 1;
  });
  for (size_t i = nodes.size(); i-- > 0;) {
    if (!live[i]) continue;
    for (int a = 0; a < op_info(nodes[i].op).arity; ++a) live[nodes[i].args[a]] = 1;
  }
  std::vector<ValueId> compact(nodes.size(), -1);
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!live[i]) continue;
    Node n = nodes[i];
    for (int a = 0; a < op_info(n.op).arity; ++a) n.args[a] = compact[n.args[a]];
    compact[i] = static_cast<ValueId>(kept.size());
    kept.push_back(n);
  }
  for_each_result(s, [&](std::vector<ValueId>& r, const char*) {
    for (ValueId& id : r) id = compact[id];
  });
  s.nodes = std::move(kept);
}

}  // namespace spikejit::ir
