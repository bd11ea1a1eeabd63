// ir::verify and the checks behind it; state defaults and constant overrides.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/checks.h"
#include "ir/naming.h"
#include "spikejit/error.h"
#include "spikejit/ir.h"

namespace spikejit::ir {
namespace {

constexpr int kNumOps = 0
#define SPIKEJIT_IR_COUNT(name, text, arity) +1
    SPIKEJIT_IR_OPS(SPIKEJIT_IR_COUNT)
#undef SPIKEJIT_IR_COUNT
    ;

// Operations in one assignment's written expression; only reachable by sharing unnamed values
// from C++, where the text would grow exponentially.
constexpr int64_t kMaxWrittenSize = 100000;

const char* type_name(Type t) { return t == Type::Bool ? "Bool" : "Float"; }

bool is_infix(Op op) {
  switch (op) {
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div:
    case Op::Eq: case Op::Ne: case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge:
    case Op::And: case Op::Or:
      return true;
    default:
      return false;
  }
}

bool is_prefix(Op op) { return op == Op::Neg || op == Op::Not; }

std::string operand_name(Op op, int i) {
  if (is_infix(op)) return i == 0 ? "its left operand" : "its right operand";
  if (is_prefix(op)) return "its operand";
  return "argument " + std::to_string(i + 1);
}

// What each operand of `op` must be; for Where, branches are checked separately.
Type operand_type(Op op, int i) {
  switch (op) {
    case Op::And: case Op::Or: case Op::Not: case Op::ToFloat:
      return Type::Bool;
    case Op::Where:
      return i == 0 ? Type::Bool : Type::Float;
    default:
      return Type::Float;
  }
}

Type result_type(Op op, const std::vector<Node>& nodes, const Node& node) {
  switch (op) {
    case Op::Eq: case Op::Ne: case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge:
    case Op::And: case Op::Or: case Op::Not: case Op::ToBool:
      return Type::Bool;
    case Op::Where:
      return nodes[node.args[1]].type;
    default:
      return Type::Float;
  }
}

class Checker {
 public:
  explicit Checker(const Neuron& n) : n_(n) {}

  std::vector<Problem> run() {
    check_names();
    check_declarations();
    for (int k = 0; k < static_cast<int>(n_.nodes.size()); ++k) check_node(k);
    check_body();
    return std::move(problems_);
  }

 private:
  void add(Problem::Where where, int index, std::string message) {
    problems_.push_back({where, index, std::move(message)});
  }

  void check_names() {
    if (!is_identifier(n_.name))
      add(Problem::Where::None, -1, "the neuron's name '" + n_.name + "' is not a valid name");
    auto check = [&](Problem::Where where, int i, const std::string& name) {
      if (!is_identifier(name)) add(where, i, "'" + name + "' is not a valid name");
    };
    for (size_t i = 0; i < n_.inputs.size(); ++i) check(Problem::Where::Input, i, n_.inputs[i].name);
    for (size_t i = 0; i < n_.states.size(); ++i) check(Problem::Where::State, i, n_.states[i].name);
    for (size_t i = 0; i < n_.constants.size(); ++i)
      check(Problem::Where::Constant, i, n_.constants[i].name);
    for (size_t i = 0; i < n_.params.size(); ++i) check(Problem::Where::Param, i, n_.params[i].name);
    for (size_t i = 0; i < n_.outputs.size(); ++i)
      check(Problem::Where::Output, i, n_.outputs[i].name);
    for (size_t i = 0; i < n_.body.size(); ++i) check(Problem::Where::Assignment, i, n_.body[i].name);
  }

  void check_declarations() {
    // Inputs, states, constants and params share one namespace; outputs name body values.
    std::set<std::string> seen;
    auto declare = [&](Problem::Where where, int i, const std::string& name) {
      if (!seen.insert(name).second) add(where, i, "duplicate declaration of '" + name + "'");
    };
    for (size_t i = 0; i < n_.inputs.size(); ++i) declare(Problem::Where::Input, i, n_.inputs[i].name);
    for (size_t i = 0; i < n_.states.size(); ++i) declare(Problem::Where::State, i, n_.states[i].name);
    for (size_t i = 0; i < n_.constants.size(); ++i)
      declare(Problem::Where::Constant, i, n_.constants[i].name);
    for (size_t i = 0; i < n_.params.size(); ++i) declare(Problem::Where::Param, i, n_.params[i].name);
    std::set<std::string> outputs;
    for (size_t i = 0; i < n_.outputs.size(); ++i) {
      const std::string& name = n_.outputs[i].name;
      if (!outputs.insert(name).second)
        add(Problem::Where::Output, i, "duplicate declaration of output '" + name + "'");
      else if (seen.count(name) && !is_state(name))
        add(Problem::Where::Output, i, "output '" + name + "' has the name of an input, constant or param");
    }
    if (n_.outputs.empty()) add(Problem::Where::None, -1, "the neuron declares no output");

    for (size_t i = 0; i < n_.constants.size(); ++i) {
      const ConstDecl& c = n_.constants[i];
      if (c.type == Type::Bool && c.value != 0 && c.value != 1)
        add(Problem::Where::Constant, i, "bool constant '" + c.name + "' must be 0 or 1");
      if (!std::isfinite(c.value))
        add(Problem::Where::Constant, i, "constant '" + c.name + "' must be finite");
    }
    for (size_t i = 0; i < n_.states.size(); ++i) {
      const StateDecl& s = n_.states[i];
      if (s.init_constant >= static_cast<int32_t>(n_.constants.size()) || s.init_constant < -1)
        add(Problem::Where::State, i, "state '" + s.name + "' has an initial value constant out of range");
      else if (s.init_constant >= 0 && n_.constants[s.init_constant].type != Type::Float)
        add(Problem::Where::State, i,
            "the initial value of state '" + s.name + "' must be a Float constant, '" +
                n_.constants[s.init_constant].name + "' is Bool");
      if (!std::isfinite(s.init))
        add(Problem::Where::State, i, "the initial value of state '" + s.name + "' must be finite");
    }
    for (size_t i = 0; i < n_.params.size(); ++i) {
      if (!std::isfinite(n_.params[i].init))
        add(Problem::Where::Param, i, "the initial value of param '" + n_.params[i].name + "' must be finite");
      if (n_.params[i].kind != ParamKind::Scalar && n_.params[i].kind != ParamKind::PerNeuron)
        add(Problem::Where::Param, i, "param '" + n_.params[i].name + "' has an unknown kind");
    }
  }

  bool is_state(const std::string& name) const {
    for (const auto& s : n_.states)
      if (s.name == name) return true;
    return false;
  }

  template <class Decls>
  void check_slot(int k, const Node& node, const Decls& decls, const char* what) {
    if (node.index < 0 || node.index >= static_cast<int32_t>(decls.size()))
      add(Problem::Where::Node, k, std::string(what) + " leaf with index " +
                                      std::to_string(node.index) + " out of range");
  }

  void check_node(int k) {
    const Node& node = n_.nodes[k];
    if (static_cast<int>(node.op) >= kNumOps) {
      add(Problem::Where::Node, k, "node " + std::to_string(k) + " has an unknown op");
      return;
    }
    if (node.type != Type::Float && node.type != Type::Bool) {
      add(Problem::Where::Node, k, "node " + std::to_string(k) + " has an unknown type");
      return;
    }
    const OpInfo& info = op_info(node.op);
    Type expected = Type::Float;
    switch (node.op) {
      case Op::Literal:
        if (!std::isfinite(node.value)) add(Problem::Where::Node, k, "a literal must be finite");
        if (node.type == Type::Bool && node.value != 0 && node.value != 1)
          add(Problem::Where::Node, k, "a bool literal must be 0 or 1");
        expected = node.type;
        break;
      case Op::Input: check_slot(k, node, n_.inputs, "input"); break;
      case Op::State: check_slot(k, node, n_.states, "state"); break;
      case Op::Param: check_slot(k, node, n_.params, "param"); break;
      case Op::Uniform:
        if (node.index < 0) add(Problem::Where::Node, k, "a uniform() draw needs a stream number >= 0");
        break;
      case Op::Constant:
        check_slot(k, node, n_.constants, "constant");
        if (node.index >= 0 && node.index < static_cast<int32_t>(n_.constants.size()))
          expected = n_.constants[node.index].type;
        break;
      case Op::Saved: case Op::GradOutput: case Op::GradState:
        add(Problem::Where::Node, k, std::string("a neuron cannot contain '") + info.name + "' leaves");
        return;
      default:
        if (!check_operands(k, node, info)) return;
        expected = result_type(node.op, n_.nodes, node);
        break;
    }
    if (node.type != expected)
      add(Problem::Where::Node, k, "node " + std::to_string(k) + " ('" + info.name + "') has type " +
                                      type_name(node.type) + " but computes " + type_name(expected));
  }

  // Checks references and operand types; false when the node's operands are unusable.
  bool check_operands(int k, const Node& node, const OpInfo& info) {
    for (int i = 0; i < 3; ++i) {
      if (i < info.arity && (node.args[i] < 0 || node.args[i] >= k)) {
        add(Problem::Where::Node, k, "node " + std::to_string(k) + " ('" + info.name +
                                        "') refers to a node that is not an earlier one");
        return false;
      }
      if (i >= info.arity && node.args[i] != -1) {
        add(Problem::Where::Node, k, "node " + std::to_string(k) + " ('" + info.name + "') takes " +
                                        std::to_string(info.arity) + " operand(s)");
        return false;
      }
    }
    bool ok = true;
    const std::string op = "'" + op_display_name(node.op) + "'";
    for (int i = 0; i < info.arity; ++i) {
      if (node.op == Op::Where && i > 0) continue;
      Type want = operand_type(node.op, i), got = n_.nodes[node.args[i]].type;
      if (want != got) {
        add(Problem::Where::Node, k, "type error: " + op + " needs " + type_name(want) + " " +
                                        (is_infix(node.op) ? "operands" : "arguments") + ", but " +
                                        operand_name(node.op, i) + " is " + type_name(got));
        ok = false;
      }
    }
    if (node.op == Op::Where) {
      Type a = n_.nodes[node.args[1]].type, b = n_.nodes[node.args[2]].type;
      if (a != b) {
        add(Problem::Where::Node, k, std::string("type error: 'where' needs branches of one type, but "
                                                 "they are ") + type_name(a) + " and " + type_name(b));
        ok = false;
      }
    }
    if (node.op == Op::Spike) {
      if (static_cast<int>(node.surrogate.kind) >= static_cast<int>(all_surrogates().size())) {
        add(Problem::Where::Node, k, "unknown surrogate kind");
      } else {
        std::string problem = surrogate_problem(node.surrogate);
        if (!problem.empty()) add(Problem::Where::Node, k, problem);
      }
    }
    return ok;
  }

  void check_body() {
    std::set<std::string> fixed;  // inputs, constants and params cannot be assigned
    for (const auto& d : n_.inputs) fixed.insert(d.name);
    for (const auto& d : n_.constants) fixed.insert(d.name);
    for (const auto& d : n_.params) fixed.insert(d.name);
    std::set<std::string> outputs;
    for (const auto& d : n_.outputs) outputs.insert(d.name);

    BodyNames names(n_);
    std::set<std::string> assigned;
    for (int i = 0; i < static_cast<int>(n_.body.size()); ++i) {
      const Assignment& a = n_.body[i];
      if (a.value < 0 || a.value >= static_cast<ValueId>(n_.nodes.size())) {
        add(Problem::Where::Assignment, i, "assignment to '" + a.name + "' refers to no node");
        continue;
      }
      if (fixed.count(a.name))
        add(Problem::Where::Assignment, i, "cannot assign to '" + a.name +
                                               "': it is an input, constant or param");
      bool is_result = outputs.count(a.name) || is_state(a.name);
      if (is_result && n_.nodes[a.value].type != Type::Float)
        add(Problem::Where::Assignment, i, "'" + a.name +
                                               "' must be assigned a Float value, got Bool (use float(...))");
      check_nameable(i, names);
      names.bind(a.name, a.value);
      assigned.insert(a.name);
    }
    for (size_t i = 0; i < n_.states.size(); ++i) {
      if (!assigned.count(n_.states[i].name))
        add(Problem::Where::State, i, "state '" + n_.states[i].name + "' is never assigned");
    }
    for (size_t i = 0; i < n_.outputs.size(); ++i) {
      if (!assigned.count(n_.outputs[i].name))
        add(Problem::Where::Output, i, "output '" + n_.outputs[i].name + "' is never assigned");
    }
  }

  // Every value reached from assignment `i` is written as a current name or inline as an
  // expression of such: a state's previous value used after the state was reassigned has no
  // name, and the written expression must not nest deeper than the parser accepts.
  void check_nameable(int i, const BodyNames& names) {
    std::vector<ValueId> stack = {n_.body[i].value}, inline_nodes;
    std::set<ValueId> seen = {n_.body[i].value};
    while (!stack.empty()) {
      ValueId v = stack.back();
      stack.pop_back();
      if (names.name_of(v) != nullptr) continue;
      const Node& node = n_.nodes[v];
      if (static_cast<int>(node.op) >= kNumOps) continue;
      if (is_leaf(node.op)) {
        if (const std::string* decl = names.declaration_name(node))
          add(Problem::Where::Assignment, i, "assignment to '" + n_.body[i].name + "' uses the old value of '" +
                                                 *decl + "' after '" + *decl + "' was reassigned; bind it to a name first");
        continue;
      }
      inline_nodes.push_back(v);
      for (int j = 0; j < op_info(node.op).arity; ++j) {
        ValueId a = node.args[j];
        if (a >= 0 && a < v && seen.insert(a).second) stack.push_back(a);
      }
    }
    // Operands come before their users, so increasing ids give each depth from its operands'.
    std::sort(inline_nodes.begin(), inline_nodes.end());
    // Depth and written size (shared unnamed values are written once per use).
    std::unordered_map<ValueId, std::pair<int, int64_t>> shape;
    for (ValueId v : inline_nodes) {
      const Node& node = n_.nodes[v];
      int depth = 1;
      int64_t size = 1;
      for (int j = 0; j < op_info(node.op).arity; ++j) {
        auto it = shape.find(node.args[j]);
        depth = std::max(depth, 1 + (it == shape.end() ? 1 : it->second.first));
        size = std::min<int64_t>(size + (it == shape.end() ? 1 : it->second.second), kMaxWrittenSize + 1);
      }
      shape[v] = {depth, size};
      if (depth > kMaxExpressionDepth) {
        add(Problem::Where::Assignment, i, "the expression of '" + n_.body[i].name + "' nests deeper than " +
                                               std::to_string(kMaxExpressionDepth) +
                                               " levels; bind parts of it to names");
        return;
      }
      if (size > kMaxWrittenSize) {
        add(Problem::Where::Assignment, i, "the expression of '" + n_.body[i].name +
                                               "' is too large to write out; bind shared parts to names");
        return;
      }
    }
  }

  const Neuron& n_;
  std::vector<Problem> problems_;
};

}  // namespace

std::vector<Problem> find_problems(const Neuron& n) { return Checker(n).run(); }

std::string op_display_name(Op op) {
  switch (op) {
    case Op::Add: return "+";
    case Op::Sub: return "-";
    case Op::Mul: return "*";
    case Op::Div: return "/";
    case Op::Neg: return "unary -";
    case Op::Eq: return "==";
    case Op::Ne: return "!=";
    case Op::Lt: return "<";
    case Op::Le: return "<=";
    case Op::Gt: return ">";
    case Op::Ge: return ">=";
    default: return op_info(op).name;
  }
}

bool is_keyword(const std::string& name) {
  static const std::set<std::string> keywords = {"neuron", "input", "state", "const", "param",
                                                 "output", "and", "or", "not", "true", "false"};
  return keywords.count(name) > 0;
}

bool is_identifier(const std::string& name) {
  if (name.empty() || is_keyword(name)) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

void verify(const Neuron& n) {
  std::vector<Problem> problems = find_problems(n);
  if (problems.empty()) return;
  std::vector<Diagnostic> diagnostics;
  for (Problem& p : problems) {
    Diagnostic d;
    d.file = n.name;
    d.message = std::move(p.message);
    diagnostics.push_back(std::move(d));
  }
  throw ParseError(std::move(diagnostics));
}

double state_default(const Neuron& n, int i) {
  if (i < 0 || i >= static_cast<int>(n.states.size()))
    throw ArgumentError("i", "a state index in [0, " + std::to_string(n.states.size()) + ")",
                        std::to_string(i));
  const StateDecl& s = n.states[i];
  if (s.init_constant >= 0 && s.init_constant < static_cast<int32_t>(n.constants.size()))
    return n.constants[s.init_constant].value;
  return s.init;
}

Neuron with_constants(const Neuron& n, const std::vector<ConstantOverride>& overrides) {
  Neuron out = n;
  for (const ConstantOverride& o : overrides) {
    ConstDecl* target = nullptr;
    for (ConstDecl& c : out.constants)
      if (c.name == o.name) target = &c;
    if (target == nullptr) {
      std::string names;
      for (const ConstDecl& c : n.constants) names += (names.empty() ? "" : ", ") + c.name;
      throw ArgumentError("constants", "a constant of neuron '" + n.name + "' (" +
                                           (names.empty() ? "it has none" : names) + ")",
                          "'" + o.name + "'");
    }
    if (target->type == Type::Bool && o.value != 0 && o.value != 1)
      throw ArgumentError(o.name, "a bool (0 or 1)", std::to_string(o.value));
    if (!std::isfinite(o.value)) throw ArgumentError(o.name, "a finite number", std::to_string(o.value));
    target->value = o.value;
  }
  return out;
}

}  // namespace spikejit::ir
