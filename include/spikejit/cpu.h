// The CPU executor: runs every kernel kind of any neuron on caller-owned CPU buffers.
// It is also the reference semantics the GPU kernels are checked against.
//
// Sequences are [T, *S] (N = prod(S) neurons), states and per-neuron parameters are [*S],
// scalar parameters are [] or [1]. Storage may be fp32, fp64, fp16 or bf16; arithmetic is fp32
// (fp64 when `compute` says so). Buffers must be contiguous and must not overlap outputs; the
// backward also reads grad_outputs / grad_state_seqs broadcast over T and/or S (stride 0).
#pragma once

#include <cstdint>
#include <vector>

#include "spikejit/buffers.h"
#include "spikejit/program.h"

namespace spikejit::cpu {

enum class Compute : uint8_t { Auto /* F64 if any buffer is fp64, else F32 */, F32, F64 };

struct Options {
  Compute compute = Compute::Auto;
  int threads = 0;  // 0: all hardware threads
};

void forward(const Program& program, const ForwardBuffers& buffers, const Options& options = {});
void backward(const Program& program, const BackwardBuffers& buffers, const Options& options = {});

}  // namespace spikejit::cpu
