// The CUDA code generator: structure of the generated sources for every kernel kind, dtype and
// option, over the built-in neurons (every SpikingJelly option, several surrogates) and test
// neurons with several inputs / states / outputs, parameters of both kinds and every op; and the
// real check: every source compiles with NVRTC (sm_90; sm_80 for bf16 and a share of the rest).
//
// SPIKEJIT_DUMP_DIR=<dir> writes every generated source there as <entry>.cu.
// SPIKEJIT_UPDATE_GOLDEN=1 rewrites tests/golden/*.cu from the generator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "codegen/step_emitter.h"
#include "spikejit/buffers.h"
#include "spikejit/builtins.h"
#include "spikejit/codegen.h"
#include "spikejit/error.h"
#include "spikejit/frontend.h"
#include "spikejit/program.h"
#include "spikejit/runtime.h"
#include "support/random_seed.h"
#include "support/require_nvrtc.h"
#include "support/test_neurons.h"

namespace spikejit {
namespace {

using codegen::BufferRole;
using codegen::BufferSlot;
using codegen::KernelKind;
using codegen::KernelSource;
using codegen::KernelSpec;

std::string source_dir() {
  const char* dir = std::getenv("SPIKEJIT_SOURCE_DIR");
  return dir ? dir : ".";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path + " (is SPIKEJIT_SOURCE_DIR set?)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

struct NamedProgram {
  std::string name;
  Program program;
};

bool has_constant(const ir::Neuron& n, const std::string& name) {
  for (const ir::ConstDecl& c : n.constants) {
    if (c.name == name) return true;
  }
  return false;
}

// IF / LIF / PLIF from neurons/*.sj with every combination of SpikingJelly's boolean options and
// a few surrogates (substituted in the text of the shipped definition).
std::vector<NamedProgram> builtin_programs() {
  const std::vector<std::string> surrogates = {
      "sigmoid(alpha = 4)", "atan(alpha = 3)", "PiecewiseLeakyReLU(w = 0.5, c = 0.02)",
      "squarewave_fourier_series(n = 3)", "erf"};
  std::vector<NamedProgram> out;
  for (const char* stem : {"if", "lif", "plif"}) {
    const std::string text = read_file(source_dir() + "/neurons/" + stem + ".sj");
    if (text.find(surrogates[0]) == std::string::npos) {
      throw Error(std::string("neurons/") + stem + ".sj no longer uses " + surrogates[0]);
    }
    for (size_t k = 0; k < surrogates.size(); ++k) {
      const ir::Neuron base = frontend::parse(replace_all(text, surrogates[0], surrogates[k]), stem);
      const bool has_decay = has_constant(base, "decay_input");
      for (int bits = 0; bits < (has_decay ? 8 : 4); ++bits) {
        std::vector<ir::ConstantOverride> o = {{"soft_reset", double(bits & 1)},
                                               {"detach_reset", double((bits >> 1) & 1)}};
        if (has_decay) o.push_back({"decay_input", double((bits >> 2) & 1)});
        std::string name = std::string(stem) + "_sg" + std::to_string(k) + ((bits & 1) ? "_soft" : "_hard") +
                           ((bits & 2) ? "_detach" : "") + (has_decay && !(bits & 4) ? "_nodecay" : "");
        out.push_back({name, Program(ir::with_constants(base, o))});
      }
    }
  }
  return out;
}

const char* kAdaptiveLif = R"(
neuron adaptive_lif
input x
state v = 0
state a = 0
const tau = 2.0, tau_a = 20.0, beta = 0.2, v_th = 1.0
output s
h = v + (x - v) / tau
s = spike(h - v_th - beta * a, atan(alpha = 2))
v = h - s * v_th
a = a + (s - a) / tau_a
)";

const char* kIzhikevich = R"(
neuron izhikevich
input i
state v = -65.0
state u = -13.0
const a = 0.02, b = 0.2, c = -65.0, d = 8.0, v_peak = 30.0
output s
v_new = v + 0.04 * v * v + 5 * v + 140 - u + i
u_new = u + a * (b * v - u)
s = spike(v_new - v_peak, piecewise_quadratic(alpha = 1))
v = where(s > 0.5, c, v_new)
u = u_new + s * d
)";

// Two inputs, two states, two outputs, a per-neuron and a scalar parameter.
const char* kTwoByTwo = R"(
neuron two_by_two
input x
input y
state a = 0
state b = 0.5
param theta[neuron] = 1.0
param w = 0.25
output s
output m
a = a * sigmoid(w) + x - y * 0.5
b = b + (a - b) * 0.1
s = spike(a - theta, sigmoid(alpha = 4))
m = a * b + detach(s) * w
)";

// No input: the dynamics run on the states alone.
const char* kStateOnly = R"(
neuron oscillator
state v = 1.0
state w = 0.0
param k = 0.1
output s
v_old = v
v = v - k * w
w = w + k * v_old
s = spike(v - 0.5, rect(alpha = 1))
)";

std::vector<NamedProgram> test_programs() {
  std::vector<NamedProgram> out;
  for (auto [name, text] : {std::pair{"adaptive_lif", kAdaptiveLif}, std::pair{"izhikevich", kIzhikevich},
                            std::pair{"two_by_two", kTwoByTwo}, std::pair{"oscillator", kStateOnly}}) {
    out.push_back({name, Program::from_text(text, name)});
  }
  out.push_back({"every_op", testing::test_neuron("every_op")});
  out.push_back({"invariants", testing::test_neuron("invariants")});
  return out;
}

SequenceLayout layout_of(int code) {
  SequenceLayout l;
  l.same_each_step = (code & 1) != 0;
  l.same_each_neuron = (code & 2) != 0;
  return l;
}

// Every spec a runtime may ask for (fields that do not apply to a kind are left at defaults).
std::vector<KernelSpec> all_specs(DType storage) {
  std::vector<KernelSpec> out;
  for (KernelKind kind : {KernelKind::Inference, KernelKind::InferenceFinalState}) {
    for (bool seqs : {false, true}) {
      for (bool reverse : {false, true}) {
        KernelSpec s;
        s.kind = kind;
        s.storage = storage;
        s.store_state_seqs = seqs;
        s.reverse = reverse;
        out.push_back(s);
      }
    }
  }
  for (int ck : {0, 3}) {
    for (bool seqs : {false, true}) {
      KernelSpec s;
      s.kind = KernelKind::TrainingForward;
      s.storage = storage;
      s.store_state_seqs = seqs;
      s.checkpoint_every = ck;
      out.push_back(s);
    }
    for (int flags = 0; flags < 4; ++flags) {
      KernelSpec s;
      s.kind = KernelKind::Backward;
      s.storage = storage;
      s.grad_state_seqs = flags & 1;
      s.grad_final_states = flags & 2;
      s.checkpoint_every = ck;
      out.push_back(s);
    }
    // Broadcast gradient sequences (SequenceLayout codes 1-3: same each step, same each neuron, both).
    for (int code = 1; code < 4; ++code) {
      KernelSpec s;
      s.kind = KernelKind::Backward;
      s.storage = storage;
      s.grad_state_seqs = true;
      s.checkpoint_every = ck;
      s.grad_output_layouts = {layout_of(code)};
      s.grad_state_seq_layouts = {layout_of(4 - code)};
      out.push_back(s);
    }
  }
  return out;
}

const std::vector<DType> kDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64};

// The documented slot order, built independently of the generator.
std::vector<BufferSlot> expected_slots(const Program& p, const KernelSpec& spec) {
  const ir::Step& f = p.forward();
  const int in = f.num_inputs, st = f.num_states, out = f.num_outputs;
  std::vector<BufferSlot> s;
  auto add = [&](BufferRole r, int n, bool per_step, bool ck = false) {
    for (int i = 0; i < n; ++i) s.push_back({r, i, per_step, false, ck, {}});
  };
  // Gradient sequences carry the spec's layout (missing entries: plain sequences).
  auto add_grads = [&](BufferRole r, int n, const std::vector<SequenceLayout>& layouts) {
    for (int i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      s.push_back({r, i, true, false, false, k < layouts.size() ? layouts[k] : SequenceLayout()});
    }
  };
  auto add_params = [&](BufferRole r) {
    for (size_t i = 0; i < f.params.size(); ++i)
      s.push_back({r, int(i), false, f.params[i] == ir::ParamKind::Scalar, false, {}});
  };
  // Per-step saved values; bit-packed ones under pack_spikes.
  auto add_saved = [&] {
    const ir::Step& b = p.backward(spec.pack_spikes);
    for (size_t i = 0; i < b.saved.size(); ++i) s.push_back({BufferRole::Saved, int(i), true, false, false, {}, b.is_saved_packed(i)});
  };
  const int ck = spec.checkpoint_every;
  if (spec.kind != KernelKind::Backward) {
    add(BufferRole::Input, in, true);
    add(BufferRole::InitialState, st, false);
    add_params(BufferRole::Param);
    add(BufferRole::Output, out, true);
    for (size_t i = 0; i < spec.packed_outputs.size(); ++i) {
      if (spec.packed_outputs[i]) s.push_back({BufferRole::PackedOutput, int(i), true, false, false, {}, true});
    }
    if (spec.store_state_seqs) add(BufferRole::StateSeq, st, true);
    if (spec.kind != KernelKind::Inference) add(BufferRole::FinalState, st, false);
    if (spec.kind == KernelKind::TrainingForward) {
      if (ck > 0) add(BufferRole::Saved, st, true, true);
      else add_saved();
    }
  } else {
    if (ck > 0) {
      add(BufferRole::Saved, st, true, true);
      add(BufferRole::Input, in, true);
    } else {
      add_saved();
    }
    add_params(BufferRole::Param);
    add_grads(BufferRole::GradOutput, out, spec.grad_output_layouts);
    if (spec.grad_state_seqs) add_grads(BufferRole::GradStateSeq, st, spec.grad_state_seq_layouts);
    if (spec.grad_final_states) add(BufferRole::GradFinalState, st, false);
    add(BufferRole::GradInput, in, true);
    add(BufferRole::GradInitialState, st, false);
    add_params(BufferRole::GradParam);
    if (std::count(f.params.begin(), f.params.end(), ir::ParamKind::Scalar) > 0) add(BufferRole::Workspace, 1, false);
  }
  // Last, the seed: for every kernel that runs forward steps of a neuron that draws.
  if (p.uses_random() && (spec.kind != KernelKind::Backward || ck > 0)) add(BufferRole::Seed, 1, false);
  return s;
}

std::string describe(const BufferSlot& s) {
  std::ostringstream o;
  o << "{role " << int(s.role) << ", index " << s.index << ", per_step " << s.per_step << ", scalar "
    << s.scalar_param << ", checkpoint " << s.checkpoint << ", repeat " << s.layout.same_each_step
    << s.layout.same_each_neuron << ", packed " << s.packed << "}";
  return o.str();
}

void dump_source(const KernelSource& k) {
  const char* dir = std::getenv("SPIKEJIT_DUMP_DIR");
  if (dir == nullptr || *dir == '\0') return;
  std::ofstream(std::string(dir) + "/" + k.entry + ".cu", std::ios::binary) << k.source;
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// Structural checks of one generated source.
void check_structure(const Program& p, const KernelSpec& spec, const KernelSource& k) {
  const std::vector<BufferSlot> expected = expected_slots(p, spec);
  ASSERT_EQ(k.buffers.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const BufferSlot& a = k.buffers[i];
    const BufferSlot& e = expected[i];
    EXPECT_TRUE(a.role == e.role && a.index == e.index && a.per_step == e.per_step &&
                a.scalar_param == e.scalar_param && a.checkpoint == e.checkpoint &&
                a.layout.same_each_step == e.layout.same_each_step &&
                a.layout.same_each_neuron == e.layout.same_each_neuron && a.packed == e.packed)
        << "slot " << i << ": got " << describe(a) << ", expected " << describe(e);
  }
  ASSERT_EQ(k.variants.size(), 2u);
  const int wide = 16 / int(dtype_size(spec.storage));
  EXPECT_EQ(k.variants[0].elements_per_thread, wide);
  EXPECT_EQ(k.variants[1].elements_per_thread, 1);
  EXPECT_EQ(k.entry, k.variants[0].entry);
  EXPECT_EQ(k.elements_per_thread, k.variants[0].elements_per_thread);
  EXPECT_EQ(k.block_size, k.variants[0].block_size);
  const std::string prefix = std::string("spikejit_") + codegen::kernel_kind_name(spec.kind) + "_" +
                             p.hash().substr(0, 12) + "_";
  const ir::Step& f = p.forward();
  const bool scalar_params = std::count(f.params.begin(), f.params.end(), ir::ParamKind::Scalar) > 0;
  std::set<std::string> names;
  for (const codegen::KernelVariant& v : k.variants) {
    EXPECT_EQ(v.entry.rfind(prefix, 0), 0u) << v.entry;
    EXPECT_GT(v.block_size, 0);
    EXPECT_EQ(v.block_size & (v.block_size - 1), 0) << "block sizes are powers of two (tree reduction)";
    // Every entry is defined exactly once, with the ABI's single by-value argument.
    EXPECT_EQ(count_of(k.source, " " + v.entry + "(const SpikejitArgs a)"), 1u) << v.entry;
    names.insert(v.entry);
    const bool reduces = spec.kind == KernelKind::Backward && scalar_params;
    EXPECT_EQ(!v.reduce_entry.empty(), reduces);
    if (reduces) {
      EXPECT_EQ(count_of(k.source, " " + v.reduce_entry + "(const SpikejitArgs a)"), 1u);
      names.insert(v.reduce_entry);
      EXPECT_GT(v.workspace_bytes(1000), 0);
    } else {
      EXPECT_EQ(v.workspace_bytes(1000), 0);
    }
    EXPECT_EQ(v.blocks(0), 0);
    EXPECT_EQ(v.blocks(1), 1);
    const int64_t per_block = int64_t(v.block_size) * v.elements_per_thread;
    EXPECT_EQ(v.blocks(per_block), 1);
    EXPECT_EQ(v.blocks(per_block + 1), 2);
    EXPECT_EQ(v.blocks(int64_t(3) << 40), ((int64_t(3) << 40) + per_block - 1) / per_block);
  }
  EXPECT_EQ(names.size(), k.variants.size() * (k.variants[0].reduce_entry.empty() ? 1 : 2));
  EXPECT_EQ(count_of(k.source, "extern \"C\" __global__"), names.size());
  const std::string args = "struct SpikejitArgs {\n  long long steps;    // T\n  long long neurons;  // N\n"
                           "  void* buffers[kMaxBuffers];\n";
  bool strided = false;
  for (const BufferSlot& slot : k.buffers) strided = strided || slot.strided;
  EXPECT_NE(k.source.find(args + (strided ? "  SjReadLayout layouts[" : "};")), std::string::npos);
  EXPECT_NE(k.source.find("constexpr int kMaxBuffers = " + std::to_string(codegen::kMaxBuffers) + ";"),
            std::string::npos);
  // Self-contained (NVRTC needs no include path), no fast-math intrinsics, no float atomics.
  EXPECT_EQ(k.source.find("#include"), std::string::npos);
  for (const char* banned : {"__expf", "__logf", "__sinf", "__cosf", "__tanf", "__powf", "__fdividef", "atomicAdd"}) {
    EXPECT_EQ(k.source.find(banned), std::string::npos) << banned;
  }
  // T and N are run-time values: read from the arguments, never compiled in.
  EXPECT_NE(k.source.find("a.steps"), std::string::npos);
  EXPECT_NE(k.source.find("a.neurons"), std::string::npos);
}

std::vector<std::pair<std::string, KernelSource>> generate_all(const NamedProgram& np, DType dtype) {
  std::vector<std::pair<std::string, KernelSource>> out;
  for (const KernelSpec& spec : all_specs(dtype)) {
    const std::string what = np.name + " " + spec.key();
    SCOPED_TRACE(what);
    KernelSource k = codegen::generate(np.program, spec);
    check_structure(np.program, spec, k);
    dump_source(k);
    out.push_back({what, std::move(k)});
  }
  return out;
}

// Specs with bit-packed rows: every spike-valued output packed (inference kinds, the training
// forward with and without checkpoints) and the pack_spikes policy (training forward, backward).
std::vector<KernelSpec> packed_specs(const Program& p) {
  std::vector<KernelSpec> out;
  for (KernelKind kind : {KernelKind::Inference, KernelKind::InferenceFinalState, KernelKind::TrainingForward}) {
    KernelSpec s;
    s.kind = kind;
    s.packed_outputs = p.packable_outputs();
    s.store_state_seqs = kind != KernelKind::InferenceFinalState;
    s.pack_spikes = kind == KernelKind::TrainingForward;
    out.push_back(s);
  }
  KernelSpec checkpoints = out.back();
  checkpoints.pack_spikes = false;
  checkpoints.checkpoint_every = 3;
  out.push_back(checkpoints);
  KernelSpec bwd;
  bwd.kind = KernelKind::Backward;
  bwd.pack_spikes = true;
  bwd.grad_final_states = true;
  out.push_back(bwd);
  return out;
}

std::vector<NamedProgram> packed_programs() {
  std::vector<NamedProgram> out = test_programs();
  for (const char* stem : {"ste_lif", "two_thresholds", "mixed_outputs"}) {
    out.push_back({stem, Program::from_file(source_dir() + "/tests/neurons/" + stem + ".sj")});
  }
  for (const char* stem : {"if", "lif", "plif"}) {
    out.push_back({stem, Program::from_file(source_dir() + "/neurons/" + stem + ".sj")});
  }
  return out;
}

// The packed specs of every program, the dtypes rotating over them.
std::vector<std::pair<std::string, KernelSource>> generate_packed() {
  std::vector<std::pair<std::string, KernelSource>> out;
  size_t rotation = 0;
  for (const NamedProgram& np : packed_programs()) {
    for (KernelSpec spec : packed_specs(np.program)) {
      spec.storage = kDTypes[rotation++ % kDTypes.size()];
      const std::string what = np.name + " " + spec.key();
      SCOPED_TRACE(what);
      KernelSource k = codegen::generate(np.program, spec);
      check_structure(np.program, spec, k);
      dump_source(k);
      out.push_back({what, std::move(k)});
    }
  }
  return out;
}

TEST(Codegen, PackedRowsSlotsKeysAndChecks) {
  const std::vector<std::pair<std::string, KernelSource>> sources = generate_packed();
  EXPECT_EQ(sources.size(), packed_programs().size() * 5);
  const Program two = Program::from_file(source_dir() + "/tests/neurons/two_thresholds.sj");
  const Program mixed = Program::from_file(source_dir() + "/tests/neurons/mixed_outputs.sj");
  KernelSpec infer;
  KernelSpec packed = infer;
  packed.packed_outputs = {true, false};  // the trailing flag does not count
  EXPECT_NE(infer.key(), packed.key());
  EXPECT_NE(packed.key().find("packed_outputs=1"), std::string::npos) << packed.key();
  KernelSpec trimmed = infer;
  trimmed.packed_outputs = {true};
  EXPECT_EQ(packed.key(), trimmed.key());
  trimmed.packed_outputs = {false, false};
  EXPECT_EQ(infer.key(), trimmed.key());
  EXPECT_NE(codegen::generate(mixed, infer).entry, codegen::generate(mixed, packed).entry);
  // pack_spikes applies to the training kinds only; packed outputs to the forward kinds only.
  KernelSpec bits = infer;
  bits.pack_spikes = true;
  EXPECT_EQ(infer.key(), bits.key());
  KernelSpec train;
  train.kind = KernelKind::TrainingForward;
  bits.kind = KernelKind::TrainingForward;
  EXPECT_NE(train.key(), bits.key());
  KernelSpec bwd;
  bwd.kind = KernelKind::Backward;
  KernelSpec bwd_packed = bwd;
  bwd_packed.packed_outputs = {true};
  EXPECT_EQ(bwd.key(), bwd_packed.key());
  bwd_packed.pack_spikes = true;
  EXPECT_NE(bwd.key(), bwd_packed.key());
  // The kernel writing bit rows keeps warps together; the others do not.
  EXPECT_NE(codegen::generate(mixed, packed).source.find("constexpr bool kWritesPackedRows = true"), std::string::npos);
  EXPECT_NE(codegen::generate(mixed, infer).source.find("constexpr bool kWritesPackedRows = false"), std::string::npos);
  EXPECT_NE(codegen::generate(two, bits).source.find("kPackedSaved = 0x3ull"), std::string::npos);
  // Only spike-valued outputs; no pack_spikes with checkpoints.
  KernelSpec bad = infer;
  bad.packed_outputs = {false, false, true};  // mixed_outputs' m
  try {
    codegen::generate(mixed, bad);
    ADD_FAILURE() << "a packed non-spike output accepted";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "spec.packed_outputs");
    EXPECT_NE(std::string(e.what()).find("output 2"), std::string::npos) << e.what();
  }
  bad.packed_outputs = {true, true, false, true};
  EXPECT_THROW(codegen::generate(mixed, bad), ArgumentError);
  bits.checkpoint_every = 2;
  try {
    codegen::generate(two, bits);
    ADD_FAILURE() << "pack_spikes with checkpoints accepted";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "spec.pack_spikes");
  }
}

TEST(Codegen, KindNamesAndKeys) {
  EXPECT_STREQ(codegen::kernel_kind_name(KernelKind::Inference), "inference");
  EXPECT_STREQ(codegen::kernel_kind_name(KernelKind::InferenceFinalState), "inference_final_state");
  EXPECT_STREQ(codegen::kernel_kind_name(KernelKind::TrainingForward), "training_forward");
  EXPECT_STREQ(codegen::kernel_kind_name(KernelKind::Backward), "backward");
  std::set<std::string> keys;
  size_t count = 0;
  for (DType d : kDTypes) {
    for (const KernelSpec& s : all_specs(d)) {
      keys.insert(s.key());
      ++count;
    }
  }
  EXPECT_EQ(keys.size(), count) << "every distinct spec has a distinct key";
  // Fields that do not apply to a kind do not change its key (nor split caches).
  KernelSpec a;
  KernelSpec b = a;
  b.grad_state_seqs = b.grad_final_states = true;
  b.checkpoint_every = 5;
  EXPECT_EQ(a.key(), b.key());
  a.kind = b.kind = KernelKind::Backward;
  a.store_state_seqs = true;
  b.store_state_seqs = false;
  b.grad_state_seqs = b.grad_final_states = false;
  b.checkpoint_every = 0;
  EXPECT_EQ(a.key(), b.key());
  // Plain sequences at the end of the layouts, and layouts of state sequences that are not read,
  // do not change the key; a repeating one does, and forward kinds ignore them.
  b.grad_output_layouts = {SequenceLayout(), SequenceLayout()};
  b.grad_state_seq_layouts = {layout_of(3)};
  EXPECT_EQ(a.key(), b.key());
  b.grad_output_layouts = {SequenceLayout(), layout_of(1)};
  EXPECT_NE(a.key(), b.key());
  EXPECT_NE(b.key().find("grad_repeat=-s/"), std::string::npos) << b.key();
  a.kind = b.kind = KernelKind::TrainingForward;
  b.store_state_seqs = a.store_state_seqs;
  EXPECT_EQ(a.key(), b.key());
  b.reverse = true;  // inference kinds only
  EXPECT_EQ(a.key(), b.key());
  a.kind = b.kind = KernelKind::Inference;
  b.grad_output_layouts.clear();
  EXPECT_NE(a.key(), b.key());
}

TEST(Codegen, RejectsBadSpecs) {
  const Program p = Program::from_text(kAdaptiveLif);
  KernelSpec s;
  s.kind = KernelKind::Backward;
  for (int bad : {-1, 257, 100000}) {
    s.checkpoint_every = bad;
    try {
      codegen::generate(p, s);
      ADD_FAILURE() << "checkpoint_every " << bad << " accepted";
    } catch (const ArgumentError& e) {
      EXPECT_EQ(e.argument(), "spec.checkpoint_every");
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
  s.checkpoint_every = 0;
  s.storage = static_cast<DType>(17);
  EXPECT_THROW(codegen::generate(p, s), ArgumentError);
  s.storage = DType::F32;
  s.grad_output_layouts.assign(static_cast<size_t>(p.forward().num_outputs) + 1, layout_of(1));
  try {
    codegen::generate(p, s);
    ADD_FAILURE() << "a layout for a missing output accepted";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "spec.grad_output_layouts");
  }
  // Strided views: of existing per-neuron buffers only.
  KernelSpec forward;
  forward.strided_inputs = uint64_t{1} << p.forward().num_inputs;
  EXPECT_THROW(codegen::generate(p, forward), ArgumentError);
  forward.strided_inputs = 0;
  forward.strided_params = 1;
  const Program scalar = Program::from_text("neuron scaled\ninput x\nstate v = 0\nparam w = 0.5\noutput s\n"
                                            "v = v * w + x\ns = spike(v - 1)\n");
  try {
    codegen::generate(scalar, forward);
    ADD_FAILURE() << "a strided scalar parameter accepted";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "spec.strided_params");
  }
}

// The masks of strided views split kernels only where they apply: a forward reads no saved
// values, a per-step backward no inputs.
TEST(Codegen, StridedViewsSlotsAndKeys) {
  const Program p = Program::from_text(kAdaptiveLif);
  KernelSpec forward;
  forward.strided_inputs = 1;
  forward.strided_states = 1;
  forward.strided_saved = 1;
  KernelSpec plain_saved = forward;
  plain_saved.strided_saved = 0;
  EXPECT_EQ(forward.key(), plain_saved.key());
  EXPECT_NE(forward.key(), KernelSpec{}.key());
  const KernelSource f = codegen::generate(p, forward);
  int strided = 0;
  for (const codegen::BufferSlot& slot : f.buffers) {
    const bool expected = (slot.role == codegen::BufferRole::Input || slot.role == codegen::BufferRole::InitialState) &&
                          slot.index == 0;
    EXPECT_EQ(slot.strided, expected) << "role " << static_cast<int>(slot.role) << " " << slot.index;
    EXPECT_FALSE(slot.strided && codegen::accessed_as_rows(slot));
    strided += slot.strided;
  }
  EXPECT_EQ(strided, 2);
  EXPECT_NE(f.source.find("SjReadLayout layouts[2];"), std::string::npos);
  KernelSpec backward;
  backward.kind = KernelKind::Backward;
  backward.strided_inputs = 1;
  backward.strided_saved = 1;
  KernelSpec no_inputs = backward;
  no_inputs.strided_inputs = 0;
  EXPECT_EQ(backward.key(), no_inputs.key());  // per step: the inputs are not read
  backward.checkpoint_every = 4;
  no_inputs.checkpoint_every = 4;
  EXPECT_NE(backward.key(), no_inputs.key());
}

TEST(Codegen, TooManyBuffersIsAnError) {
  std::string text = "neuron wide\nstate v = 0\noutput s\n";
  std::string sum = "v";
  for (int i = 0; i < 70; ++i) {
    text += "input x" + std::to_string(i) + "\n";
    sum += " + x" + std::to_string(i);
  }
  text += "v = " + sum + "\ns = spike(v - 1)\n";
  const Program p = Program::from_text(text);
  try {
    codegen::generate(p, KernelSpec{});
    ADD_FAILURE() << "70 inputs accepted";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("64"), std::string::npos) << e.what();
  }
}

TEST(Codegen, BuiltinsEveryOptionKindAndDtype) {
  const std::vector<NamedProgram> programs = builtin_programs();
  ASSERT_EQ(programs.size(), 5u * (4 + 8 + 8));
  for (const NamedProgram& np : programs) {
    for (DType d : kDTypes) generate_all(np, d);
  }
}

TEST(Codegen, TestNeuronsEveryKindAndDtype) {
  for (const NamedProgram& np : test_programs()) {
    for (DType d : kDTypes) generate_all(np, d);
  }
}

// SpikingJelly's other neurons as shipped (the modules specialise only their constants).
std::vector<NamedProgram> shipped_programs() {
  std::vector<NamedProgram> out;
  for (const std::string& name : builtins::shipped_names()) {
    if (name != "if" && name != "lif" && name != "plif") out.push_back({name, Program(builtins::shipped_neuron(name))});
  }
  return out;
}

TEST(Codegen, ShippedNeuronsEveryKindAndDtype) {
  for (const NamedProgram& np : shipped_programs()) {
    for (DType d : kDTypes) generate_all(np, d);
  }
}

TEST(Codegen, DeterministicAndIndependentOfSizes) {
  // The same program and spec always give the same text; programs that differ only in a
  // constant give different sources and entries.
  const Program lif = Program::from_file(source_dir() + "/neurons/lif.sj");
  for (const KernelSpec& spec : all_specs(DType::F16)) {
    const KernelSource a = codegen::generate(lif, spec), b = codegen::generate(lif, spec);
    EXPECT_EQ(a.source, b.source);
    EXPECT_EQ(a.entry, b.entry);
  }
  const Program other(ir::with_constants(lif.neuron(), {{"tau", 3.0}}));
  const KernelSource a = codegen::generate(lif, KernelSpec{}), b = codegen::generate(other, KernelSpec{});
  EXPECT_NE(a.source, b.source);
  EXPECT_NE(a.entry, b.entry);
}

// Values of parameters and literals alone are computed once per thread (hoist_values): the costly
// ones (with a transcendental) that a changing value reads (r, q, the Bool exp(g) > 1.5) or that
// are results (gain = q * 2), not what only they read (-w, exp(-w), r * g), nor the cheap
// 0.1 * (1 - g), which the step recomputes. The step functions compute no transcendental.
TEST(Codegen, HoistsTheValuesOfParametersAloneThatTheStepsRead) {
  const Program p = testing::test_neuron("invariants");
  const ir::Step& fwd = p.forward();
  std::multiset<std::string> ops;
  for (ir::ValueId id : codegen::hoisted_values(fwd, {{"out.y", fwd.outputs}, {"out.s_next", fwd.next_states}})) {
    ops.insert(ir::op_info(fwd.nodes[id].op).name);
  }
  EXPECT_EQ(ops, (std::multiset<std::string>{"sigmoid", "add", "mul", "gt"})) << ir::to_string(fwd);
  for (KernelKind kind : {KernelKind::Inference, KernelKind::TrainingForward, KernelKind::Backward}) {
    KernelSpec spec;
    spec.kind = kind;
    const std::string source = codegen::generate(p, spec).source;
    const size_t step = source.find("ForwardOut forward_step("), hoist = source.find("void hoist_values(");
    ASSERT_NE(step, std::string::npos);
    ASSERT_NE(hoist, std::string::npos);
    const std::string step_body = source.substr(step, source.find("\n}\n", step) - step);
    EXPECT_EQ(step_body.find("sj_exp("), std::string::npos) << step_body;
    EXPECT_EQ(step_body.find("sj_sigmoid("), std::string::npos) << step_body;
    EXPECT_NE(source.find("sj_exp(", hoist), std::string::npos);
  }
}

TEST(Codegen, LiteralsAreExact) {
  // Constants reach the source with the value the CPU executor uses (the double rounded to
  // float): printed with enough digits to round-trip.
  const uint64_t seed = testing::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (SPIKEJIT_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mantissa(-10.0, 10.0);
  for (int i = 0; i < 20; ++i) {
    const double c = mantissa(rng) * std::pow(10.0, int(rng() % 9) - 4);
    SCOPED_TRACE("constant " + std::to_string(c));
    std::ostringstream text;
    text.precision(17);
    text << "neuron lit\ninput x\nstate v = 0\nconst c = " << c << "\noutput s\nv = v * c + x\ns = spike(v - 1)\n";
    const Program p = Program::from_text(text.str());
    for (DType d : {DType::F32, DType::F64}) {
      KernelSpec spec;
      spec.storage = d;
      const std::string src = codegen::generate(p, spec).source;
      const size_t at = src.find("sj_mul(", src.find(" forward_step(const ForwardIn in)"));
      ASSERT_NE(at, std::string::npos);
      // The literal's variable is the multiplication's second argument.
      const std::string args = src.substr(at + 7, src.find(')', at) - at - 7);
      const std::string var = args.substr(args.find(", ") + 2);
      const size_t def = src.find("const real " + var + " = ");
      ASSERT_NE(def, std::string::npos) << var;
      std::string lit = src.substr(def + var.size() + 14, src.find(';', def) - def - var.size() - 14);
      lit.erase(std::remove(lit.begin(), lit.end(), '('), lit.end());
      lit.erase(std::remove(lit.begin(), lit.end(), ')'), lit.end());
      if (d == DType::F32) {
        ASSERT_EQ(lit.back(), 'f') << lit;
        EXPECT_EQ(std::strtof(lit.c_str(), nullptr), static_cast<float>(c)) << lit;
      } else {
        EXPECT_EQ(std::strtod(lit.c_str(), nullptr), c) << lit;
      }
    }
  }
}

TEST(Codegen, PickVariant) {
  const Program lif = Program::from_file(source_dir() + "/neurons/lif.sj");
  const KernelSource k = codegen::generate(lif, KernelSpec{});
  EXPECT_EQ(&codegen::pick_variant(k, 4096, 132), &k.variants[1]);
  EXPECT_EQ(&codegen::pick_variant(k, 16384, 132), &k.variants[1]);
  EXPECT_EQ(&codegen::pick_variant(k, int64_t(4) << 20, 132), &k.variants[0]);
  EXPECT_EQ(&codegen::pick_variant(k, 262144, 132), &k.variants[0]);
  // Unaligned rows, or N not a multiple of the vector width: one neuron per thread.
  EXPECT_EQ(&codegen::pick_variant(k, int64_t(4) << 20, 132, false), &k.variants[1]);
  EXPECT_EQ(&codegen::pick_variant(k, (int64_t(4) << 20) + 2, 132), &k.variants[1]);
  EXPECT_THROW(codegen::pick_variant(k, 4096, 0), ArgumentError);
}

// ---- golden files ---------------------------------------------------------------------------

void check_golden(const std::string& name, const std::string& text) {
  const std::string path = source_dir() + "/tests/golden/" + name;
  const char* update = std::getenv("SPIKEJIT_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << text;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "missing golden file " << path << " (SPIKEJIT_UPDATE_GOLDEN=1 writes it)";
  std::ostringstream s;
  s << in.rdbuf();
  EXPECT_EQ(s.str(), text) << "generated source changed: review it, then SPIKEJIT_UPDATE_GOLDEN=1";
}

TEST(Codegen, Golden) {
  const Program lif = Program::from_file(source_dir() + "/neurons/lif.sj");
  const Program plif = Program::from_file(source_dir() + "/neurons/plif.sj");
  KernelSpec infer;
  check_golden("lif.inference.f32.cu", codegen::generate(lif, infer).source);
  KernelSpec bwd;
  bwd.kind = KernelKind::Backward;
  bwd.storage = DType::F16;
  bwd.grad_final_states = true;
  check_golden("plif.backward.f16.cu", codegen::generate(plif, bwd).source);
}

// ---- compilation ----------------------------------------------------------------------------


// Compiles every source for sm_90 on a few threads, and for sm_80 the sources whose code differs
// by architecture (bf16 conversions) and every third other one; returns the failures.
std::vector<std::string> compile_all(const std::vector<std::pair<std::string, KernelSource>>& sources) {
  std::vector<std::string> failures;
  std::mutex mutex;
  size_t next = 0;
  auto work = [&] {
    for (;;) {
      size_t i;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (next == sources.size()) return;
        i = next++;
      }
      const bool bf16 = sources[i].second.source.find("storage bfloat16") != std::string::npos;
      for (const char* arch : {"sm_90", "sm_80"}) {
        if (std::string(arch) == "sm_80" && !bf16 && i % 3 != 0) continue;
        try {
          const std::string cubin = runtime::compile_for_arch(sources[i].second.source, sources[i].second.entry, arch);
          if (cubin.empty()) throw Error("empty cubin");
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mutex);
          failures.push_back(sources[i].first + " (" + arch + "): " + e.what());
        }
      }
    }
  };
  const unsigned threads = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  return failures;
}

void expect_compiles(const std::vector<std::pair<std::string, KernelSource>>& sources) {
  const std::vector<std::string> failures = compile_all(sources);
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << sources.size()
                                << " sources failed; first:\n" << (failures.empty() ? "" : failures[0]);
}

// Every kind and spec of the test neurons, each dtype on a rotating share of the specs (all of
// them over the set), so that every code path of the bodies is compiled.
TEST(CodegenCompile, TestNeuronsEverySpec) {
  REQUIRE_NVRTC();
  std::vector<std::pair<std::string, KernelSource>> sources;
  size_t rotation = 0;
  for (const NamedProgram& np : test_programs()) {
    for (size_t d = 0; d < kDTypes.size(); ++d) {
      std::vector<std::pair<std::string, KernelSource>> all = generate_all(np, kDTypes[d]);
      for (size_t i = 0; i < all.size(); ++i) {
        if ((i + d + rotation) % kDTypes.size() == 0) sources.push_back(std::move(all[i]));
      }
    }
    ++rotation;
  }
  expect_compiles(sources);
}

// Kernels with bit-packed rows: packed outputs (ballots, one path per warp) and packed saved
// values (written by the training forward, read by the backward).
TEST(CodegenCompile, PackedSpikes) {
  REQUIRE_NVRTC();
  expect_compiles(generate_packed());
}

// The built-ins as SpikingJelly's modules use them: every option combination with the default
// surrogate (inference, training forward, backward), and every other surrogate in the backward
// (where surrogates appear) with the default options; the dtypes rotate.
TEST(CodegenCompile, Builtins) {
  REQUIRE_NVRTC();
  std::vector<std::pair<std::string, KernelSource>> sources;
  size_t rotation = 0;
  for (const NamedProgram& np : builtin_programs()) {
    const bool default_surrogate = np.name.find("_sg0_") != std::string::npos;
    const bool default_options = np.name.find("_hard") != std::string::npos &&
                                 np.name.find("_detach") == std::string::npos &&
                                 np.name.find("_nodecay") == std::string::npos;
    if (!default_surrogate && !default_options) continue;
    KernelSpec infer, train, bwd;
    infer.kind = KernelKind::InferenceFinalState;
    train.kind = KernelKind::TrainingForward;
    bwd.kind = KernelKind::Backward;
    bwd.grad_final_states = true;
    std::vector<KernelSpec> specs = {bwd};
    if (default_surrogate) specs = {infer, train, bwd};
    for (KernelSpec& spec : specs) {
      spec.storage = kDTypes[rotation++ % kDTypes.size()];
      sources.push_back({np.name + " " + spec.key(), codegen::generate(np.program, spec)});
    }
  }
  expect_compiles(sources);
}

// The kernels a module call of a shipped neuron takes (inference, training forward, backward),
// the dtypes rotating over them.
TEST(CodegenCompile, ShippedNeurons) {
  REQUIRE_NVRTC();
  std::vector<std::pair<std::string, KernelSource>> sources;
  size_t rotation = 0;
  for (const NamedProgram& np : shipped_programs()) {
    KernelSpec infer, train, bwd;
    infer.kind = KernelKind::InferenceFinalState;
    train.kind = KernelKind::TrainingForward;
    bwd.kind = KernelKind::Backward;
    bwd.grad_final_states = true;
    for (KernelSpec& spec : std::vector<KernelSpec>{infer, train, bwd}) {
      spec.storage = kDTypes[rotation++ % kDTypes.size()];
      sources.push_back({np.name + " " + spec.key(), codegen::generate(np.program, spec)});
    }
  }
  expect_compiles(sources);
}

// Checkpoint kernels of the built-ins (default options, as SpikingJelly's modules use them):
// segments unrolled into registers (small k) and kept in local memory (large k), the next segment
// prefetched (k = 16 at one element a thread) or not (k = 16 at 4 or 8), training forward and
// backward with and without final-state gradients; the dtypes rotate.
// Every kind with its read-only buffers strided: inputs, initial states, per-neuron parameters,
// per-step saved values (and inputs under checkpoints).
TEST(CodegenCompile, StridedViews) {
  REQUIRE_NVRTC();
  std::vector<std::pair<std::string, KernelSource>> sources;
  size_t rotation = 0;
  for (const NamedProgram& np : test_programs()) {
    KernelSpec infer, train, bwd, bwd_checkpoints;
    infer.kind = KernelKind::InferenceFinalState;
    train.kind = KernelKind::TrainingForward;
    bwd.kind = bwd_checkpoints.kind = KernelKind::Backward;
    bwd_checkpoints.checkpoint_every = 4;
    train.checkpoint_every = rotation % 2 == 0 ? 0 : 4;
    for (KernelSpec& spec : std::vector<KernelSpec>{infer, train, bwd, bwd_checkpoints}) {
      spec.storage = kDTypes[rotation++ % 3];
      uint64_t per_neuron = 0;
      for (size_t i = 0; i < np.program.forward().params.size(); ++i) {
        if (np.program.forward().params[i] == ir::ParamKind::PerNeuron) per_neuron |= uint64_t{1} << i;
      }
      spec.strided_params = per_neuron;
      const ir::Step& f = np.program.forward();
      const auto mask = [](int count) { return count >= 4 ? ~uint64_t{0} >> 60 : (uint64_t{1} << count) - 1; };
      spec.strided_inputs = mask(f.num_inputs);
      spec.strided_states = mask(f.num_states);
      spec.strided_saved = mask(static_cast<int>(np.program.backward().saved.size()));
      sources.push_back({np.name + " " + spec.key(), codegen::generate(np.program, spec)});
    }
  }
  expect_compiles(sources);
}

TEST(CodegenCompile, BuiltinCheckpoints) {
  REQUIRE_NVRTC();
  std::vector<std::pair<std::string, KernelSource>> sources;
  size_t rotation = 0;
  for (const char* stem : {"if", "lif", "plif"}) {
    const Program program = Program::from_file(source_dir() + "/neurons/" + stem + ".sj");
    for (int k : {16, kMaxCheckpointEvery}) {
      KernelSpec train, bwd, bwd_final;
      train.kind = KernelKind::TrainingForward;
      bwd.kind = bwd_final.kind = KernelKind::Backward;
      bwd_final.grad_final_states = true;
      for (KernelSpec spec : {train, bwd, bwd_final}) {
        spec.checkpoint_every = k;
        spec.storage = kDTypes[rotation++ % 3];  // f32, f16, bf16 (the CUDA dtypes)
        sources.push_back({std::string(stem) + " " + spec.key(), codegen::generate(program, spec)});
      }
    }
  }
  expect_compiles(sources);
}

}  // namespace
}  // namespace spikejit
