// Eager training calls in C++ (`train_eager`): the forward's buffers and kernels, and an autograd
// node whose backward builds the gradient buffers and runs spikejit's backward kernels without
// Python or the GIL. At small sizes a training step is bound by its host time, most of which a
// Python forward and node spent (docs/benchmarks.md). The Python layer checks the arguments first
// (TrainingCall's checks, with its messages). Compiled where PyTorch's headers are found at build
// time; without them the Python path (ops._Training) runs every call.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/saved_variable.h>

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

using torch::autograd::variable_list;

DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::F32;
    case at::kDouble: return DType::F64;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    default: throw ArgumentError("tensor", "float32, float64, float16 or bfloat16", std::string(t.dtype().name()));
  }
}

TensorView view_of(const at::Tensor& t) {
  if (!t.defined()) return TensorView();
  std::vector<int64_t> strides;
  if (!t.is_contiguous()) strides.assign(t.strides().begin(), t.strides().end());
  return TensorView(t.data_ptr(), dtype_of(t), t.sizes().vec(), strides);
}

PackedView packed_view_of(const at::Tensor& t) {
  return PackedView(t.data_ptr(), t.sizes().vec(), t.is_contiguous() ? std::vector<int64_t>()
                                                                      : t.strides().vec());
}

// An empty contiguous buffer; on the CPU a large one comes from spikejit's CPU pool, as the
// Python path's do (its pages stay mapped from one step to the next).
at::Tensor empty_buffer(at::IntArrayRef shape, const at::TensorOptions& options) {
  const size_t bytes = static_cast<size_t>(c10::multiply_integers(shape)) * options.dtype().itemsize();
  if (!options.device().is_cpu() || bytes < kCpuPoolMinBytes) return at::empty(shape, options);
  void* block = cpu_pool_take(bytes);
  return at::from_blob(block, shape, [bytes](void* data) { cpu_pool_give_back(data, bytes); }, options);
}

at::Tensor unpack(nb::handle h) { return THPVariable_Unpack(h.ptr()); }

std::vector<at::Tensor> unpack_all(const std::vector<nb::handle>& handles) {
  std::vector<at::Tensor> out;
  out.reserve(handles.size());
  for (nb::handle h : handles) out.push_back(h.is_none() ? at::Tensor() : unpack(h));
  return out;
}

struct SecondDerivativeRefused final : torch::autograd::Node {
  std::string name() const override { return "spikejit::SecondDerivativeRefused"; }
  variable_list apply(variable_list&&) override {
    throw std::runtime_error("spikejit's neuron kernels have first derivatives only: a second derivative (a "
                             "gradient of a gradient) cannot run through them");
  }
};

struct TrainingNode final : torch::autograd::Node {
  Program program;
  std::vector<int64_t> seq_shape;
  at::TensorOptions options;
  int num_inputs = 0, num_states = 0, num_outputs = 0;
  bool states_given = false, store_state_seqs = false, pack_spikes = false;
  int64_t checkpoint_every = 0;
  std::vector<bool> saved_packed;
  std::vector<torch::autograd::SavedVariable> saved, params;
  std::optional<torch::autograd::SavedVariable> seed;
  at::Tensor workspace;  // TrainingCall.backward_workspace's scratch (undefined where none is needed)

  // A Python object the node keeps alive while it lives (the handle's ActiveReference: the
  // kernels stay registered while a backward may still need them). Released with the GIL.
  PyObject* keep_alive = nullptr;

  explicit TrainingNode(Program p) : program(std::move(p)) {}

  ~TrainingNode() override {
    if (keep_alive && Py_IsInitialized()) {
      nb::gil_scoped_acquire gil;
      Py_DECREF(keep_alive);
    }
  }

  std::string name() const override { return "spikejit::TrainingBackward"; }

  void release_variables() override {
    for (auto& s : saved) s.reset_data();
    for (auto& p : params) p.reset_data();
    if (seed) seed->reset_data();
    workspace.reset();
  }

  variable_list apply(variable_list&& grads) override {
    const auto ptr = shared_from_this();
    std::vector<at::Tensor> saved_tensors, param_tensors;
    for (auto& s : saved) saved_tensors.push_back(s.unpack(ptr).contiguous());
    for (auto& p : params) param_tensors.push_back(p.unpack(ptr).contiguous());
    at::Tensor seed_tensor = seed ? seed->unpack(ptr) : at::Tensor();

    const std::vector<int64_t> neuron_shape(seq_shape.begin() + 1, seq_shape.end());
    BackwardBuffers b;
    b.steps = seq_shape[0];
    b.neuron_shape = neuron_shape;
    b.pack_spikes = pack_spikes;
    b.checkpoint_every = checkpoint_every;
    if (checkpoint_every > 0) {
      for (int j = 0; j < num_states; ++j) b.saved.push_back(view_of(saved_tensors[j]));
      for (size_t j = num_states; j < saved_tensors.size(); ++j) b.inputs.push_back(view_of(saved_tensors[j]));
    } else {
      // Packed or not, each saved value keeps its place in both lists (absent in the other).
      for (size_t j = 0; j < saved_tensors.size(); ++j) {
        const bool packed = !saved_packed.empty() && saved_packed[j];
        b.saved.push_back(packed ? TensorView() : view_of(saved_tensors[j]));
        if (!saved_packed.empty()) b.packed_saved.push_back(packed ? packed_view_of(saved_tensors[j]) : PackedView());
      }
    }
    for (const at::Tensor& p : param_tensors) b.params.push_back(view_of(p));
    std::vector<at::Tensor> kept;  // gradients copied into the layout the kernels read, alive until they ran
    // A sequence gradient the kernels read as it lies (sequence_layout: contiguous, or the
    // expanded gradient of y.sum()) is not copied; any other layout is.
    auto grad_at = [&](int i, bool sequence) {
      at::Tensor g = grads[static_cast<size_t>(i)];
      SequenceLayout layout;
      if (g.defined() && !(sequence ? sequence_layout(view_of(g), &layout) : g.is_contiguous())) g = g.contiguous();
      kept.push_back(g);
      return view_of(g);
    };
    for (int i = 0; i < num_outputs; ++i) b.grad_outputs.push_back(grad_at(i, true));
    for (int j = 0; j < num_states; ++j) b.grad_final_states.push_back(grad_at(num_outputs + j, false));
    if (store_state_seqs) {
      for (int j = 0; j < num_states; ++j) b.grad_state_seqs.push_back(grad_at(num_outputs + num_states + j, true));
    }

    variable_list results(next_edges().size());
    size_t edge = 0;
    for (int i = 0; i < num_inputs; ++i, ++edge) {
      if (task_should_compute_output(edge)) results[edge] = empty_buffer(seq_shape, options);
      b.grad_inputs.push_back(view_of(results[edge]));
    }
    for (int j = 0; j < num_states; ++j) {
      if (!states_given) {
        b.grad_initial_states.emplace_back();
        continue;
      }
      if (task_should_compute_output(edge)) results[edge] = empty_buffer(neuron_shape, options);
      b.grad_initial_states.push_back(view_of(results[edge]));
      ++edge;
    }
    for (const at::Tensor& p : param_tensors) {
      if (task_should_compute_output(edge)) results[edge] = at::empty(p.sizes(), p.options());
      b.grad_params.push_back(view_of(results[edge]));
      ++edge;
    }
    b.workspace = view_of(workspace);
    b.seed = seed_tensor.defined() ? seed_tensor.data_ptr() : nullptr;
    try {
      if (options.device().is_cuda()) {  // on the stream autograd chose for this node (the forward's)
        const c10::Stream stream =
            c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(options.device());
        cuda::backward(program, b, stream.native_handle(), options.device().index());
      } else {
        cpu::Options o;
        o.threads = at::get_num_threads();
        cpu::backward(program, b, o);
      }
    } catch (const Error&) {  // raised in Python as spikejit's own exception, not the engine's RuntimeError
      nb::gil_scoped_acquire gil;
      set_python_error(std::current_exception());
      python_error error;
      error.persist();
      throw error;
    }
    if (at::GradMode::is_enabled()) refuse_second_derivatives(results, grads);
    return results;
  }

  // create_graph=True: the results behind a node that raises when differentiated, linked to the
  // incoming gradients and to this node's inputs (a second derivative would need the kernels').
  void refuse_second_derivatives(variable_list& results, const variable_list& grads) {
    auto refuse = std::shared_ptr<SecondDerivativeRefused>(new SecondDerivativeRefused(), torch::autograd::deleteNode);
    torch::autograd::edge_list edges = torch::autograd::collect_next_edges(grads);
    for (const torch::autograd::Edge& e : next_edges()) edges.push_back(e);
    refuse->set_next_edges(std::move(edges));
    for (at::Tensor& r : results) {
      if (!r.defined()) continue;
      const uint32_t nr = refuse->add_input_metadata(r);
      torch::autograd::impl::set_gradient_edge(r, {refuse, nr});
    }
  }
};

// Links `returned` (outputs, final states, state sequences, in that order) to `differentiable`
// (inputs, initial states, params) through a TrainingNode that keeps `saved` (what the backward
// reads: per step the saved values with inputs in their places; with checkpoints, the
// checkpoints then the inputs), `params`, `seed`, the backward's `workspace` and `keep_alive`.
void link_training_node(const std::shared_ptr<TrainingNode>& node, const std::vector<at::Tensor>& returned,
                        const std::vector<at::Tensor>& differentiable, const std::vector<at::Tensor>& saved,
                        const std::vector<at::Tensor>& params, const at::Tensor& seed) {
  node->seq_shape = differentiable.at(0).sizes().vec();
  node->options = differentiable.at(0).options();
  node->set_next_edges(torch::autograd::collect_next_edges(differentiable));
  // (Saving runs the saved-tensor hooks: torch.utils.checkpoint's may raise to stop a recomputation.)
  for (const at::Tensor& s : saved) node->saved.emplace_back(s, false);
  for (const at::Tensor& p : params) node->params.emplace_back(p, false);
  if (seed.defined()) node->seed.emplace(seed, false);
  for (const at::Tensor& r : returned) {
    const uint32_t nr = node->add_input_metadata(r);
    torch::autograd::impl::set_gradient_edge(r, {node, nr});
  }
}

std::vector<nb::object> wrap_all(const std::vector<at::Tensor>& tensors) {
  std::vector<nb::object> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) out.push_back(nb::steal(THPVariable_Wrap(t)));
  return out;
}

at::ScalarType scalar_type_of(DType dtype) {
  switch (dtype) {
    case DType::F32: return at::kFloat;
    case DType::F64: return at::kDouble;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
  }
  return at::kFloat;
}

// An eager training call in one C++ call: the forward's buffers (spikejit::saved_layout's for the
// save policy; large CPU ones from the pool), the forward kernels (on the device's current stream,
// or PyTorch's intra-op threads), and the TrainingNode that links the returned tensors (outputs,
// final states, state sequences if stored) to the arguments. The caller checked the arguments
// (TrainingCall's checks: counts, shapes, dtypes, devices, the seed); the kernels check again.
std::vector<nb::object> train_eager(const Program& program, const std::vector<nb::handle>& inputs_in,
                                    const std::vector<nb::handle>& init_states_in,
                                    const std::vector<nb::handle>& params_in, std::optional<nb::handle> seed_in,
                                    bool store_state_seqs, int64_t checkpoint_every, bool pack_spikes,
                                    nb::handle keep_alive) {
  const std::vector<at::Tensor> inputs = unpack_all(inputs_in), init_states = unpack_all(init_states_in),
                                params = unpack_all(params_in);
  const at::Tensor seed = program.uses_random() && seed_in && !seed_in->is_none() ? unpack(*seed_in) : at::Tensor();
  const at::Tensor& x = inputs.at(0);
  const at::Device device = x.device();
  if (!device.is_cpu() && !device.is_cuda())
    throw ArgumentError("device", "a CPU or CUDA tensor", "one on " + device.str());
  const at::TensorOptions options = x.options();
  const std::vector<int64_t> seq_shape = x.sizes().vec();
  const std::vector<int64_t> neuron_shape(seq_shape.begin() + 1, seq_shape.end());
  const int num_states = static_cast<int>(program.neuron().states.size());
  std::vector<at::Tensor> differentiable = inputs;
  differentiable.insert(differentiable.end(), init_states.begin(), init_states.end());
  differentiable.insert(differentiable.end(), params.begin(), params.end());
  const bool needs_node = torch::autograd::compute_requires_grad(differentiable);  // (grad mode included)

  ForwardBuffers b;
  b.steps = seq_shape[0];
  b.neuron_shape = neuron_shape;
  b.checkpoint_every = checkpoint_every;
  b.pack_spikes = pack_spikes;
  b.seed = seed.defined() ? seed.data_ptr() : nullptr;
  std::vector<at::Tensor> read;  // contiguous copies of the arguments, alive until the kernels ran
  auto read_view = [&](const at::Tensor& t) {
    at::AutoGradMode no_grad(false);  // (a contiguous copy of an argument is not part of the graph)
    read.push_back(t.defined() ? t.contiguous() : t);
    return view_of(read.back());
  };
  for (const at::Tensor& t : inputs) b.inputs.push_back(read_view(t));
  for (const at::Tensor& t : init_states) b.initial_states.push_back(read_view(t));
  for (const at::Tensor& t : params) b.params.push_back(read_view(t));

  std::vector<at::Tensor> returned;
  auto written = [&](at::IntArrayRef shape) {
    returned.push_back(empty_buffer(shape, options));
    return view_of(returned.back());
  };
  for (size_t i = 0; i < program.neuron().outputs.size(); ++i) b.outputs.push_back(written(seq_shape));
  for (int j = 0; j < num_states; ++j) b.final_states.push_back(written(neuron_shape));
  if (store_state_seqs) {
    for (int j = 0; j < num_states; ++j) b.state_seqs.push_back(written(seq_shape));
  }

  // What the backward reads, per the save policy: a saved input is read where it lies (the
  // forward does not write it); with checkpoints, the checkpoints and then the inputs.
  const std::vector<SavedBuffer> layout =
      saved_layout(program, b.steps, neuron_shape, dtype_of(x), checkpoint_every, pack_spikes);
  std::vector<bool> saved_packed;
  for (const SavedBuffer& s : layout) saved_packed.push_back(s.packed);
  if (std::find(saved_packed.begin(), saved_packed.end(), true) == saved_packed.end()) saved_packed.clear();
  std::vector<at::Tensor> saved;
  for (size_t i = 0; i < layout.size(); ++i) {
    const SavedBuffer& s = layout[i];
    at::Tensor t;
    if (s.input >= 0) {
      t = inputs.at(static_cast<size_t>(s.input));
    } else if (s.packed) {
      t = empty_buffer(s.shape, options.dtype(at::kByte));
    } else {
      t = empty_buffer(s.shape, options.dtype(scalar_type_of(s.dtype)));
    }
    const bool written_here = s.input < 0;
    b.saved.push_back(written_here && !s.packed ? view_of(t) : TensorView());
    if (!saved_packed.empty()) b.packed_saved.push_back(written_here && s.packed ? packed_view_of(t) : PackedView());
    saved.push_back(t);
  }
  if (checkpoint_every > 0) saved.insert(saved.end(), inputs.begin(), inputs.end());

  {
    nb::gil_scoped_release release;
    if (device.is_cuda()) {
      const c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device);
      cuda::forward(program, b, stream.native_handle(), device.index());
    } else {
      cpu::Options o;
      o.threads = at::get_num_threads();
      cpu::forward(program, b, o);
    }
  }

  if (!needs_node) return wrap_all(returned);

  auto node = std::shared_ptr<TrainingNode>(new TrainingNode(program), torch::autograd::deleteNode);
  node->keep_alive = keep_alive.inc_ref().ptr();
  node->num_inputs = static_cast<int>(inputs.size());
  node->num_states = num_states;
  node->num_outputs = static_cast<int>(program.neuron().outputs.size());
  node->states_given = !init_states.empty();
  node->store_state_seqs = store_state_seqs;
  node->checkpoint_every = checkpoint_every;
  node->pack_spikes = pack_spikes;
  node->saved_packed = saved_packed;
  // The CUDA kernels' scratch for scalar parameters' gradients, from PyTorch's allocator: in a
  // CUDA graph it lives in the graph's pool for every replay (the backend's own must not be captured).
  const int64_t workspace =
      device.is_cuda() ? backward_workspace_elements(program, c10::multiply_integers(neuron_shape)) : 0;
  if (workspace > 0) node->workspace = at::empty({workspace}, options.dtype(at::kDouble));
  try {
    link_training_node(node, returned, differentiable, saved, params, seed);
  } catch (python_error& e) {  // PyTorch's wrapper of a Python exception (a saved-tensor hook's): raised as itself
    e.restore();
    throw nb::python_error();
  }
  return wrap_all(returned);
}

}  // namespace

void bind_torch_autograd(nb::module_& m) {
  m.def("train_eager", &train_eager, "program"_a, "inputs"_a, "init_states"_a, "params"_a, "seed"_a.none(),
        "store_state_seqs"_a, "checkpoint_every"_a, "pack_spikes"_a, "keep_alive"_a,
        "An eager training forward whose results are linked to the arguments through an autograd node "
        "whose backward runs spikejit's backward kernels in C++: [*outputs, *final_states, *state_seqs].");
}

}  // namespace spikejit::python
