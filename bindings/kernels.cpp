// Kernel calls on caller-owned memory. Every buffer is described from Python as
// (data_ptr: int, dtype code: int, shape: list[int], strides: list[int]) or None when an
// optional buffer is absent; empty strides mean contiguous (validation says which buffers may have
// others: read-only ones, see ReadLayout in spikejit/buffers.h, and the backward's broadcast
// sequence gradients). Dtype codes follow
// spikejit::DType: 0 float32, 1 float64, 2 float16, 3 bfloat16. Bit-packed buffers (uint8
// [T, ceil(N / 8)]: `packed_outputs`, `packed_saved`) are (data_ptr, shape, strides) or None. The
// GIL is released while a kernel runs. `checkpoint_every` and `pack_spikes` are the save policy of
// spikejit/buffers.h (0: per step; k: checkpoints, and the backward reads `inputs`). A
// backward's `workspace` is BackwardBuffers::workspace (float64 scratch, or None). `seed` is the
// address of the call's uint64 seed (an int64 tensor's data_ptr, in the call's memory) or None:
// ForwardBuffers::seed and BackwardBuffers::seed, for neurons that draw random numbers.
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "spikejit/buffers.h"
#include "spikejit/cpu.h"
#include "spikejit/cuda.h"
#include "spikejit/error.h"
#include "spikejit/program.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace spikejit::python {
namespace {

using Buffer = std::optional<std::tuple<uintptr_t, int, std::vector<int64_t>, std::vector<int64_t>>>;
using Buffers = std::vector<Buffer>;
using Shape = std::vector<int64_t>;
using PackedBuffers = std::vector<std::optional<std::tuple<uintptr_t, std::vector<int64_t>, std::vector<int64_t>>>>;

// The save policy of a training call, and the seed of its draws.
struct Policy {
  int64_t checkpoint_every = 0;
  bool pack_spikes = false;
  std::optional<uintptr_t> seed;
  bool reverse = false;  // forward: the steps last to first (inference)
};

const void* seed_pointer(const Policy& policy) {
  return policy.seed ? reinterpret_cast<const void*>(*policy.seed) : nullptr;
}

std::vector<PackedView> to_packed_views(const PackedBuffers& buffers) {
  std::vector<PackedView> out;
  for (const auto& b : buffers) {
    if (!b) {
      out.emplace_back();
      continue;
    }
    const auto& [data, shape, strides] = *b;
    out.emplace_back(reinterpret_cast<void*>(data), shape, strides);
  }
  return out;
}

bool is_dtype_code(int code) { return code >= 0 && code <= static_cast<int>(DType::BF16); }

DType dtype_of(int code, const std::string& argument) {
  if (!is_dtype_code(code))
    throw ArgumentError(argument, "a dtype code 0..3 (float32, float64, float16, bfloat16)",
                        std::to_string(code));
  return static_cast<DType>(code);
}

// `index` >= 0 names element `index` of the argument. (The name is built only for an error: a
// launch converts several buffers, at small sizes on the path the host time of a step is made of.)
TensorView to_view(const Buffer& b, const char* argument, int64_t index = -1) {
  if (!b) return TensorView();
  const auto& [data, code, shape, strides] = *b;
  const DType dtype = is_dtype_code(code) ? static_cast<DType>(code)
                      : dtype_of(code, index < 0 ? std::string(argument)
                                                 : std::string(argument) + "[" + std::to_string(index) + "]");
  return TensorView(reinterpret_cast<void*>(data), dtype, shape, strides);
}

std::vector<TensorView> to_views(const Buffers& buffers, const char* argument) {
  std::vector<TensorView> out;
  out.reserve(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) out.push_back(to_view(buffers[i], argument, static_cast<int64_t>(i)));
  return out;
}

ForwardBuffers forward_buffers(int64_t steps, const Shape& neuron_shape, const Buffers& inputs,
                               const Buffers& initial_states, const Buffers& params,
                               const Buffers& outputs, const Buffers& state_seqs,
                               const Buffers& final_states, const Buffers& saved,
                               const PackedBuffers& packed_outputs, const PackedBuffers& packed_saved,
                               const Policy& policy) {
  ForwardBuffers b;
  b.steps = steps;
  b.neuron_shape = neuron_shape;
  b.inputs = to_views(inputs, "inputs");
  b.initial_states = to_views(initial_states, "initial_states");
  b.params = to_views(params, "params");
  b.outputs = to_views(outputs, "outputs");
  b.state_seqs = to_views(state_seqs, "state_seqs");
  b.final_states = to_views(final_states, "final_states");
  b.saved = to_views(saved, "saved");
  b.packed_outputs = to_packed_views(packed_outputs);
  b.packed_saved = to_packed_views(packed_saved);
  b.checkpoint_every = policy.checkpoint_every;
  b.pack_spikes = policy.pack_spikes;
  b.seed = seed_pointer(policy);
  b.reverse = policy.reverse;
  return b;
}

BackwardBuffers backward_buffers(int64_t steps, const Shape& neuron_shape, const Buffers& saved,
                                 const PackedBuffers& packed_saved, const Buffers& params,
                                 const Buffers& grad_outputs, const Buffers& grad_state_seqs,
                                 const Buffers& grad_final_states, const Buffers& grad_inputs,
                                 const Buffers& grad_initial_states, const Buffers& grad_params,
                                 const Buffers& inputs, const Buffer& workspace, const Policy& policy) {
  BackwardBuffers b;
  b.steps = steps;
  b.neuron_shape = neuron_shape;
  b.saved = to_views(saved, "saved");
  b.packed_saved = to_packed_views(packed_saved);
  b.pack_spikes = policy.pack_spikes;
  b.params = to_views(params, "params");
  b.grad_outputs = to_views(grad_outputs, "grad_outputs");
  b.grad_state_seqs = to_views(grad_state_seqs, "grad_state_seqs");
  b.grad_final_states = to_views(grad_final_states, "grad_final_states");
  b.grad_inputs = to_views(grad_inputs, "grad_inputs");
  b.grad_initial_states = to_views(grad_initial_states, "grad_initial_states");
  b.grad_params = to_views(grad_params, "grad_params");
  b.inputs = to_views(inputs, "inputs");
  b.workspace = to_view(workspace, "workspace");
  b.checkpoint_every = policy.checkpoint_every;
  b.seed = seed_pointer(policy);
  return b;
}

cpu::Options cpu_options(int threads, const std::string& compute) {
  cpu::Options o;
  o.threads = threads;
  if (compute == "auto") o.compute = cpu::Compute::Auto;
  else if (compute == "float32") o.compute = cpu::Compute::F32;
  else if (compute == "float64") o.compute = cpu::Compute::F64;
  else throw ArgumentError("compute", "'auto', 'float32' or 'float64'", "'" + compute + "'");
  if (threads < 0) throw ArgumentError("threads", "a count >= 0 (0: all hardware threads)", std::to_string(threads));
  return o;
}

void cpu_forward(const Program& program, int64_t steps, const Shape& neuron_shape,
                 const Buffers& inputs, const Buffers& initial_states, const Buffers& params,
                 const Buffers& outputs, const Buffers& state_seqs, const Buffers& final_states,
                 const Buffers& saved, int threads, const std::string& compute,
                 int64_t checkpoint_every, const PackedBuffers& packed_outputs,
                 const PackedBuffers& packed_saved, bool pack_spikes, std::optional<uintptr_t> seed, bool reverse) {
  ForwardBuffers b = forward_buffers(steps, neuron_shape, inputs, initial_states, params, outputs,
                                     state_seqs, final_states, saved, packed_outputs, packed_saved,
                                     {checkpoint_every, pack_spikes, seed, reverse});
  cpu::Options o = cpu_options(threads, compute);
  nb::gil_scoped_release release;
  cpu::forward(program, b, o);
}

void cpu_backward(const Program& program, int64_t steps, const Shape& neuron_shape,
                  const Buffers& saved, const Buffers& params, const Buffers& grad_outputs,
                  const Buffers& grad_state_seqs, const Buffers& grad_final_states,
                  const Buffers& grad_inputs, const Buffers& grad_initial_states,
                  const Buffers& grad_params, int threads, const std::string& compute,
                  const Buffers& inputs, int64_t checkpoint_every, const PackedBuffers& packed_saved,
                  bool pack_spikes, const Buffer& workspace, std::optional<uintptr_t> seed) {
  BackwardBuffers b = backward_buffers(steps, neuron_shape, saved, packed_saved, params, grad_outputs,
                                       grad_state_seqs, grad_final_states, grad_inputs, grad_initial_states,
                                       grad_params, inputs, workspace, {checkpoint_every, pack_spikes, seed});
  cpu::Options o = cpu_options(threads, compute);
  nb::gil_scoped_release release;
  cpu::backward(program, b, o);
}

void cuda_forward(const Program& program, int64_t steps, const Shape& neuron_shape,
                  const Buffers& inputs, const Buffers& initial_states, const Buffers& params,
                  const Buffers& outputs, const Buffers& state_seqs, const Buffers& final_states,
                  const Buffers& saved, uintptr_t stream, int device, int64_t checkpoint_every,
                  const PackedBuffers& packed_outputs, const PackedBuffers& packed_saved, bool pack_spikes,
                  std::optional<uintptr_t> seed, bool reverse) {
  ForwardBuffers b = forward_buffers(steps, neuron_shape, inputs, initial_states, params, outputs,
                                     state_seqs, final_states, saved, packed_outputs, packed_saved,
                                     {checkpoint_every, pack_spikes, seed, reverse});
  nb::gil_scoped_release release;
  cuda::forward(program, b, reinterpret_cast<void*>(stream), device);
}

void cuda_backward(const Program& program, int64_t steps, const Shape& neuron_shape,
                   const Buffers& saved, const Buffers& params, const Buffers& grad_outputs,
                   const Buffers& grad_state_seqs, const Buffers& grad_final_states,
                   const Buffers& grad_inputs, const Buffers& grad_initial_states,
                   const Buffers& grad_params, uintptr_t stream, int device,
                   const Buffers& inputs, int64_t checkpoint_every, const PackedBuffers& packed_saved,
                   bool pack_spikes, const Buffer& workspace, std::optional<uintptr_t> seed) {
  BackwardBuffers b = backward_buffers(steps, neuron_shape, saved, packed_saved, params, grad_outputs,
                                       grad_state_seqs, grad_final_states, grad_inputs, grad_initial_states,
                                       grad_params, inputs, workspace, {checkpoint_every, pack_spikes, seed});
  nb::gil_scoped_release release;
  cuda::backward(program, b, reinterpret_cast<void*>(stream), device);
}

// [(shape, dtype code, input, packed)] of `saved` for this call and policy (spikejit::saved_layout).
std::vector<std::tuple<Shape, int, int, bool>> saved_layout_of(const Program& program, int64_t steps,
                                                               const Shape& neuron_shape, int dtype,
                                                               int64_t checkpoint_every, bool pack_spikes) {
  std::vector<std::tuple<Shape, int, int, bool>> out;
  const DType storage = dtype_of(dtype, "dtype");
  for (const SavedBuffer& b : saved_layout(program, steps, neuron_shape, storage, checkpoint_every, pack_spikes))
    out.emplace_back(b.shape, static_cast<int>(b.dtype), b.input, b.packed);
  return out;
}

}  // namespace

void bind_kernels(nb::module_& m) {
  m.def("cpu_forward", &cpu_forward, "program"_a, "steps"_a, "neuron_shape"_a, "inputs"_a,
        "initial_states"_a, "params"_a, "outputs"_a, "state_seqs"_a, "final_states"_a, "saved"_a,
        "threads"_a = 0, "compute"_a = "auto", "checkpoint_every"_a = 0, "packed_outputs"_a = PackedBuffers(),
        "packed_saved"_a = PackedBuffers(), "pack_spikes"_a = false, "seed"_a = nb::none(), "reverse"_a = false,
        "Inference (saved empty) or training forward on CPU buffers (`reverse`: inference, the steps last to "
        "first).");
  m.def("cpu_backward", &cpu_backward, "program"_a, "steps"_a, "neuron_shape"_a, "saved"_a,
        "params"_a, "grad_outputs"_a, "grad_state_seqs"_a, "grad_final_states"_a, "grad_inputs"_a,
        "grad_initial_states"_a, "grad_params"_a, "threads"_a = 0, "compute"_a = "auto",
        "inputs"_a = Buffers(), "checkpoint_every"_a = 0, "packed_saved"_a = PackedBuffers(),
        "pack_spikes"_a = false, "workspace"_a = nb::none(), "seed"_a = nb::none(),
        "Backward on CPU buffers (checkpoints: also the forward's inputs; `workspace` is checked, "
        "not used).");
  m.def("cuda_forward", &cuda_forward, "program"_a, "steps"_a, "neuron_shape"_a, "inputs"_a,
        "initial_states"_a, "params"_a, "outputs"_a, "state_seqs"_a, "final_states"_a, "saved"_a,
        "stream"_a, "device"_a, "checkpoint_every"_a = 0, "packed_outputs"_a = PackedBuffers(),
        "packed_saved"_a = PackedBuffers(), "pack_spikes"_a = false, "seed"_a = nb::none(), "reverse"_a = false,
        "Inference or training forward on device buffers, launched on `stream` (a CUstream; `reverse`: "
        "inference, the steps last to first).");
  m.def("cuda_backward", &cuda_backward, "program"_a, "steps"_a, "neuron_shape"_a, "saved"_a,
        "params"_a, "grad_outputs"_a, "grad_state_seqs"_a, "grad_final_states"_a, "grad_inputs"_a,
        "grad_initial_states"_a, "grad_params"_a, "stream"_a, "device"_a, "inputs"_a = Buffers(),
        "checkpoint_every"_a = 0, "packed_saved"_a = PackedBuffers(), "pack_spikes"_a = false,
        "workspace"_a = nb::none(), "seed"_a = nb::none(),
        "Backward on device buffers, launched on `stream` (a CUstream); `workspace`: float64 scratch "
        "of backward_workspace_elements elements (None: the stream's own, not while capturing a "
        "CUDA graph).");
  m.def("backward_workspace_elements", &backward_workspace_elements, "program"_a, "neurons"_a,
        "Float64 elements of a backward's `workspace` for N neurons (0: no scalar parameters).");
  m.def("saved_layout", &saved_layout_of, "program"_a, "steps"_a, "neuron_shape"_a, "dtype"_a,
        "checkpoint_every"_a, "pack_spikes"_a = false,
        "[(shape, dtype code, input, packed)] of what the backward reads under the policy (0: per "
        "step, in `dtype`, `input` >= 0 for a saved input the forward does not write, `packed`: "
        "uint8 [T, ceil(N / 8)] bits with pack_spikes; k: one [ceil(T/k), *S] checkpoint per state, "
        "compute dtype, input -1).");
  m.attr("MAX_STRIDED_READS") = kMaxStridedReads;
  m.def(
      "reads_in_place",
      [](const Shape& shape, const Shape& strides, bool sequence) {
        ReadLayout layout;
        return read_layout(TensorView(nullptr, DType::F32, shape, strides), sequence, &layout);
      },
      "shape"_a, "strides"_a, "sequence"_a,
      "Whether the kernels read a read-only buffer of this shape and strides (elements; a [T, *S] "
      "`sequence`, else [*S]) in place: spikejit::read_layout. At most MAX_STRIDED_READS per call.");
  m.attr("MAX_CHECKPOINT_EVERY") = kMaxCheckpointEvery;
  m.attr("AUTO_CHECKPOINT_EVERY") = kAutoCheckpointEvery;
  m.attr("AUTO_CHECKPOINT_MIN_STEPS") = kAutoCheckpointMinSteps;
  m.attr("AUTO_CHECKPOINT_MIN_NEURONS") = kAutoCheckpointMinNeurons;
  m.def(
      "auto_checkpoint_interval",
      [](const Program& program, bool on_cuda, int dtype, bool stores_state_seqs, bool packs) {
        return auto_checkpoint_interval(program, on_cuda, dtype_of(dtype, "dtype"), stores_state_seqs, packs);
      },
      "program"_a, "on_cuda"_a, "dtype"_a, "stores_state_seqs"_a, "packs"_a,
      "The auto save policy's checkpoint_every for a training call of at least AUTO_CHECKPOINT_MIN_STEPS x "
      "AUTO_CHECKPOINT_MIN_NEURONS (spikejit::auto_checkpoint_interval).");
  m.def(
      "cuda_available",
      [] {
        std::string why;
        bool ok = cuda::available(&why);
        return std::make_pair(ok, why);
      },
      "(True, '') when a CUDA driver with a device and an NVRTC library can be opened, else "
      "(False, what was not found and where it looked).");
  m.def(
      "cpu_fused_support",
      [] {
        const cpu::FusedSupport support = cpu::fused_support();
        return std::make_pair(support.available, support.detail);
      },
      "(True, the compiler) when large CPU calls can run the neuron's step compiled by the host C++ "
      "compiler, else (False, why not).");
}

}  // namespace spikejit::python
