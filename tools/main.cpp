// spikejit: the command-line front end. Exit codes: 0 success, 1 error, 2 bad usage.
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "cli.h"
#include "commands.h"
#include "spikejit/error.h"

namespace {

using spikejit::cli::UsageError;

struct Command {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* summary;
};

const Command kCommands[] = {
    {"check", spikejit::cli::cmd_check, "parse and verify a neuron; print its canonical text"},
    {"grad", spikejit::cli::cmd_grad, "print the forward step, the backward step and what is saved"},
    {"run", spikejit::cli::cmd_run, "simulate a neuron on random input on the CPU; firing rates, speed"},
    {"emit", spikejit::cli::cmd_emit, "print the generated CUDA source of each kernel kind"},
    {"cache", spikejit::cli::cmd_cache, "list, size or clear the on-disk cache of compiled kernels"},
};

void print_usage(std::ostream& out) {
  out << "usage: spikejit COMMAND [ARGS]\n\n"
         "spikejit turns one step of a spiking neuron into fused multi-step kernels.\n\n"
         "commands:\n";
  for (const Command& c : kCommands) {
    out << "  " << c.name << std::string(8 - std::string(c.name).size(), ' ') << c.summary << "\n";
  }
  out << "  help    help [COMMAND]: this text, or a command's help\n\n"
         "FILE is a neuron text file or a built-in neuron: builtin:if, builtin:lif, builtin:plif.\n"
         "Run 'spikejit COMMAND --help' for a command's options.\n";
}

const Command* find_command(const std::string& name) {
  for (const Command& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

int run_command(const Command& command, int argc, char** argv) {
  const std::string prefix = std::string("spikejit ") + command.name + ": ";
  try {
    return command.run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << prefix << e.what() << "\nRun 'spikejit " << command.name << " --help' for usage.\n";
    return 2;
  } catch (const spikejit::ParseError& e) {
    for (const spikejit::Diagnostic& d : e.diagnostics()) std::cerr << spikejit::format_diagnostic(d) << "\n";
    const size_t n = e.diagnostics().size();
    std::cerr << n << (n == 1 ? " error\n" : " errors\n");
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << prefix << "error: out of memory (an allocation of the command failed; smaller sizes may fit)\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << prefix << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(std::cerr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "help" || name == "--help" || name == "-h") {
    if (argc < 3) {
      print_usage(std::cout);
      return 0;
    }
    const Command* command = find_command(argv[2]);
    if (command == nullptr) {
      std::cerr << "spikejit help: unknown command '" << argv[2] << "'\n";
      return 2;
    }
    char help_flag[] = "--help";
    char* help_argv[] = {argv[2], help_flag, nullptr};
    return run_command(*command, 2, help_argv);
  }
  const Command* command = find_command(name);
  if (command == nullptr) {
    std::cerr << "spikejit: unknown command '" << name << "'\n\n";
    print_usage(std::cerr);
    return 2;
  }
  return run_command(*command, argc - 1, argv + 1);
}
