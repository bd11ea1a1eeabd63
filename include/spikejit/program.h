// A neuron ready to run: its definition, its lowered forward step and its backward step.
#pragma once

#include <functional>
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
  // Derived by autodiff on first use (thread-safe), for a save policy: `pack_spikes` saves
  // spike-valued values as bits (see spikejit/buffers.h), which may change what is saved.
  const ir::Step& backward(bool pack_spikes = false) const;
  // For each backward(pack_spikes).saved value: the index of the input it is, or -1 for a
  // computed value. A saved input's forward buffer may be absent (nothing is written): pass the
  // input sequence itself to the backward, which saves one sequence write per input.
  const std::vector<int>& saved_inputs(bool pack_spikes = false) const;
  // For each output: true when its value is spike-valued (ir::spike_valued), so that it may be
  // written as packed bits (ForwardBuffers::packed_outputs).
  const std::vector<bool>& packable_outputs() const;
  // Which outputs and states carry a gradient and which inputs, initial states and parameters
  // get one (ir::gradient_flow): the Python package returns the others without requires_grad
  // and gives None as their gradient, as a PyTorch loop of the step does.
  const ir::GradientFlow& gradient_flow() const;
  // True when the neuron draws random numbers (uniform()): its calls need a seed
  // (ForwardBuffers::seed, and BackwardBuffers::seed under checkpoints).
  bool uses_random() const;
  const std::string& canonical() const;  // canonical text of the neuron
  const std::string& hash() const;       // hex digest of the canonical text (on every kernel lookup)

  // A value another part derives from this program (the CPU executor's compiled steps): made by
  // `make` on the first call with this (owner, variant) and kept as long as the program, so
  // that a call does not derive it again (thread-safe). `owner` is the address of something of
  // the deriving part (one tag per part); every call with the same key must ask for the same T.
  // `make` may derive other values of this program (not its own key).
  template <class T, class Make>
  const T& derived(const void* owner, int variant, const Make& make) const {
    return *static_cast<const T*>(
        derived_value(owner, variant, [&]() -> std::shared_ptr<const void> { return std::make_shared<T>(make()); }));
  }

 private:
  const void* derived_value(const void* owner, int variant,
                            const std::function<std::shared_ptr<const void>()>& make) const;

  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace spikejit
