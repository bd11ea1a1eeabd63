#include "spikejit/error.h"

#include <utility>

namespace spikejit {

ArgumentError::ArgumentError(const std::string& argument, const std::string& expected,
                             const std::string& got)
    : Error("argument '" + argument + "': expected " + expected + ", got " + got),
      argument_(argument) {}

std::string format_diagnostic(const Diagnostic& d) {
  std::string out;
  if (!d.file.empty()) out += d.file + ":";
  if (d.line > 0) out += std::to_string(d.line) + ":" + std::to_string(d.column) + ":";
  if (!out.empty()) out += " ";
  out += "error: " + d.message;
  if (d.line > 0 && !d.source_line.empty()) {
    // Control bytes shown as '?' (one column each, so the caret still lines up): never written
    // raw to a terminal.
    std::string line = d.source_line;
    for (char& c : line) {
      const auto byte = static_cast<unsigned char>(c);
      if ((byte < 0x20 && c != '\t') || byte == 0x7f) c = '?';
    }
    out += "\n  " + line + "\n  ";
    // Keep tabs so the caret lines up with the source line as a terminal shows it.
    for (int i = 0; i + 1 < d.column && i < static_cast<int>(d.source_line.size()); ++i)
      out += d.source_line[i] == '\t' ? '\t' : ' ';
    out += '^';
  }
  return out;
}

namespace {

std::string join_diagnostics(const std::vector<Diagnostic>& diagnostics) {
  std::string out;
  for (const Diagnostic& d : diagnostics) {
    if (!out.empty()) out += '\n';
    out += format_diagnostic(d);
  }
  return out;
}

}  // namespace

ParseError::ParseError(std::vector<Diagnostic> diagnostics)
    : Error(join_diagnostics(diagnostics)), diagnostics_(std::move(diagnostics)) {}

}  // namespace spikejit
