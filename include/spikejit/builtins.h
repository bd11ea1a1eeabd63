// The built-in neurons IF, LIF and PLIF: neuron definitions shipped with the library
// (neurons/*.sj), specialised by SpikingJelly's options.
#pragma once

#include <optional>

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

// The definition text of a built-in ("if", "lif", "plif"), as shipped.
const char* definition_text(const std::string& name);

ir::Neuron if_neuron(const Options& o = {});
ir::Neuron lif_neuron(const Options& o = {});
ir::Neuron plif_neuron(const Options& o = {});  // one scalar parameter `w`, 1/tau = sigmoid(w)

}  // namespace spikejit::builtins
