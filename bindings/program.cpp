// spikejit._core.Program: a parsed, verified neuron with its forward and backward steps.
#include <string>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "spikejit/autodiff.h"
#include "spikejit/ir.h"
#include "spikejit/program.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace spikejit::python {
namespace {

template <typename Decl>
std::vector<std::string> names(const std::vector<Decl>& decls) {
  std::vector<std::string> out;
  for (const Decl& d : decls) out.push_back(d.name);
  return out;
}

const char* param_kind_name(ir::ParamKind kind) {
  return kind == ir::ParamKind::Scalar ? "scalar" : "per_neuron";
}

}  // namespace

void bind_program(nb::module_& m) {
  nb::class_<Program>(m, "Program", "A neuron ready to run: definition, forward step, backward step.")
      .def_static(
          "from_text",
          [](const std::string& text, const std::string& file) { return Program::from_text(text, file); },
          "text"_a, "file"_a = "<text>", "Parses the neuron text format (raises ParseError).")
      .def_static("from_file", &Program::from_file, "path"_a)
      .def(
          "tangent", [](const Program& p) { return Program(autodiff::tangent(p.neuron())); },
          "The tangent neuron (forward mode): inputs, states, parameters and outputs of this neuron, "
          "then one tangent of each in that order; its inference is this neuron's JVP.")
      .def(
          "adjoint", [](const Program& p) { return Program(autodiff::adjoint(p.neuron())); },
          "The adjoint neuron (this neuron's backward step as a neuron, run backward in time): see "
          "spikejit/autodiff.h. Its gradients are this neuron's second derivatives.")
      .def_prop_ro("name", [](const Program& p) { return p.neuron().name; })
      .def_prop_ro("inputs", [](const Program& p) { return names(p.neuron().inputs); })
      .def_prop_ro("states", [](const Program& p) { return names(p.neuron().states); })
      .def_prop_ro("outputs", [](const Program& p) { return names(p.neuron().outputs); })
      .def_prop_ro("num_inputs", [](const Program& p) { return p.neuron().inputs.size(); })
      .def_prop_ro("num_states", [](const Program& p) { return p.neuron().states.size(); })
      .def_prop_ro("num_outputs", [](const Program& p) { return p.neuron().outputs.size(); })
      .def_prop_ro("uses_random", &Program::uses_random,
                   "True when the neuron draws random numbers (uniform()): its calls take a seed.")
      .def_prop_ro(
          "params",
          [](const Program& p) {
            std::vector<std::tuple<std::string, std::string, double>> out;
            for (const ir::ParamDecl& d : p.neuron().params)
              out.emplace_back(d.name, param_kind_name(d.kind), d.init);
            return out;
          },
          "(name, 'scalar' | 'per_neuron', initial value) of each parameter, in order.")
      .def_prop_ro(
          "state_defaults",
          [](const Program& p) {
            std::vector<double> out;
            for (size_t i = 0; i < p.neuron().states.size(); ++i)
              out.push_back(ir::state_default(p.neuron(), static_cast<int>(i)));
            return out;
          },
          "The initial value of each state when none is given.")
      .def_prop_ro(
          "constants",
          [](const Program& p) {
            std::vector<std::tuple<std::string, double>> out;
            for (const ir::ConstDecl& d : p.neuron().constants) out.emplace_back(d.name, d.value);
            return out;
          })
      .def_prop_ro(
          "num_saved", [](const Program& p) { return p.backward().saved.size(); },
          "How many [T, *S] buffers the backward reads per step (saved inputs included).")
      .def_prop_ro(
          "saved_inputs", [](const Program& p) { return p.saved_inputs(); },
          "Per saved value: the index of the input it is (never written by the forward; the "
          "backward reads the input), or -1 for a computed value.")
      .def(
          "saved_plan",
          [](const Program& p, bool pack_spikes) {
            const ir::Step& step = p.backward(pack_spikes);
            std::vector<std::tuple<int, bool>> out;
            for (size_t i = 0; i < step.saved.size(); ++i)
              out.emplace_back(p.saved_inputs(pack_spikes)[i], step.is_saved_packed(i));
            return out;
          },
          "pack_spikes"_a = false,
          "Per saved value of the save policy: (the input it is or -1, saved as packed bits).")
      .def_prop_ro(
          "packable_outputs", [](const Program& p) { return p.packable_outputs(); },
          "Per output: whether it is spike-valued (only +0 or 1), so that it may be packed.")
      .def_prop_ro(
          "differentiable_outputs", [](const Program& p) { return p.gradient_flow().outputs; },
          "Per output: whether a step computes it with a gradient from its inputs, states and "
          "parameters, by PyTorch's requires_grad rule (false: only through comparisons, float(bool) "
          "or detach). Over a call: results_requiring_grad.")
      .def_prop_ro(
          "differentiable_states", [](const Program& p) { return p.gradient_flow().states; },
          "Per state: whether a step computes its next value with a gradient (as for outputs).")
      .def_prop_ro(
          "differentiable_arguments", [](const Program& p) { return p.gradient_flow().arguments; },
          "Per input, then state (its initial value), then parameter: whether its gradient reaches an "
          "output or state (false: PyTorch gives None for it).")
      .def(
          "results_requiring_grad",
          [](const Program& p, const std::vector<bool>& requiring, int64_t steps) {
            return p.gradient_flow().requires_grad(requiring, steps);
          },
          "requiring"_a, "steps"_a,
          "Per output, then per final state, then per state sequence: whether a call of `steps` "
          "steps returns it with requires_grad when the inputs, initial states and parameters marked "
          "in `requiring` require grad, as a loop of the step in PyTorch does.")
      .def(
          "requires_grad_settles_after",
          [](const Program& p, const std::vector<bool>& requiring) {
            return p.gradient_flow().settles_after(requiring);
          },
          "requiring"_a,
          "The least number of steps from which results_requiring_grad(requiring, steps) stays the "
          "same for every longer call; -1 where it keeps changing.")
      .def("canonical", &Program::canonical, "The canonical text of the neuron.")
      .def("hash", &Program::hash, "Hex SHA-256 of the canonical text.")
      .def("forward_text", [](const Program& p) { return ir::to_string(p.forward()); })
      .def(
          "backward_text", [](const Program& p, bool pack_spikes) { return ir::to_string(p.backward(pack_spikes)); },
          "pack_spikes"_a = false)
      .def("__repr__", [](const Program& p) {
        return "<spikejit._core.Program " + p.neuron().name + " " + p.hash().substr(0, 12) + ">";
      });
}

}  // namespace spikejit::python
