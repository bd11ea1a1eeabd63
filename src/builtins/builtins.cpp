// The shipped definitions specialised through their constants (IF / LIF / PLIF by SpikingJelly's
// options); constant folding then removes the branches not taken.
#include "spikejit/builtins.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "builtins/neuron_files.h"
#include "spikejit/error.h"
#include "spikejit/frontend.h"

namespace spikejit::builtins {
namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string known_names() {
  std::string names;
  for (const NeuronFile* f = kNeuronFiles; f->name != nullptr; ++f) {
    if (!names.empty()) names += ", ";
    names += f->name;
  }
  return names;
}

void require_finite(const char* argument, double v) {
  if (!std::isfinite(v)) throw ArgumentError(argument, "a finite number", number(v));
}

void validate_surrogate(const ir::Surrogate& surrogate) {
  const ir::SurrogateInfo& info = ir::surrogate_info(surrogate.kind);
  if (surrogate.params.size() != info.param_names.size()) {
    throw ArgumentError("surrogate", std::to_string(info.param_names.size()) + " parameters for " +
                                         info.class_name,
                        std::to_string(surrogate.params.size()));
  }
  for (double p : surrogate.params) require_finite("surrogate", p);
}

// The shipped neuron `name` with the options shared by IF, LIF and PLIF applied.
ir::Neuron specialise(const std::string& name, const Options& o, std::vector<ir::ConstantOverride> extra) {
  require_finite("v_threshold", o.v_threshold);
  if (o.v_reset) require_finite("v_reset", *o.v_reset);
  const bool soft_reset = !o.v_reset.has_value();
  std::vector<ir::ConstantOverride> overrides = {
      {"v_threshold", o.v_threshold},
      {"v_reset", soft_reset ? 0.0 : *o.v_reset},
      {"soft_reset", soft_reset ? 1.0 : 0.0},
      {"detach_reset", o.detach_reset ? 1.0 : 0.0},
  };
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return shipped_neuron(name, overrides, o.surrogate);
}

}  // namespace

const char* definition_text(const std::string& name) {
  for (const NeuronFile* f = kNeuronFiles; f->name != nullptr; ++f) {
    if (name == f->name) return f->text;
  }
  throw ArgumentError("name", "a shipped neuron (" + known_names() + ")", "'" + name + "'");
}

std::vector<std::string> shipped_names() {
  std::vector<std::string> names;
  for (const NeuronFile* f = kNeuronFiles; f->name != nullptr; ++f) names.emplace_back(f->name);
  return names;
}

ir::Neuron shipped_neuron(const std::string& name, const std::vector<ir::ConstantOverride>& constants,
                          const std::optional<ir::Surrogate>& surrogate) {
  if (surrogate) validate_surrogate(*surrogate);
  ir::Neuron n = ir::with_constants(frontend::parse(definition_text(name), "neurons/" + name + ".sj"), constants);
  if (surrogate) {
    for (ir::Node& node : n.nodes) {
      if (node.op == ir::Op::Spike) node.surrogate = *surrogate;
    }
  }
  return n;
}

ir::Neuron if_neuron(const Options& o) { return specialise("if", o, {}); }

ir::Neuron lif_neuron(const Options& o) {
  // SpikingJelly's LIFNode asserts tau > 1 (a smaller tau overshoots: 1/tau > 1).
  if (!(o.tau > 1.0) || !std::isfinite(o.tau)) throw ArgumentError("tau", "a number > 1", number(o.tau));
  return specialise("lif", o, {{"decay_input", o.decay_input ? 1.0 : 0.0}, {"tau", o.tau}});
}

ir::Neuron plif_neuron(const Options& o) {
  if (!(o.init_tau > 1.0) || !std::isfinite(o.init_tau)) {
    throw ArgumentError("init_tau", "a number > 1", number(o.init_tau));
  }
  ir::Neuron n = specialise("plif", o, {{"decay_input", o.decay_input ? 1.0 : 0.0}});
  for (ir::ParamDecl& p : n.params) {
    // 0 - log(...) rather than -log(...): init_tau = 2 gives +0, as the shipped text says.
    if (p.name == "w") p.init = 0.0 - std::log(o.init_tau - 1.0);
  }
  return n;
}

}  // namespace spikejit::builtins
