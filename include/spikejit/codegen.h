// CUDA C++ source for the kernel kinds of any neuron. Pure text: never touches CUDA.
//
// Kernel ABI (shared with the runtime): every kernel is
//   extern "C" __global__ void <entry>(SpikejitArgs args)
// with `struct SpikejitArgs { long long steps; long long neurons; void* buffers[kMaxBuffers]; }`
// passed by value; `KernelSource::buffers` names each slot of `buffers` in order. One thread
// owns `elements_per_thread` neurons and walks the whole time axis; the grid is
// ceil(N / (elements_per_thread * block_size)) blocks of `block_size` threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spikejit/program.h"
#include "spikejit/tensor.h"

namespace spikejit::codegen {

constexpr int kMaxBuffers = 64;

enum class KernelKind : uint8_t { Inference, InferenceFinalState, TrainingForward, Backward };
const char* kernel_kind_name(KernelKind k);  // "inference", "inference_final_state", ...

struct KernelSpec {
  KernelKind kind = KernelKind::Inference;
  DType storage = DType::F32;      // dtype of every sequence, state and parameter buffer
  bool store_state_seqs = false;   // Inference / TrainingForward: also write states[t]
  // Backward: which optional gradients are read (absent ones are zero, not read).
  bool grad_state_seqs = false;
  bool grad_final_states = false;
  std::string key() const;         // stable text, part of cache keys
};

// What one buffer slot holds.
enum class BufferRole : uint8_t {
  Input, InitialState, Param, Output, StateSeq, FinalState, Saved,
  GradOutput, GradStateSeq, GradFinalState, GradInput, GradInitialState, GradParam,
};
struct BufferSlot {
  BufferRole role;
  int index;          // which input / state / output / param / saved value
  bool per_step;      // [T, N] sequence (else [N], or [1] for scalar parameters)
  bool scalar_param;  // a scalar parameter: one element
};

struct KernelSource {
  std::string entry;                // symbol name of the __global__ function
  std::string source;               // complete CUDA C++ translation unit (NVRTC-compilable)
  std::vector<BufferSlot> buffers;  // order of SpikejitArgs::buffers
  int block_size = 256;
  int elements_per_thread = 1;
};

KernelSource generate(const Program& program, const KernelSpec& spec);

}  // namespace spikejit::codegen
