#include "codegen/kernel_source.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "codegen/cuda_prelude.h"
#include "codegen/kernel_bodies.h"
#include "codegen/kernel_plan.h"
#include "codegen/step_emitter.h"
#include "spikejit/buffers.h"
#include "spikejit/error.h"

namespace spikejit::codegen {
namespace {

constexpr int kWideBlock = 256;
constexpr int kNarrowBlock = 64;
// A variant's blocks hold at least kWorkspaceNeuronsPerBlock neurons: backward_workspace_elements
// (the caller-owned workspace) counts one partial sum per parameter per that many.
static_assert(kNarrowBlock >= kWorkspaceNeuronsPerBlock && kWideBlock >= kWorkspaceNeuronsPerBlock);
constexpr int kReduceThreads = 256;
// Registers (32-bit) the prefetch ring may take per thread, and the deepest prefetch.
constexpr int kRingRegisters = 32;
constexpr int kMaxDepth = 16;
// Checkpoint segments are unrolled (values kept in registers) up to this many values per thread,
// and the next segment's inputs are prefetched up to the second count, k * (saved + 2 * inputs)
// * EPT. H200, fp32: LIF at k = 16 with its inputs prefetched spilled to local memory and ran at
// half the speed; at 128, PLIF at k = 8 (128) and a two-input, two-state neuron at k = 4 (112,
// 158 registers a thread) ran their backward 5-12 % slower prefetched than not; LIF at k = 8 (96)
// gains from it.
constexpr int kCheckpointRegisters = 64;
constexpr int kCheckpointPrefetchRegisters = 96;
// Without that prefetch, the recomputation asks L2 for the input rows of the steps ahead (in its
// order: a segment's steps forward, then the segment before it), as many as fit in this many bytes
// a thread. H200, fp32, one input (8 steps ahead): LIF's backward at k = 16 and 32 and PLIF's at
// k = 8 and 16 ran 4-15 % faster than without; at 256 bytes (16 steps) slower than without, the
// rows in flight then exceed L2 (about 270K resident threads).
constexpr int kCheckpointL2AheadBytes = 128;
// The one-neuron-per-thread variant (few warps: small N) also asks L2 for the rows this many
// steps beyond its register ring, so that the ring's loads find them in L2 rather than in DRAM.
constexpr int kRingL2Ahead = 32;
// Above this cost (step_cost) a step function is called instead of inlined.
constexpr int kInlineStepCost = 120;

const char* dtype_tag(DType d) {
  switch (d) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
  }
  return "?";
}

std::string spec_tag(const KernelSpec& s) {
  std::string tag = dtype_tag(s.storage);
  if (s.store_state_seqs) tag += "_seq";
  if (s.reverse) tag += "_rev";
  if (s.grad_state_seqs) tag += "_gseq";
  if (s.grad_final_states) tag += "_gfinal";
  if (s.checkpoint_every > 0) tag += "_ck" + std::to_string(s.checkpoint_every);
  if (!s.packed_outputs.empty()) {  // e.g. "_po101": outputs 0 and 2 packed
    tag += "_po";
    for (bool f : s.packed_outputs) tag += f ? '1' : '0';
  }
  if (s.pack_spikes) tag += "_bits";
  std::string repeat = layout_tag(s);  // e.g. "a/-s", spelled as an identifier: "_ra_0s"
  if (!repeat.empty()) {
    for (char& c : repeat) c = c == '-' ? '0' : c == '/' ? '_' : c;
    tag += "_r" + repeat;
  }
  return tag;
}

std::string hex64(unsigned long long v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llxull", v);
  return buf;
}

std::string b(bool v) { return v ? "true" : "false"; }

// Rows of storage each step streams in (what the prefetch ring holds).
int streamed_rows(const KernelPlan& p) {
  if (!p.backward()) return p.inputs;
  return (p.checkpointed() ? 0 : p.saved) + p.outputs + (p.spec.grad_state_seqs ? p.states : 0);
}

// The vector variant runs where there are many warps per SM to hide latency: prefetching one step
// ahead was measured as fast as deeper rings (H200, LIF), with fewer registers. The one-per-thread variant runs where there are few: prefetch as deep as registers
// allow. (Each level of depth replicates the step body: compile time grows with it.)
int prefetch_depth(const KernelPlan& p, int ept) {
  const int rows = streamed_rows(p);
  if (rows == 0) return 1;
  if (ept > 1) return 1;
  const int per_step = rows * (p.spec.storage == DType::F64 ? 2 : 1);
  return std::max(1, std::min(kMaxDepth, kRingRegisters / per_step));
}

std::string slot_shape(const BufferSlot& s) {
  if (s.role == BufferRole::Workspace) return "[scalar params, blocks] double";
  if (s.role == BufferRole::Seed) return "[1] uint64";
  if (s.packed) return "[T, ceil(N/8)] uint8 bits";
  if (s.checkpoint) return "[ceil(T/k), N] compute dtype";
  if (s.scalar_param) return "[1]";
  return s.per_step ? "[T, N]" : "[N]";
}

std::string slot_name(const BufferSlot& s, const ir::Neuron* n) {
  if (n == nullptr) return "";
  const size_t i = static_cast<size_t>(s.index);
  switch (s.role) {
    case BufferRole::Input: case BufferRole::GradInput:
      return i < n->inputs.size() ? n->inputs[i].name : "";
    case BufferRole::InitialState: case BufferRole::StateSeq: case BufferRole::FinalState:
    case BufferRole::GradStateSeq: case BufferRole::GradFinalState: case BufferRole::GradInitialState:
      return i < n->states.size() ? n->states[i].name : "";
    case BufferRole::Param: case BufferRole::GradParam:
      return i < n->params.size() ? n->params[i].name : "";
    case BufferRole::Output: case BufferRole::GradOutput: case BufferRole::PackedOutput:
      return i < n->outputs.size() ? n->outputs[i].name : "";
    case BufferRole::Saved:
      return s.checkpoint && i < n->states.size() ? n->states[i].name : "";
    case BufferRole::Workspace: case BufferRole::Seed:
      return "";
  }
  return "";
}

std::string header_comment(const KernelPlan& p, const NeuronIdentity& id, const ir::Step* backward) {
  const ir::Neuron* neuron = id.neuron;
  std::string s = "// Generated by spikejit: neuron " + id.name + " (" + id.hash + "), kernel " +
                  kernel_kind_name(p.spec.kind) + ", " + p.spec.key() + ".\n";
  if (!id.canonical.empty()) {
    s += "//\n";
    size_t start = 0;
    while (start < id.canonical.size()) {
      size_t end = id.canonical.find('\n', start);
      if (end == std::string::npos) end = id.canonical.size();
      const std::string line = id.canonical.substr(start, end - start);
      s += line.empty() ? "//\n" : "//   " + line + "\n";
      start = end + 1;
    }
  }
  s += "//\n// Buffers (SpikejitArgs::buffers, in order):\n";
  for (size_t i = 0; i < p.slots.size(); ++i) {
    const BufferSlot& slot = p.slots[i];
    std::string line = "//   " + std::to_string(i) + ": " + buffer_role_name(slot.role) + " " +
                       std::to_string(slot.index);
    const std::string name = slot_name(slot, neuron);
    if (!name.empty()) line += " (" + name + ")";
    if (slot.role == BufferRole::Saved && !slot.checkpoint && backward != nullptr) {
      line += " (forward %" + std::to_string(backward->saved[slot.index]) + ")";
    }
    s += line + " " + slot_shape(slot) + "\n";
  }
  return s;
}

// "{c0, c1, ...}": per index of `role`'s slots, bit 0 same_each_step, bit 1 same_each_neuron (0
// for indexes without a slot; at least one entry, like the arrays it initialises).
std::string repeat_codes(const KernelPlan& p, BufferRole role, int count) {
  std::vector<int> codes(static_cast<size_t>(std::max(1, count)), 0);
  for (const BufferSlot& s : p.slots) {
    if (s.role == role) codes[static_cast<size_t>(s.index)] = (s.layout.same_each_step ? 1 : 0) | (s.layout.same_each_neuron ? 2 : 0);
  }
  std::string text = "{";
  for (size_t i = 0; i < codes.size(); ++i) text += (i ? ", " : "") + std::to_string(codes[i]);
  return text + "}";
}

// The values hoisted out of a kernel's time loop (hoisted_values): the forward step's, then the
// backward step's (a backward kernel runs both where it recomputes the forward).
struct Hoisted {
  std::vector<ir::ValueId> forward, backward;
};

std::string constants(const KernelPlan& p, const Hoisted& hoisted) {
  unsigned long long scalar_mask = 0, row_mask = 0;
  for (size_t i = 0; i < p.params.size(); ++i) {
    if (p.params[i] == ir::ParamKind::Scalar) scalar_mask |= 1ull << i;
  }
  for (size_t i = 0; i < p.slots.size(); ++i) {
    const BufferSlot& s = p.slots[i];
    if (accessed_as_rows(s)) row_mask |= 1ull << i;
  }
  unsigned long long packed_outputs = 0, packed_saved = 0;
  std::string packed_output_slots = "{";
  for (int i = 0; i < std::max(1, p.outputs); ++i) {
    int slot = 0;
    for (size_t k = 0; k < p.slots.size(); ++k) {
      if (p.slots[k].role == BufferRole::PackedOutput && p.slots[k].index == i) slot = static_cast<int>(k);
    }
    if (slot > 0) packed_outputs |= 1ull << i;
    packed_output_slots += (i ? ", " : "") + std::to_string(slot);
  }
  packed_output_slots += "}";
  for (size_t i = 0; i < p.saved_packed.size(); ++i) {
    if (p.saved_packed[i]) packed_saved |= 1ull << i;
  }
  auto slot = [&](BufferRole r) { return std::to_string(std::max(0, p.first_slot(r))); };
  const KernelSpec& spec = p.spec;
  unsigned long long strided_mask = 0;
  std::string slot_layouts = "{";
  int strided = 0;
  for (size_t i = 0; i < p.slots.size(); ++i) {
    const bool is_strided = p.slots[i].strided;
    if (is_strided) strided_mask |= 1ull << i;
    slot_layouts += (i ? ", " : "") + std::to_string(is_strided ? strided++ : -1);
  }
  slot_layouts += "}";
  std::string s;
  s += "\n// ---- this neuron and kernel ----------------------------------------------------------------\n";
  s += "// Slots read through strided views (bit s: slot s).\n";
  s += "[[maybe_unused]] constexpr unsigned long long kStridedSlots = " + hex64(strided_mask) + ";\n";
  s += "struct SpikejitArgs {\n  long long steps;    // T\n  long long neurons;  // N\n  void* buffers[kMaxBuffers];\n";
  if (strided > 0) s += "  SjReadLayout layouts[" + std::to_string(strided) + "];  // of the strided slots, in order\n";
  s += "};\n";
  s += "[[maybe_unused]] constexpr int kLayouts = " + std::to_string(strided) +
       ", kLayoutsA = SJ_AT_LEAST_1(kLayouts);\n";
  s += "// Index in layouts, per slot (-1: not strided).\n";
  s += "[[maybe_unused]] constexpr int kSlotLayout[kMaxBuffers] = " + slot_layouts + ";\n";
  s += "// The layout of strided slot `slot` (never called for others).\n";
  if (strided > 0) {
    s += "__device__ __forceinline__ const SjReadLayout& slot_layout(const SpikejitArgs& a, int slot) {\n"
         "  return a.layouts[kSlotLayout[slot]];\n}\n";
  } else {
    s += "__device__ const SjReadLayout sj_no_layout = {};\n"
         "__device__ __forceinline__ const SjReadLayout& slot_layout(const SpikejitArgs&, int) {\n"
         "  return sj_no_layout;\n}\n";
  }
  s += "[[maybe_unused]] constexpr int kInputs = " + std::to_string(p.inputs) + ", kStates = " + std::to_string(p.states) +
       ", kOutputs = " + std::to_string(p.outputs) + ", kParams = " + std::to_string(p.params.size()) +
       ", kSaved = " + std::to_string(p.saved) + ";\n";
  s += "[[maybe_unused]] constexpr int kInputsA = SJ_AT_LEAST_1(kInputs), kStatesA = SJ_AT_LEAST_1(kStates),\n"
       "                               kOutputsA = SJ_AT_LEAST_1(kOutputs), kParamsA = SJ_AT_LEAST_1(kParams),\n"
       "                               kSavedA = SJ_AT_LEAST_1(kSaved);\n";
  s += "// A thread's parameter values: the parameters, then the values hoisted out of the time loop\n"
       "// (computed from parameters and literals alone; see hoist_values).\n";
  s += "[[maybe_unused]] constexpr int kHoistedForward = " + std::to_string(hoisted.forward.size()) +
       ", kHoistedBackward = " + std::to_string(hoisted.backward.size()) + ",\n"
       "                               kParamValues = kParams + kHoistedForward + kHoistedBackward,\n"
       "                               kParamValuesA = SJ_AT_LEAST_1(kParamValues);\n";
  s += "[[maybe_unused]] constexpr unsigned long long kScalarParams = " + hex64(scalar_mask) + ";  // bit i: param i is one scalar\n";
  s += "[[maybe_unused]] constexpr int kScalarParamCount = " + std::to_string(p.scalar_params) +
       ", kScalarParamCountA = SJ_AT_LEAST_1(kScalarParamCount);\n";
  s += "// Streams of random draws (uniform()), and whether this kernel draws (it has the seed).\n";
  s += "[[maybe_unused]] constexpr int kStreams = " + std::to_string(p.streams) +
       ", kStreamsA = SJ_AT_LEAST_1(kStreams);\n";
  s += "[[maybe_unused]] constexpr bool kReadsSeed = " + b(p.reads_seed) + ";\n";
  s += "// First slot of each group of buffers (0 when the kernel has none; then never used).\n";
  s += "[[maybe_unused]] constexpr int kSlotInput = " + slot(BufferRole::Input) + ", kSlotInitialState = " +
       slot(BufferRole::InitialState) + ", kSlotParam = " + slot(BufferRole::Param) +
       ", kSlotOutput = " + slot(BufferRole::Output) + ",\n                               kSlotStateSeq = " +
       slot(BufferRole::StateSeq) + ", kSlotFinalState = " + slot(BufferRole::FinalState) +
       ", kSlotSaved = " + slot(BufferRole::Saved) + ", kSlotGradOutput = " + slot(BufferRole::GradOutput) +
       ",\n                               kSlotGradStateSeq = " + slot(BufferRole::GradStateSeq) +
       ", kSlotGradFinalState = " + slot(BufferRole::GradFinalState) +
       ", kSlotGradInput = " + slot(BufferRole::GradInput) + ",\n                               kSlotGradInitialState = " +
       slot(BufferRole::GradInitialState) + ", kSlotGradParam = " + slot(BufferRole::GradParam) +
       ", kSlotWorkspace = " + slot(BufferRole::Workspace) + ", kSlotSeed = " + slot(BufferRole::Seed) + ";\n";
  s += "[[maybe_unused]] constexpr unsigned long long kRowSlots = " + hex64(row_mask) + ";  // slots accessed as rows of storage\n";
  const bool training_forward = spec.kind == KernelKind::TrainingForward;
  s += "[[maybe_unused]] constexpr bool kStoreStateSeqs = " + b(spec.store_state_seqs) +
       ", kWriteFinalStates = " + b(spec.kind != KernelKind::Inference && !p.backward()) +
       ", kSaveSteps = " + b(training_forward && !p.checkpointed()) + ";\n";
  s += "[[maybe_unused]] constexpr bool kReverse = " + b(spec.reverse) + ";  // the steps last to first\n";
  s += "[[maybe_unused]] constexpr bool kReadGradStateSeqs = " + b(spec.grad_state_seqs) +
       ", kReadGradFinalStates = " + b(spec.grad_final_states) + ";\n";
  s += "// Bit-packed rows: bit i of kPackedOutputs: output i is also written packed, to slot\n"
       "// kPackedOutputSlot[i]; bit i of kPackedSaved: saved value i is stored / read packed.\n";
  s += "[[maybe_unused]] constexpr unsigned long long kPackedOutputs = " + hex64(packed_outputs) +
       ", kPackedSaved = " + hex64(packed_saved) + ";\n";
  s += "[[maybe_unused]] constexpr int kPackedOutputSlot[kOutputsA] = " + packed_output_slots + ";\n";
  s += "[[maybe_unused]] constexpr bool kWritesPackedRows = " +
       b(!p.backward() && (packed_outputs != 0 || (training_forward && !p.checkpointed() && packed_saved != 0))) +
       ";\n";
  if (p.backward()) {
    s += "// How each gradient sequence repeats (bit 0: the same each step, bit 1: the same for every neuron).\n";
    s += "[[maybe_unused]] constexpr int kGradOutputRepeat[kOutputsA] = " + repeat_codes(p, BufferRole::GradOutput, p.outputs) +
         ", kGradStateSeqRepeat[kStatesA] = " + repeat_codes(p, BufferRole::GradStateSeq, p.states) + ";\n";
  }
  s += "[[maybe_unused]] constexpr int kCheckpointEvery = " + std::to_string(spec.checkpoint_every) + ";\n";
  s += "[[maybe_unused]] constexpr int kCheckpointRegisters = " + std::to_string(kCheckpointRegisters) + ";\n";
  s += "[[maybe_unused]] constexpr int kCheckpointPrefetchRegisters = " +
       std::to_string(kCheckpointPrefetchRegisters) + ";\n";
  s += "[[maybe_unused]] constexpr int kCheckpointL2AheadBytes = " + std::to_string(kCheckpointL2AheadBytes) + ";\n";
  s += "[[maybe_unused]] constexpr int kRingL2Ahead = " + std::to_string(kRingL2Ahead) + ";\n";
  s += "[[maybe_unused]] constexpr int kReduceThreads = " + std::to_string(kReduceThreads) + ";\n";
  s += "// The values one step function takes and returns.\n";
  s += "struct ForwardIn { real x[kInputsA], s[kStatesA], p[kParamValuesA], u[kStreamsA]; };  // u: the draws\n";
  // A thread's EPT neighbouring neurons share the block of each group of four: one block per
  // group and stream, not one per neuron (a draw is tens of integer instructions, more than the
  // bytes of a step leave time for). A per-step backward of a neuron that draws reads no seed
  // (the draws it needs are saved) and never draws.
  s += "// The draws of the thread's neurons n0 .. n0 + EPT - 1 at step t, per stream.\n"
       "template <int EPT>\n"
       "__device__ __forceinline__ void draw_rows(const SpikejitArgs& a, long long n0, long long t,\n"
       "                                          real (&u)[kStreamsA][EPT]) {\n"
       "  if constexpr (kReadsSeed) {\n"
       "    const unsigned long long seed = __ldg(static_cast<const unsigned long long*>(a.buffers[kSlotSeed]));\n"
       "#pragma unroll\n"
       "    for (int k = 0; k < kStreams; ++k) {\n"
       "      uint4 block;\n"
       "#pragma unroll\n"
       "      for (int e = 0; e < EPT; ++e) {\n"
       "        const unsigned long long n = (unsigned long long)(n0 + e);\n"
       "        // A new group: known at compile time where EPT is a multiple of 4 (n0 is then too).\n"
       "        const bool first_of_group = EPT % 4 == 0 ? e % 4 == 0 : (e == 0 || (n & 3) == 0);\n"
       "        if (first_of_group) block = sj_philox_block(seed, n >> 2, t, k);\n"
       "        u[k][e] = sj_draw_of(block, n);\n"
       "      }\n"
       "    }\n"
       "  }\n"
       "}\n";
  s += 
       "struct ForwardOut { real y[kOutputsA], s_next[kStatesA], saved[kSavedA]; };\n"
       "struct BackwardIn { real saved[kSavedA], go[kOutputsA], gs[kStatesA], p[kParamValuesA]; };\n"
       "struct BackwardOut { real gi[kInputsA], g_prev[kStatesA], gp[kParamsA]; };\n";
  return s;
}

// Light steps are inlined into every unrolled copy of the time loop; heavy ones (many
// transcendentals) are called, so that compile time does not grow with the unrolling.
const char* step_linkage(const ir::Step& step, const StepLeaves& leaves, const std::vector<StepResults>& results) {
  return step_cost(step, leaves, results) <= kInlineStepCost ? "__forceinline__" : "__noinline__";
}

std::vector<StepResults> forward_results(const ir::Step& fwd, const ir::Step* bwd, const KernelPlan& p) {
  std::vector<StepResults> results = {{"out.y", fwd.outputs}, {"out.s_next", fwd.next_states}};
  if (p.forward_saves) results.push_back({"out.saved", bwd->saved});
  return results;
}

std::vector<StepResults> backward_results(const ir::Step& bwd) {
  return {{"out.gi", bwd.grad_inputs}, {"out.g_prev", bwd.grad_prev_states}, {"out.gp", bwd.grad_params}};
}

// A step's leaves read `in.p[first + j]` for its j-th hoisted value.
void read_hoisted(StepLeaves& leaves, const ir::Step& step, const std::vector<ir::ValueId>& ids, size_t first) {
  leaves.read_instead.assign(step.nodes.size(), "");
  for (size_t j = 0; j < ids.size(); ++j) leaves.read_instead[ids[j]] = "in.p[" + std::to_string(first + j) + "]";
}

std::string forward_step_function(const ir::Step& fwd, const ir::Step* bwd, const KernelPlan& p, const Hoisted& h) {
  StepLeaves leaves;
  leaves.input = "in.x";
  leaves.state = "in.s";
  leaves.param = "in.p";
  leaves.draw = "in.u";
  read_hoisted(leaves, fwd, h.forward, p.params.size());
  const std::vector<StepResults> results = forward_results(fwd, bwd, p);
  return "\n// ---- forward step: (inputs[t], states[t-1], params) -> (outputs[t], states[t], saved[t]) ----\n"
         "__device__ " + std::string(step_linkage(fwd, leaves, results)) + " ForwardOut forward_step(const ForwardIn in) {\n"
         "  ForwardOut out = {};\n" +
         emit_step_statements(fwd, leaves, results, p.spec.storage == DType::F64) + "  return out;\n}\n";
}

std::string backward_step_function(const ir::Step& bwd, const KernelPlan& p, const Hoisted& h) {
  StepLeaves leaves;
  leaves.saved = "in.saved";
  leaves.grad_output = "in.go";
  leaves.grad_state = "in.gs";
  leaves.param = "in.p";
  read_hoisted(leaves, bwd, h.backward, p.params.size() + h.forward.size());
  const std::vector<StepResults> results = backward_results(bwd);
  return "\n// ---- backward step: (saved[t], dL/d outputs[t], dL/d states[t], params)\n"
         "//                      -> (dL/d inputs[t], dL/d states[t-1], this step's dL/d params) ----\n"
         "__device__ " + std::string(step_linkage(bwd, leaves, results)) + " BackwardOut backward_step(const BackwardIn in) {\n"
         "  BackwardOut out = {};\n" +
         emit_step_statements(bwd, leaves, results, p.spec.storage == DType::F64) + "  return out;\n}\n";
}

// `text` with `spaces` more spaces at the start of each line.
std::string indented(const std::string& text, int spaces) {
  std::string out;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size() - 1) + 1;
    out += std::string(static_cast<size_t>(spaces), ' ') + text.substr(start, end - start);
    start = end;
  }
  return out;
}

// hoist_values<EPT>(pr): fills a thread's hoisted values (pr[kParams ...]) from its parameters,
// once before the time loop, with the statements the steps would run at every step.
std::string hoist_values_function(const ir::Step& fwd, const ir::Step* bwd, const Hoisted& h, bool f64) {
  std::string s =
      "\n// ---- values of parameters and literals alone: computed once, read by the steps as in.p[...] ----\n"
      "template <int EPT>\n"
      "__device__ __forceinline__ void hoist_values(real (&pr)[kParamValuesA][EPT]) {\n"
      "#pragma unroll\n"
      "  for (int e = 0; e < EPT; ++e) {\n"
      "    struct { real p[kParamValuesA]; } in;\n"
      "#pragma unroll\n"
      "    for (int i = 0; i < kParams; ++i) in.p[i] = pr[i][e];\n";
  StepLeaves leaves;
  leaves.param = "in.p";
  size_t first = 0;
  for (const auto& [step, ids] : {std::pair{&fwd, &h.forward}, std::pair{bwd, &h.backward}}) {
    if (ids->empty()) continue;
    const std::string array = "hoisted_" + std::to_string(first);
    s += "    {\n      real " + array + "[" + std::to_string(ids->size()) + "];\n";
    s += indented(emit_step_statements(*step, leaves, {{array, *ids}}, f64), 4);
    s += "#pragma unroll\n      for (int j = 0; j < " + std::to_string(ids->size()) + "; ++j) pr[kParams + " +
         std::to_string(first) + " + j][e] = " + array + "[j];\n    }\n";
    first += ids->size();
  }
  return s + "  }\n}\n";
}

std::string entry_line(const std::string& name, int block, const std::string& body) {
  return "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(block) + ") " + name +
         "(const SpikejitArgs a) { " + body + " }\n";
}

std::string instantiate(const char* fn, int ept, int block, int depth) {
  return std::string(fn) + "<" + std::to_string(ept) + ", " + std::to_string(block) + ", " +
         std::to_string(depth) + ">(a);";
}

void check_results(const ir::Step& s, const char* what, size_t outputs, size_t states, size_t params,
                   const std::vector<ir::ValueId>& a, const std::vector<ir::ValueId>& b,
                   const std::vector<ir::ValueId>& c) {
  if (a.size() != outputs || b.size() != states || c.size() != params) {
    throw Error(std::string("codegen: the ") + what + " step has " + std::to_string(a.size()) + "/" +
                std::to_string(b.size()) + "/" + std::to_string(c.size()) + " results, expected " +
                std::to_string(outputs) + "/" + std::to_string(states) + "/" + std::to_string(params) +
                ":\n" + ir::to_string(s));
  }
}

// The initial value of state i when its buffer is absent (the neuron's declared default), rounded
// through the storage type as a given state would be.
std::string state_default_function(const KernelPlan& p, const ir::Neuron* neuron) {
  if (neuron == nullptr && p.states > 0) throw Error("codegen: the neuron is needed for its states' defaults");
  std::string s = "\n// The initial value of state i when none is given (its buffer is null).\n"
                  "__device__ __forceinline__ real state_default(int i) {\n  real value = (real)0;\n";
  for (int i = 0; i < p.states; ++i) {
    const double value = ir::state_default(*neuron, i);
    if (value == 0.0 && !std::signbit(value)) continue;
    s += "  if (i == " + std::to_string(i) + ") value = " +
         real_literal(value, p.spec.storage == DType::F64) + ";\n";
  }
  return s + "  return to_real(to_storage(value));\n}\n";
}

}  // namespace

KernelSource generate_kernel(const ir::Step& forward, const ir::Step* backward,
                             const NeuronIdentity& neuron, const KernelSpec& spec) {
  const KernelPlan p = plan_kernel(forward, backward, spec);
  check_results(forward, "forward", p.outputs, p.states, 0, forward.outputs, forward.next_states, {});
  if (p.backward()) {
    check_results(*backward, "backward", p.inputs, p.states, p.params.size(), backward->grad_inputs,
                  backward->grad_prev_states, backward->grad_params);
  }

  KernelSource out;
  out.buffers = p.slots;
  const std::string base = "spikejit_" + std::string(kernel_kind_name(p.spec.kind)) + "_" +
                           neuron.hash.substr(0, 12) + "_" + spec_tag(p.spec);
  const int wide = vector_elements(p.spec.storage);
  for (int ept : {wide, 1}) {
    KernelVariant v;
    v.entry = base + "_e" + std::to_string(ept);
    v.elements_per_thread = ept;
    v.block_size = ept == 1 ? kNarrowBlock : kWideBlock;
    if (p.backward() && p.scalar_params > 0) {
      v.reduce_entry = v.entry + "_reduce";
      v.reduce_block_size = kReduceThreads;
      v.scalar_params = p.scalar_params;
    }
    out.variants.push_back(v);
  }
  out.entry = out.variants[0].entry;
  out.block_size = out.variants[0].block_size;
  out.elements_per_thread = out.variants[0].elements_per_thread;

  Hoisted hoisted;
  hoisted.forward = hoisted_values(forward, forward_results(forward, backward, p));
  if (p.backward()) hoisted.backward = hoisted_values(*backward, backward_results(*backward));
  const bool f64 = p.spec.storage == DType::F64;
  std::string& s = out.source;
  s = header_comment(p, neuron, backward);
  s += cuda_prelude(p.spec.storage);
  s += constants(p, hoisted);
  s += state_default_function(p, neuron.neuron);
  s += forward_step_function(forward, backward, p, hoisted);
  if (p.backward()) s += backward_step_function(*backward, p, hoisted);
  s += hoist_values_function(forward, backward, hoisted, f64);
  s += kCommonBodies;
  s += p.backward() ? kBackwardBodies : kForwardBodies;
  s += "\n// ---- entries (one neuron per thread variant last) -----------------------------------------\n";
  for (const KernelVariant& v : out.variants) {
    const int depth = prefetch_depth(p, v.elements_per_thread);
    const char* fn = p.backward() ? "backward_entry" : "forward_entry";
    s += entry_line(v.entry, v.block_size, instantiate(fn, v.elements_per_thread, v.block_size, depth));
    if (!v.reduce_entry.empty()) {
      s += entry_line(v.reduce_entry, v.reduce_block_size,
                      "reduce_entry<" + std::to_string(v.elements_per_thread) + ", " +
                          std::to_string(v.block_size) + ">(a);");
    }
  }
  return out;
}

}  // namespace spikejit::codegen
