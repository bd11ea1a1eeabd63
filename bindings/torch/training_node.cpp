// The autograd node of eager training calls (training_node.h).
#include "training_node.h"

#include <optional>
#include <string>

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>

#include "../bindings.h"
#include "spikejit/buffers.h"
#include "spikejit/cpu.h"
#include "spikejit/cuda.h"
#include "spikejit/error.h"
#include "tensors.h"

namespace nb = nanobind;

namespace spikejit::python {
namespace {

using torch::autograd::variable_list;

struct SecondDerivativeRefused final : torch::autograd::Node {
  std::string name() const override { return "spikejit::SecondDerivativeRefused"; }
  variable_list apply(variable_list&&) override {
    throw std::runtime_error("spikejit's neuron kernels have first derivatives only: a second derivative (a "
                             "gradient of a gradient) cannot run through them. For second and higher derivatives "
                             "with torch.autograd, make the neuron calls inside `with spikejit.double_backward():`");
  }
};

struct TrainingNode final : torch::autograd::Node {
  Program program;
  std::vector<int64_t> seq_shape;
  at::TensorOptions options;
  TrainingCallSpec spec;
  std::vector<torch::autograd::SavedVariable> saved, params;
  std::optional<torch::autograd::SavedVariable> seed;
  at::Tensor workspace;  // the CUDA backward's scratch (undefined where none is needed)

  // A Python object the node keeps alive while it lives (the handle's ActiveReference: the
  // kernels stay registered while a backward may still need them). Released with the GIL.
  PyObject* keep_alive = nullptr;

  TrainingNode(Program p, TrainingCallSpec s) : program(std::move(p)), spec(std::move(s)) {}

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
    for (auto& s : saved) saved_tensors.push_back(s.unpack(ptr));
    for (auto& p : params) param_tensors.push_back(p.unpack(ptr));
    at::Tensor seed_tensor = seed ? seed->unpack(ptr) : at::Tensor();
    // Saved inputs and parameters as the forward read them (strided views in place: read_view).
    std::vector<at::Tensor> read;
    int strided_left = kMaxStridedReads;
    auto read_at = [&](const at::Tensor& t, bool sequence) { return read_view(t, sequence, strided_left, read); };

    const std::vector<int64_t> neuron_shape(seq_shape.begin() + 1, seq_shape.end());
    BackwardBuffers b;
    b.steps = seq_shape[0];
    b.neuron_shape = neuron_shape;
    b.pack_spikes = spec.pack_spikes;
    b.checkpoint_every = spec.checkpoint_every;
    if (spec.checkpoint_every > 0) {
      for (int j = 0; j < spec.num_states; ++j) b.saved.push_back(view_of(saved_tensors[j]));
      for (size_t j = spec.num_states; j < saved_tensors.size(); ++j) {
        b.inputs.push_back(read_at(saved_tensors[j], true));
      }
    } else {
      // Packed or not, each saved value keeps its place in both lists (absent in the other).
      for (size_t j = 0; j < saved_tensors.size(); ++j) {
        const bool packed = !spec.saved_packed.empty() && spec.saved_packed[j];
        b.saved.push_back(packed ? TensorView() : read_at(saved_tensors[j], true));
        if (!spec.saved_packed.empty()) b.packed_saved.push_back(packed ? packed_view_of(saved_tensors[j]) : PackedView());
      }
    }
    for (const at::Tensor& p : param_tensors) b.params.push_back(read_at(p, false));
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
    for (int i = 0; i < spec.num_outputs; ++i) b.grad_outputs.push_back(grad_at(i, true));
    for (int j = 0; j < spec.num_states; ++j) b.grad_final_states.push_back(grad_at(spec.num_outputs + j, false));
    if (spec.store_state_seqs) {
      for (int j = 0; j < spec.num_states; ++j) b.grad_state_seqs.push_back(grad_at(spec.num_outputs + spec.num_states + j, true));
    }

    variable_list results(next_edges().size());
    // A gradient that reaches no result (Program::gradient_flow) is left undefined, as PyTorch
    // leaves it (None), not computed as zeros.
    const std::vector<bool>& differentiable = program.gradient_flow().arguments;
    auto wanted = [&](size_t edge, size_t argument) {
      return task_should_compute_output(edge) && differentiable[argument];
    };
    size_t edge = 0, argument = 0;
    for (int i = 0; i < spec.num_inputs; ++i, ++edge, ++argument) {
      if (wanted(edge, argument)) results[edge] = empty_buffer(seq_shape, options);
      b.grad_inputs.push_back(view_of(results[edge]));
    }
    for (int j = 0; j < spec.num_states; ++j, ++argument) {
      if (!spec.states_given) {
        b.grad_initial_states.emplace_back();
        continue;
      }
      if (wanted(edge, argument)) results[edge] = empty_buffer(neuron_shape, options);
      b.grad_initial_states.push_back(view_of(results[edge]));
      ++edge;
    }
    for (const at::Tensor& p : param_tensors) {
      if (wanted(edge, argument)) results[edge] = at::empty(p.sizes(), p.options());
      b.grad_params.push_back(view_of(results[edge]));
      ++edge, ++argument;
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

}  // namespace

void attach_training_node(const Program& program, const TrainingCallSpec& spec, const std::vector<at::Tensor>& returned,
                          const std::vector<at::Tensor>& differentiable, const std::vector<at::Tensor>& saved,
                          const std::vector<at::Tensor>& params, const at::Tensor& seed, const at::Tensor& workspace,
                          nb::handle keep_alive) {
  auto node = std::shared_ptr<TrainingNode>(new TrainingNode(program, spec), torch::autograd::deleteNode);
  node->keep_alive = keep_alive.inc_ref().ptr();
  node->seq_shape = differentiable.at(0).sizes().vec();
  node->options = differentiable.at(0).options();
  node->workspace = workspace;
  node->set_next_edges(torch::autograd::collect_next_edges(differentiable));
  try {  // (saving runs the saved-tensor hooks: torch.utils.checkpoint's may raise to stop a recomputation)
    for (const at::Tensor& s : saved) node->saved.emplace_back(s, false);
    for (const at::Tensor& p : params) node->params.emplace_back(p, false);
    if (seed.defined()) node->seed.emplace(seed, false);
  } catch (python_error& e) {  // PyTorch's wrapper of a Python exception: raised as itself
    e.restore();
    throw nb::python_error();
  }
  // A value that carries no gradient from the arguments that require grad is returned without
  // requires_grad (as PyTorch returns a comparison); its gradient arrives undefined, read as zero.
  std::vector<bool> requiring;
  size_t k = 0;
  for (int i = 0; i < spec.num_inputs; ++i) requiring.push_back(differentiable[k++].requires_grad());
  for (int j = 0; j < spec.num_states; ++j) {  // (none given: zeros, which require none)
    requiring.push_back(spec.states_given && differentiable[k++].requires_grad());
  }
  while (k < differentiable.size()) requiring.push_back(differentiable[k++].requires_grad());
  // (per output, final state, state sequence: the order of `returned`)
  const std::vector<bool> requires_grad = program.gradient_flow().requires_grad(requiring, node->seq_shape.at(0));
  for (size_t i = 0; i < returned.size(); ++i) {
    if (!requires_grad[i]) {
      node->add_input_metadata(torch::autograd::Node::undefined_input());
      continue;
    }
    const uint32_t nr = node->add_input_metadata(returned[i]);
    torch::autograd::impl::set_gradient_edge(returned[i], {node, nr});
  }
}

}  // namespace spikejit::python
