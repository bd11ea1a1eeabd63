// Exceptions thrown by spikejit. The library never aborts or exits on bad input.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace spikejit {

// Base class of every spikejit exception.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed a bad argument: the message names the argument, what was expected and what came.
class ArgumentError : public Error {
 public:
  ArgumentError(const std::string& argument, const std::string& expected, const std::string& got);
  const std::string& argument() const { return argument_; }

 private:
  std::string argument_;
};

// One problem in a neuron definition, located in its source text.
struct Diagnostic {
  std::string file;
  int line = 0;    // 1-based; 0 when the problem has no location
  int column = 0;  // 1-based
  std::string message;
  std::string source_line;  // the text of that line, for the caret display
};

// Renders `file:line:col: error: message`, the source line and a caret under the column.
std::string format_diagnostic(const Diagnostic& d);

// Every problem found in a neuron definition (parse and verification), collected in one throw.
class ParseError : public Error {
 public:
  explicit ParseError(std::vector<Diagnostic> diagnostics);
  const std::vector<Diagnostic>& diagnostics() const { return diagnostics_; }

 private:
  std::vector<Diagnostic> diagnostics_;
};

}  // namespace spikejit
