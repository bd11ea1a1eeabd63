// CUDA C++ source for the kernel kinds of any neuron. Pure text: never touches CUDA.
//
// Kernel ABI (shared with the runtime): every kernel is
//   extern "C" __global__ void <entry>(SpikejitArgs args)
// with `struct SpikejitArgs { long long steps; long long neurons; void* buffers[kMaxBuffers];
// SjReadLayout layouts[L]; }` passed by value, where L is the number of strided slots (no member
// when none) and SjReadLayout is ReadLayout of spikejit/buffers.h (int64 fields, same order);
// `KernelSource::buffers` names each slot of `buffers` in order. One thread
// owns `elements_per_thread` neurons and walks the whole time axis; the grid is
// ceil(N / (elements_per_thread * block_size)) blocks of `block_size` threads (see
// KernelVariant). T and N are only run-time arguments. Every buffer is read or written only when
// its pointer is not null: an absent gradient input reads as zero, an absent written buffer is
// skipped. T = 0 is handled (final states = initial states, grad_initial_states = the final
// gradient or zero, parameter gradients zero); N = 0 must not be launched.
//
// Bit-packed rows (PackedView of spikejit/buffers.h: uint8 [T, ceil(N / 8)]) are written a warp at
// a time: the warp's bits are gathered with ballots and each byte is stored once, by one thread.
// Kernels that write them keep every thread of a warp that has any neuron on the same path over
// the same steps (threads past N run with no neurons, contribute zero bits and write nothing);
// they need the block size to be a multiple of 32, as every variant's is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spikejit/buffers.h"
#include "spikejit/program.h"
#include "spikejit/tensor.h"

namespace spikejit::codegen {

constexpr int kMaxBuffers = 64;

enum class KernelKind : uint8_t { Inference, InferenceFinalState, TrainingForward, Backward };
const char* kernel_kind_name(KernelKind k);  // "inference", "inference_final_state", ...

struct KernelSpec {
  KernelKind kind = KernelKind::Inference;
  DType storage = DType::F32;      // dtype of every sequence, state and parameter buffer
  bool store_state_seqs = false;   // forward kinds: also write states[t]
  bool reverse = false;            // inference kinds: the steps last to first (ForwardBuffers::reverse)
  // Backward: which optional gradients are read (absent ones are zero, not read).
  bool grad_state_seqs = false;
  bool grad_final_states = false;
  // TrainingForward / Backward: 0 saves backward().saved per step (one pass, default). k > 0
  // saves only the states every k steps (O(T/k) memory); Backward then recomputes each segment of
  // k steps from its checkpoint and the inputs, bit for bit like the forward
  // (1 <= k <= kMaxCheckpointEvery of spikejit/buffers.h).
  int checkpoint_every = 0;
  // Backward: grad_outputs / grad_state_seqs that repeat their elements (SequenceLayout: the
  // expanded gradient of `y.sum()`), read in place; index i is output / state i, missing entries
  // are plain sequences.
  std::vector<SequenceLayout> grad_output_layouts;
  std::vector<SequenceLayout> grad_state_seq_layouts;
  // Forward kinds: packed_outputs[i] writes output i as bit-packed rows too (a PackedOutput
  // slot; the Output slot may then be null). Only spike-valued outputs; missing entries false.
  std::vector<bool> packed_outputs;
  // TrainingForward / Backward, per step: the pack_spikes save policy (the plan of
  // Program::backward(true)); its packed saved values are bit-packed rows.
  bool pack_spikes = false;
  // Read-only buffers given as strided views (ReadLayout of spikejit/buffers.h), read element by
  // element through SpikejitArgs::layouts (one per such slot, in slot order): bit i of
  // strided_inputs is input i (forward kinds; Backward with checkpoints), of strided_states
  // initial state i (forward kinds), of strided_params parameter i (per-neuron ones), of
  // strided_saved saved value i (Backward, per step). At most kMaxStridedReads in all.
  uint64_t strided_inputs = 0, strided_states = 0, strided_params = 0, strided_saved = 0;
  std::string key() const;         // stable text, part of cache keys (only the fields that apply)
};

// What one buffer slot holds.
enum class BufferRole : uint8_t {
  Input, InitialState, Param, Output, StateSeq, FinalState, Saved,
  GradOutput, GradStateSeq, GradFinalState, GradInput, GradInitialState, GradParam,
  Workspace,     // Backward with scalar parameters: per-block partial sums, see KernelVariant
  PackedOutput,  // output `index` as bit-packed rows (KernelSpec::packed_outputs)
  Seed,          // the call's uint64 seed (a neuron that draws: forward kinds, checkpointed backward)
};
struct BufferSlot {
  BufferRole role;
  int index;          // which input / state / output / param / saved value
  bool per_step;      // [T, N] sequence (else [N], or [1] for scalar parameters)
  bool scalar_param;  // a scalar parameter: one element
  // Saved in checkpoint mode: state `index` before steps 0, k, 2k, ..., shape [ceil(T/k), N],
  // in the compute dtype (float32; float64 for float64 storage) so that recomputation is exact.
  bool checkpoint = false;
  // GradOutput / GradStateSeq: how the sequence repeats (see KernelSpec); a slot that has one
  // value per step (same_each_neuron) is read element by element, never as a row.
  SequenceLayout layout;
  // Bit-packed rows, uint8 [T, ceil(N / 8)]: PackedOutput slots, and Saved slots of values the
  // pack_spikes policy saves packed.
  bool packed = false;
  // Read through a strided view (KernelSpec::strided_*), element by element.
  bool strided = false;
};
// Whether the kernels access a slot as rows of per-neuron elements (with 16-byte vector accesses
// in the variants that need every such row aligned).
bool accessed_as_rows(const BufferSlot& slot);

// One compiled entry of a KernelSource. All variants of a source share its buffers (same ABI)
// and compute the same results; they differ in how many neurons a thread owns.
struct KernelVariant {
  std::string entry;
  int block_size = 256;
  int elements_per_thread = 1;
  // Backward with scalar parameters: the kernel writes, per scalar parameter j (in declaration
  // order among the scalar ones) and block b, the block's partial sum as a double at
  // workspace[j * blocks(N) + b]; then `reduce_entry` (same arguments, grid = the number of
  // scalar parameters, block = reduce_block_size) adds them in a fixed order and writes
  // grad_params. Empty when there is nothing to reduce. Deterministic: same bits every run.
  std::string reduce_entry;
  int reduce_block_size = 256;
  int scalar_params = 0;

  int64_t blocks(int64_t neurons) const;           // grid size of `entry` (0 for N = 0)
  int64_t workspace_bytes(int64_t neurons) const;  // size of the Workspace buffer (0: none)
};

struct KernelSource {
  std::string entry;                // symbol name of the __global__ function (= variants[0])
  std::string source;               // complete CUDA C++ translation unit (NVRTC-compilable)
  std::vector<BufferSlot> buffers;  // order of SpikejitArgs::buffers
  int block_size = 256;             // of variants[0]
  int elements_per_thread = 1;      // of variants[0]
  // variants[0]: EPT = 16 bytes / element size with 16-byte vector loads where every row is
  // aligned (one uniform test per launch, scalar path otherwise), for large N. variants[1]: one
  // neuron per thread with a deeper prefetch of future steps, for small N (latency-bound).
  std::vector<KernelVariant> variants;
};

KernelSource generate(const Program& program, const KernelSpec& spec);

// The variant to launch for `neurons` on a device with `multiprocessors` SMs: the vector variant
// once it has a warp for every SM scheduler and its rows are aligned (`rows_aligned`: every buffer that is not a
// scalar parameter, checkpoint, workspace or bit-packed starts on 16 bytes; and N % its EPT == 0), else the
// one-neuron-per-thread variant (more threads in flight). The vector variant stays correct on
// unaligned rows, element by element, but slow.
const KernelVariant& pick_variant(const KernelSource& source, int64_t neurons, int multiprocessors,
                                  bool rows_aligned = true);

}  // namespace spikejit::codegen
