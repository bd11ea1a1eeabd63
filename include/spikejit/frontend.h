// The neuron text format: parse, canonical print, identity hash. See docs/neuron-format.md.
#pragma once

#include <string>
#include <string_view>

#include "spikejit/ir.h"

namespace spikejit::frontend {

// Parses one neuron. Throws ParseError carrying every diagnostic (file:line:col, line, caret);
// the result is verified.
ir::Neuron parse(std::string_view text, std::string_view file = "<text>");

// The canonical text: stable for the same neuron whatever its whitespace, comments or the order
// of its constant declarations; parse(print(n)) yields a neuron whose print is the same text.
std::string print(const ir::Neuron& n);

// Hex SHA-256 of the canonical text.
std::string hash(const ir::Neuron& n);

// The text of the neuron file at `path`. Throws Error naming the path and why it cannot be read
// (missing, unreadable, a directory).
std::string read_neuron_file(const std::string& path);

}  // namespace spikejit::frontend
