// The buffers of one kernel call, for every backend (CPU pointers for spikejit::cpu, device
// pointers for spikejit::cuda). Sequences are [T, *S] (N = prod(S) neurons); states and
// per-neuron parameters are [*S]; scalar parameters are [] or [1].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spikejit/tensor.h"

namespace spikejit {

// The save policy of training (`checkpoint_every` of ForwardBuffers and BackwardBuffers; both
// calls of one training step must use the same value):
//   0 (default)  save per step: `saved` holds one [T, *S] buffer per backward().saved value, in
//                the storage dtype; the backward is one pass.
//   k (1..kMaxCheckpointEvery)  checkpoints: `saved` holds one [ceil(T/k), *S] buffer per state,
//                row j the state before step j*k (row 0: the initial state), in the compute
//                dtype (float32, or float64 when computing in float64) so that it is exact. The
//                backward recomputes every segment of k steps from its checkpoint and the
//                inputs, with the forward's own step, and reads the inputs (BackwardBuffers::
//                inputs). Saved memory: O(T/k) states instead of T x backward().saved values.
//                The recomputed values are kept in the compute dtype, never rounded to the
//                storage dtype, so with float16 / bfloat16 storage the gradients may differ
//                from the per-step policy's (which rounds what it stores) by that rounding.
constexpr int kMaxCheckpointEvery = 256;
//
// `pack_spikes` (per step only; both calls the same): spike-valued values (ir::spike_valued:
// spikes, comparisons, 0/1 products, ...) are saved as bits, in `packed_saved`, at 1/16 of the
// cost of a value in the choice of what to save, which may then save spikes that it would
// otherwise recompute (Program::backward(true) is that plan). Gradients equal the default
// policy's bit for bit with float32 / float64 storage; with float16 / bfloat16 the default policy
// may round a value it stores where this one keeps exact spikes.

// Bit-packed spikes of one [T, *S] sequence (N = prod(S) neurons): uint8 [T, ceil(N / 8)]; row t
// holds step t, and neuron n is bit n % 8 (LSB first) of byte n / 8 of its row; the unused high
// bits of a row's last byte are zero. For N % 8 == 0 this is exactly bit_spike_compress of the
// [T, *S] sequence (spikejit/compress.h); otherwise every row is padded to whole bytes. Contiguous
// (`strides` in bytes, empty: contiguous). A default-constructed view is absent.
struct PackedView {
  void* data = nullptr;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  bool present = false;

  PackedView() = default;
  PackedView(void* d, std::vector<int64_t> s, std::vector<int64_t> st = {})
      : data(d), shape(std::move(s)), strides(std::move(st)), present(true) {}

  std::string describe() const;  // "uint8[4, 2]"
};

// Bytes of one packed row of N neurons: ceil(N / 8).
int64_t packed_row_bytes(int64_t neurons);

// Inference:                 outputs (+ state_seqs and/or final_states when present).
// Training forward:          the same plus `saved` (see the save policy above; per step, a saved
//                            value that is an input, see Program::saved_inputs(), may be absent
//                            and is then not written: the backward's `saved` entry is the input).
// Any kind writes output i as packed bits too when packed_outputs[i] is present, or only so when
// outputs[i] is absent. Only spike-valued outputs (Program::packable_outputs()) may be packed.
struct ForwardBuffers {
  int64_t steps = 0;                     // T
  std::vector<int64_t> neuron_shape;     // S
  std::vector<TensorView> inputs;        // num_inputs x [T,*S]
  std::vector<TensorView> initial_states;  // empty, or num_states entries; absent -> default
  std::vector<TensorView> params;        // one per parameter declaration
  // num_outputs x [T,*S]; written. Absent only where packed_outputs[i] is present.
  std::vector<TensorView> outputs;
  std::vector<PackedView> packed_outputs;  // empty, or num_outputs entries; present -> written
  std::vector<TensorView> state_seqs;    // empty, or num_states entries; present -> written
  std::vector<TensorView> final_states;  // empty, or num_states entries; present -> written
  // Per step: empty (inference) or backward(pack_spikes).saved.size() entries. Checkpoints:
  // num_states entries (a checkpointed call is always a training forward). Written.
  std::vector<TensorView> saved;
  // pack_spikes: empty when no saved value is packed, else one entry per saved value, present
  // exactly where backward(true).is_saved_packed(i) (and saved[i] is then absent). Written.
  std::vector<PackedView> packed_saved;
  int64_t checkpoint_every = 0;          // the save policy
  bool pack_spikes = false;              // the save policy (per step only)
  // The seed of the neuron's random draws (Program::uses_random; else unused): one uint64 in the
  // call's memory (host memory for the CPU backend, device memory for CUDA, read by the
  // kernels, so that a captured CUDA graph reads each replay's seed). Required when used.
  const void* seed = nullptr;
  // Inference only (no saved values): the steps run last to first. Step T-1 runs first, from the
  // initial states, and step 0 last; each step reads its own row of the inputs and writes its
  // own row of the outputs and state sequences (state_seqs[t]: the states after the step that
  // read inputs[t]); final_states are the states after step 0. The same as a forward call on the
  // sequences reversed in time, with its results reversed back, without copying them. A neuron's
  // draws stay those of each row's index.
  bool reverse = false;
};

struct BackwardBuffers {
  int64_t steps = 0;
  std::vector<int64_t> neuron_shape;
  std::vector<TensorView> saved;              // what the training forward wrote (same policy)
  std::vector<PackedView> packed_saved;       // likewise (pack_spikes)
  bool pack_spikes = false;                   // the save policy
  std::vector<TensorView> inputs;             // checkpoints: the forward's inputs; else empty
  std::vector<TensorView> params;
  std::vector<TensorView> grad_outputs;       // empty or num_outputs; absent -> zero
  std::vector<TensorView> grad_state_seqs;    // empty or num_states; absent -> zero
  std::vector<TensorView> grad_final_states;  // empty or num_states; absent -> zero
  std::vector<TensorView> grad_inputs;        // empty or num_inputs; present -> written
  std::vector<TensorView> grad_initial_states;  // empty or num_states; present -> written
  std::vector<TensorView> grad_params;        // empty or one per parameter; present -> written
  int64_t checkpoint_every = 0;               // the save policy
  // Scratch of the CUDA backend for the partial sums of scalar parameters' gradients: float64
  // [n], contiguous, n >= backward_workspace_elements(program, N); written. Absent: the backend
  // keeps one buffer per stream, grown (and the old one freed) when a call needs more, so a call
  // that a CUDA graph captures must pass its own (absent then is an error). The CPU backend
  // checks it and does not use it.
  TensorView workspace;
  // The forward's seed (ForwardBuffers::seed): required under checkpoints of a neuron that
  // draws random numbers (the recomputation draws them again), unused otherwise.
  const void* seed = nullptr;
};

// The float64 elements of BackwardBuffers::workspace for N neurons: one per scalar parameter per
// kWorkspaceNeuronsPerBlock neurons (rounded up), enough for every kernel variant; 0 without
// scalar parameters.
constexpr int64_t kWorkspaceNeuronsPerBlock = 64;
class Program;
int64_t backward_workspace_elements(const Program& program, int64_t neurons);

// A read-only [T, *S] view whose elements repeat: the same row for every step (stride 0 over T)
// and/or one value for every neuron (stride 0 over every dimension of S), like the expanded
// gradient of `y.sum()` in PyTorch. Row-major contiguous views have both flags false.
struct SequenceLayout {
  bool same_each_step = false;
  bool same_each_neuron = false;
};

// The layout of `v` (a [T, *S] view), or false when it is neither contiguous nor such a broadcast.
bool sequence_layout(const TensorView& v, SequenceLayout* layout);

// Buffers that are only read (inputs, initial_states, per-neuron params, and the backward's inputs
// and per-step saved values) may also be strided views: any non-negative strides, such as a
// per-channel parameter expanded over the neurons (stride 0), a conductance the same for every
// neuron of a channel at each step, an input repeated over T, or a slice. Each kernel reads them
// in place, element by element (contiguous buffers keep their full-row accesses). Limits: at most
// kMaxStridedReads strided buffers in one call, each with at most kMaxReadDims dimensions of S
// once the dimensions that chain (stride of one = size x stride of the next, a broadcast run
// included) are merged and those of size 1 dropped.
constexpr int kMaxReadDims = 4;
constexpr int kMaxStridedReads = 12;

// Where a strided view keeps its elements: element n (row-major over S) of step t is at
// t * step_stride + the sum over d of index_d(n) * strides[d], in elements, with the merged
// dimensions of S innermost first (index_0 = n % sizes[0], and so on). Trivially copyable: the
// CUDA backend passes it to the kernels by value.
struct ReadLayout {
  int64_t step_stride = 0;  // [T, *S] views; 0 for [*S] views
  int64_t dims = 0;
  int64_t sizes[kMaxReadDims] = {};
  int64_t strides[kMaxReadDims] = {};

  int64_t offset(int64_t t, int64_t n) const;
};

// The layout of `v`, a [T, *S] view (`sequence`) or a [*S] one; false when a stride is negative or
// more than kMaxReadDims dimensions of S remain after merging. A contiguous view has one.
bool read_layout(const TensorView& v, bool sequence, ReadLayout* layout);

// Checks every buffer against the program (counts, shapes, dtypes, contiguity or a read layout,
// overlap of written buffers with anything else) and throws ArgumentError naming the first bad
// argument. `broadcast_grads` (both backends read them): grad_outputs and grad_state_seqs may also
// be broadcast views (SequenceLayout); other buffers that are neither read-only nor contiguous
// are rejected.
void validate(const Program& program, const ForwardBuffers& b);
void validate(const Program& program, const BackwardBuffers& b, bool broadcast_grads = false);

// One buffer the backward reads: its shape and dtype, and (per step) the input it is, or -1 when
// the forward computes it. A saved input may be absent in the forward (see Program::saved_inputs).
// `packed`: it goes to packed_saved as uint8 [T, ceil(N / 8)] (`dtype` does not apply).
struct SavedBuffer {
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  int input = -1;
  bool packed = false;
};

// The dtype of checkpoints for a storage dtype: float64 for float64, else float32 (the compute
// dtype of the CUDA kernels and of the CPU executor's automatic choice).
DType checkpoint_dtype(DType storage);

// The "auto" save policy (the Python package's default, checkpoint_every="auto"): checkpoints
// every kAutoCheckpointEvery steps where they were measured to be faster than saving per step and
// keep no more memory (the default saves the least memory), per-step saving (0) elsewhere.
// Faster (H200, docs/benchmarks.md): float32 storage on CUDA with T >= kAutoCheckpointMinSteps
// and N >= kAutoCheckpointMinNeurons, for neurons with one input and one state. No more memory:
// checkpoints keep the inputs alive plus 1/k of each state, so they pay for a neuron that saves
// more than its input per step (PLIF: x and v), not for one that saves a single value (IF and
// LIF: h). Stored state sequences and packed spikes or outputs are per-step policies: 0.
constexpr int64_t kAutoCheckpointEvery = 4;
constexpr int64_t kAutoCheckpointMinSteps = 8;
constexpr int64_t kAutoCheckpointMinNeurons = 65536;

// The auto policy's checkpoint_every for a training call of at least kAutoCheckpointMinSteps x
// kAutoCheckpointMinNeurons (everything but the size; a caller with symbolic sizes compares them
// itself).
int64_t auto_checkpoint_interval(const Program& program, bool on_cuda, DType storage, bool stores_state_seqs,
                                 bool packs_spikes_or_outputs);

// The auto policy's checkpoint_every for one training call of `steps` x `neurons`.
int64_t auto_checkpoint_every(const Program& program, bool on_cuda, DType storage, int64_t steps, int64_t neurons,
                              bool stores_state_seqs, bool packs_spikes_or_outputs);

// What a training forward with this policy writes (and the backward reads), in order: per step,
// backward(pack_spikes).saved.size() x [T, *S] in `storage`, or packed (uint8 [T, ceil(N / 8)],
// in packed_saved) where the policy packs; with checkpoints, num_states x [ceil(T/k), *S] in
// checkpoint_dtype(storage). Throws ArgumentError for a bad T, S or policy.
std::vector<SavedBuffer> saved_layout(const Program& program, int64_t steps,
                                      const std::vector<int64_t>& neuron_shape, DType storage,
                                      int64_t checkpoint_every, bool pack_spikes = false);

}  // namespace spikejit
