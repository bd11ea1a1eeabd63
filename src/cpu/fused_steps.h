// The fused CPU steps of a program: its lane programs compiled to machine code by the host
// compiler (runtime/host_compiler.h), once per program, through the disk cache. They compute the
// same bits as the interpreted lane loops; the executor picks them by Options::fused.
#pragma once

#include <string>

#include "cpu/fused_source.h"
#include "cpu/lane_program.h"
#include "spikejit/cpu.h"
#include "spikejit/program.h"

namespace spikejit::cpu {

// The fused step of `variant`, or nullptr to interpret: `fused` resolved against the
// SPIKEJIT_CPU_FUSED variable (Auto only), the compute type and the call's `work` (steps x
// neurons). Throws Error when the steps must be fused (Fused::On) and cannot be compiled; under
// Auto a failure is logged once per program as a warning and the program runs interpreted.
FusedStepFn fused_step(const Program& program, LaneVariant variant, Fused fused, bool f64, int64_t work);

}  // namespace spikejit::cpu
