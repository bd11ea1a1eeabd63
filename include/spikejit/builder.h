// Builds an ir::Neuron from C++ (the parser uses it too, so both paths make the same IR).
//
//   NeuronBuilder b("lif");
//   auto x = b.input("x");
//   auto v = b.state("v", 0.0);
//   auto tau = b.constant("tau", 2.0);
//   b.output("s");
//   auto h = b.assign("h", v + (x - v) / tau);
//   auto s = b.assign("s", b.spike(h - 1.0, {ir::SurrogateKind::Sigmoid, {4.0}}));
//   b.assign("v", h - s);
//   ir::Neuron n = b.build();   // verifies; throws ParseError listing every problem
#pragma once

#include <initializer_list>
#include <string>

#include "spikejit/ir.h"

namespace spikejit {

class NeuronBuilder;

// A value inside a NeuronBuilder. Arithmetic operators add nodes to that builder.
class Value {
 public:
  Value() = default;
  Value(NeuronBuilder* b, ir::ValueId id) : builder_(b), id_(id) {}
  ir::ValueId id() const { return id_; }
  NeuronBuilder* builder() const { return builder_; }

 private:
  NeuronBuilder* builder_ = nullptr;
  ir::ValueId id_ = -1;
};

Value operator+(Value a, Value b);
Value operator-(Value a, Value b);
Value operator*(Value a, Value b);
Value operator/(Value a, Value b);
Value operator-(Value a);
Value operator+(Value a, double b);
Value operator-(Value a, double b);
Value operator*(Value a, double b);
Value operator/(Value a, double b);
Value operator+(double a, Value b);
Value operator-(double a, Value b);
Value operator*(double a, Value b);
Value operator/(double a, Value b);

class NeuronBuilder {
 public:
  explicit NeuronBuilder(std::string name);

  // Declarations. Each returns the declared value (for states: the previous-step value).
  Value input(const std::string& name);
  Value state(const std::string& name, double init = 0.0);
  Value state(const std::string& name, const std::string& init_constant);
  Value constant(const std::string& name, double value);
  Value bool_constant(const std::string& name, bool value);
  Value param(const std::string& name, ir::ParamKind kind = ir::ParamKind::Scalar, double init = 0.0);
  void output(const std::string& name);

  Value literal(double v);
  Value op(ir::Op op, std::initializer_list<Value> args);
  Value spike(Value x, const ir::Surrogate& surrogate);
  Value detach(Value x) { return op(ir::Op::Detach, {x}); }
  // A fresh draw in [0, 1) per neuron and step (its own stream: each call is independent).
  Value uniform();

  // Binds `name` to `v` for the rest of the body (the last binding of a state is its next value).
  Value assign(const std::string& name, Value v);
  // The current binding of `name` (a declaration or an earlier assignment); throws if none.
  Value ref(const std::string& name) const;
  bool has(const std::string& name) const;

  // Finishes: verifies and returns the neuron (throws ParseError with every problem found).
  ir::Neuron build() const;
  // The neuron so far, unverified (for the parser, which reports problems with locations).
  const ir::Neuron& peek() const { return n_; }
  ir::Neuron& raw() { return n_; }

 private:
  ir::Neuron n_;
  std::vector<std::pair<std::string, ir::ValueId>> bindings_;  // latest wins
};

}  // namespace spikejit
