// Assembles one generated translation unit from the steps of a neuron (internal entry point of
// codegen::generate, also used by tests with hand-built steps).
#pragma once

#include <string>

#include "spikejit/codegen.h"
#include "spikejit/ir.h"

namespace spikejit::codegen {

struct NeuronIdentity {
  std::string name;       // the neuron's name
  std::string hash;       // hex digest of its canonical text (entry names use 12 digits)
  std::string canonical;  // canonical text, quoted in a comment at the top ("" to leave out)
  const ir::Neuron* neuron = nullptr;  // its states' defaults; names buffers in that comment
};

// `backward` is needed (non-null) for TrainingForward and Backward.
KernelSource generate_kernel(const ir::Step& forward, const ir::Step* backward,
                             const NeuronIdentity& neuron, const KernelSpec& spec);

}  // namespace spikejit::codegen
