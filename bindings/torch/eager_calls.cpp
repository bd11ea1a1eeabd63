// Calls on torch tensors in one C++ call each (`infer_eager`, `train_forward`, `train_eager`): the
// forward's buffers, its kernels (on the device's current stream, or PyTorch's intra-op threads)
// and, for eager training, the autograd node (training_node.h). At small sizes a step is bound by its
// host time, most of which the Python path spent (docs/benchmarks.md). The Python layer checks the
// arguments first (TrainingCall's and inference's checks, with their messages); the kernels
// check again. Compiled where PyTorch's headers are found at build time; without them the Python
// path runs every call.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/autograd/functions/utils.h>

#include "../bindings.h"
#include "spikejit/buffers.h"
#include "spikejit/cpu.h"
#include "spikejit/cuda.h"
#include "spikejit/error.h"
#include "spikejit/program.h"
#include "tensors.h"
#include "training_node.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace spikejit::python {
namespace {

using Handles = std::vector<nb::handle>;

// A forward call on torch tensors: its arguments as the core's views (read where they lie, or
// through contiguous copies kept with the call: read_view) and the buffers it writes, made like its
// first input.
struct EagerForward {
  std::vector<at::Tensor> inputs, init_states, params;
  at::Tensor seed;  // undefined unless the program draws random numbers
  at::TensorOptions options;
  std::vector<int64_t> seq_shape, neuron_shape;
  ForwardBuffers buffers;
  std::vector<at::Tensor> read;  // the arguments as read (copies too), alive until the kernels ran
  int strided_left = kMaxStridedReads;

  EagerForward(const Program& program, const Handles& inputs_in, const Handles& init_states_in,
               const Handles& params_in, std::optional<nb::handle> seed_in)
      : inputs(unpack_all(inputs_in)), init_states(unpack_all(init_states_in)), params(unpack_all(params_in)) {
    if (program.uses_random() && seed_in && !seed_in->is_none()) seed = unpack(*seed_in);
    const at::Tensor& x = inputs.at(0);
    if (!x.device().is_cpu() && !x.device().is_cuda())
      throw ArgumentError("inputs[0]", "a tensor on the CPU or a CUDA device", "one on " + x.device().str());
    options = x.options();
    seq_shape = x.sizes().vec();
    neuron_shape.assign(seq_shape.begin() + 1, seq_shape.end());
    buffers.steps = seq_shape[0];
    buffers.neuron_shape = neuron_shape;
    buffers.seed = seed.defined() ? seed.data_ptr() : nullptr;
    for (const at::Tensor& t : inputs) buffers.inputs.push_back(read_view(t, true, strided_left, read));
    for (const at::Tensor& t : init_states) buffers.initial_states.push_back(read_view(t, false, strided_left, read));
    for (const at::Tensor& t : params) buffers.params.push_back(read_view(t, false, strided_left, read));
  }

  at::Tensor new_sequence() const { return empty_buffer(seq_shape, options); }
  at::Tensor new_state() const { return empty_buffer(neuron_shape, options); }
  at::Tensor new_bit_rows() const {
    return empty_buffer({buffers.steps, packed_row_bytes(c10::multiply_integers(neuron_shape))},
                        options.dtype(at::kByte));
  }

  // The outputs' buffers, written by the kernels: [T, *S] values, or uint8 bit rows [T, ceil(N / 8)]
  // where bit i of `packed_outputs` is set.
  std::vector<at::Tensor> new_outputs(const Program& program, int64_t packed_outputs) {
    std::vector<at::Tensor> outputs;
    for (size_t i = 0; i < program.neuron().outputs.size(); ++i) {
      const bool packed = (packed_outputs >> i) & 1;
      outputs.push_back(packed ? new_bit_rows() : new_sequence());
      buffers.outputs.push_back(packed ? TensorView() : view_of(outputs.back()));
      if (packed_outputs != 0) buffers.packed_outputs.push_back(packed ? packed_view_of(outputs.back()) : PackedView());
    }
    return outputs;
  }

  void launch(const Program& program) const {
    const at::Device device = options.device();
    nb::gil_scoped_release release;
    if (device.is_cuda()) {
      const c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device);
      cuda::forward(program, buffers, stream.native_handle(), device.index());
    } else {
      cpu::Options o;
      o.threads = at::get_num_threads();
      cpu::forward(program, buffers, o);
    }
  }
};

// [*outputs, *state_seqs (if stored), *final_states (if asked)]; output i as uint8 bit rows
// [T, ceil(N / 8)] where bit i of `packed_outputs` is set.
std::vector<nb::object> infer_eager(const Program& program, const Handles& inputs, const Handles& init_states,
                                    const Handles& params, std::optional<nb::handle> seed, bool store_state_seqs,
                                    bool final_state, int64_t packed_outputs, bool reverse) {
  EagerForward call(program, inputs, init_states, params, seed);
  ForwardBuffers& b = call.buffers;
  b.reverse = reverse;
  const int num_states = static_cast<int>(program.neuron().states.size());
  std::vector<at::Tensor> results = call.new_outputs(program, packed_outputs);
  for (int j = 0; store_state_seqs && j < num_states; ++j) {
    results.push_back(call.new_sequence());
    b.state_seqs.push_back(view_of(results.back()));
  }
  for (int j = 0; final_state && j < num_states; ++j) {
    results.push_back(call.new_state());
    b.final_states.push_back(view_of(results.back()));
  }
  call.launch(program);
  return wrap_all(results);
}

// A training forward's results: `returned` (outputs, as bit rows where packed, then final states,
// then state sequences if stored), `written` (what it saves: per step the computed saved values,
// bit rows where pack_spikes packs; with checkpoints one per state) and `saved` (what the backward
// reads: per step the saved values with the saved inputs in their places, read where they lie;
// with checkpoints, the checkpoints then the inputs). The buffers follow spikejit::saved_layout.
struct TrainingForward {
  std::vector<at::Tensor> returned, written, saved;
  TrainingCallSpec spec;
};

TrainingForward run_training_forward(const Program& program, EagerForward& call, bool store_state_seqs,
                                     int64_t checkpoint_every, bool pack_spikes, int64_t packed_outputs) {
  ForwardBuffers& b = call.buffers;
  b.checkpoint_every = checkpoint_every;
  b.pack_spikes = pack_spikes;
  TrainingForward f;
  TrainingCallSpec& spec = f.spec;
  spec.num_inputs = static_cast<int>(call.inputs.size());
  spec.num_states = static_cast<int>(program.neuron().states.size());
  spec.num_outputs = static_cast<int>(program.neuron().outputs.size());
  spec.states_given = !call.init_states.empty();
  spec.store_state_seqs = store_state_seqs;
  spec.checkpoint_every = checkpoint_every;
  spec.pack_spikes = pack_spikes;

  f.returned = call.new_outputs(program, packed_outputs);
  auto written = [&](at::Tensor t) {
    f.returned.push_back(std::move(t));
    return view_of(f.returned.back());
  };
  for (int j = 0; j < spec.num_states; ++j) b.final_states.push_back(written(call.new_state()));
  for (int j = 0; store_state_seqs && j < spec.num_states; ++j) b.state_seqs.push_back(written(call.new_sequence()));

  const std::vector<SavedBuffer> layout =
      saved_layout(program, b.steps, call.neuron_shape, dtype_of(call.inputs[0]), checkpoint_every, pack_spikes);
  const bool any_packed = std::any_of(layout.begin(), layout.end(), [](const SavedBuffer& s) { return s.packed; });
  for (const SavedBuffer& s : layout) {
    if (any_packed) spec.saved_packed.push_back(s.packed);
    if (s.input >= 0) {
      f.saved.push_back(call.inputs.at(static_cast<size_t>(s.input)));
      b.saved.emplace_back();
      if (any_packed) b.packed_saved.emplace_back();
      continue;
    }
    f.written.push_back(s.packed ? call.new_bit_rows()
                                 : empty_buffer(s.shape, call.options.dtype(scalar_type_of(s.dtype))));
    f.saved.push_back(f.written.back());
    b.saved.push_back(s.packed ? TensorView() : view_of(f.written.back()));
    if (any_packed) b.packed_saved.push_back(s.packed ? packed_view_of(f.written.back()) : PackedView());
  }
  if (checkpoint_every > 0) f.saved.insert(f.saved.end(), call.inputs.begin(), call.inputs.end());
  call.launch(program);
  return f;
}

// [*outputs, *final_states, *state_seqs (if stored), *written saved values] (TrainingForward), for
// the training op (which hands the saved values to its backward itself).
std::vector<nb::object> train_forward(const Program& program, const Handles& inputs, const Handles& init_states,
                                      const Handles& params, std::optional<nb::handle> seed, bool store_state_seqs,
                                      int64_t checkpoint_every, bool pack_spikes, int64_t packed_outputs) {
  EagerForward call(program, inputs, init_states, params, seed);
  TrainingForward f = run_training_forward(program, call, store_state_seqs, checkpoint_every, pack_spikes,
                                           packed_outputs);
  f.returned.insert(f.returned.end(), f.written.begin(), f.written.end());
  return wrap_all(f.returned);
}

// [*outputs, *final_states, *state_seqs (if stored)], linked to the arguments through a
// TrainingNode where one of them requires a gradient.
std::vector<nb::object> train_eager(const Program& program, const Handles& inputs, const Handles& init_states,
                                    const Handles& params, std::optional<nb::handle> seed, bool store_state_seqs,
                                    int64_t checkpoint_every, bool pack_spikes, nb::handle keep_alive) {
  EagerForward call(program, inputs, init_states, params, seed);
  const TrainingForward f = run_training_forward(program, call, store_state_seqs, checkpoint_every, pack_spikes, 0);
  std::vector<at::Tensor> differentiable = call.inputs;
  differentiable.insert(differentiable.end(), call.init_states.begin(), call.init_states.end());
  differentiable.insert(differentiable.end(), call.params.begin(), call.params.end());
  if (torch::autograd::compute_requires_grad(differentiable)) {  // (grad mode included)
    // The CUDA kernels' scratch for scalar parameters' gradients, from PyTorch's allocator: in a
    // CUDA graph it lives in the graph's pool for every replay (the backend's own must not be captured).
    const int64_t scratch = call.options.device().is_cuda()
                                ? backward_workspace_elements(program, c10::multiply_integers(call.neuron_shape))
                                : 0;
    const at::Tensor workspace = scratch > 0 ? at::empty({scratch}, call.options.dtype(at::kDouble)) : at::Tensor();
    attach_training_node(program, f.spec, f.returned, differentiable, f.saved, call.params, call.seed, workspace,
                         keep_alive);
  }
  return wrap_all(f.returned);
}

}  // namespace

void bind_torch_calls(nb::module_& m) {
  m.def("infer_eager", &infer_eager, "program"_a, "inputs"_a, "init_states"_a, "params"_a, "seed"_a.none(),
        "store_state_seqs"_a, "final_state"_a, "packed_outputs"_a, "reverse"_a = false,
        "Inference on torch tensors: [*outputs, *state_seqs, *final_states] (bit i of packed_outputs: output i "
        "as uint8 bit rows; `reverse`: the steps last to first).");
  m.def("train_forward", &train_forward, "program"_a, "inputs"_a, "init_states"_a, "params"_a, "seed"_a.none(),
        "store_state_seqs"_a, "checkpoint_every"_a, "pack_spikes"_a, "packed_outputs"_a,
        "A training forward on torch tensors without autograd: [*outputs, *final_states, *state_seqs, *saved] "
        "(saved: what the forward writes for the backward).");
  m.def("train_eager", &train_eager, "program"_a, "inputs"_a, "init_states"_a, "params"_a, "seed"_a.none(),
        "store_state_seqs"_a, "checkpoint_every"_a, "pack_spikes"_a, "keep_alive"_a,
        "A training forward on torch tensors whose results are linked to the arguments through an autograd "
        "node that runs spikejit's backward kernels in C++: [*outputs, *final_states, *state_seqs].");
}

}  // namespace spikejit::python
