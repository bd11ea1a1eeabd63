// What the CLI commands share: argument parsing, loading a neuron, dtype names.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "spikejit/program.h"
#include "spikejit/tensor.h"

namespace spikejit::cli {

// Bad command-line usage: main prints it with a pointer to --help and exits with 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The arguments of one command (argv[0] is the command's name): positional arguments,
// `--name value` / `--name=value` options (repeatable; the last one wins for value()) and
// `--flag` switches. `--help` / `-h` is always accepted. Anything else throws UsageError.
class Args {
 public:
  Args(int argc, char** argv, const std::vector<std::string>& value_options,
       const std::vector<std::string>& flags = {});

  bool help() const { return help_; }
  const std::vector<std::string>& positional() const { return positional_; }
  // Exactly one positional argument, named `what` in the error when missing or extra.
  const std::string& single_positional(const char* what) const;
  std::optional<std::string> value(const std::string& name) const;
  std::vector<std::string> values(const std::string& name) const;
  bool flag(const std::string& name) const;
  // --name as an integer in [min, max], or `fallback` when absent.
  int64_t integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  // --name as a finite number, or `fallback` when absent.
  double real(const std::string& name, double fallback) const;

 private:
  bool help_ = false;
  std::vector<std::string> positional_;
  std::vector<std::pair<std::string, std::string>> options_;
  std::vector<std::string> flags_;
};

// FILE (a neuron text file) or `builtin:NAME` (if, lif, plif with default options), with
// `NAME=VALUE` constant overrides applied (VALUE: a number, true or false).
Program load_program(const std::string& file, const std::vector<std::string>& overrides = {});

// "float32", "float16", "bfloat16", "float64".
DType parse_dtype(const std::string& text);

// The help text of the options every neuron-loading command accepts.
extern const char* const kNeuronSourceHelp;

}  // namespace spikejit::cli
