// Second pass of the parser: resolves names and builds the ir::Neuron through NeuronBuilder,
// then locates ir::verify's findings in the source.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "frontend/syntax.h"
#include "ir/checks.h"
#include "spikejit/builder.h"
#include "spikejit/frontend.h"

namespace spikejit::frontend {
namespace {

using ir::Op;

class Resolver {
 public:
  Resolver(Syntax syntax, Diagnostics& diagnostics) : syntax_(std::move(syntax)), diagnostics_(diagnostics) {}

  ir::Neuron run() {
    drop_duplicate_declarations();
    NeuronBuilder b(syntax_.name);
    // Declarations by kind, in source order within a kind; constants before the states that
    // take their initial value from them.
    for (const Decl& d : syntax_.decls)
      if (d.kind == Decl::Kind::Input) leaf(d, b.input(d.name), ir::Problem::Where::Input, b);
    for (const Decl& d : syntax_.decls)
      if (d.kind == Decl::Kind::Const)
        leaf(d, d.is_bool ? b.bool_constant(d.name, d.value != 0) : b.constant(d.name, d.value),
             ir::Problem::Where::Constant, b);
    for (const Decl& d : syntax_.decls) {
      if (d.kind != Decl::Kind::State) continue;
      if (d.init_name.empty()) {
        leaf(d, b.state(d.name, d.value), ir::Problem::Where::State, b);
        continue;
      }
      bool known = false;
      for (const auto& c : b.peek().constants) known = known || c.name == d.init_name;
      if (!known) diagnostics_.error(d.init_loc, "unknown constant '" + d.init_name + "' (a state's initial value is a number or a constant)");
      leaf(d, known ? b.state(d.name, d.init_name) : b.state(d.name, 0.0), ir::Problem::Where::State, b);
    }
    for (const Decl& d : syntax_.decls)
      if (d.kind == Decl::Kind::Param)
        leaf(d, b.param(d.name, d.per_neuron ? ir::ParamKind::PerNeuron : ir::ParamKind::Scalar, d.value),
             ir::Problem::Where::Param, b);
    for (const Decl& d : syntax_.decls) {
      if (d.kind != Decl::Kind::Output) continue;
      b.output(d.name);
      decl_locs_[{ir::Problem::Where::Output, static_cast<int>(b.peek().outputs.size() - 1)}] = d.loc;
    }

    for (size_t i = 0; i < syntax_.statements.size(); ++i) {
      const Statement& s = syntax_.statements[i];
      ir::ValueId v = s.expr ? value(*s.expr, b, i) : -1;
      if (v < 0) {
        v = b.literal(0.0).id();
        poisoned_.insert(v);
      }
      b.assign(s.name, Value(&b, v));
      assignment_locs_.push_back(s.loc);
    }

    ir::Neuron n = b.peek();
    report_problems(n);
    return n;
  }

 private:
  // Reports a name declared twice at its later declaration, and drops that declaration.
  void drop_duplicate_declarations() {
    std::set<std::string> slots, outputs;
    std::vector<Decl> kept;
    for (Decl& d : syntax_.decls) {
      bool output = d.kind == Decl::Kind::Output;
      if (!(output ? outputs : slots).insert(d.name).second) {
        diagnostics_.error(d.loc, std::string("duplicate declaration of ") + (output ? "output '" : "'") + d.name + "'");
        continue;
      }
      kept.push_back(std::move(d));
    }
    syntax_.decls = std::move(kept);
  }

  void leaf(const Decl& d, Value v, ir::Problem::Where where, const NeuronBuilder& b) {
    locate(v.id(), d.loc);
    const ir::Neuron& n = b.peek();
    int index = where == ir::Problem::Where::Input      ? static_cast<int>(n.inputs.size()) - 1
                : where == ir::Problem::Where::Constant ? static_cast<int>(n.constants.size()) - 1
                : where == ir::Problem::Where::State    ? static_cast<int>(n.states.size()) - 1
                                                        : static_cast<int>(n.params.size()) - 1;
    decl_locs_[{where, index}] = d.loc;
  }

  void locate(ir::ValueId id, Loc loc) {
    if (id >= static_cast<ir::ValueId>(node_locs_.size())) node_locs_.resize(id + 1);
    node_locs_[id] = loc;
  }

  // The node of `e`, or -1 after reporting why there is none.
  ir::ValueId value(const Expr& e, NeuronBuilder& b, size_t statement) {
    switch (e.kind) {
      case Expr::Kind::Number: {
        ir::ValueId id = b.literal(e.value).id();
        locate(id, e.loc);
        return id;
      }
      case Expr::Kind::Bool: {
        ir::ValueId id = b.literal(e.value).id();
        b.raw().nodes[id].type = ir::Type::Bool;
        locate(id, e.loc);
        return id;
      }
      case Expr::Kind::Name:
        if (b.has(e.name)) return b.ref(e.name).id();
        unknown_name(e, statement);
        return -1;
      default:
        break;
    }
    if (e.kind == Expr::Kind::Call && e.name == "uniform") {
      if (!e.args.empty()) {
        diagnostics_.error(e.loc, "'uniform' takes no arguments, got " + std::to_string(e.args.size()));
        return -1;
      }
      ir::ValueId id = b.uniform().id();
      locate(id, e.loc);
      return id;
    }
    std::vector<ir::ValueId> args;
    bool ok = true;
    for (const ExprPtr& a : e.args) {
      args.push_back(value(*a, b, statement));
      ok = ok && args.back() >= 0;
    }
    Op op = e.op;
    ir::Surrogate surrogate;
    if (e.kind == Expr::Kind::Call) {
      if (!ir::op_from_name(e.name, &op)) {
        diagnostics_.error(e.loc, "unknown function '" + e.name + "'");
        return -1;
      }
      int arity = ir::op_info(op).arity;
      if (static_cast<int>(e.args.size()) != arity) {
        diagnostics_.error(e.loc, "'" + e.name + "' takes " + std::to_string(arity) + " argument" +
                         (arity == 1 ? "" : "s") + ", got " + std::to_string(e.args.size()));
        return -1;
      }
      if (op == Op::Spike && !resolve_surrogate(e, &surrogate)) return -1;
    }
    if (!ok) return -1;
    Value v;
    switch (args.size()) {
      case 1: v = b.op(op, {Value(&b, args[0])}); break;
      case 2: v = b.op(op, {Value(&b, args[0]), Value(&b, args[1])}); break;
      default: v = b.op(op, {Value(&b, args[0]), Value(&b, args[1]), Value(&b, args[2])}); break;
    }
    if (op == Op::Spike) b.raw().nodes[v.id()].surrogate = surrogate;
    locate(v.id(), e.loc);
    return v.id();
  }

  void unknown_name(const Expr& e, size_t statement) {
    for (size_t j = statement + 1; j < syntax_.statements.size(); ++j) {
      if (syntax_.statements[j].name == e.name) {
        diagnostics_.error(e.loc, "'" + e.name + "' is used before it is assigned (line " +
                         std::to_string(syntax_.statements[j].loc.line) + ")");
        return;
      }
    }
    for (const Decl& d : syntax_.decls) {
      if (d.kind == Decl::Kind::Output && d.name == e.name) {
        diagnostics_.error(e.loc, "output '" + e.name + "' is never assigned before this use");
        return;
      }
    }
    diagnostics_.error(e.loc, "unknown name '" + e.name + "'");
  }

  bool resolve_surrogate(const Expr& e, ir::Surrogate* out) {
    if (!e.has_surrogate) {
      out->kind = ir::SurrogateKind::Sigmoid;
      out->params = ir::surrogate_info(out->kind).defaults;
      return true;
    }
    if (!ir::surrogate_from_name(e.surrogate, &out->kind)) {
      std::string known;
      for (ir::SurrogateKind k : ir::all_surrogates())
        known += std::string(known.empty() ? "" : ", ") + ir::surrogate_info(k).name;
      diagnostics_.error(e.surrogate_loc, "unknown surrogate '" + e.surrogate + "' (known: " + known + ")");
      return false;
    }
    const ir::SurrogateInfo& info = ir::surrogate_info(out->kind);
    out->params = info.defaults;
    std::vector<bool> given(info.param_names.size(), false);
    bool ok = true;
    for (const SurrogateArg& a : e.surrogate_args) {
      size_t i = 0;
      while (i < info.param_names.size() && a.name != info.param_names[i]) ++i;
      if (i == info.param_names.size()) {
        std::string names;
        for (const char* p : info.param_names) names += std::string(names.empty() ? "" : ", ") + p;
        diagnostics_.error(a.loc, "surrogate '" + std::string(info.name) + "' has no parameter '" + a.name + "' (" +
                         (names.empty() ? "it takes none" : "it takes " + names) + ")");
        ok = false;
      } else if (given[i]) {
        diagnostics_.error(a.loc, "surrogate parameter '" + a.name + "' given twice");
        ok = false;
      } else {
        given[i] = true;
        out->params[i] = a.value;
      }
    }
    if (!ok) return false;
    std::string problem = ir::surrogate_problem(*out);
    if (!problem.empty()) {
      diagnostics_.error(e.surrogate_loc, problem);
      return false;
    }
    return true;
  }

  // Verification problems, located; those caused by an already reported error are dropped.
  void report_problems(const ir::Neuron& n) {
    std::set<ir::ValueId> poisoned = poisoned_;
    for (ir::ValueId k = 0; k < static_cast<ir::ValueId>(n.nodes.size()); ++k) {
      const ir::Node& node = n.nodes[k];
      if (ir::is_leaf(node.op)) continue;
      for (int i = 0; i < ir::op_info(node.op).arity; ++i)
        if (poisoned.count(node.args[i])) poisoned.insert(k);
    }
    for (ir::Problem& p : ir::find_problems(n)) {
      Loc loc = syntax_.neuron_loc;
      switch (p.where) {
        case ir::Problem::Where::None:
          break;
        case ir::Problem::Where::Node:
          if (poisoned.count(p.index)) continue;
          if (p.index < static_cast<int>(node_locs_.size())) loc = node_locs_[p.index];
          break;
        case ir::Problem::Where::Assignment:
          if (poisoned.count(n.body[p.index].value)) continue;
          loc = assignment_locs_[p.index];
          break;
        default:
          loc = decl_locs_[{p.where, p.index}];
          break;
      }
      if (loc.line == 0 && syntax_.neuron_loc.line == 0) loc = {1, 1};
      diagnostics_.error(loc, std::move(p.message));
    }
  }

  Syntax syntax_;
  Diagnostics& diagnostics_;
  std::vector<Loc> node_locs_;
  std::vector<Loc> assignment_locs_;
  std::map<std::pair<ir::Problem::Where, int>, Loc> decl_locs_;
  std::set<ir::ValueId> poisoned_;  // stand-ins for values whose expression had an error
};

}  // namespace

ir::Neuron parse(std::string_view text, std::string_view file) {
  Diagnostics diagnostics(text, file);
  Syntax syntax = read_syntax(text, diagnostics);
  ir::Neuron n = Resolver(std::move(syntax), diagnostics).run();
  if (!diagnostics.empty()) diagnostics.throw_all();
  return n;
}

}  // namespace spikejit::frontend
