// spikejit grad FILE: the lowered forward step, the backward step autodiff derives from it, and
// the values the training forward saves for the backward; or, with --tangent / --adjoint, the
// tangent / adjoint neuron.
#include <iostream>
#include <string>

#include "cli.h"
#include "commands.h"
#include "spikejit/autodiff.h"

namespace spikejit::cli {

static const char* const kAbout =
    "usage: spikejit grad FILE [--set NAME=VALUE]... [--pack-spikes] [--tangent | --adjoint]\n"
    "\n"
    "Prints the neuron's lowered forward step, its backward step (one reverse step of\n"
    "backpropagation through time: gradients of the inputs, of the previous states and of the\n"
    "parameters from the gradients of the outputs and of the next states), and which forward\n"
    "values the training forward saves per step for the backward (`saved i = forward %k`), and the\n"
    "outputs and states without a gradient, if any (a spike written as a comparison, not spike()).\n"
    "\n"
    "  --pack-spikes   the plan of the pack_spikes save policy: spike-valued values are saved\n"
    "                  as bits (marked `packed bits`), which may change what is saved\n"
    "  --tangent       instead, forward mode: the tangent neuron (the neuron's step, then the\n"
    "                  tangents of its outputs and next states from those of its inputs, states\n"
    "                  and parameters), whose inference over a sequence is the JVP\n"
    "  --adjoint       instead, the adjoint neuron (the backward step as a neuron, run over the\n"
    "                  reversed sequences; the Python package differentiates it for second\n"
    "                  derivatives)\n"
    "\n";

int cmd_grad(int argc, char** argv) {
  const Args args(argc, argv, {"set"}, {"pack-spikes", "tangent", "adjoint"});
  if (args.help()) {
    std::cout << kAbout << kNeuronSourceHelp;
    return 0;
  }
  const Program program = load_program(args.single_positional("FILE"), args.values("set"));
  if (args.flag("tangent") && args.flag("adjoint")) throw UsageError("--tangent and --adjoint print different neurons: give one");
  if (args.flag("tangent") || args.flag("adjoint")) {
    const ir::Neuron& n = program.neuron();
    std::cout << Program(args.flag("tangent") ? autodiff::tangent(n) : autodiff::adjoint(n)).canonical();
    return 0;
  }
  const ir::Step& backward = program.backward(args.flag("pack-spikes"));
  std::cout << "# neuron " << program.neuron().name << "\n\n# forward step\n"
            << ir::to_string(program.forward()) << "\n# backward step\n"
            << ir::to_string(backward) << "\n# the training forward saves " << backward.saved.size()
            << " value(s) per neuron and step";
  for (size_t i = 0; i < backward.saved.size(); ++i) {
    std::cout << (i == 0 ? ": " : ", ") << "forward %" << backward.saved[i]
              << (backward.is_saved_packed(i) ? " (bits)" : "");
  }
  std::cout << "; the backward recomputes everything else\n";
  // A value without a gradient is often a spike written as a comparison instead of spike().
  std::string without;
  auto name = [&without](const char* kind, const std::string& what) {
    without += (without.empty() ? " " : ", ") + std::string(kind) + " " + what;
  };
  const ir::Neuron& n = program.neuron();
  const ir::GradientFlow& flow = program.gradient_flow();
  for (size_t i = 0; i < n.outputs.size(); ++i)
    if (!flow.outputs[i]) name("output", n.outputs[i].name);
  for (size_t i = 0; i < n.states.size(); ++i)
    if (!flow.states[i]) name("state", n.states[i].name);
  if (!without.empty()) {
    std::cout << "# without a gradient (computed only through comparisons, float(bool) or detach):" << without
              << "\n";
  }
  return 0;
}

}  // namespace spikejit::cli
