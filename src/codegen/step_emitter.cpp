#include "codegen/step_emitter.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "spikejit/error.h"

namespace spikejit::codegen {
namespace {

using ir::Op;

std::string var(ir::ValueId id) { return "v" + std::to_string(id); }

std::string leaf_read(const ir::Step& step, ir::ValueId id, const char* array, const char* what) {
  const ir::Node& n = step.nodes[id];
  if (array == nullptr) {
    throw Error(std::string("codegen: a '") + what + "' leaf (%" + std::to_string(id) +
                ") cannot appear in this step:\n" + ir::to_string(step));
  }
  const std::string read = std::string(array) + "[" + std::to_string(n.index) + "]";
  return n.type == ir::Type::Bool ? "(" + read + " != (real)0)" : read;
}

std::string call(const char* fn, const std::vector<std::string>& args) {
  std::string s = std::string(fn) + "(";
  for (size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + args[i];
  return s + ")";
}

bool read_instead(const StepLeaves& leaves, ir::ValueId id) {
  return static_cast<size_t>(id) < leaves.read_instead.size() && !leaves.read_instead[id].empty();
}

// The expression of node `id` (arguments are earlier variables).
std::string expression(const ir::Step& step, ir::ValueId id, const StepLeaves& leaves, bool f64) {
  if (read_instead(leaves, id)) return leaves.read_instead[id];
  const ir::Node& n = step.nodes[id];
  const std::string a = n.args[0] >= 0 ? var(n.args[0]) : "";
  const std::string b = n.args[1] >= 0 ? var(n.args[1]) : "";
  const std::string c = n.args[2] >= 0 ? var(n.args[2]) : "";
  switch (n.op) {
    case Op::Literal:
      if (n.type == ir::Type::Bool) return n.value != 0.0 ? "true" : "false";
      return real_literal(n.value, f64);
    case Op::Constant:
      throw Error("codegen: named constant %" + std::to_string(id) + " in a lowered step");
    case Op::Input: return leaf_read(step, id, leaves.input, "input");
    case Op::State: return leaf_read(step, id, leaves.state, "state");
    case Op::Param: return leaf_read(step, id, leaves.param, "param");
    case Op::Saved: return leaf_read(step, id, leaves.saved, "saved");
    case Op::GradOutput: return leaf_read(step, id, leaves.grad_output, "grad_output");
    case Op::GradState: return leaf_read(step, id, leaves.grad_state, "grad_state");
    case Op::Uniform:
      if (leaves.draw == nullptr) leaf_read(step, id, nullptr, "uniform");  // throws
      return std::string(leaves.draw) + "[" + std::to_string(n.index) + "]";
    case Op::Add: return call("sj_add", {a, b});
    case Op::Sub: return call("sj_sub", {a, b});
    case Op::Mul: return call("sj_mul", {a, b});
    case Op::Div: return call("sj_div", {a, b});
    case Op::Neg: return "-" + a;
    case Op::Reciprocal: return call("sj_reciprocal", {a});
    case Op::Fmod: return call("sj_fmod", {a, b});
    case Op::Pow: return call("sj_pow", {a, b});
    case Op::Min: return call("sj_min", {a, b});
    case Op::Max: return call("sj_max", {a, b});
    case Op::Clamp: return call("sj_clamp", {a, b, c});
    case Op::Exp: return call("sj_exp", {a});
    case Op::Log: return call("sj_log", {a});
    case Op::Log2: return call("sj_log2", {a});
    case Op::Sqrt: return call("sj_sqrt", {a});
    case Op::Rsqrt: return call("sj_rsqrt", {a});
    case Op::Sigmoid: return call("sj_sigmoid", {a});
    case Op::Tanh: return call("sj_tanh", {a});
    case Op::Sin: return call("sj_sin", {a});
    case Op::Cos: return call("sj_cos", {a});
    case Op::Erf: return call("sj_erf", {a});
    case Op::Abs: return call("sj_abs", {a});
    case Op::Relu: return call("sj_relu", {a});
    case Op::Sign: return call("sj_sign", {a});
    case Op::Round: return call("sj_round", {a});
    case Op::Floor: return call("sj_floor", {a});
    case Op::Ceil: return call("sj_ceil", {a});
    case Op::Log1p: return call("sj_log1p", {a});
    case Op::Expm1: return call("sj_expm1", {a});
    case Op::Exp2: return call("sj_exp2", {a});
    case Op::Log10: return call("sj_log10", {a});
    case Op::Tan: return call("sj_tan", {a});
    case Op::Atan: return call("sj_atan", {a});
    case Op::Asin: return call("sj_asin", {a});
    case Op::Acos: return call("sj_acos", {a});
    case Op::Sinh: return call("sj_sinh", {a});
    case Op::Cosh: return call("sj_cosh", {a});
    case Op::Asinh: return call("sj_asinh", {a});
    case Op::Acosh: return call("sj_acosh", {a});
    case Op::Atanh: return call("sj_atanh", {a});
    case Op::Erfc: return call("sj_erfc", {a});
    case Op::Erfinv: return call("sj_erfinv", {a});
    case Op::Ndtri: return call("sj_ndtri", {a});
    case Op::Atan2: return call("sj_atan2", {a, b});
    case Op::Hypot: return call("sj_hypot", {a, b});
    case Op::Eq: return a + " == " + b;
    case Op::Ne: return a + " != " + b;
    case Op::Lt: return a + " < " + b;
    case Op::Le: return a + " <= " + b;
    case Op::Gt: return a + " > " + b;
    case Op::Ge: return a + " >= " + b;
    case Op::And: return a + " && " + b;
    case Op::Or: return a + " || " + b;
    case Op::Not: return "!" + a;
    case Op::Where: return a + " ? " + b + " : " + c;
    case Op::ToFloat: return a + " ? (real)1 : (real)0";
    case Op::ToBool: return a + " != (real)0";
    case Op::Spike: return a + " >= (real)0 ? (real)1 : (real)0";
    case Op::Detach: return a;
  }
  throw Error("codegen: unknown op " + std::to_string(static_cast<int>(n.op)));
}

void check_id(const ir::Step& step, ir::ValueId id, ir::ValueId limit) {
  if (id < 0 || id >= limit) {
    throw Error("codegen: node reference %" + std::to_string(id) + " out of range (" +
                std::to_string(step.nodes.size()) + " nodes)");
  }
}

}  // namespace

std::string real_literal(double value, bool f64) {
  if (!f64) value = static_cast<double>(static_cast<float>(value));
  if (std::isnan(value)) return f64 ? "__longlong_as_double(0x7ff8000000000000LL)" : "__int_as_float(0x7fc00000)";
  if (std::isinf(value)) {
    const char* inf = f64 ? "__longlong_as_double(0x7ff0000000000000LL)" : "__int_as_float(0x7f800000)";
    return value > 0 ? inf : std::string("(-") + inf + ")";
  }
  // Enough digits to identify the value; the compiler rounds the text to the literal's type.
  char buf[64];
  std::snprintf(buf, sizeof buf, f64 ? "%.17g" : "%.9g", value);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  if (!f64) s += "f";
  return std::signbit(value) ? "(" + s + ")" : s;
}

namespace {

// The nodes the results need; a node read from `leaves.read_instead` needs no arguments.
std::vector<char> needed_nodes(const ir::Step& step, const StepLeaves& leaves, const std::vector<StepResults>& results) {
  const ir::ValueId count = static_cast<ir::ValueId>(step.nodes.size());
  std::vector<char> needed(step.nodes.size(), 0);
  for (const StepResults& r : results) {
    for (ir::ValueId id : r.ids) {
      check_id(step, id, count);
      needed[id] = 1;
    }
  }
  for (ir::ValueId id = count - 1; id >= 0; --id) {
    if (!needed[id] || read_instead(leaves, id)) continue;
    const ir::Node& n = step.nodes[id];
    for (int k = 0; k < ir::op_info(n.op).arity; ++k) {
      check_id(step, n.args[k], id);
      needed[n.args[k]] = 1;
    }
  }
  return needed;
}

// The cost of a division, a square root or an exponential: the cheapest op worth hoisting.
constexpr int kCostlyOp = 10;

int op_cost(Op op) {
  switch (op) {
    case Op::Div: case Op::Reciprocal: case Op::Sqrt: case Op::Rsqrt: case Op::Exp: case Op::Log:
    case Op::Log2: case Op::Sigmoid: case Op::Exp2: case Op::Log10: case Op::Log1p: case Op::Expm1:
      return 10;
    case Op::Tanh: case Op::Erf: case Op::Fmod: case Op::Erfc: case Op::Erfinv: case Op::Atan: case Op::Sinh:
    case Op::Cosh: case Op::Asinh: case Op::Acosh: case Op::Atanh: case Op::Hypot: case Op::Ndtri:
      return 25;
    case Op::Pow: case Op::Sin: case Op::Cos: case Op::Tan: case Op::Asin: case Op::Acos:
    case Op::Atan2: case Op::Uniform:
      return 40;
    default:
      return ir::is_leaf(op) ? 0 : 1;
  }
}

}  // namespace

int step_cost(const ir::Step& step, const StepLeaves& leaves, const std::vector<StepResults>& results) {
  const std::vector<char> needed = needed_nodes(step, leaves, results);
  int cost = 0;
  for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(needed.size()); ++id) {
    if (needed[id] && !read_instead(leaves, id)) cost += op_cost(step.nodes[id].op);
  }
  return cost;
}

std::vector<ir::ValueId> hoisted_values(const ir::Step& step, const std::vector<StepResults>& results) {
  const std::vector<char> needed = needed_nodes(step, {}, results);
  const std::vector<bool> invariant = ir::step_invariant(step.nodes);
  // Invariant values with a costly op (op_cost of a division or a transcendental) among the ops
  // that compute them.
  std::vector<char> costly(step.nodes.size(), 0);
  for (size_t id = 0; id < step.nodes.size(); ++id) {
    const ir::Node& n = step.nodes[id];
    if (!invariant[id] || ir::is_leaf(n.op)) continue;
    costly[id] = op_cost(n.op) >= kCostlyOp;
    for (int k = 0; k < ir::op_info(n.op).arity; ++k) costly[id] = costly[id] || costly[n.args[k]];
  }
  std::vector<char> hoist(step.nodes.size(), 0);
  for (const StepResults& r : results) {
    for (ir::ValueId id : r.ids) hoist[id] = costly[id];
  }
  for (size_t id = 0; id < step.nodes.size(); ++id) {
    const ir::Node& n = step.nodes[id];
    if (!needed[id] || invariant[id]) continue;
    for (int k = 0; k < ir::op_info(n.op).arity; ++k) hoist[n.args[k]] = hoist[n.args[k]] || costly[n.args[k]];
  }
  std::vector<ir::ValueId> out;
  for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(hoist.size()); ++id) {
    if (hoist[id]) out.push_back(id);
  }
  return out;
}

std::string emit_step_statements(const ir::Step& step, const StepLeaves& leaves,
                                 const std::vector<StepResults>& results, bool f64) {
  const ir::ValueId count = static_cast<ir::ValueId>(step.nodes.size());
  const std::vector<char> needed = needed_nodes(step, leaves, results);
  std::string out;
  for (ir::ValueId id = 0; id < count; ++id) {
    if (!needed[id]) continue;
    const char* type = step.nodes[id].type == ir::Type::Bool ? "bool" : "real";
    out += "  const " + std::string(type) + " " + var(id) + " = " + expression(step, id, leaves, f64) + ";\n";
  }
  for (const StepResults& r : results) {
    for (size_t i = 0; i < r.ids.size(); ++i) {
      const ir::ValueId id = r.ids[i];
      const std::string value =
          step.nodes[id].type == ir::Type::Bool ? var(id) + " ? (real)1 : (real)0" : var(id);
      out += "  " + r.array + "[" + std::to_string(i) + "] = " + value + ";\n";
    }
  }
  return out;
}

}  // namespace spikejit::codegen
