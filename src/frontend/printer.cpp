// The canonical text of a neuron and its hash.
#include <algorithm>
#include <charconv>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "ir/naming.h"
#include "spikejit/error.h"
#include "spikejit/frontend.h"

namespace spikejit::frontend {
namespace {

using ir::Op;

// Shortest text that reads back as the same double.
std::string number(double v) {
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, result.ptr);
}

// Binding strength, as in the grammar: or < and < not < comparison < + - < * / < unary < primary.
enum Level { kAny = 0, kOr, kAnd, kNot, kCompare, kSum, kProduct, kUnary, kPrimary };

const char* infix(Op op, Level* level) {
  switch (op) {
    case Op::Or: *level = kOr; return "or";
    case Op::And: *level = kAnd; return "and";
    case Op::Eq: *level = kCompare; return "==";
    case Op::Ne: *level = kCompare; return "!=";
    case Op::Lt: *level = kCompare; return "<";
    case Op::Le: *level = kCompare; return "<=";
    case Op::Gt: *level = kCompare; return ">";
    case Op::Ge: *level = kCompare; return ">=";
    case Op::Add: *level = kSum; return "+";
    case Op::Sub: *level = kSum; return "-";
    case Op::Mul: *level = kProduct; return "*";
    case Op::Div: *level = kProduct; return "/";
    default: return nullptr;
  }
}

std::string surrogate_text(const ir::Surrogate& s) {
  const ir::SurrogateInfo& info = ir::surrogate_info(s.kind);
  std::string out = std::string(info.name) + "(";
  for (size_t i = 0; i < info.param_names.size(); ++i)
    out += (i ? ", " : "") + std::string(info.param_names[i]) + "=" + number(s.params[i]);
  return out + ")";
}

class Printer {
 public:
  explicit Printer(const ir::Neuron& n) : n_(n), names_(n) {}

  std::string run() {
    std::string out = "neuron " + n_.name + "\n";
    for (const auto& d : n_.inputs) out += "input " + d.name + "\n";
    for (const auto& d : n_.states) {
      std::string init = d.init_constant >= 0 ? n_.constants[d.init_constant].name : number(d.init);
      out += "state " + d.name + " = " + init + "\n";
    }
    for (const auto& d : n_.params)
      out += "param " + d.name + (d.kind == ir::ParamKind::PerNeuron ? "[neuron]" : "") + " = " +
             number(d.init) + "\n";
    std::vector<const ir::ConstDecl*> constants;
    for (const auto& d : n_.constants) constants.push_back(&d);
    std::sort(constants.begin(), constants.end(),
              [](const ir::ConstDecl* a, const ir::ConstDecl* b) { return a->name < b->name; });
    for (const ir::ConstDecl* d : constants) {
      std::string value = d->type == ir::Type::Bool ? (d->value != 0 ? "true" : "false") : number(d->value);
      out += "const " + d->name + " = " + value + "\n";
    }
    for (const auto& d : n_.outputs) out += "output " + d.name + "\n";
    out += "\n";
    for (const ir::Assignment& a : n_.body) {
      out += a.name + " = " + expr(a.value, kAny) + "\n";
      names_.bind(a.name, a.value);
    }
    return out;
  }

 private:
  std::string expr(ir::ValueId v, Level context) {
    if (const std::string* name = names_.name_of(v)) return *name;
    const ir::Node& node = n_.nodes[v];
    Level level = kPrimary;
    std::string text;
    if (node.op == Op::Literal) {
      if (node.type == ir::Type::Bool) return node.value != 0 ? "true" : "false";
      text = number(node.value);
      if (text[0] == '-') level = kUnary;
    } else if (node.op == Op::Uniform) {
      // Parsing numbers the draws in the order of the text: print each once, in stream order.
      if (node.index != uniforms_printed_++) {
        throw Error("print: uniform() draw %" + std::to_string(v) + " (stream " + std::to_string(node.index) +
                    ") is used more than once without a name, or out of stream order; assign each draw to a "
                    "name and use the name");
      }
      text = "uniform()";
    } else if (ir::is_leaf(node.op)) {
      // ir::verify rejects neurons where this can happen.
      throw Error("print: a leaf value has no current name");
    } else if (const char* op = infix(node.op, &level)) {
      // Left-associative chains need no parentheses on the left; comparisons do not chain.
      // The left operand first (the order of the operands of + is unspecified): draws are
      // numbered in the order of the text.
      Level left = level == kCompare ? Level(level + 1) : level;
      text = expr(node.args[0], left);
      text += std::string(" ") + op + " " + expr(node.args[1], Level(level + 1));
    } else if (node.op == Op::Neg) {
      level = kUnary;
      text = "-" + expr(node.args[0], kUnary);
    } else if (node.op == Op::Not) {
      level = kNot;
      text = "not " + expr(node.args[0], kNot);
    } else {
      text = std::string(ir::op_info(node.op).name) + "(";
      for (int i = 0; i < ir::op_info(node.op).arity; ++i)
        text += (i ? ", " : "") + expr(node.args[i], kAny);
      if (node.op == Op::Spike) text += ", " + surrogate_text(node.surrogate);
      text += ")";
    }
    return level < context ? "(" + text + ")" : text;
  }

  const ir::Neuron& n_;
  ir::BodyNames names_;
  int32_t uniforms_printed_ = 0;
};

}  // namespace

std::string print(const ir::Neuron& n) {
  ir::verify(n);
  return Printer(n).run();
}

std::string hash(const ir::Neuron& n) { return sha256_hex(print(n)); }

}  // namespace spikejit::frontend
