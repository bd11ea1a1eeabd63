// The autograd node of eager training calls, in C++: its backward builds the gradient buffers
// and runs spikejit's backward kernels without Python or the GIL (a Python node's backward is
// most of a small training step's host time, and on CUDA it runs on autograd's device thread).
// The forward stays in Python (TrainingCall.forward: the buffers of the save policy and the
// launch); `attach_training_node` then links the tensors it returns to the differentiable
// arguments through this node. Compiled where PyTorch's headers are found at build time.
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

// An empty contiguous gradient; on the CPU a large one comes from spikejit's CPU pool, as the
// Python path's do (its pages stay mapped from one step to the next).
at::Tensor empty_gradient(at::IntArrayRef shape, const at::TensorOptions& options) {
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
      if (task_should_compute_output(edge)) results[edge] = empty_gradient(seq_shape, options);
      b.grad_inputs.push_back(view_of(results[edge]));
    }
    for (int j = 0; j < num_states; ++j) {
      if (!states_given) {
        b.grad_initial_states.emplace_back();
        continue;
      }
      if (task_should_compute_output(edge)) results[edge] = empty_gradient(neuron_shape, options);
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
// (inputs, given initial states, params) through a TrainingNode that keeps `saved` (what
// TrainingCall.backward reads: per step the saved values with inputs in their places; with
// checkpoints, the checkpoints then the inputs), `params`, `seed`, the backward's `workspace`
// and `keep_alive`.
void attach_training_node(const Program& program, const std::vector<nb::handle>& returned,
                          const std::vector<nb::handle>& differentiable, const std::vector<nb::handle>& saved,
                          const std::vector<nb::handle>& params, std::optional<nb::handle> seed,
                          int num_inputs, int num_states, int num_outputs, bool states_given,
                          bool store_state_seqs, int64_t checkpoint_every, bool pack_spikes,
                          const std::vector<bool>& saved_packed, std::optional<nb::handle> workspace,
                          nb::handle keep_alive) {
  auto node = std::shared_ptr<TrainingNode>(new TrainingNode(program), torch::autograd::deleteNode);
  node->keep_alive = keep_alive.inc_ref().ptr();
  const std::vector<at::Tensor> inputs = unpack_all(differentiable);
  node->seq_shape = inputs.at(0).sizes().vec();
  node->options = inputs.at(0).options();
  node->num_inputs = num_inputs;
  node->num_states = num_states;
  node->num_outputs = num_outputs;
  node->states_given = states_given;
  node->store_state_seqs = store_state_seqs;
  node->checkpoint_every = checkpoint_every;
  node->pack_spikes = pack_spikes;
  node->saved_packed = saved_packed;
  if (workspace && !workspace->is_none()) node->workspace = unpack(*workspace);
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  try {  // (saving runs the saved-tensor hooks: torch.utils.checkpoint's may raise to stop a recomputation)
    for (const at::Tensor& s : unpack_all(saved)) node->saved.emplace_back(s, false);
    for (const at::Tensor& p : unpack_all(params)) node->params.emplace_back(p, false);
    if (seed && !seed->is_none()) node->seed.emplace(unpack(*seed), false);
  } catch (python_error& e) {  // PyTorch's wrapper of a Python exception: raised as itself
    e.restore();
    throw nb::python_error();
  }
  for (const at::Tensor& r : unpack_all(returned)) {
    const uint32_t nr = node->add_input_metadata(r);
    torch::autograd::impl::set_gradient_edge(r, {node, nr});
  }
}

}  // namespace

void bind_torch_autograd(nb::module_& m) {
  m.def("attach_training_node", &attach_training_node, "program"_a, "returned"_a, "differentiable"_a, "saved"_a,
        "params"_a, "seed"_a.none(), "num_inputs"_a, "num_states"_a, "num_outputs"_a, "states_given"_a,
        "store_state_seqs"_a, "checkpoint_every"_a, "pack_spikes"_a, "saved_packed"_a, "workspace"_a.none(),
        "keep_alive"_a,
        "Links a training forward's returned tensors to its differentiable arguments through an autograd "
        "node whose backward runs spikejit's backward kernels in C++.");
}

}  // namespace spikejit::python
