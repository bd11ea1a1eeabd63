// A neuron ready to run: its definition, its lowered forward step and its backward step.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "spikejit/ir.h"

namespace spikejit {

class Program {
 public:
  // Parses the neuron text format (throws ParseError with every diagnostic).
  static Program from_text(std::string_view text, std::string_view file = "<text>");
  static Program from_file(const std::string& path);
  explicit Program(ir::Neuron neuron);  // verifies

  const ir::Neuron& neuron() const;
  const ir::Step& forward() const;   // the lowered forward step
  const ir::Step& backward() const;  // derived by autodiff on first use (thread-safe)
  // For each backward().saved value: the index of the input it is, or -1 for a computed value.
  // A saved input's forward buffer may be absent (nothing is written): pass the input sequence
  // itself to the backward, which saves one sequence write per input.
  const std::vector<int>& saved_inputs() const;
  std::string canonical() const;     // canonical text of the neuron
  std::string hash() const;          // hex digest of the canonical text

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace spikejit
