// The neuron files of tests/neurons (neurons made to exercise one feature), read from the source
// tree that SPIKEJIT_SOURCE_DIR names (CTest sets it).
#pragma once

#include <cstdlib>
#include <string>

#include "spikejit/program.h"

namespace spikejit::testing {

inline Program test_neuron(const std::string& stem) {
  const char* dir = std::getenv("SPIKEJIT_SOURCE_DIR");
  return Program::from_file(std::string(dir ? dir : ".") + "/tests/neurons/" + stem + ".sj");
}

}  // namespace spikejit::testing
