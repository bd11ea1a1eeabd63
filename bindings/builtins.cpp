// The shipped neurons (IF, LIF, PLIF with SpikingJelly's options; any of them by its constants)
// and the surrogate table.
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "spikejit/builtins.h"
#include "spikejit/error.h"
#include "spikejit/program.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace spikejit::python {
namespace {

std::string surrogate_names() {
  std::string out;
  for (ir::SurrogateKind k : ir::all_surrogates()) {
    if (!out.empty()) out += ", ";
    out += ir::surrogate_info(k).class_name;
  }
  return out;
}

// Missing trailing parameters take SpikingJelly's defaults.
ir::Surrogate make_surrogate(const std::string& name, const std::vector<double>& params) {
  ir::Surrogate s;
  if (!ir::surrogate_from_name(name, &s.kind))
    throw ArgumentError("surrogate", "one of " + surrogate_names(), "'" + name + "'");
  const ir::SurrogateInfo& info = ir::surrogate_info(s.kind);
  if (params.size() > info.param_names.size())
    throw ArgumentError("surrogate_params",
                        "at most " + std::to_string(info.param_names.size()) + " values for " +
                            info.class_name,
                        std::to_string(params.size()));
  s.params = info.defaults;
  for (size_t i = 0; i < params.size(); ++i) s.params[i] = params[i];
  return s;
}

Program make_builtin(const std::string& name, double v_threshold, std::optional<double> v_reset,
                     bool detach_reset, const std::string& surrogate,
                     const std::vector<double>& surrogate_params, bool decay_input, double tau,
                     double init_tau) {
  builtins::Options o;
  o.v_threshold = v_threshold;
  o.v_reset = v_reset;
  o.detach_reset = detach_reset;
  o.surrogate = make_surrogate(surrogate, surrogate_params);
  o.decay_input = decay_input;
  o.tau = tau;
  o.init_tau = init_tau;
  if (name == "if") return Program(builtins::if_neuron(o));
  if (name == "lif") return Program(builtins::lif_neuron(o));
  if (name == "plif") return Program(builtins::plif_neuron(o));
  throw ArgumentError("name", "'if', 'lif' or 'plif'", "'" + name + "'");
}

Program make_shipped(const std::string& name, const std::map<std::string, double>& constants,
                     const std::optional<std::string>& surrogate, const std::vector<double>& surrogate_params) {
  std::vector<ir::ConstantOverride> overrides;
  for (const auto& [constant, value] : constants) overrides.push_back({constant, value});
  std::optional<ir::Surrogate> s;
  if (surrogate) s = make_surrogate(*surrogate, surrogate_params);
  return Program(builtins::shipped_neuron(name, overrides, s));
}

}  // namespace

void bind_builtins(nb::module_& m) {
  m.def("builtin", &make_builtin, "name"_a, "v_threshold"_a = 1.0, "v_reset"_a = 0.0,
        "detach_reset"_a = false, "surrogate"_a = "sigmoid",
        "surrogate_params"_a = std::vector<double>{}, "decay_input"_a = true, "tau"_a = 2.0,
        "init_tau"_a = 2.0,
        "A built-in neuron ('if', 'lif', 'plif') with SpikingJelly's options; v_reset=None is a "
        "soft reset.");
  m.def("shipped", &make_shipped, "name"_a, "constants"_a = std::map<std::string, double>{},
        "surrogate"_a.none() = nb::none(), "surrogate_params"_a = std::vector<double>{},
        "A shipped neuron (shipped_names()) with constants overridden ({name: value}, a bool as 0 or "
        "1) and, when given, the surrogate of its spikes replaced.");
  m.def("shipped_names", &builtins::shipped_names, "The names of the shipped neurons (neurons/*.sj).");
  m.def("definition_text", [](const std::string& name) { return std::string(builtins::definition_text(name)); },
        "name"_a, "The shipped definition of a neuron (one of shipped_names()).");
  m.def(
      "surrogates",
      [] {
        std::vector<std::tuple<std::string, std::string, std::vector<std::string>, std::vector<double>>> out;
        for (ir::SurrogateKind k : ir::all_surrogates()) {
          const ir::SurrogateInfo& info = ir::surrogate_info(k);
          out.emplace_back(info.name, info.class_name,
                           std::vector<std::string>(info.param_names.begin(), info.param_names.end()),
                           info.defaults);
        }
        return out;
      },
      "(name, SpikingJelly class name, parameter names, defaults) of every surrogate.");
}

}  // namespace spikejit::python
