#include "spikejit/builder.h"

#include <string>
#include <utility>

#include "ir/checks.h"
#include "spikejit/error.h"

namespace spikejit {
namespace {

using ir::Op;
using ir::Type;

// The result type of `op` given its operands' types (operands are checked by ir::verify).
Type result_type(Op op, const ir::Node* args[3]) {
  switch (op) {
    case Op::Eq: case Op::Ne: case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge:
    case Op::And: case Op::Or: case Op::Not: case Op::ToBool:
      return Type::Bool;
    case Op::Where:
      return args[1]->type;
    default:
      return Type::Float;
  }
}

NeuronBuilder* common_builder(Value a, Value b) {
  if (a.builder() != b.builder())
    throw ArgumentError("b", "a value of the same NeuronBuilder as a", "a value of another builder");
  return a.builder();
}

}  // namespace

Value operator+(Value a, Value b) { return common_builder(a, b)->op(Op::Add, {a, b}); }
Value operator-(Value a, Value b) { return common_builder(a, b)->op(Op::Sub, {a, b}); }
Value operator*(Value a, Value b) { return common_builder(a, b)->op(Op::Mul, {a, b}); }
Value operator/(Value a, Value b) { return common_builder(a, b)->op(Op::Div, {a, b}); }
Value operator-(Value a) {
  if (a.builder() == nullptr) throw ArgumentError("a", "a value of a NeuronBuilder", "an empty Value");
  return a.builder()->op(Op::Neg, {a});
}

namespace {
Value lit_like(Value v, double x) {
  if (v.builder() == nullptr) throw ArgumentError("value", "a value of a NeuronBuilder", "an empty Value");
  return v.builder()->literal(x);
}
}  // namespace

Value operator+(Value a, double b) { return a + lit_like(a, b); }
Value operator-(Value a, double b) { return a - lit_like(a, b); }
Value operator*(Value a, double b) { return a * lit_like(a, b); }
Value operator/(Value a, double b) { return a / lit_like(a, b); }
Value operator+(double a, Value b) { return lit_like(b, a) + b; }
Value operator-(double a, Value b) { return lit_like(b, a) - b; }
Value operator*(double a, Value b) { return lit_like(b, a) * b; }
Value operator/(double a, Value b) { return lit_like(b, a) / b; }

NeuronBuilder::NeuronBuilder(std::string name) { n_.name = std::move(name); }

namespace {
ir::ValueId add_leaf(ir::Neuron& n, Op op, int32_t index, Type type) {
  ir::Node node;
  node.op = op;
  node.type = type;
  node.index = index;
  n.nodes.push_back(node);
  return static_cast<ir::ValueId>(n.nodes.size() - 1);
}
}  // namespace

Value NeuronBuilder::input(const std::string& name) {
  n_.inputs.push_back({name});
  ir::ValueId id = add_leaf(n_, Op::Input, static_cast<int32_t>(n_.inputs.size() - 1), Type::Float);
  bindings_.emplace_back(name, id);
  return Value(this, id);
}

Value NeuronBuilder::state(const std::string& name, double init) {
  n_.states.push_back({name, init, -1});
  ir::ValueId id = add_leaf(n_, Op::State, static_cast<int32_t>(n_.states.size() - 1), Type::Float);
  bindings_.emplace_back(name, id);
  return Value(this, id);
}

Value NeuronBuilder::state(const std::string& name, const std::string& init_constant) {
  for (size_t i = n_.constants.size(); i-- > 0;) {
    if (n_.constants[i].name == init_constant) {
      Value v = state(name, 0.0);
      n_.states.back().init_constant = static_cast<int32_t>(i);
      return v;
    }
  }
  throw ArgumentError("init_constant", "the name of a constant declared before state '" + name + "'",
                      "'" + init_constant + "'");
}

Value NeuronBuilder::constant(const std::string& name, double value) {
  n_.constants.push_back({name, Type::Float, value});
  ir::ValueId id =
      add_leaf(n_, Op::Constant, static_cast<int32_t>(n_.constants.size() - 1), Type::Float);
  bindings_.emplace_back(name, id);
  return Value(this, id);
}

Value NeuronBuilder::bool_constant(const std::string& name, bool value) {
  n_.constants.push_back({name, Type::Bool, value ? 1.0 : 0.0});
  ir::ValueId id =
      add_leaf(n_, Op::Constant, static_cast<int32_t>(n_.constants.size() - 1), Type::Bool);
  bindings_.emplace_back(name, id);
  return Value(this, id);
}

Value NeuronBuilder::param(const std::string& name, ir::ParamKind kind, double init) {
  n_.params.push_back({name, kind, init});
  ir::ValueId id = add_leaf(n_, Op::Param, static_cast<int32_t>(n_.params.size() - 1), Type::Float);
  bindings_.emplace_back(name, id);
  return Value(this, id);
}

void NeuronBuilder::output(const std::string& name) { n_.outputs.push_back({name}); }

Value NeuronBuilder::uniform() {
  int32_t streams = 0;
  for (const ir::Node& node : n_.nodes) streams += node.op == Op::Uniform;
  return Value(this, add_leaf(n_, Op::Uniform, streams, Type::Float));
}

Value NeuronBuilder::literal(double v) {
  ir::Node node;
  node.op = Op::Literal;
  node.value = v;
  n_.nodes.push_back(node);
  return Value(this, static_cast<ir::ValueId>(n_.nodes.size() - 1));
}

Value NeuronBuilder::op(ir::Op op, std::initializer_list<Value> args) {
  const ir::OpInfo& info = ir::op_info(op);
  if (ir::is_leaf(op))
    throw ArgumentError("op", "a non-leaf op", "'" + std::string(info.name) + "'");
  if (static_cast<int>(args.size()) != info.arity)
    throw ArgumentError("args", std::to_string(info.arity) + " operand(s) for '" + info.name + "'",
                        std::to_string(args.size()));
  ir::Node node;
  node.op = op;
  const ir::Node* arg_nodes[3] = {nullptr, nullptr, nullptr};
  int i = 0;
  for (Value a : args) {
    if (a.builder() != this || a.id() < 0 || a.id() >= static_cast<ir::ValueId>(n_.nodes.size()))
      throw ArgumentError("args", "values of this NeuronBuilder",
                          "an empty Value or one of another builder");
    node.args[i] = a.id();
    arg_nodes[i] = &n_.nodes[a.id()];
    ++i;
  }
  node.type = result_type(op, arg_nodes);
  n_.nodes.push_back(node);
  return Value(this, static_cast<ir::ValueId>(n_.nodes.size() - 1));
}

Value NeuronBuilder::spike(Value x, const ir::Surrogate& surrogate) {
  Value s = op(Op::Spike, {x});
  n_.nodes[s.id()].surrogate = surrogate;
  return s;
}

Value NeuronBuilder::assign(const std::string& name, Value v) {
  if (v.builder() != this || v.id() < 0 || v.id() >= static_cast<ir::ValueId>(n_.nodes.size()))
    throw ArgumentError("v", "a value of this NeuronBuilder", "an empty Value or one of another builder");
  n_.body.push_back({name, v.id()});
  bindings_.emplace_back(name, v.id());
  return v;
}

Value NeuronBuilder::ref(const std::string& name) const {
  for (size_t i = bindings_.size(); i-- > 0;) {
    if (bindings_[i].first == name)
      return Value(const_cast<NeuronBuilder*>(this), bindings_[i].second);
  }
  throw ArgumentError("name", "a declared or assigned name", "'" + name + "'");
}

bool NeuronBuilder::has(const std::string& name) const {
  for (const auto& b : bindings_)
    if (b.first == name) return true;
  return false;
}

ir::Neuron NeuronBuilder::build() const {
  ir::verify(n_);
  return n_;
}

}  // namespace spikejit
