// The neuron files of tests/neurons (neurons made to exercise one feature), read from the source
// tree that SPIKEJIT_SOURCE_DIR names (CTest sets it).
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "spikejit/builtins.h"
#include "spikejit/program.h"

namespace spikejit::testing {

inline Program test_neuron(const std::string& stem) {
  const char* dir = std::getenv("SPIKEJIT_SOURCE_DIR");
  return Program::from_file(std::string(dir ? dir : ".") + "/tests/neurons/" + stem + ".sj");
}

struct NamedProgram {
  std::string name;
  Program program;
};

// The built-in neurons (LIF with a soft, detached reset too) and the test neurons that the CPU
// executor's whole-call comparisons run: between them every feature of a step.
inline std::vector<NamedProgram> executor_test_programs() {
  builtins::Options soft;
  soft.v_reset = std::nullopt;
  soft.detach_reset = true;
  soft.decay_input = false;
  std::vector<NamedProgram> out = {{"if", Program(builtins::if_neuron({}))},
                                   {"lif", Program(builtins::lif_neuron({}))},
                                   {"lif_soft_detach", Program(builtins::lif_neuron(soft))},
                                   {"plif", Program(builtins::plif_neuron({}))}};
  for (const char* stem : {"every_op", "noisy_threshold", "ste_lif", "two_thresholds", "mixed_outputs", "invariants"}) {
    out.push_back({stem, test_neuron(stem)});
  }
  return out;
}

}  // namespace spikejit::testing
