// The neuron definitions shipped with the library (neurons/*.sj): IF, LIF and PLIF, specialised
// by SpikingJelly's options, and SpikingJelly's other neurons (QIF, EIF, Izhikevich, I-LIF, CLIF)
// through their constants.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "spikejit/ir.h"

namespace spikejit::builtins {

struct Options {
  double v_threshold = 1.0;
  std::optional<double> v_reset = 0.0;  // nullopt: soft reset
  bool detach_reset = false;
  ir::Surrogate surrogate{ir::SurrogateKind::Sigmoid, {4.0}};
  bool decay_input = true;  // LIF, PLIF
  double tau = 2.0;         // LIF
  double init_tau = 2.0;    // PLIF: parameter w starts at -log(init_tau - 1)
};

// The definition text of a shipped neuron (one of shipped_names()), as shipped.
const char* definition_text(const std::string& name);

// The names of the shipped neurons: "clif", "eif", "if", "ilif", "izhikevich", "lif", "plif", "qif".
std::vector<std::string> shipped_names();

// A shipped neuron with some of its constants overridden (each one of its `const`s, a Bool one 0
// or 1) and, when `surrogate` is given, the surrogate of its spikes replaced. The general form of
// the three below, which also check SpikingJelly's conditions on their options; for the others,
// their constants are SpikingJelly's options (neurons/<name>.sj; a soft reset is soft_reset = 1
// with v_reset = 0), e.g. shipped_neuron("qif", {{"a0", 0.5}, {"tau", 3}}).
ir::Neuron shipped_neuron(const std::string& name, const std::vector<ir::ConstantOverride>& constants = {},
                          const std::optional<ir::Surrogate>& surrogate = std::nullopt);

ir::Neuron if_neuron(const Options& o = {});
ir::Neuron lif_neuron(const Options& o = {});
ir::Neuron plif_neuron(const Options& o = {});  // one scalar parameter `w`, 1/tau = sigmoid(w)

}  // namespace spikejit::builtins
