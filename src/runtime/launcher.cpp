// spikejit::cuda::forward / backward: validate, pick the kernel, fill its arguments, launch on
// the caller's stream. No synchronisation and no host<->device copies.
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/driver_api.h"
#include "runtime/kernel_cache.h"
#include "runtime/workspace.h"
#include "spikejit/codegen.h"
#include "spikejit/cuda.h"
#include "spikejit/error.h"

namespace spikejit::cuda {
namespace {

using runtime::CUdeviceptr;
using runtime::CUstream;

// The kernel argument, laid out as the generated `struct SpikejitArgs`: a kernel's own struct
// ends after the layouts of its strided slots (the launch copies only that much).
struct SpikejitArgs {
  long long steps;
  long long neurons;
  void* buffers[codegen::kMaxBuffers];
  ReadLayout layouts[kMaxStridedReads];
};
static_assert(sizeof(ReadLayout) == sizeof(long long) * (2 + 2 * kMaxReadDims), "SjReadLayout's fields");

// Bit i: views[i] is present and not contiguous (validate() accepted it as a strided view). A
// kernel has at most kMaxBuffers (64) slots, so that later entries cannot run anyway (plan_kernel
// names the program).
uint64_t strided_mask(const std::vector<TensorView>& views) {
  uint64_t mask = 0;
  for (size_t i = 0; i < views.size() && i < 64; ++i) {
    if (views[i].present && !views[i].is_contiguous()) mask |= uint64_t{1} << i;
  }
  return mask;
}

const TensorView& view_at(const std::vector<TensorView>& views, int index) {
  return views.at(static_cast<size_t>(index));
}

int64_t neuron_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string entry_name(const char* argument, size_t i) {
  return std::string(argument) + "[" + std::to_string(i) + "]";
}

// Every present buffer must have the same dtype, one the GPU kernels store.
DType storage_dtype(std::initializer_list<std::pair<const char*, const std::vector<TensorView>*>> groups) {
  const char* first_name = nullptr;
  size_t first_index = 0;
  DType storage = DType::F32;
  for (const auto& [name, views] : groups) {
    for (size_t i = 0; i < views->size(); ++i) {
      const TensorView& v = (*views)[i];
      if (!v.present) continue;
      // (Named only for an error: a valid launch builds no text.)
      if (v.dtype != DType::F32 && v.dtype != DType::F16 && v.dtype != DType::BF16) {
        throw ArgumentError(entry_name(name, i), "dtype float32, float16 or bfloat16 (the CUDA backend)",
                            v.describe());
      }
      if (!first_name) {
        first_name = name;
        first_index = i;
        storage = v.dtype;
      } else if (v.dtype != storage) {
        throw ArgumentError(entry_name(name, i),
                            std::string("dtype ") + dtype_name(storage) + " like " + first_name +
                                "[" + std::to_string(first_index) + "] (one dtype per call)",
                            v.describe());
      }
    }
  }
  return storage;
}

// Checkpoints hold the kernels' fp32 compute states, whatever the storage dtype.
void check_checkpoints(const std::vector<TensorView>& checkpoints) {
  for (size_t i = 0; i < checkpoints.size(); ++i) {
    if (checkpoints[i].dtype != DType::F32) {
      throw ArgumentError("saved[" + std::to_string(i) + "]",
                          "dtype float32 (checkpoints hold the states in the CUDA kernels' compute dtype)",
                          checkpoints[i].describe());
    }
  }
}

bool any_present(const std::vector<TensorView>& views) {
  for (const TensorView& v : views) {
    if (v.present) return true;
  }
  return false;
}

void* pointer_of(const std::vector<TensorView>& views, int index) {
  if (index < 0 || static_cast<size_t>(index) >= views.size()) return nullptr;
  const TensorView& v = views[static_cast<size_t>(index)];
  return v.present ? v.data : nullptr;
}

int multiprocessors(int device) {
  static std::mutex mutex;
  static std::vector<int> counts;
  std::lock_guard<std::mutex> lock(mutex);
  if (counts.empty()) counts.assign(static_cast<size_t>(runtime::device_count()), 0);
  int& count = counts[static_cast<size_t>(device)];
  if (count == 0) {
    const runtime::DriverApi& api = runtime::driver();
    runtime::CUdevice handle = 0;
    runtime::check_cuda(api.cuDeviceGet(&handle, device), "cuDeviceGet");
    runtime::check_cuda(api.cuDeviceGetAttribute(&count, runtime::kAttrMultiprocessorCount, handle),
                        "cuDeviceGetAttribute");
  }
  return count;
}

void launch(runtime::CUfunction function, int64_t blocks, int threads, CUstream stream,
            SpikejitArgs& args, const Program& program, const std::string& entry) {
  if (blocks <= 0) return;
  if (blocks > 0x7fffffff) {
    throw ArgumentError("neuron_shape", "at most 2^31 - 1 blocks of neurons per launch",
                        std::to_string(args.neurons) + " neurons (" + std::to_string(blocks) +
                            " blocks) for neuron " + program.neuron().name + ", kernel " + entry);
  }
  void* params[] = {&args};
  const runtime::CUresult result = runtime::driver().cuLaunchKernel(
      function, static_cast<unsigned>(blocks), 1, 1, static_cast<unsigned>(threads), 1, 1, 0,
      stream, params, nullptr);
  if (result != runtime::kCudaSuccess) {
    runtime::check_cuda(result, "cuLaunchKernel",
                        "neuron " + program.neuron().name + ", kernel " + entry);
  }
}

// The partial-sum scratch of a backward with scalar parameters: the caller's (validate checked
// it against the bound of every variant), else the stream's own, which a CUDA graph must not
// capture: a later call on the stream may grow it and free the old one.
void* workspace_for(const TensorView& given, int64_t bytes, runtime::CUcontext context, CUstream stream) {
  if (bytes <= 0) return nullptr;
  if (given.present) {
    if (given.numel() * static_cast<int64_t>(sizeof(double)) < bytes) {
      throw Error("internal: workspace of " + given.describe() + " for " + std::to_string(bytes) + " bytes");
    }
    return given.data;
  }
  if (runtime::stream_is_capturing(stream)) {
    throw ArgumentError("workspace",
                        "a caller-owned float64 buffer of backward_workspace_elements(program, N) elements "
                        "while the stream captures a CUDA graph",
                        "none (the stream's own scratch, which later calls may free)");
  }
  return reinterpret_cast<void*>(runtime::stream_workspace(context, stream, static_cast<size_t>(bytes)));
}

// Looks up the kernel, fills SpikejitArgs slot by slot with `pointer_for` (and the layouts of
// strided slots from `view_for`, their views) and launches the variant chosen for N (and its
// reduction when there is one). N > 0; T = 0 only with strided initial states (the kernels pass
// them on). `workspace`: a backward's BackwardBuffers::workspace (absent for a forward).
template <class PointerFor, class ViewFor>
void run(const Program& program, const codegen::KernelSpec& spec, int64_t steps, int64_t neurons,
         void* stream, int device, const TensorView& workspace, PointerFor pointer_for, ViewFor view_for) {
  runtime::ContextGuard guard(device);
  std::shared_ptr<const runtime::LoadedKernel> kernel =
      runtime::kernel_for(program, spec, device, guard.context());
  const codegen::KernelSource& source = kernel->source;
  CUstream cu_stream = static_cast<CUstream>(stream);

  SpikejitArgs args{};
  args.steps = steps;
  args.neurons = neurons;
  bool reduce = false;
  bool rows_aligned = true;  // every per-neuron row on 16 bytes: the vector variant may be used
  size_t layouts = 0;
  for (size_t i = 0; i < source.buffers.size(); ++i) {
    const codegen::BufferSlot& slot = source.buffers[i];
    if (slot.role == codegen::BufferRole::Workspace) continue;  // filled once the variant is known
    args.buffers[i] = pointer_for(slot);
    if (slot.strided && !read_layout(view_for(slot), slot.per_step, &args.layouts[layouts++])) {
      throw Error("internal: no read layout for strided slot " + std::to_string(i));
    }
    if (codegen::accessed_as_rows(slot)) {
      rows_aligned = rows_aligned && reinterpret_cast<uintptr_t>(args.buffers[i]) % 16 == 0;
    }
    reduce = reduce || (slot.role == codegen::BufferRole::GradParam && slot.scalar_param &&
                        args.buffers[i] != nullptr);
  }
  const codegen::KernelVariant& variant =
      codegen::pick_variant(source, neurons, multiprocessors(device), rows_aligned);
  const size_t v = static_cast<size_t>(&variant - source.variants.data());
  for (size_t i = 0; i < source.buffers.size(); ++i) {
    if (source.buffers[i].role != codegen::BufferRole::Workspace) continue;
    args.buffers[i] = workspace_for(workspace, variant.workspace_bytes(neurons), guard.context(), cu_stream);
  }
  launch(kernel->functions[v], variant.blocks(neurons), variant.block_size, cu_stream, args,
         program, variant.entry);
  if (reduce && kernel->reduce_functions[v]) {
    launch(kernel->reduce_functions[v], variant.scalar_params, variant.reduce_block_size, cu_stream,
           args, program, variant.reduce_entry);
  }
}

// T = 0 or N = 0 launches no kernel: the states pass through unchanged, so their gradients do
// too, and parameter gradients (sums over nothing) are zero.
void copy_or_fill(const TensorView* src, const TensorView& dst, double fill, CUstream stream,
                  const char* what) {
  const runtime::DriverApi& api = runtime::driver();
  const CUdeviceptr to = reinterpret_cast<CUdeviceptr>(dst.data);
  const size_t count = static_cast<size_t>(dst.numel());
  if (count == 0) return;
  if (src) {
    runtime::check_cuda(api.cuMemcpyDtoDAsync(to, reinterpret_cast<CUdeviceptr>(src->data),
                                              count * dtype_size(dst.dtype), stream),
                        "cuMemcpyDtoDAsync", what);
  } else if (dst.dtype == DType::F32) {
    const float value = static_cast<float>(fill);
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    runtime::check_cuda(api.cuMemsetD32Async(to, bits, count, stream), "cuMemsetD32Async", what);
  } else {
    const float value = static_cast<float>(fill);
    const uint16_t bits = dst.dtype == DType::F16 ? float_to_half(value) : float_to_bfloat16(value);
    runtime::check_cuda(api.cuMemsetD16Async(to, bits, count, stream), "cuMemsetD16Async", what);
  }
}

const TensorView* present_at(const std::vector<TensorView>& views, size_t i) {
  return i < views.size() && views[i].present ? &views[i] : nullptr;
}

void forward_no_steps(const Program& program, const ForwardBuffers& b, CUstream stream) {
  for (size_t i = 0; i < b.final_states.size(); ++i) {
    if (!b.final_states[i].present) continue;
    copy_or_fill(present_at(b.initial_states, i), b.final_states[i],
                 ir::state_default(program.neuron(), static_cast<int>(i)), stream, "final_states");
  }
}

void backward_no_steps(const BackwardBuffers& b, CUstream stream) {
  for (size_t i = 0; i < b.grad_initial_states.size(); ++i) {
    if (b.grad_initial_states[i].present) {
      copy_or_fill(present_at(b.grad_final_states, i), b.grad_initial_states[i], 0.0, stream,
                   "grad_initial_states");
    }
  }
  for (const TensorView& g : b.grad_params) {
    if (g.present) copy_or_fill(nullptr, g, 0.0, stream, "grad_params");
  }
}

void* packed_pointer_of(const std::vector<PackedView>& views, int index) {
  if (index < 0 || static_cast<size_t>(index) >= views.size()) return nullptr;
  const PackedView& v = views[static_cast<size_t>(index)];
  return v.present ? v.data : nullptr;
}

std::vector<bool> present_flags(const std::vector<PackedView>& views) {
  std::vector<bool> flags;
  for (const PackedView& v : views) flags.push_back(v.present);
  return flags;
}

// The pack_spikes policy needs kernels of its own only where its plan packs a saved value (else
// the plan is the default one: a cut without spike-valued values costs the same under both).
bool packs_saved_spikes(const Program& program, bool pack_spikes) {
  if (!pack_spikes) return false;
  const ir::Step& step = program.backward(true);
  for (size_t i = 0; i < step.saved.size(); ++i) {
    if (step.is_saved_packed(i)) return true;
  }
  return false;
}

// How each present gradient sequence repeats (validate() accepted it as contiguous or broadcast).
std::vector<SequenceLayout> layouts_of(const std::vector<TensorView>& grads) {
  std::vector<SequenceLayout> layouts(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].present) sequence_layout(grads[i], &layouts[i]);
  }
  return layouts;
}

}  // namespace

void forward(const Program& program, const ForwardBuffers& b, void* stream, int device) {
  validate(program, b);
  const bool checkpoints = b.checkpoint_every > 0;
  const std::vector<TensorView> no_views;
  codegen::KernelSpec spec;
  spec.storage = storage_dtype({{"inputs", &b.inputs},
                                {"initial_states", &b.initial_states},
                                {"params", &b.params},
                                {"outputs", &b.outputs},
                                {"state_seqs", &b.state_seqs},
                                {"final_states", &b.final_states},
                                {"saved", checkpoints ? &no_views : &b.saved}});
  if (checkpoints) check_checkpoints(b.saved);
  spec.kind = checkpoints || !b.saved.empty() ? codegen::KernelKind::TrainingForward
              : any_present(b.final_states)   ? codegen::KernelKind::InferenceFinalState
                                              : codegen::KernelKind::Inference;
  spec.store_state_seqs = any_present(b.state_seqs);
  spec.reverse = b.reverse;
  spec.checkpoint_every = static_cast<int>(b.checkpoint_every);
  spec.packed_outputs = present_flags(b.packed_outputs);
  spec.pack_spikes = spec.kind == codegen::KernelKind::TrainingForward && packs_saved_spikes(program, b.pack_spikes);
  spec.strided_inputs = strided_mask(b.inputs);
  spec.strided_states = strided_mask(b.initial_states);
  spec.strided_params = strided_mask(b.params);
  // With no steps the final states are copies of the initial ones, which the kernels make when
  // those are strided views.
  if (neuron_count(b.neuron_shape) == 0 || (b.steps == 0 && spec.strided_states == 0)) {
    runtime::ContextGuard guard(device);
    forward_no_steps(program, b, static_cast<CUstream>(stream));
    return;
  }
  run(program, spec, b.steps, neuron_count(b.neuron_shape), stream, device, TensorView(),
      [&](const codegen::BufferSlot& slot) -> void* {
        switch (slot.role) {
          case codegen::BufferRole::Input: return pointer_of(b.inputs, slot.index);
          case codegen::BufferRole::InitialState:  // absent: the kernels start from the declared default
            return pointer_of(b.initial_states, slot.index);
          case codegen::BufferRole::Param: return pointer_of(b.params, slot.index);
          case codegen::BufferRole::Output: return pointer_of(b.outputs, slot.index);
          case codegen::BufferRole::PackedOutput: return packed_pointer_of(b.packed_outputs, slot.index);
          case codegen::BufferRole::Seed: return const_cast<void*>(b.seed);  // only read
          case codegen::BufferRole::StateSeq: return pointer_of(b.state_seqs, slot.index);
          case codegen::BufferRole::FinalState: return pointer_of(b.final_states, slot.index);
          case codegen::BufferRole::Saved:
            return slot.packed ? packed_pointer_of(b.packed_saved, slot.index) : pointer_of(b.saved, slot.index);
          default:
            throw Error(std::string("internal: forward kernel slot with role ") +
                        std::to_string(static_cast<int>(slot.role)));
        }
      },
      [&](const codegen::BufferSlot& slot) -> const TensorView& {
        return view_at(slot.role == codegen::BufferRole::Input          ? b.inputs
                       : slot.role == codegen::BufferRole::InitialState ? b.initial_states
                                                                        : b.params,
                       slot.index);
      });
}

void backward(const Program& program, const BackwardBuffers& b, void* stream, int device) {
  validate(program, b, /*broadcast_grads=*/true);
  const bool checkpoints = b.checkpoint_every > 0;
  const std::vector<TensorView> no_views;
  codegen::KernelSpec spec;
  spec.kind = codegen::KernelKind::Backward;
  spec.storage = storage_dtype({{"saved", checkpoints ? &no_views : &b.saved},
                                {"inputs", &b.inputs},
                                {"params", &b.params},
                                {"grad_outputs", &b.grad_outputs},
                                {"grad_state_seqs", &b.grad_state_seqs},
                                {"grad_final_states", &b.grad_final_states},
                                {"grad_inputs", &b.grad_inputs},
                                {"grad_initial_states", &b.grad_initial_states},
                                {"grad_params", &b.grad_params}});
  if (checkpoints) check_checkpoints(b.saved);
  spec.grad_state_seqs = any_present(b.grad_state_seqs);
  spec.grad_final_states = any_present(b.grad_final_states);
  spec.grad_output_layouts = layouts_of(b.grad_outputs);
  spec.grad_state_seq_layouts = layouts_of(b.grad_state_seqs);
  spec.checkpoint_every = static_cast<int>(b.checkpoint_every);
  spec.pack_spikes = packs_saved_spikes(program, b.pack_spikes);
  spec.strided_inputs = strided_mask(b.inputs);
  spec.strided_params = strided_mask(b.params);
  if (!checkpoints) spec.strided_saved = strided_mask(b.saved);
  if (b.steps == 0 || neuron_count(b.neuron_shape) == 0) {
    runtime::ContextGuard guard(device);
    backward_no_steps(b, static_cast<CUstream>(stream));
    return;
  }
  run(program, spec, b.steps, neuron_count(b.neuron_shape), stream, device, b.workspace,
      [&](const codegen::BufferSlot& slot) -> void* {
        switch (slot.role) {
          case codegen::BufferRole::Saved:
            return slot.packed ? packed_pointer_of(b.packed_saved, slot.index) : pointer_of(b.saved, slot.index);
          case codegen::BufferRole::Input: return pointer_of(b.inputs, slot.index);
          case codegen::BufferRole::Param: return pointer_of(b.params, slot.index);
          case codegen::BufferRole::GradOutput: return pointer_of(b.grad_outputs, slot.index);
          case codegen::BufferRole::GradStateSeq: return pointer_of(b.grad_state_seqs, slot.index);
          case codegen::BufferRole::GradFinalState:
            return pointer_of(b.grad_final_states, slot.index);
          case codegen::BufferRole::GradInput: return pointer_of(b.grad_inputs, slot.index);
          case codegen::BufferRole::GradInitialState:
            return pointer_of(b.grad_initial_states, slot.index);
          case codegen::BufferRole::GradParam: return pointer_of(b.grad_params, slot.index);
          case codegen::BufferRole::Seed: return const_cast<void*>(b.seed);  // only read
          default:
            throw Error(std::string("internal: backward kernel slot with role ") +
                        std::to_string(static_cast<int>(slot.role)));
        }
      },
      [&](const codegen::BufferSlot& slot) -> const TensorView& {
        return view_at(slot.role == codegen::BufferRole::Input   ? b.inputs
                       : slot.role == codegen::BufferRole::Saved ? b.saved
                                                                 : b.params,
                       slot.index);
      });
}

}  // namespace spikejit::cuda
