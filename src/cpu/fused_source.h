// C++ source for the fused CPU step: a lane program's instructions as one loop over the lanes,
// where the values in between live in registers instead of slots. Pure text; the runtime's host
// compiler turns it into machine code (cpu/fused_steps.h).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cpu/lane_program.h"

namespace spikejit::cpu {

// The symbol of a fused step function: `extern "C" void NAME(float* const* slots, int64_t n)`.
// It reads the program's leaf slots and writes its result slots for lanes [0, n), with the same
// float32 arithmetic as the lane loops (ir/scalar_ops.h), so the results have the same bits.
using FusedStepFn = void (*)(float* const* slots, int64_t n);

// One translation unit defining a function per (symbol, program). It includes the headers of
// host_compile_headers() (runtime/host_compiler.h) and nothing else outside the standard library.
std::string fused_unit_source(const std::vector<std::pair<std::string, const LaneProgram*>>& functions);

}  // namespace spikejit::cpu
