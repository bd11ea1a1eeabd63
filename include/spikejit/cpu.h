// The CPU executor: runs every kernel kind of any neuron on caller-owned CPU buffers.
// It is also the reference semantics the GPU kernels are checked against.
//
// Sequences are [T, *S] (N = prod(S) neurons), states and per-neuron parameters are [*S],
// scalar parameters are [] or [1]. Storage may be fp32, fp64, fp16 or bf16; arithmetic is fp32
// (fp64 when `compute` says so). Buffers must be contiguous and must not overlap outputs; the
// backward also reads grad_outputs / grad_state_seqs broadcast over T and/or S (stride 0).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spikejit/buffers.h"
#include "spikejit/program.h"

namespace spikejit::cpu {

enum class Compute : uint8_t { Auto /* F64 if any buffer is fp64, else F32 */, F32, F64 };

// Fused steps: a neuron's step compiled to machine code by the host's C++ compiler (once per
// neuron, kept in the disk cache), with the same results, bit for bit, as the interpreted lane
// loops, several times faster. fp32 compute only; fp64 always runs interpreted.
//   Auto: fused for calls of at least 2^20 neuron-steps when a compiler is found and the step
//         is not too large (kFusedMaxInstructions), else interpreted (a compile that fails
//         says why at SPIKEJIT_LOG=warning). SPIKEJIT_CPU_FUSED=0 or 1 turns it into Off or On.
//   On:   always fused; an Error when the step cannot be compiled.
//   Off:  always interpreted.
enum class Fused : uint8_t { Auto, On, Off };

// Calls with fewer neuron-steps than this run interpreted under Fused::Auto: compiling a neuron
// the first time takes about a second, and small calls gain little.
constexpr int64_t kFusedMinWork = int64_t{1} << 20;

// Neurons whose step variants hold more lane instructions than this run interpreted under
// Fused::Auto: the compile takes about 4 ms per instruction (LIF: 65 in 0.6 s; a neuron with
// every op: 893 in 4 s; 5400 took 44 s), longer than a first call should stall.
constexpr int64_t kFusedMaxInstructions = 2048;

struct Options {
  Compute compute = Compute::Auto;
  int threads = 0;  // 0: all hardware threads
  Fused fused = Fused::Auto;
};

void forward(const Program& program, const ForwardBuffers& buffers, const Options& options = {});
void backward(const Program& program, const BackwardBuffers& buffers, const Options& options = {});

// Whether Fused::Auto can fuse here: (true, the compiler and its --version line), or (false, why
// not: SPIKEJIT_CPU_FUSED=0, or no compiler, with what was tried). Compiles nothing; a compiler
// that is found may still fail on a neuron (the warning of Fused::Auto says so).
// `fused` with Auto turned into On or Off by SPIKEJIT_CPU_FUSED=1 or 0 (Auto when it is unset or
// "auto"); throws Error naming the variable for any other value.
Fused resolve_fused(Fused fused);

struct FusedSupport {
  bool available = false;
  std::string detail;
};
FusedSupport fused_support();

// What a call of `program` with `work` neuron-steps stored in `dtype` runs under `fused`: (true,
// the compiler) when the compiled steps, else (false, why not: turned off, float64, below
// kFusedMinWork, or the compile failed, with the compiler's reason). Compiles the steps when the
// call would (so the call then finds them); throws what the call would under Fused::On.
FusedSupport fused_steps_used(const Program& program, Fused fused, DType dtype, int64_t work);

}  // namespace spikejit::cpu
