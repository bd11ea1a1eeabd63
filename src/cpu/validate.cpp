// Buffer validation shared by every backend: counts, shapes, dtypes, layouts and overlap (bit-
// packed outputs and saved values included); and the layout of `saved` under a save policy (what
// validation expects).
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "spikejit/buffers.h"
#include "spikejit/error.h"
#include "spikejit/program.h"

namespace spikejit {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string tensors_text(size_t n) { return std::to_string(n) + (n == 1 ? " tensor" : " tensors"); }

bool known_dtype(DType d) {
  return d == DType::F32 || d == DType::F64 || d == DType::F16 || d == DType::BF16;
}

// The name of an argument or of one of its entries ("inputs[2]"): text only for an error, so that
// a valid call (many per training step at small sizes, where the host is the limit) builds none.
struct Name {
  const char* argument;
  int64_t index = -1;  // >= 0: the entry

  std::string text() const {
    return index < 0 ? std::string(argument) : std::string(argument) + "[" + std::to_string(index) + "]";
  }
};

// The shape a buffer must have; its wording in messages is expected_text's.
struct ExpectedShape {
  enum class Kind { Sequence, Neuron, Scalar, Packed, Checkpoints };
  Kind kind = Kind::Sequence;
  std::vector<int64_t> shape;
  int64_t detail = 0;  // Packed: N; Checkpoints: k
};

std::string expected_text(const ExpectedShape& e) {
  switch (e.kind) {
    case ExpectedShape::Kind::Sequence: return "[T, *S] = " + shape_text(e.shape);
    case ExpectedShape::Kind::Neuron: return "[*S] = " + shape_text(e.shape);
    case ExpectedShape::Kind::Scalar: return "[] or [1]";
    case ExpectedShape::Kind::Packed:
      return "[T, ceil(N / 8)] = " + shape_text(e.shape) + " (N = " + std::to_string(e.detail) + ")";
    case ExpectedShape::Kind::Checkpoints:
      return "[ceil(T/k), *S] = " + shape_text(e.shape) + " (k = checkpoint_every = " + std::to_string(e.detail) +
             ")";
  }
  return shape_text(e.shape);
}

// How a buffer may lie in memory: contiguous; any ReadLayout (read-only buffers); contiguous or
// repeating its elements (SequenceLayout: sequence gradients).
enum class Access { Contiguous, Strided, Repeating };

class Checker {
 public:
  Checker(int64_t steps, const std::vector<int64_t>& neuron_shape) {
    if (steps < 0) throw ArgumentError("steps", "T >= 0", std::to_string(steps));
    const int64_t max = std::numeric_limits<int64_t>::max();
    int64_t n = 1;
    for (int64_t d : neuron_shape) {
      if (d < 0) throw ArgumentError("neuron_shape", "dimensions >= 0", shape_text(neuron_shape));
      if (d != 0 && n > max / d)
        throw ArgumentError("neuron_shape", "N = prod(S) to fit in int64", shape_text(neuron_shape));
      n *= d;
    }
    // Byte offsets of the widest dtype (8 bytes) must fit in int64 too.
    if (n != 0 && steps > max / 8 / n) {
      throw ArgumentError("steps", "T * N * 8 bytes to fit in int64",
                          "T = " + std::to_string(steps) + ", N = " + std::to_string(n));
    }
    sequence_.shape = {steps};
    sequence_.shape.insert(sequence_.shape.end(), neuron_shape.begin(), neuron_shape.end());
    packed_ = {ExpectedShape::Kind::Packed, {steps, packed_row_bytes(n)}, n};
    neuron_ = {ExpectedShape::Kind::Neuron, neuron_shape, 0};
    scalar_.kind = ExpectedShape::Kind::Scalar;
    steps_ = steps;
  }

  // [ceil(T/k), *S]: the checkpoints of the save policy k > 0.
  ExpectedShape checkpoints(int64_t k) const {
    ExpectedShape e{ExpectedShape::Kind::Checkpoints, neuron_.shape, k};
    e.shape.insert(e.shape.begin(), (steps_ + k - 1) / k);
    return e;
  }

  const ExpectedShape& sequence() const { return sequence_; }
  const ExpectedShape& packed() const { return packed_; }
  const ExpectedShape& neuron() const { return neuron_; }
  const ExpectedShape& param(ir::ParamKind kind) const {
    return kind == ir::ParamKind::Scalar ? scalar_ : neuron_;
  }

  // `allow_empty`: the vector may be empty instead of holding `count` entries.
  template <class View>
  static void count(const char* name, const std::vector<View>& views, size_t count, bool allow_empty,
                    const std::string& what) {
    if (views.size() == count || (allow_empty && views.empty())) return;
    std::string expected = tensors_text(count) + " (" + what + ")";
    if (allow_empty && count != 0) expected = "no tensors or " + expected;
    throw ArgumentError(name, expected, tensors_text(views.size()));
  }

  // Checks one entry; `required`: an absent tensor is an error. `access`: how a read-only
  // buffer may lie (see ReadLayout and SequenceLayout in spikejit/buffers.h).
  void tensor(Name name, const TensorView& v, const ExpectedShape& expected, bool required, bool written,
              Access access = Access::Contiguous) {
    if (!v.present) {
      if (required) throw ArgumentError(name.text(), "a tensor of shape " + expected_text(expected), "no tensor");
      return;
    }
    if (!known_dtype(v.dtype)) {
      throw ArgumentError(name.text(), "dtype float32, float64, float16 or bfloat16",
                          "dtype code " + std::to_string(static_cast<int>(v.dtype)));
    }
    const bool shape_ok = v.shape == expected.shape ||
                          (expected.kind == ExpectedShape::Kind::Scalar && v.shape.size() == 1 && v.shape[0] == 1);
    if (!shape_ok) throw ArgumentError(name.text(), "shape " + expected_text(expected), v.describe());
    int64_t elements = v.numel();
    if (elements != 0 && !v.is_contiguous()) elements = strided_elements(name, v, expected, access);
    add_range(name, v.data, elements * static_cast<int64_t>(dtype_size(v.dtype)), written);
  }

  // The elements a non-contiguous view spans (from its first one), when `access` lets it lie so.
  int64_t strided_elements(Name name, const TensorView& v, const ExpectedShape& expected, Access access) {
    SequenceLayout repeats;
    if (access == Access::Repeating && sequence_layout(v, &repeats)) {
      const int64_t steps = v.shape[0];
      return (repeats.same_each_step ? 1 : steps) * (repeats.same_each_neuron ? 1 : v.numel() / steps);
    }
    ReadLayout layout;
    const bool sequence = expected.kind == ExpectedShape::Kind::Sequence;
    if (access != Access::Strided || !read_layout(v, sequence, &layout)) {
      std::string wanted = "a contiguous tensor";
      if (access == Access::Repeating) wanted += " or one broadcast over T and/or S (stride 0)";
      if (access == Access::Strided) {
        wanted += " or a strided view with non-negative strides whose dimensions of S merge into at most " +
                  std::to_string(kMaxReadDims) + " (kMaxReadDims)";
      }
      throw ArgumentError(name.text(), wanted, v.describe());
    }
    if (++strided_reads_ > kMaxStridedReads) {
      throw ArgumentError(name.text(), "a contiguous tensor: a call reads at most " +
                                           std::to_string(kMaxStridedReads) + " strided views (kMaxStridedReads)",
                          v.describe() + ", strided view number " + std::to_string(strided_reads_));
    }
    const int64_t steps = sequence ? v.shape[0] : 1;
    int64_t last = (steps - 1) * layout.step_stride;
    for (int64_t d = 0; d < layout.dims; ++d) last += (layout.sizes[d] - 1) * layout.strides[d];
    return last + 1;
  }

  // Checks one bit-packed sequence, uint8 [T, ceil(N / 8)], contiguous.
  void packed(Name name, const PackedView& v, bool required, bool written) {
    if (!v.present) {
      if (required) {
        throw ArgumentError(name.text(), "bit-packed spikes, uint8 of shape " + expected_text(packed_), "no tensor");
      }
      return;
    }
    if (v.shape != packed_.shape) {
      throw ArgumentError(name.text(), "bit-packed spikes, uint8 of shape " + expected_text(packed_), v.describe());
    }
    if (!is_contiguous_layout(v.shape, v.strides)) {
      throw ArgumentError(name.text(), "a contiguous tensor", v.describe());
    }
    add_range(name, v.data, shape_numel(v.shape), written);
  }

  // Checks a scratch buffer (written): float64 [n], contiguous, n >= `elements`.
  void scratch(Name name, const TensorView& v, int64_t elements) {
    if (!v.present) return;
    if (v.dtype != DType::F64 || v.shape.size() != 1 || v.shape[0] < elements || !v.is_contiguous()) {
      throw ArgumentError(name.text(), "a contiguous float64 [n] tensor with n >= " + std::to_string(elements) +
                                    " (backward_workspace_elements)", v.describe());
    }
    add_range(name, v.data, v.shape[0] * static_cast<int64_t>(sizeof(double)), true);
  }

  // Written buffers may overlap neither each other nor any buffer that is read.
  void overlaps() const {
    for (size_t i = 0; i < ranges_.size(); ++i) {
      for (size_t j = 0; j < ranges_.size(); ++j) {
        const Range& a = ranges_[i];
        const Range& b = ranges_[j];
        if (i == j || !a.written || (b.written && j < i)) continue;
        if (a.begin < b.end && b.begin < a.end) {
          throw ArgumentError(a.name.text(), "memory that overlaps no other buffer",
                              "memory that overlaps " + b.name.text());
        }
      }
    }
  }

 private:
  void add_range(Name name, const void* data, int64_t bytes, bool written) {
    if (bytes == 0) return;
    if (data == nullptr) throw ArgumentError(name.text(), "a non-null data pointer", "a null pointer");
    const uintptr_t begin = reinterpret_cast<uintptr_t>(data);
    ranges_.push_back({name, begin, begin + static_cast<uintptr_t>(bytes), written});
  }

  struct Range {
    Name name;
    uintptr_t begin, end;
    bool written;
  };
  ExpectedShape sequence_, neuron_, scalar_, packed_;
  int64_t steps_ = 0;
  int strided_reads_ = 0;
  std::vector<Range> ranges_;
};

Name item(const char* name, size_t i) { return {name, static_cast<int64_t>(i)}; }

void each(Checker& c, const char* name, const std::vector<TensorView>& views, const ExpectedShape& shape,
          bool required, bool written, Access access = Access::Contiguous) {
  for (size_t i = 0; i < views.size(); ++i)
    c.tensor(item(name, i), views[i], shape, required, written, access);
}

void each_param(Checker& c, const char* name, const std::vector<TensorView>& views,
                const std::vector<ir::ParamKind>& kinds, bool required, bool written) {
  for (size_t i = 0; i < views.size(); ++i) {
    const bool per_neuron = kinds[i] == ir::ParamKind::PerNeuron;
    c.tensor(item(name, i), views[i], c.param(kinds[i]), required, written,
             per_neuron && !written ? Access::Strided : Access::Contiguous);
  }
}

void check_policy(int64_t checkpoint_every, bool pack_spikes) {
  if (checkpoint_every < 0 || checkpoint_every > kMaxCheckpointEvery) {
    throw ArgumentError("checkpoint_every",
                        "0 (save per step) or a checkpoint interval from 1 to " +
                            std::to_string(kMaxCheckpointEvery),
                        std::to_string(checkpoint_every));
  }
  if (pack_spikes && checkpoint_every > 0) {
    throw ArgumentError("pack_spikes", "false with checkpoints (packed spikes are a per-step policy)",
                        "true with checkpoint_every = " + std::to_string(checkpoint_every));
  }
}

// Per step: saved[i] and packed_saved[i] as the plan of the policy has them. A packed value is in
// packed_saved only; a saved input may be absent in the forward (the backward reads the input).
void each_saved(Checker& c, const Program& program, const std::vector<TensorView>& saved,
                const std::vector<PackedView>& packed_saved, bool pack_spikes, bool forward) {
  const ir::Step& step = program.backward(pack_spikes);
  if (!pack_spikes && !packed_saved.empty()) {
    throw ArgumentError("packed_saved", "no tensors (pack_spikes is false)", tensors_text(packed_saved.size()));
  }
  if (pack_spikes) Checker::count("packed_saved", packed_saved, saved.size(), true, "one per saved value");
  for (size_t i = 0; i < saved.size(); ++i) {
    const Name name = item("saved", i), packed_name = item("packed_saved", i);
    const bool given = i < packed_saved.size() && packed_saved[i].present;
    if (step.is_saved_packed(i)) {
      if (saved[i].present) {
        throw ArgumentError(name.text(), "no tensor (saved value " + std::to_string(i) + " is saved packed, in " +
                                             packed_name.text() + ")", saved[i].describe());
      }
      if (packed_saved.empty()) {
        throw ArgumentError("packed_saved", tensors_text(saved.size()) + " (one per saved value; " +
                                                packed_name.text() + " is saved packed)", "no tensors");
      }
      c.packed(packed_name, packed_saved[i], true, forward);
      continue;
    }
    if (given) {
      throw ArgumentError(packed_name.text(), "no tensor (saved value " + std::to_string(i) +
                                                  " is not spike-valued: " + name.text() + " holds it)",
                          packed_saved[i].describe());
    }
    const bool input = program.saved_inputs(pack_spikes)[i] >= 0;
    const Access access = forward ? Access::Contiguous : Access::Strided;  // (the backward only reads it)
    c.tensor(name, saved[i], c.sequence(), !(forward && input), forward, access);
  }
}

// Outputs: full width and / or packed; packed only where the output is spike-valued.
void each_output(Checker& c, const Program& program, const ForwardBuffers& b) {
  const size_t outputs = b.outputs.size();
  Checker::count("packed_outputs", b.packed_outputs, outputs, true, "one per output");
  for (size_t i = 0; i < outputs; ++i) {
    const bool packed = i < b.packed_outputs.size() && b.packed_outputs[i].present;
    if (packed && !program.packable_outputs()[i]) {
      throw ArgumentError(item("packed_outputs", i).text(),
                          "no tensor: output " + std::to_string(i) + " ('" + program.neuron().outputs[i].name +
                              "') is not spike-valued (spike(), a comparison, float(bool), 0/1 products; "
                              "see ir::spike_valued)",
                          b.packed_outputs[i].describe());
    }
    if (!packed && !b.outputs[i].present) {
      throw ArgumentError(item("outputs", i).text(), "a tensor of shape " + expected_text(c.sequence()) +
                                                         " (or packed_outputs[" +
                                                  std::to_string(i) + "])", "no tensor");
    }
    c.tensor(item("outputs", i), b.outputs[i], c.sequence(), false, true);
    if (packed) c.packed(item("packed_outputs", i), b.packed_outputs[i], true, true);
  }
}

// Checkpoints: one per state, [ceil(T/k), *S], in a compute dtype (exact states).
void each_checkpoint(Checker& c, const std::vector<TensorView>& views, int64_t k, bool written) {
  const ExpectedShape shape = c.checkpoints(k);
  for (size_t i = 0; i < views.size(); ++i) {
    const Name name = item("saved", i);
    c.tensor(name, views[i], shape, true, written);
    if (views[i].dtype != DType::F32 && views[i].dtype != DType::F64) {
      throw ArgumentError(name.text(), "dtype float32 or float64 (checkpoints hold states in the compute dtype)",
                          views[i].describe());
    }
  }
}

// A neuron that draws random numbers needs the call's seed.
void check_seed(const Program& program, const void* seed, const char* why) {
  if (program.uses_random() && seed == nullptr) {
    throw ArgumentError("seed", std::string("the address of the call's 64-bit seed (the neuron draws random numbers "
                                            "with uniform(); ") + why + ")",
                        "none");
  }
}

std::string checkpoint_count_text(int64_t k) {
  return "one checkpoint per state, checkpoint_every = " + std::to_string(k);
}

}  // namespace

bool sequence_layout(const TensorView& v, SequenceLayout* layout) {
  *layout = SequenceLayout();
  if (v.is_contiguous()) return true;
  if (v.shape.empty() || v.strides.size() != v.shape.size()) return false;
  // The neuron dimensions: one value for all, or row-major contiguous (size-1 dimensions ignored).
  bool zero = true;
  for (size_t i = 1; i < v.shape.size(); ++i) zero = zero && (v.shape[i] == 1 || v.strides[i] == 0);
  const TensorView row(v.data, v.dtype, std::vector<int64_t>(v.shape.begin() + 1, v.shape.end()),
                       std::vector<int64_t>(v.strides.begin() + 1, v.strides.end()));
  if (!zero && !row.is_contiguous()) return false;
  layout->same_each_neuron = zero;
  // The time dimension: stride 0, or one row further per step.
  const int64_t row_elements = zero ? 1 : row.numel();
  if (v.shape[0] != 1 && v.strides[0] == 0) {
    layout->same_each_step = true;
  } else if (v.shape[0] != 1 && v.strides[0] != row_elements) {
    return false;
  }
  return true;
}

void validate(const Program& program, const ForwardBuffers& b) {
  const ir::Step& step = program.forward();
  const size_t inputs = step.num_inputs, states = step.num_states, outputs = step.num_outputs;
  Checker c(b.steps, b.neuron_shape);
  Checker::count("inputs", b.inputs, inputs, false, "one per input");
  Checker::count("initial_states", b.initial_states, states, true, "one per state");
  Checker::count("params", b.params, step.params.size(), false, "one per parameter");
  Checker::count("outputs", b.outputs, outputs, false, "one per output");
  Checker::count("state_seqs", b.state_seqs, states, true, "one per state");
  Checker::count("final_states", b.final_states, states, true, "one per state");
  check_policy(b.checkpoint_every, b.pack_spikes);
  check_seed(program, b.seed, "every call draws");
  const bool checkpoints = b.checkpoint_every > 0;
  if (b.reverse && (checkpoints || !b.saved.empty() || !b.packed_saved.empty())) {
    throw ArgumentError("reverse", "an inference call (no saved values, checkpoint_every 0)",
                        "a training forward (" + std::to_string(b.saved.size()) + " saved buffer(s), checkpoint_every " +
                            std::to_string(b.checkpoint_every) + ")");
  }
  if (checkpoints) {
    Checker::count("saved", b.saved, states, false, checkpoint_count_text(b.checkpoint_every));
  } else if (!b.saved.empty()) {
    Checker::count("saved", b.saved, program.backward(b.pack_spikes).saved.size(), true,
                   "one per saved value of the backward step");
  }
  each(c, "inputs", b.inputs, c.sequence(), true, false, Access::Strided);
  each(c, "initial_states", b.initial_states, c.neuron(), false, false, Access::Strided);
  each_param(c, "params", b.params, step.params, true, false);
  each_output(c, program, b);
  each(c, "state_seqs", b.state_seqs, c.sequence(), false, true);
  each(c, "final_states", b.final_states, c.neuron(), false, true);
  if (checkpoints) {
    if (!b.packed_saved.empty()) {
      throw ArgumentError("packed_saved", "no tensors (checkpoints save states)", tensors_text(b.packed_saved.size()));
    }
    each_checkpoint(c, b.saved, b.checkpoint_every, true);
  } else {
    each_saved(c, program, b.saved, b.packed_saved, b.pack_spikes, true);
  }
  c.overlaps();
}

void validate(const Program& program, const BackwardBuffers& b, bool broadcast_grads) {
  const ir::Step& step = program.forward();
  const size_t inputs = step.num_inputs, states = step.num_states, outputs = step.num_outputs;
  Checker c(b.steps, b.neuron_shape);
  check_policy(b.checkpoint_every, b.pack_spikes);
  const bool checkpoints = b.checkpoint_every > 0;
  if (checkpoints) check_seed(program, b.seed, "the recomputation of checkpointed steps draws again");
  if (checkpoints) {
    Checker::count("saved", b.saved, states, false, checkpoint_count_text(b.checkpoint_every));
    Checker::count("inputs", b.inputs, inputs, false, "one per input: checkpoints are recomputed from them");
    if (!b.packed_saved.empty()) {
      throw ArgumentError("packed_saved", "no tensors (checkpoints save states)", tensors_text(b.packed_saved.size()));
    }
  } else {
    Checker::count("saved", b.saved, program.backward(b.pack_spikes).saved.size(), false,
                   "one per saved value of the backward step");
    if (!b.inputs.empty()) {
      throw ArgumentError("inputs",
                          "no tensors (the backward reads the inputs only with checkpoints, "
                          "checkpoint_every > 0)",
                          tensors_text(b.inputs.size()));
    }
  }
  Checker::count("params", b.params, step.params.size(), false, "one per parameter");
  Checker::count("grad_outputs", b.grad_outputs, outputs, true, "one per output");
  Checker::count("grad_state_seqs", b.grad_state_seqs, states, true, "one per state");
  Checker::count("grad_final_states", b.grad_final_states, states, true, "one per state");
  Checker::count("grad_inputs", b.grad_inputs, inputs, true, "one per input");
  Checker::count("grad_initial_states", b.grad_initial_states, states, true, "one per state");
  Checker::count("grad_params", b.grad_params, step.params.size(), true, "one per parameter");
  if (checkpoints) {
    each_checkpoint(c, b.saved, b.checkpoint_every, false);
    each(c, "inputs", b.inputs, c.sequence(), true, false, Access::Strided);
  } else {
    // A saved input (program.saved_inputs()) is the input sequence itself, as the forward read it.
    each_saved(c, program, b.saved, b.packed_saved, b.pack_spikes, false);
  }
  each_param(c, "params", b.params, step.params, true, false);
  const Access grads = broadcast_grads ? Access::Repeating : Access::Contiguous;
  each(c, "grad_outputs", b.grad_outputs, c.sequence(), false, false, grads);
  each(c, "grad_state_seqs", b.grad_state_seqs, c.sequence(), false, false, grads);
  each(c, "grad_final_states", b.grad_final_states, c.neuron(), false, false);
  each(c, "grad_inputs", b.grad_inputs, c.sequence(), false, true);
  each(c, "grad_initial_states", b.grad_initial_states, c.neuron(), false, true);
  each_param(c, "grad_params", b.grad_params, step.params, false, true);
  int64_t neurons = 1;
  for (int64_t d : b.neuron_shape) neurons *= d;  // fits: the Checker checked it
  c.scratch({"workspace"}, b.workspace, backward_workspace_elements(program, neurons));
  c.overlaps();
}

int64_t backward_workspace_elements(const Program& program, int64_t neurons) {
  if (neurons < 0) throw ArgumentError("neurons", "N >= 0", std::to_string(neurons));
  int64_t scalar_params = 0;
  for (ir::ParamKind kind : program.forward().params) scalar_params += kind == ir::ParamKind::Scalar;
  const int64_t blocks = neurons / kWorkspaceNeuronsPerBlock + (neurons % kWorkspaceNeuronsPerBlock != 0);  // no overflow
  return scalar_params * blocks;
}

DType checkpoint_dtype(DType storage) { return storage == DType::F64 ? DType::F64 : DType::F32; }

std::vector<SavedBuffer> saved_layout(const Program& program, int64_t steps,
                                      const std::vector<int64_t>& neuron_shape, DType storage,
                                      int64_t checkpoint_every, bool pack_spikes) {
  const Checker c(steps, neuron_shape);
  check_policy(checkpoint_every, pack_spikes);
  if (!known_dtype(storage)) {
    throw ArgumentError("storage", "dtype float32, float64, float16 or bfloat16",
                        "dtype code " + std::to_string(static_cast<int>(storage)));
  }
  if (checkpoint_every > 0) {
    const SavedBuffer checkpoint{c.checkpoints(checkpoint_every).shape, checkpoint_dtype(storage)};
    return std::vector<SavedBuffer>(static_cast<size_t>(program.forward().num_states), checkpoint);
  }
  const ir::Step& step = program.backward(pack_spikes);
  std::vector<SavedBuffer> out;
  for (size_t i = 0; i < step.saved.size(); ++i) {
    const bool packed = step.is_saved_packed(i);
    out.push_back({packed ? c.packed().shape : c.sequence().shape, storage, program.saved_inputs(pack_spikes)[i], packed});
  }
  return out;
}

}  // namespace spikejit
