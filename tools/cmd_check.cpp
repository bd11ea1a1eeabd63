// spikejit check FILE: the canonical text of a neuron, or every problem in it.
#include <iostream>

#include "cli.h"
#include "commands.h"

namespace spikejit::cli {

static const char* const kAbout =
    "usage: spikejit check FILE [--set NAME=VALUE]... [--hash]\n"
    "\n"
    "Parses and verifies a neuron. Prints its canonical text (the same whatever the whitespace,\n"
    "comments or order of constant declarations), or every problem found as\n"
    "file:line:col: error: message, with the source line and a caret, and exits with 1.\n"
    "\n";

static const char* const kOptions =
    "  --hash           print only the neuron's hash (SHA-256 of the canonical text)\n";

int cmd_check(int argc, char** argv) {
  const Args args(argc, argv, {"set"}, {"hash"});
  if (args.help()) {
    std::cout << kAbout << kNeuronSourceHelp << kOptions;
    return 0;
  }
  const Program program = load_program(args.single_positional("FILE"), args.values("set"));
  std::cout << (args.flag("hash") ? program.hash() + "\n" : program.canonical());
  return 0;
}

}  // namespace spikejit::cli
