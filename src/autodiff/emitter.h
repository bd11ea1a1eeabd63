// Appends IR nodes to a node list: the vocabulary of the gradient rules and surrogates.
#pragma once

#include <vector>

#include "spikejit/ir.h"

namespace spikejit::autodiff {

class Emitter {
 public:
  explicit Emitter(std::vector<ir::Node>& nodes) : nodes_(nodes) {}

  // A slot leaf (input, state, parameter, ...) of slot `index`.
  ir::ValueId leaf(ir::Op op, int index) {
    ir::Node n;
    n.op = op;
    n.index = index;
    return push(n);
  }

  ir::ValueId literal(double v) {
    ir::Node n;
    n.op = ir::Op::Literal;
    n.value = v;
    return push(n);
  }

  // A node of `op`; its type follows the op (comparisons, logic and `bool` give Bool, `where`
  // the type of its branches, everything else Float).
  ir::ValueId op(ir::Op op, ir::ValueId a, ir::ValueId b = -1, ir::ValueId c = -1) {
    ir::Node n;
    n.op = op;
    n.args[0] = a;
    n.args[1] = b;
    n.args[2] = c;
    n.type = result_type(op, b);
    return push(n);
  }

  ir::ValueId add(ir::ValueId a, ir::ValueId b) { return op(ir::Op::Add, a, b); }
  ir::ValueId sub(ir::ValueId a, ir::ValueId b) { return op(ir::Op::Sub, a, b); }
  ir::ValueId mul(ir::ValueId a, ir::ValueId b) { return op(ir::Op::Mul, a, b); }
  ir::ValueId div(ir::ValueId a, ir::ValueId b) { return op(ir::Op::Div, a, b); }
  ir::ValueId neg(ir::ValueId a) { return op(ir::Op::Neg, a); }
  ir::ValueId abs(ir::ValueId a) { return op(ir::Op::Abs, a); }
  ir::ValueId where(ir::ValueId c, ir::ValueId a, ir::ValueId b) {
    return op(ir::Op::Where, c, a, b);
  }

  const ir::Node& node(ir::ValueId id) const { return nodes_[id]; }
  std::vector<ir::Node>& nodes() { return nodes_; }

 private:
  ir::Type result_type(ir::Op op, ir::ValueId b) const {
    switch (op) {
      case ir::Op::Eq:
      case ir::Op::Ne:
      case ir::Op::Lt:
      case ir::Op::Le:
      case ir::Op::Gt:
      case ir::Op::Ge:
      case ir::Op::And:
      case ir::Op::Or:
      case ir::Op::Not:
      case ir::Op::ToBool: return ir::Type::Bool;
      case ir::Op::Where: return nodes_[b].type;
      default: return ir::Type::Float;
    }
  }

  ir::ValueId push(const ir::Node& n) {
    nodes_.push_back(n);
    return static_cast<ir::ValueId>(nodes_.size() - 1);
  }

  std::vector<ir::Node>& nodes_;
};

}  // namespace spikejit::autodiff
