// The CPU executor. Neurons are split into fixed blocks of kBlock lanes (independent of the thread
// count, so every result, scalar parameter gradients included, has the same bits for any number
// of threads). A block keeps its values in lane arrays and runs all T steps before the next block.
// With checkpoints the backward recomputes each segment of k steps with the forward step first.
// Bit-packed rows (outputs, saved spikes) are packed and unpacked per block: a block starts on a
// multiple of 8 lanes, so it owns its bytes of every row.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/parallel.h"
#include "cpu/fused_steps.h"
#include "cpu/lane_bits.h"
#include "cpu/lane_kernels.h"
#include "cpu/lane_program.h"
#include "spikejit/cpu.h"
#include "spikejit/error.h"

namespace spikejit::cpu {
namespace {

constexpr int64_t kBlock = 512;
static_assert(kBlock % 4 == 0, "blocks start where a group of four draws does (ir/random.h)");
static_assert(kBlock % 8 == 0, "packed rows: a block owns whole bytes");
constexpr size_t kAlignBytes = 64;

// Aligned lane arrays for one block: slot k holds kBlock lanes, or points at caller memory for
// the current step (`point`): a leaf read in place, or a result written in place.
template <class F>
class Slots {
 public:
  explicit Slots(int32_t count)
      : storage_(new F[count * kBlock + kAlignBytes / sizeof(F)]), slots_(static_cast<size_t>(count)) {
    const uintptr_t raw = reinterpret_cast<uintptr_t>(storage_.get());
    F* base = reinterpret_cast<F*>((raw + kAlignBytes - 1) / kAlignBytes * kAlignBytes);
    for (int32_t k = 0; k < count; ++k) slots_[k] = base + k * kBlock;
  }
  F* operator[](int32_t slot) const { return slots_[slot]; }
  F* const* pointers() const { return slots_.data(); }
  void point(int32_t slot, F* at) { slots_[slot] = at; }
  void swap(int32_t a, int32_t b) { std::swap(slots_[a], slots_[b]); }

 private:
  std::unique_ptr<F[]> storage_;
  std::vector<F*> slots_;
};

// Element `offset` of `b` when it holds F (no conversion needed), else null.
template <class F>
F* same_type_lanes(const LaneBuffer& b, int64_t offset) {
  const DType want = std::is_same_v<F, double> ? DType::F64 : DType::F32;
  return b.dtype == want ? static_cast<F*>(b.data) + offset : nullptr;
}

// Asks the cache for lanes [offset, offset + n) of the dense sequences in `buffers`, a step
// ahead of their use: one block's row of a step is a few KiB, too short a run for the hardware
// prefetchers to pick up before it ends.
void prefetch_lanes(const std::vector<LaneBuffer>& buffers, int64_t offset, int64_t n) {
  constexpr int64_t kLine = 64;
  for (const LaneBuffer& b : buffers) {
    if (!b.present() || b.same_each_step || b.same_each_neuron || b.strided) continue;
    const int64_t size = static_cast<int64_t>(dtype_size(b.dtype));
    const char* first = static_cast<const char*>(b.data) + offset * size;
    for (int64_t at = 0; at < n * size; at += kLine) __builtin_prefetch(first + at);
  }
}

// A leaf's lanes at `offset`: read in place when the buffer holds F (leaf slots are never
// written), else converted into the slot's own lanes.
template <class F>
void read_leaf(Slots<F>& s, int32_t slot, const LaneBuffer& b, int64_t offset, int64_t n) {
  if (F* at = same_type_lanes<F>(b, offset)) {
    s.point(slot, at);
  } else {
    load_lanes(s[slot], b, offset, n);
  }
}

// A sequence leaf's lanes [start, start + n) of step t: read_leaf's, or gathered from a strided
// view into the slot's own lanes (its slot is then never pointed elsewhere).
template <class F>
void read_step_leaf(Slots<F>& s, int32_t slot, const LaneBuffer& b, int64_t t, int64_t neurons, int64_t start,
                    int64_t n) {
  if (b.strided) {
    load_strided_lanes(s[slot], b, t, start, n);
  } else {
    read_leaf(s, slot, b, t * neurons + start, n);
  }
}

// Lanes [start, start + n) of a [*S] buffer (an initial state, a per-neuron parameter).
template <class F>
void load_neuron_lanes(F* dst, const LaneBuffer& b, int64_t start, int64_t n) {
  if (b.strided) {
    load_strided_lanes(dst, b, 0, start, n);
  } else {
    load_lanes(dst, b, start, n);
  }
}

// The lane buffers of `views`; a present view that is not contiguous is strided (validate()
// accepted its layout where the buffer may be strided).
std::vector<LaneBuffer> lane_buffers(const std::vector<TensorView>& views, size_t count, bool sequences = true) {
  std::vector<LaneBuffer> out(count);
  for (size_t i = 0; i < views.size(); ++i) {
    if (!views[i].present) continue;
    out[i].data = views[i].data;
    out[i].dtype = views[i].dtype;
    if (!views[i].is_contiguous() && views[i].numel() != 0) {
      out[i].strided = read_layout(views[i], sequences, &out[i].layout);
    }
  }
  return out;
}

// Sequence gradients, which may be broadcast views (validated with broadcast_grads).
std::vector<LaneBuffer> sequence_lane_buffers(const std::vector<TensorView>& views, size_t count) {
  std::vector<LaneBuffer> out = lane_buffers(views, count);
  for (size_t i = 0; i < views.size(); ++i) {
    SequenceLayout layout;
    if (views[i].present && sequence_layout(views[i], &layout)) {
      out[i].same_each_step = layout.same_each_step;
      out[i].same_each_neuron = layout.same_each_neuron;
    }
  }
  return out;
}

std::vector<int32_t> slots_of(const LaneProgram& p, const std::vector<ir::ValueId>& ids) {
  std::vector<int32_t> out;
  for (ir::ValueId id : ids) out.push_back(p.node_slot[id]);
  return out;
}

bool any_f64(std::initializer_list<const std::vector<TensorView>*> groups) {
  for (const auto* views : groups) {
    for (const TensorView& v : *views) {
      if (v.present && v.dtype == DType::F64) return true;
    }
  }
  return false;
}

// A state's declared default as a given initial state holds it: stored in the dtype the call
// keeps states in and loaded back, with the conversions of a given state (store_lanes /
// load_lanes), as the CUDA kernels and the Python layer's materialized defaults do. That dtype
// is the first given initial state's, else the first input's, final state's, state sequence's or
// output's (one dtype for every buffer is the usual call).
double stored_default(double value, const ForwardBuffers& b) {
  for (const auto* group : {&b.initial_states, &b.inputs, &b.final_states, &b.state_seqs, &b.outputs}) {
    for (const TensorView& v : *group) {
      if (!v.present) continue;
      alignas(8) unsigned char cell[sizeof(double)];
      LaneBuffer held;
      held.data = cell;
      held.dtype = v.dtype;
      store_lanes(held, 0, &value, 1);
      double loaded = 0;
      load_lanes(&loaded, held, 0, 1);
      return loaded;
    }
  }
  return value;
}

void check_options(const Options& o) {
  if (o.threads < 0)
    throw ArgumentError("options.threads", "0 (all hardware threads) or more", std::to_string(o.threads));
}

bool compute_in_f64(const Options& o, bool any_buffer_f64) {
  return o.compute == Compute::F64 || (o.compute == Compute::Auto && any_buffer_f64);
}

int64_t neuron_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t block_count(int64_t n) { return (n + kBlock - 1) / kBlock; }

// Bit-packed [T, ceil(N / 8)] sequences, one per entry; null where absent.
struct PackedRows {
  std::vector<uint8_t*> data;
  int64_t row_bytes = 0;

  PackedRows(const std::vector<PackedView>& views, size_t count, int64_t neurons)
      : data(count, nullptr), row_bytes(packed_row_bytes(neurons)) {
    for (size_t i = 0; i < views.size(); ++i) {
      if (views[i].present) data[i] = static_cast<uint8_t*>(views[i].data);
    }
  }
  PackedRows() = default;
  // The bytes of block lanes from `start` (a multiple of 8) at step t of entry i.
  uint8_t* at(size_t i, int64_t t, int64_t start) const { return data[i] + t * row_bytes + start / 8; }
};

// Literals, parameters and the invariants computed from them: once per block.
template <class F>
void fill_constants(const LaneProgram& p, const std::vector<LaneBuffer>& params,
                    const std::vector<ir::ParamKind>& kinds, const Slots<F>& s, int64_t start, int64_t n) {
  for (const LaneLiteral& lit : p.literals) fill_lanes(s[lit.slot], static_cast<F>(lit.value), n);
  for (const LaneLeaf& leaf : p.params) {
    F* dst = s[leaf.slot];
    if (kinds[leaf.index] == ir::ParamKind::PerNeuron) {
      load_neuron_lanes(dst, params[leaf.index], start, n);
    } else {
      load_lanes(dst, params[leaf.index], 0, 1);
      fill_lanes(dst, dst[0], n);
    }
  }
  for (const LaneInstr& in : p.invariants)
    run_op_lanes<F>(in.op, s[in.dst], s[in.args[0]], s[in.args[1]], s[in.args[2]], n);
}

// The step's instructions over n lanes: the fused step when there is one (fp32 only), else
// one lane loop per instruction.
template <class F>
void run_instrs(const LaneProgram& p, FusedStepFn fused, const Slots<F>& s, int64_t n) {
  if constexpr (std::is_same_v<F, float>) {
    if (fused) return fused(s.pointers(), n);
  }
  for (const LaneInstr& in : p.instrs)
    run_op_lanes<F>(in.op, s[in.dst], s[in.args[0]], s[in.args[1]], s[in.args[2]], n);
}

// Slots of a forward step: the program's, plus room to stage the next states when needed.
template <class F>
Slots<F> forward_slots(const LaneProgram& p) {
  const int32_t states = static_cast<int32_t>(p.carry_slot.size());
  return Slots<F>(p.num_slots + (p.states_need_staging ? states : 0));
}

// The coordinates of a step's random draws: the call's seed, the step, the block's first neuron.
struct DrawSite {
  uint64_t seed;
  int64_t t, start;
};

// The call's seed when the neuron draws random numbers (validate() checked that there is one).
uint64_t seed_of(const Program& program, const void* seed) {
  return program.uses_random() ? *static_cast<const uint64_t*>(seed) : 0;
}

// One forward step over a block: loads the inputs of the site's step, draws, runs the step, lets `results`
// read the step's values, then moves the next states into the carried slots. The training
// forward and the checkpoint recomputation of the backward both run this, so they agree bit for
// bit (the draws too: they depend only on the site).
template <class F, class Results>
void forward_step(const LaneProgram& p, FusedStepFn fused, const std::vector<LaneBuffer>& inputs,
                  const std::vector<int32_t>& next_state_slots, Slots<F>& s, int64_t neurons, int64_t n,
                  const DrawSite& site, const Results& results) {
  const int32_t states = static_cast<int32_t>(p.carry_slot.size());
  for (const LaneLeaf& leaf : p.step_leaves) {
    read_step_leaf(s, leaf.slot, inputs[leaf.index], site.t, neurons, site.start, n);
  }
  for (const LaneLeaf& draw : p.draws) draw_lanes(s[draw.slot], site.seed, site.t, draw.index, site.start, n);
  run_instrs(p, fused, s, n);
  results();
  if (p.states_need_staging) {
    const int32_t staging = p.num_slots;
    for (int32_t i = 0; i < states; ++i) copy_lanes(s[staging + i], s[next_state_slots[i]], n);
    for (int32_t i = 0; i < states; ++i) copy_lanes(s[p.carry_slot[i]], s[staging + i], n);
  } else {
    for (int32_t i = 0; i < states; ++i) {
      if (p.swap_carry[i]) {
        s.swap(p.carry_slot[i], next_state_slots[i]);
      } else if (next_state_slots[i] != p.carry_slot[i]) {
        copy_lanes(s[p.carry_slot[i]], s[next_state_slots[i]], n);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------

struct ForwardCall {
  const LaneProgram* program = nullptr;
  FusedStepFn fused = nullptr;
  int64_t steps = 0, neurons = 0;
  std::vector<ir::ParamKind> param_kinds;
  std::vector<double> state_defaults;
  std::vector<LaneBuffer> inputs, initial_states, params, outputs, state_seqs, final_states, saved;
  PackedRows packed_outputs, packed_saved;
  std::vector<int32_t> output_slots, next_state_slots, saved_slots;
  // Outputs and saved values the step's instructions write straight into the caller's buffer.
  std::vector<bool> output_in_place, saved_in_place;
  uint64_t seed = 0;                  // of the random draws
  bool reverse = false;               // the steps last to first (inference)
  int64_t checkpoint_every = 0;       // > 0: `checkpoints` instead of `saved`
  std::vector<LaneBuffer> checkpoints;  // per state, [ceil(T/k), N] in the compute type F
};

// Per group of results, which are computed straight into the caller's buffer: those an
// instruction computes into a slot of its own (kept for the whole step, so no other value reuses
// it) whose buffer holds the compute type; a slot that holds two results is written in place for
// the first.
struct ResultGroup {
  const std::vector<ir::ValueId>& nodes;
  const std::vector<LaneBuffer>& buffers;
};
std::vector<std::vector<bool>> in_place_results(const LaneProgram& p, const ir::Step& step, DType compute,
                                                const std::vector<ResultGroup>& groups) {
  std::vector<bool> taken(static_cast<size_t>(p.num_slots), false);
  for (int32_t slot : p.carry_slot) taken[slot] = true;
  std::vector<std::vector<bool>> marks;
  for (const ResultGroup& g : groups) {
    std::vector<bool>& in_place = marks.emplace_back(g.buffers.size(), false);
    for (size_t i = 0; i < g.buffers.size(); ++i) {
      const int32_t slot = p.node_slot[g.nodes[i]];
      if (!g.buffers[i].present() || g.buffers[i].dtype != compute || ir::is_leaf(step.nodes[g.nodes[i]].op) ||
          taken[slot])
        continue;
      taken[slot] = true;
      in_place[i] = true;
    }
  }
  return marks;
}

template <class F>
void forward_block(const ForwardCall& c, int64_t block) {
  const LaneProgram& p = *c.program;
  const int64_t start = block * kBlock, n = std::min(kBlock, c.neurons - start);
  const int32_t states = static_cast<int32_t>(p.carry_slot.size());
  Slots<F> s = forward_slots<F>(p);
  fill_constants(p, c.params, c.param_kinds, s, start, n);
  for (int32_t i = 0; i < states; ++i) {
    if (c.initial_states[i].present()) {
      load_neuron_lanes(s[p.carry_slot[i]], c.initial_states[i], start, n);
    } else {
      fill_lanes(s[p.carry_slot[i]], static_cast<F>(c.state_defaults[i]), n);
    }
  }
  const int64_t first = c.reverse ? c.steps - 1 : 0, step = c.reverse ? -1 : 1;
  for (int64_t k = 0, t = first; k < c.steps; ++k, t += step) {
    const int64_t row = t * c.neurons + start;
    if (k + 1 < c.steps) {
      for (const auto* buffers : {&c.inputs, &c.outputs, &c.saved}) prefetch_lanes(*buffers, row + step * c.neurons, n);
    }
    if (c.checkpoint_every > 0 && t % c.checkpoint_every == 0) {
      const int64_t at = t / c.checkpoint_every * c.neurons + start;
      for (int32_t i = 0; i < states; ++i) store_lanes(c.checkpoints[i], at, s[p.carry_slot[i]], n);
    }
    for (size_t i = 0; i < c.outputs.size(); ++i) {
      if (c.output_in_place[i]) s.point(c.output_slots[i], same_type_lanes<F>(c.outputs[i], row));
    }
    for (size_t i = 0; i < c.saved.size(); ++i) {
      if (c.saved_in_place[i]) s.point(c.saved_slots[i], same_type_lanes<F>(c.saved[i], row));
    }
    forward_step(p, c.fused, c.inputs, c.next_state_slots, s, c.neurons, n, {c.seed, t, start}, [&] {
      for (size_t i = 0; i < c.outputs.size(); ++i) {
        if (c.outputs[i].present() && !c.output_in_place[i]) store_lanes(c.outputs[i], row, s[c.output_slots[i]], n);
        if (c.packed_outputs.data[i]) pack_lanes(c.packed_outputs.at(i, t, start), s[c.output_slots[i]], n);
      }
      for (int32_t i = 0; i < states; ++i) {
        if (c.state_seqs[i].present()) store_lanes(c.state_seqs[i], row, s[c.next_state_slots[i]], n);
      }
      for (size_t i = 0; i < c.saved.size(); ++i) {  // absent: an input (not written) or packed
        if (c.saved[i].present() && !c.saved_in_place[i]) store_lanes(c.saved[i], row, s[c.saved_slots[i]], n);
        if (c.packed_saved.data[i]) pack_lanes(c.packed_saved.at(i, t, start), s[c.saved_slots[i]], n);
      }
    });
  }
  for (int32_t i = 0; i < states; ++i) {
    if (c.final_states[i].present()) store_lanes(c.final_states[i], start, s[p.carry_slot[i]], n);
  }
}

// ---------------------------------------------------------------------------------------------

struct BackwardCall {
  const LaneProgram* program = nullptr;
  FusedStepFn fused = nullptr;
  int64_t steps = 0, neurons = 0;
  std::vector<ir::ParamKind> param_kinds;
  std::vector<LaneBuffer> saved, params, grad_outputs, grad_state_seqs, grad_final_states;
  PackedRows packed_saved;
  std::vector<LaneBuffer> grad_inputs, grad_initial_states, grad_params;
  std::vector<int32_t> grad_input_slots, grad_prev_state_slots, grad_param_slots;
  std::vector<bool> grad_input_in_place;  // computed straight into the caller's buffer
  std::vector<double> partial_sums;  // [block][param]: per-block sums of scalar parameter gradients
  // Checkpoints (checkpoint_every > 0): the forward step that recomputes the saved values from
  // `checkpoints` (per state, [ceil(T/k), N] in F) and `inputs`, drawing with `seed`.
  int64_t checkpoint_every = 0;
  uint64_t seed = 0;
  const LaneProgram* forward = nullptr;
  FusedStepFn forward_fused = nullptr;
  std::vector<LaneBuffer> checkpoints, inputs;
  std::vector<int32_t> forward_next_state_slots, forward_saved_slots;
};

// One reverse step at `t`: `load_saved(slot, index)` fills (or points) a saved value's slot.
template <class F, class LoadSaved>
void backward_step(BackwardCall& c, Slots<F>& s, int64_t t, int64_t start, int64_t n,
                   const LoadSaved& load_saved) {
  const LaneProgram& p = *c.program;
  const int32_t states = static_cast<int32_t>(p.carry_slot.size());
  const int32_t num_params = static_cast<int32_t>(c.param_kinds.size());
  const int32_t accumulators = p.num_slots;  // one per parameter
  const int64_t row = t * c.neurons + start;
  for (const LaneLeaf& leaf : p.step_leaves) {
    F* dst = s[leaf.slot];
    if (leaf.op == ir::Op::Saved) {
      load_saved(leaf.slot, leaf.index);
    } else if (leaf.op == ir::Op::GradOutput) {
      const LaneBuffer& g = c.grad_outputs[leaf.index];
      if (!g.present() || g.same_each_step) continue;  // loaded once per block
      if (g.same_each_neuron) {
        load_sequence_lanes(dst, g, t, c.neurons, start, n);
      } else {
        read_leaf(s, leaf.slot, g, row, n);
      }
    } else {  // GradState: the carried gradient plus the direct one of the state sequence
      F* carry = s[p.carry_slot[leaf.index]];
      if (c.grad_state_seqs[leaf.index].present()) {
        load_sequence_lanes(dst, c.grad_state_seqs[leaf.index], t, c.neurons, start, n);
        add_lanes(dst, carry, n);
      } else {
        s.point(leaf.slot, carry);  // the carry changes only after the step's instructions
      }
    }
  }
  for (size_t i = 0; i < c.grad_inputs.size(); ++i) {
    if (c.grad_input_in_place[i]) s.point(c.grad_input_slots[i], same_type_lanes<F>(c.grad_inputs[i], row));
  }
  run_instrs(p, c.fused, s, n);
  for (size_t i = 0; i < c.grad_inputs.size(); ++i) {
    if (c.grad_inputs[i].present() && !c.grad_input_in_place[i])
      store_lanes(c.grad_inputs[i], row, s[c.grad_input_slots[i]], n);
  }
  for (int32_t k = 0; k < num_params; ++k) {
    if (c.grad_params[k].present()) add_lanes(s[accumulators + k], s[c.grad_param_slots[k]], n);
  }
  // Last: exchanging slots moves the step's values away.
  if (p.states_need_staging) {
    const int32_t staging = accumulators + num_params;
    for (int32_t i = 0; i < states; ++i) copy_lanes(s[staging + i], s[c.grad_prev_state_slots[i]], n);
    for (int32_t i = 0; i < states; ++i) copy_lanes(s[p.carry_slot[i]], s[staging + i], n);
    return;
  }
  for (int32_t i = 0; i < states; ++i) {
    F* carry = s[p.carry_slot[i]];
    const F* grad_prev = s[c.grad_prev_state_slots[i]];
    if (p.swap_carry[i]) {
      s.swap(p.carry_slot[i], c.grad_prev_state_slots[i]);
    } else if (grad_prev != carry) {
      copy_lanes(carry, grad_prev, n);
    }
  }
}

// Checkpoints: per segment of k steps, last first, the forward recomputes the segment's saved
// values (kept in F, never rounded to a storage dtype) from its checkpoint; then the reverse
// steps read them. The steps run in the same order as without checkpoints.
template <class F>
void backward_segments(BackwardCall& c, Slots<F>& s, int64_t start, int64_t n) {
  const LaneProgram& fp = *c.forward;
  const int64_t k = c.checkpoint_every, T = c.steps, N = c.neurons;
  const int32_t states = static_cast<int32_t>(fp.carry_slot.size());
  const int32_t saved = static_cast<int32_t>(c.forward_saved_slots.size());
  Slots<F> fs = forward_slots<F>(fp);
  fill_constants(fp, c.params, c.param_kinds, fs, start, n);
  const Slots<F> values(static_cast<int32_t>(std::min(k, T)) * saved);  // [step in segment][saved]
  for (int64_t seg = (T + k - 1) / k - 1; seg >= 0; --seg) {
    const int64_t first = seg * k, len = std::min(k, T - first);
    for (int32_t i = 0; i < states; ++i) {
      load_lanes(fs[fp.carry_slot[i]], c.checkpoints[i], seg * N + start, n);
    }
    for (int64_t u = 0; u < len; ++u) {
      const int32_t at = static_cast<int32_t>(u) * saved;
      forward_step(fp, c.forward_fused, c.inputs, c.forward_next_state_slots, fs, N, n, {c.seed, first + u, start},
                   [&] {
        for (int32_t i = 0; i < saved; ++i) copy_lanes(values[at + i], fs[c.forward_saved_slots[i]], n);
      });
    }
    for (int64_t u = len - 1; u >= 0; --u) {
      const int32_t at = static_cast<int32_t>(u) * saved;
      backward_step(c, s, first + u, start, n,
                    [&](int32_t slot, int32_t index) { s.point(slot, values[at + index]); });
    }
  }
}

template <class F>
void backward_block(BackwardCall& c, int64_t block) {
  const LaneProgram& p = *c.program;
  const int64_t start = block * kBlock, n = std::min(kBlock, c.neurons - start);
  const int32_t states = static_cast<int32_t>(p.carry_slot.size());
  const int32_t num_params = static_cast<int32_t>(c.param_kinds.size());
  const int32_t accumulators = p.num_slots;  // one per parameter, then room to stage the carries
  Slots<F> s(p.num_slots + num_params + (p.states_need_staging ? states : 0));
  fill_constants(p, c.params, c.param_kinds, s, start, n);
  for (int32_t i = 0; i < states; ++i) {
    if (c.grad_final_states[i].present()) {
      load_lanes(s[p.carry_slot[i]], c.grad_final_states[i], start, n);
    } else {
      fill_lanes(s[p.carry_slot[i]], F(0), n);
    }
  }
  for (int32_t k = 0; k < num_params; ++k) fill_lanes(s[accumulators + k], F(0), n);
  // Output gradients that do not change over time (absent: zero; broadcast over T) load once.
  for (const LaneLeaf& leaf : p.step_leaves) {
    if (leaf.op != ir::Op::GradOutput) continue;
    const LaneBuffer& g = c.grad_outputs[leaf.index];
    if (!g.present()) {
      fill_lanes(s[leaf.slot], F(0), n);
    } else if (g.same_each_step) {
      load_sequence_lanes(s[leaf.slot], g, 0, c.neurons, start, n);
    }
  }
  if (c.checkpoint_every > 0) {
    backward_segments(c, s, start, n);
  } else {
    for (int64_t t = c.steps - 1; t >= 0; --t) {
      if (t > 0) {
        for (const auto* buffers : {&c.saved, &c.grad_outputs, &c.grad_state_seqs, &c.grad_inputs})
          prefetch_lanes(*buffers, (t - 1) * c.neurons + start, n);
      }
      backward_step(c, s, t, start, n, [&](int32_t slot, int32_t index) {
        const size_t i = static_cast<size_t>(index);
        if (c.packed_saved.data[i]) {  // unpacked into the slot's own lanes (never pointed elsewhere)
          unpack_lanes(s[slot], c.packed_saved.at(i, t, start), n);
        } else {
          read_step_leaf(s, slot, c.saved[i], t, c.neurons, start, n);
        }
      });
    }
  }
  for (int32_t i = 0; i < states; ++i) {
    if (c.grad_initial_states[i].present())
      store_lanes(c.grad_initial_states[i], start, s[p.carry_slot[i]], n);
  }
  for (int32_t k = 0; k < num_params; ++k) {
    if (!c.grad_params[k].present()) continue;
    const F* acc = s[accumulators + k];
    if (c.param_kinds[k] == ir::ParamKind::PerNeuron) {
      store_lanes(c.grad_params[k], start, acc, n);
    } else {
      double sum = 0.0;
      for (int64_t l = 0; l < n; ++l) sum += static_cast<double>(acc[l]);
      c.partial_sums[block * num_params + k] = sum;
    }
  }
}

// Checkpoints hold exact states: their dtype must be the compute type of the call.
void check_checkpoint_dtypes(const std::vector<TensorView>& checkpoints, bool f64) {
  const DType want = f64 ? DType::F64 : DType::F32;
  for (size_t i = 0; i < checkpoints.size(); ++i) {
    if (checkpoints[i].dtype != want) {
      throw ArgumentError("saved[" + std::to_string(i) + "]",
                          std::string("dtype ") + dtype_name(want) +
                              " (checkpoints hold the states in the compute dtype of the call)",
                          checkpoints[i].describe());
    }
  }
}

}  // namespace

void forward(const Program& program, const ForwardBuffers& b, const Options& options) {
  check_options(options);
  validate(program, b);
  const ir::Step& step = program.forward();
  const bool checkpoints = b.checkpoint_every > 0;
  // Per-step saving computes and keeps the saved values; checkpoints store only states.
  const std::vector<ir::ValueId> saved_nodes =
      !b.saved.empty() && !checkpoints ? program.backward(b.pack_spikes).saved : std::vector<ir::ValueId>{};

  ForwardCall c;
  c.program = &lane_program(program, forward_variant(!saved_nodes.empty(), b.pack_spikes));
  c.steps = b.steps;
  c.neurons = neuron_count(b.neuron_shape);
  c.param_kinds = step.params;
  for (int i = 0; i < step.num_states; ++i)
    c.state_defaults.push_back(stored_default(ir::state_default(program.neuron(), i), b));
  c.inputs = lane_buffers(b.inputs, step.num_inputs);
  c.initial_states = lane_buffers(b.initial_states, step.num_states, false);
  c.params = lane_buffers(b.params, step.params.size(), false);
  c.outputs = lane_buffers(b.outputs, step.num_outputs);
  c.packed_outputs = PackedRows(b.packed_outputs, step.outputs.size(), c.neurons);
  c.state_seqs = lane_buffers(b.state_seqs, step.num_states);
  c.final_states = lane_buffers(b.final_states, step.num_states);
  c.saved = lane_buffers(checkpoints ? std::vector<TensorView>{} : b.saved, saved_nodes.size());
  c.packed_saved = PackedRows(b.packed_saved, saved_nodes.size(), c.neurons);
  c.output_slots = slots_of(*c.program, step.outputs);
  c.next_state_slots = slots_of(*c.program, step.next_states);
  c.saved_slots = slots_of(*c.program, saved_nodes);
  if (checkpoints) {
    c.checkpoint_every = b.checkpoint_every;
    c.checkpoints = lane_buffers(b.saved, step.num_states);
  }
  c.seed = seed_of(program, b.seed);
  c.reverse = b.reverse;

  const bool f64 = compute_in_f64(options, any_f64({&b.inputs, &b.initial_states, &b.params, &b.outputs,
                                                    &b.state_seqs, &b.final_states, &b.saved}));
  if (checkpoints) check_checkpoint_dtypes(b.saved, f64);
  c.fused = fused_step(program, forward_variant(!saved_nodes.empty(), b.pack_spikes), options.fused, f64,
                       c.steps * c.neurons);
  std::vector<std::vector<bool>> in_place = in_place_results(
      *c.program, step, f64 ? DType::F64 : DType::F32, {{step.outputs, c.outputs}, {saved_nodes, c.saved}});
  c.output_in_place = std::move(in_place[0]);
  c.saved_in_place = std::move(in_place[1]);
  parallel_for(block_count(c.neurons), options.threads, [&](int64_t block) {
    if (f64) {
      forward_block<double>(c, block);
    } else {
      forward_block<float>(c, block);
    }
  });
}

void backward(const Program& program, const BackwardBuffers& b, const Options& options) {
  check_options(options);
  validate(program, b, /*broadcast_grads=*/true);
  const ir::Step& fwd = program.forward();
  const ir::Step& step = program.backward(b.pack_spikes);
  const size_t num_params = fwd.params.size();

  BackwardCall c;
  c.program = &lane_program(program, backward_variant(b.pack_spikes));
  c.steps = b.steps;
  c.neurons = neuron_count(b.neuron_shape);
  c.param_kinds = fwd.params;
  if (b.checkpoint_every > 0) {
    c.checkpoint_every = b.checkpoint_every;
    c.forward = &lane_program(program, forward_variant(true, b.pack_spikes));
    c.checkpoints = lane_buffers(b.saved, fwd.num_states);
    c.inputs = lane_buffers(b.inputs, fwd.num_inputs);
    c.forward_next_state_slots = slots_of(*c.forward, fwd.next_states);
    c.forward_saved_slots = slots_of(*c.forward, step.saved);
    c.seed = seed_of(program, b.seed);
  } else {
    c.saved = lane_buffers(b.saved, step.saved.size());
    c.packed_saved = PackedRows(b.packed_saved, step.saved.size(), c.neurons);
  }
  c.params = lane_buffers(b.params, num_params, false);
  c.grad_outputs = sequence_lane_buffers(b.grad_outputs, fwd.num_outputs);
  c.grad_state_seqs = sequence_lane_buffers(b.grad_state_seqs, fwd.num_states);
  c.grad_final_states = lane_buffers(b.grad_final_states, fwd.num_states);
  c.grad_inputs = lane_buffers(b.grad_inputs, fwd.num_inputs);
  c.grad_initial_states = lane_buffers(b.grad_initial_states, fwd.num_states);
  c.grad_params = lane_buffers(b.grad_params, num_params);
  c.grad_input_slots = slots_of(*c.program, step.grad_inputs);
  c.grad_prev_state_slots = slots_of(*c.program, step.grad_prev_states);
  c.grad_param_slots = slots_of(*c.program, step.grad_params);
  const int64_t blocks = block_count(c.neurons);
  c.partial_sums.assign(static_cast<size_t>(blocks) * num_params, 0.0);

  const bool f64 = compute_in_f64(
      options, any_f64({&b.saved, &b.inputs, &b.params, &b.grad_outputs, &b.grad_state_seqs,
                        &b.grad_final_states, &b.grad_inputs, &b.grad_initial_states, &b.grad_params}));
  if (b.checkpoint_every > 0) check_checkpoint_dtypes(b.saved, f64);
  c.grad_input_in_place =
      in_place_results(*c.program, step, f64 ? DType::F64 : DType::F32, {{step.grad_inputs, c.grad_inputs}})[0];
  c.fused = fused_step(program, backward_variant(b.pack_spikes), options.fused, f64, c.steps * c.neurons);
  if (b.checkpoint_every > 0) {
    c.forward_fused =
        fused_step(program, forward_variant(true, b.pack_spikes), options.fused, f64, c.steps * c.neurons);
  }
  parallel_for(blocks, options.threads, [&](int64_t block) {
    if (f64) {
      backward_block<double>(c, block);
    } else {
      backward_block<float>(c, block);
    }
  });

  // Scalar parameter gradients: the per-block sums added in block order.
  for (size_t k = 0; k < num_params; ++k) {
    if (!c.grad_params[k].present() || c.param_kinds[k] != ir::ParamKind::Scalar) continue;
    double sum = 0.0;
    for (int64_t block = 0; block < blocks; ++block) sum += c.partial_sums[block * num_params + k];
    if (f64) {
      store_lanes(c.grad_params[k], 0, &sum, 1);
    } else {
      const float rounded = static_cast<float>(sum);
      store_lanes(c.grad_params[k], 0, &rounded, 1);
    }
  }
}

}  // namespace spikejit::cpu
