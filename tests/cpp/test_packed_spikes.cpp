// Packed spikes in the neuron kernels, on the CPU executor: outputs written as bit rows
// (PackedView, uint8 [T, ceil(N / 8)]) besides or instead of full width, and spikes saved as bits
// for the backward (the pack_spikes save policy). References: cpu::bit_spike_compress of each row
// of the full-width outputs, and the results of the default policy. Written buffers are
// poisoned (0xA5 bytes) first.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "spikejit/builtins.h"
#include "spikejit/compress.h"
#include "spikejit/cpu.h"
#include "spikejit/error.h"
#include "spikejit/program.h"
#include "support/random_seed.h"
#include "support/test_neurons.h"

namespace spikejit {
namespace {

using testing::SeededRng;
using testing::test_neuron;

constexpr unsigned char kPoison = 0xA5;

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Host memory of one storage dtype.
struct Host {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;

  Host(DType d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)) {
    bytes.assign(static_cast<size_t>(numel_of(shape)) * dtype_size(d), kPoison);
  }
  void set(int64_t i, double v) {
    unsigned char* at = bytes.data() + static_cast<size_t>(i) * dtype_size(dtype);
    const float f = static_cast<float>(v);
    const uint16_t h = dtype == DType::F16 ? float_to_half(f) : float_to_bfloat16(f);
    switch (dtype) {
      case DType::F32: std::memcpy(at, &f, 4); break;
      case DType::F64: std::memcpy(at, &v, 8); break;
      case DType::F16:
      case DType::BF16: std::memcpy(at, &h, 2); break;
    }
  }
  TensorView view() { return TensorView(bytes.data(), dtype, shape); }
};

// A bit-packed sequence, uint8 [T, ceil(N / 8)].
struct Bits {
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  Bits(int64_t steps, int64_t neurons) : shape{steps, packed_row_bytes(neurons)} {
    bytes.assign(static_cast<size_t>(numel_of(shape)), kPoison);
  }
  PackedView view() { return PackedView(bytes.data(), shape); }
};

Host random_host(SeededRng& rng, DType d, const std::vector<int64_t>& shape, double lo, double hi) {
  Host h(d, shape);
  for (int64_t i = 0; i < numel_of(shape); ++i) h.set(i, rng.uniform(lo, hi));
  return h;
}

// Row t of a [T, N] sequence, packed by cpu::bit_spike_compress: ceil(N / 8) bytes.
std::vector<uint8_t> compressed_row(Host& seq, int64_t t, int64_t neurons) {
  std::vector<uint8_t> out(static_cast<size_t>(packed_row_bytes(neurons)));
  void* row = seq.bytes.data() + static_cast<size_t>(t * neurons) * dtype_size(seq.dtype);
  cpu::bit_spike_compress(SpikeView(row, spike_dtype(seq.dtype), {neurons}),
                          SpikeView(out.data(), SpikeDType::U8, {packed_row_bytes(neurons)}));
  return out;
}

// Bits equal to the compressed rows of `seq`, row by row (every byte written: no poison left).
void expect_rows_of(Bits& bits, Host& seq, int64_t steps, int64_t neurons, const std::string& what) {
  const int64_t row_bytes = packed_row_bytes(neurons);
  for (int64_t t = 0; t < steps; ++t) {
    const std::vector<uint8_t> want = compressed_row(seq, t, neurons);
    const std::vector<uint8_t> got(bits.bytes.begin() + t * row_bytes, bits.bytes.begin() + (t + 1) * row_bytes);
    ASSERT_EQ(got, want) << what << ", row " << t;
  }
}

bool same_bytes(const Host& a, const Host& b) { return a.bytes == b.bytes; }

// One neuron's call: random inputs, initial states and parameters.
struct Call {
  const Program* program;
  DType dtype;
  int64_t steps, neurons;
  std::vector<int64_t> shape, seq;
  std::vector<Host> inputs, initial_states, params;

  Call(const Program& p, DType d, int64_t t, std::vector<int64_t> s, SeededRng& rng)
      : program(&p), dtype(d), steps(t), neurons(numel_of(s)), shape(std::move(s)) {
    seq = {steps};
    seq.insert(seq.end(), shape.begin(), shape.end());
    const ir::Step& f = p.forward();
    for (int i = 0; i < f.num_inputs; ++i) inputs.push_back(random_host(rng, d, seq, -1.0, 3.0));
    for (int i = 0; i < f.num_states; ++i) initial_states.push_back(random_host(rng, d, shape, -0.5, 1.0));
    for (ir::ParamKind k : f.params) {
      params.push_back(random_host(rng, d, k == ir::ParamKind::Scalar ? std::vector<int64_t>{1} : shape, -0.5, 1.2));
    }
  }
};

std::vector<TensorView> views(std::vector<Host>& hosts) {
  std::vector<TensorView> v;
  for (Host& h : hosts) v.push_back(h.view());
  return v;
}

enum class Kind { Inference, FinalState, Training };

// What one forward call wrote. Absent buffers stay in place (poisoned, not passed).
struct ForwardRun {
  std::vector<Host> outputs, state_seqs, final_states, saved;
  std::vector<Bits> packed_outputs, packed_saved;
  std::vector<bool> full, packed;  // per output: passed full width / packed
};

ForwardRun run_forward(Call& s, Kind kind, const std::vector<bool>& full, const std::vector<bool>& packed,
                       bool pack_spikes, int threads, cpu::Fused fused = cpu::Fused::Off) {
  const Program& p = *s.program;
  const ir::Step& f = p.forward();
  ForwardRun r;
  r.full = full;
  r.packed = packed;
  ForwardBuffers b;
  b.steps = s.steps;
  b.neuron_shape = s.shape;
  b.inputs = views(s.inputs);
  b.initial_states = views(s.initial_states);
  b.params = views(s.params);
  for (int i = 0; i < f.num_outputs; ++i) {
    r.outputs.emplace_back(s.dtype, s.seq);
    r.packed_outputs.emplace_back(s.steps, s.neurons);
  }
  for (int i = 0; i < f.num_states; ++i) {
    r.state_seqs.emplace_back(s.dtype, s.seq);
    r.final_states.emplace_back(s.dtype, s.shape);
  }
  if (kind == Kind::Training) {
    for (const SavedBuffer& sb : saved_layout(p, s.steps, s.shape, s.dtype, 0, pack_spikes)) {
      r.saved.emplace_back(s.dtype, sb.packed ? std::vector<int64_t>{0} : sb.shape);
      r.packed_saved.emplace_back(sb.packed ? s.steps : 0, s.neurons);
    }
  }
  for (int i = 0; i < f.num_outputs; ++i) {
    b.outputs.push_back(full[i] ? r.outputs[i].view() : TensorView());
    b.packed_outputs.push_back(packed[i] ? r.packed_outputs[i].view() : PackedView());
  }
  if (kind != Kind::Inference) b.final_states = views(r.final_states);
  b.state_seqs = views(r.state_seqs);
  const ir::Step& plan = p.backward(pack_spikes);
  for (size_t i = 0; i < r.saved.size(); ++i) {
    b.saved.push_back(plan.is_saved_packed(i) ? TensorView() : r.saved[i].view());
    if (pack_spikes) b.packed_saved.push_back(plan.is_saved_packed(i) ? r.packed_saved[i].view() : PackedView());
  }
  b.pack_spikes = pack_spikes;
  cpu::Options o;
  o.threads = threads;
  o.fused = fused;
  cpu::forward(p, b, o);
  return r;
}

struct BackwardRun {
  std::vector<Host> grad_inputs, grad_initial_states, grad_params;
};

BackwardRun run_backward(Call& s, ForwardRun& fr, std::vector<Host>& grad_outputs, bool pack_spikes,
                         cpu::Fused fused = cpu::Fused::Off) {
  const Program& p = *s.program;
  const ir::Step& f = p.forward();
  const ir::Step& plan = p.backward(pack_spikes);
  BackwardRun r;
  BackwardBuffers b;
  b.steps = s.steps;
  b.neuron_shape = s.shape;
  b.pack_spikes = pack_spikes;
  for (size_t i = 0; i < fr.saved.size(); ++i) {
    b.saved.push_back(plan.is_saved_packed(i) ? TensorView() : fr.saved[i].view());
    if (pack_spikes) b.packed_saved.push_back(plan.is_saved_packed(i) ? fr.packed_saved[i].view() : PackedView());
  }
  b.params = views(s.params);
  b.grad_outputs = views(grad_outputs);
  for (int i = 0; i < f.num_inputs; ++i) r.grad_inputs.emplace_back(s.dtype, s.seq);
  for (int i = 0; i < f.num_states; ++i) r.grad_initial_states.emplace_back(s.dtype, s.shape);
  for (Host& h : s.params) r.grad_params.emplace_back(s.dtype, h.shape);
  b.grad_inputs = views(r.grad_inputs);
  b.grad_initial_states = views(r.grad_initial_states);
  b.grad_params = views(r.grad_params);
  cpu::Options o;
  o.fused = fused;
  cpu::backward(p, b, o);
  return r;
}

struct NamedProgram {
  std::string name;
  Program program;
  // float16 / bfloat16 gradients equal the default policy's: it saves nothing that it rounds
  // where the pack_spikes policy keeps exact bits. (mixed_outputs' default policy saves h and
  // recomputes c = float(h > 0.5 and x < 2) from h rounded to the storage dtype; pack_spikes
  // saves c exactly.)
  bool same_16bit_gradients = true;
};

std::vector<NamedProgram> programs() {
  builtins::Options soft;
  soft.v_reset.reset();
  soft.detach_reset = true;
  return {{"if", Program(builtins::if_neuron())},
          {"lif soft detach", Program(builtins::lif_neuron(soft))},
          {"plif", Program(builtins::plif_neuron())},
          {"ste_lif", test_neuron("ste_lif")},
          {"two_thresholds", test_neuron("two_thresholds")},
          {"mixed_outputs", test_neuron("mixed_outputs"), false}};
}

const DType kDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16};

// A random shape: N from 0 to 2100 (mostly not a multiple of 8, across several 512-lane blocks),
// sometimes two or three dimensions.
std::vector<int64_t> random_shape(SeededRng& rng) {
  const int64_t n = rng.integer(0, 9) == 0 ? 8 * rng.integer(0, 260) : rng.integer(0, 2100);
  if (n % 6 == 0 && rng.integer(0, 1)) return {2, 3, n / 6};
  if (n % 2 == 0 && rng.integer(0, 1)) return {n / 2, 2};
  return {n};
}

// ---------------------------------------------------------------------------------------------

TEST(PackedSpikes, SpikeValuedRule) {
  const Program p = Program::from_text(R"(
neuron forms
input x
state v = 0
output s, c, one, zero, neg_zero, d, p, lo, hi, not_s, w, sum, twice, inv, raw, st
h = v + x
s = spike(h - 1, sigmoid(alpha = 4))
c = float(h > 0.5 and not (x < 0))
one = 1
zero = 0
neg_zero = -0.0
d = detach(s)
p = s * c
lo = min(s, c)
hi = max(s, c)
not_s = 1 - s
w = where(h > 0, s, c)
sum = s + c
twice = 2 * s
inv = 1 - h
raw = x
st = v
v = h * (1 - s)
)");
  const std::vector<bool> want = {true, true, true, true, false, true, true, true,
                                  true, true, true, false, false, false, false, false};
  EXPECT_EQ(p.packable_outputs(), want);
  // The per-node rule on the forward step: bool values count too.
  const std::vector<bool> nodes = ir::spike_valued(p.forward().nodes);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (p.forward().nodes[i].type == ir::Type::Bool) {
      EXPECT_TRUE(nodes[i]) << "%" << i;
    }
  }
}

TEST(PackedSpikes, SavePlanPrefersBitsWhereTheyAreCheaper) {
  // Default: the number of spikes (lo + hi) as one value. Packed: the two spikes as bits.
  const Program two = test_neuron("two_thresholds");
  EXPECT_EQ(two.backward().saved.size(), 1u);
  EXPECT_FALSE(two.backward().is_saved_packed(0));
  ASSERT_EQ(two.backward(true).saved.size(), 2u);
  EXPECT_TRUE(two.backward(true).is_saved_packed(0));
  EXPECT_TRUE(two.backward(true).is_saved_packed(1));
  // The reset gate 1 - s, as a value or as bits.
  const Program ste = test_neuron("ste_lif");
  ASSERT_EQ(ste.backward(true).saved.size(), 1u);
  EXPECT_TRUE(ste.backward(true).is_saved_packed(0));
  EXPECT_EQ(ste.backward(true).saved, ste.backward().saved);
  // LIF and PLIF need their potentials: nothing changes.
  for (const Program& p : {Program(builtins::lif_neuron()), Program(builtins::plif_neuron())}) {
    EXPECT_EQ(p.backward(true).saved, p.backward().saved);
    EXPECT_EQ(p.saved_inputs(true), p.saved_inputs());
    for (size_t i = 0; i < p.backward(true).saved.size(); ++i) EXPECT_FALSE(p.backward(true).is_saved_packed(i));
  }
  EXPECT_TRUE(two.backward().saved_packed.empty());  // the default policy has no flags
}

TEST(PackedSpikes, SavedLayoutReportsBitRows) {
  const Program two = test_neuron("two_thresholds");
  const std::vector<SavedBuffer> packed = saved_layout(two, 7, {3, 5}, DType::F16, 0, true);
  ASSERT_EQ(packed.size(), 2u);
  for (const SavedBuffer& b : packed) {
    EXPECT_TRUE(b.packed);
    EXPECT_EQ(b.shape, (std::vector<int64_t>{7, 2}));  // ceil(15 / 8)
    EXPECT_EQ(b.input, -1);
  }
  const std::vector<SavedBuffer> plain = saved_layout(two, 7, {3, 5}, DType::F16, 0);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_FALSE(plain[0].packed);
  EXPECT_EQ(plain[0].shape, (std::vector<int64_t>{7, 3, 5}));
  EXPECT_THROW(saved_layout(two, 7, {15}, DType::F32, 4, true), ArgumentError);  // no checkpoints
}

// Every kind writes the rows of bit_spike_compress; passing the output packed only gives the same
// bytes and changes nothing else; any thread count gives the same bytes.
TEST(PackedSpikes, OutputsAreRowsOfBitSpikeCompress) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (const NamedProgram& np : programs()) {
    const Program& p = np.program;
    for (DType d : kDTypes) {
      for (Kind kind : {Kind::Inference, Kind::FinalState, Kind::Training}) {
        const int64_t steps = rng.integer(0, 5) == 0 ? 0 : rng.integer(1, 9);
        Call s(p, d, steps, random_shape(rng), rng);
        SCOPED_TRACE(np.name + " " + dtype_name(d) + " kind " + std::to_string(static_cast<int>(kind)) + " T=" +
                     std::to_string(s.steps) + " N=" + std::to_string(s.neurons));
        const size_t outputs = p.packable_outputs().size();
        const std::vector<bool> all(outputs, true);
        const bool pack_spikes = rng.integer(0, 1) == 1;
        ForwardRun both = run_forward(s, kind, all, p.packable_outputs(), pack_spikes, rng.integer(1, 4));
        std::vector<bool> full(outputs);
        for (size_t i = 0; i < outputs; ++i) full[i] = !p.packable_outputs()[i];  // packed instead
        ForwardRun instead = run_forward(s, kind, full, p.packable_outputs(), pack_spikes, rng.integer(1, 4));
        for (size_t i = 0; i < outputs; ++i) {
          if (!p.packable_outputs()[i]) {
            EXPECT_TRUE(same_bytes(both.outputs[i], instead.outputs[i])) << "output " << i;
            continue;
          }
          expect_rows_of(both.packed_outputs[i], both.outputs[i], s.steps, s.neurons, "output " + std::to_string(i));
          EXPECT_EQ(both.packed_outputs[i].bytes, instead.packed_outputs[i].bytes) << "output " << i;
          if (s.neurons % 8 == 0) {  // the whole sequence's bit_spike_compress
            Bits whole(s.steps, s.neurons);
            cpu::bit_spike_compress(both.outputs[i].view(),
                                    SpikeView(whole.bytes.data(), SpikeDType::U8, {packed_bytes(s.steps * s.neurons)}));
            EXPECT_EQ(whole.bytes, both.packed_outputs[i].bytes);
          }
        }
        for (size_t i = 0; i < both.state_seqs.size(); ++i) {
          EXPECT_TRUE(same_bytes(both.state_seqs[i], instead.state_seqs[i])) << "state_seqs " << i;
          EXPECT_TRUE(same_bytes(both.final_states[i], instead.final_states[i])) << "final_states " << i;
        }
        for (size_t i = 0; i < both.saved.size(); ++i) {
          EXPECT_TRUE(same_bytes(both.saved[i], instead.saved[i])) << "saved " << i;
          EXPECT_EQ(both.packed_saved[i].bytes, instead.packed_saved[i].bytes) << "packed_saved " << i;
        }
      }
    }
  }
}

// The pack_spikes policy: the same outputs and final states as the default policy, the packed
// saved bits are the rows of what the default policy saves where both save the same value, and
// the gradients are the same bits (float16 / bfloat16: see NamedProgram), interpreted and on
// the fused steps alike.
TEST(PackedSpikes, SavedBitsGiveTheDefaultPolicysGradients) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (const NamedProgram& np : programs()) {
    const Program& p = np.program;
    const std::vector<ir::ValueId>& plain_saved = p.backward().saved;
    const ir::Step& packed_plan = p.backward(true);
    for (DType d : kDTypes) {
      for (int repeat = 0; repeat < 2; ++repeat) {
        const int64_t steps = rng.integer(0, 6) == 0 ? 0 : rng.integer(1, 12);
        Call s(p, d, steps, random_shape(rng), rng);
        SCOPED_TRACE(np.name + " " + dtype_name(d) + " T=" + std::to_string(s.steps) + " N=" +
                     std::to_string(s.neurons));
        std::vector<Host> grad_outputs;
        for (int i = 0; i < p.forward().num_outputs; ++i) grad_outputs.push_back(random_host(rng, d, s.seq, -1, 1));
        const std::vector<bool> all(p.packable_outputs().size(), true), none(all.size(), false);
        // The second repeat runs the packed policy on the fused steps (the same bits again).
        const cpu::Fused fused = repeat == 1 ? cpu::Fused::On : cpu::Fused::Off;
        ForwardRun plain = run_forward(s, Kind::Training, all, none, false, 0);
        ForwardRun packed = run_forward(s, Kind::Training, all, none, true, 0, fused);
        for (size_t i = 0; i < plain.outputs.size(); ++i) EXPECT_TRUE(same_bytes(plain.outputs[i], packed.outputs[i]));
        for (size_t i = 0; i < plain.final_states.size(); ++i) {
          EXPECT_TRUE(same_bytes(plain.final_states[i], packed.final_states[i]));
        }
        for (size_t i = 0; i < packed_plan.saved.size(); ++i) {
          if (!packed_plan.is_saved_packed(i)) continue;
          for (size_t j = 0; j < plain_saved.size(); ++j) {
            if (plain_saved[j] == packed_plan.saved[i]) {
              expect_rows_of(packed.packed_saved[i], plain.saved[j], s.steps, s.neurons, "saved " + std::to_string(i));
            }
          }
        }
        const BackwardRun want = run_backward(s, plain, grad_outputs, false);
        const BackwardRun got = run_backward(s, packed, grad_outputs, true, fused);
        if (dtype_size(d) == 2 && !np.same_16bit_gradients) continue;
        for (size_t i = 0; i < want.grad_inputs.size(); ++i) {
          EXPECT_TRUE(same_bytes(want.grad_inputs[i], got.grad_inputs[i])) << "grad_inputs " << i;
        }
        for (size_t i = 0; i < want.grad_initial_states.size(); ++i) {
          EXPECT_TRUE(same_bytes(want.grad_initial_states[i], got.grad_initial_states[i])) << "grad_initial_states " << i;
        }
        for (size_t i = 0; i < want.grad_params.size(); ++i) {
          EXPECT_TRUE(same_bytes(want.grad_params[i], got.grad_params[i])) << "grad_params " << i;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bad buffers: an ArgumentError naming the argument, what was expected and what came.

void expect_argument_error(const std::function<void()>& call, const std::string& argument,
                           const std::vector<std::string>& fragments) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one naming " << argument;
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
    for (const std::string& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

TEST(PackedSpikes, RejectsBadPackedBuffers) {
  SeededRng rng;
  const Program mixed = test_neuron("mixed_outputs");
  Call s(mixed, DType::F32, 4, {13}, rng);
  Host out0(DType::F32, s.seq), out1(DType::F32, s.seq), out2(DType::F32, s.seq);
  Bits bits(4, 13), other(4, 13);
  std::vector<uint8_t> short_rows(4);  // [4, 1]: floor(13 / 8) bytes a row
  auto forward = [&](const std::function<void(ForwardBuffers&)>& edit) {
    ForwardBuffers b;
    b.steps = 4;
    b.neuron_shape = {13};
    b.inputs = views(s.inputs);
    b.params = views(s.params);
    b.outputs = {out0.view(), out1.view(), out2.view()};
    b.packed_outputs = {bits.view(), PackedView(), PackedView()};
    edit(b);
    return [&mixed, b] { cpu::forward(mixed, b); };
  };
  EXPECT_NO_THROW(forward([](ForwardBuffers&) {})());
  expect_argument_error(forward([&](ForwardBuffers& b) { b.packed_outputs[0] = PackedView(short_rows.data(), {4, 1}); }),
                        "packed_outputs[0]", {"[T, ceil(N / 8)] = [4, 2]", "uint8[4, 1]"});
  expect_argument_error(forward([&](ForwardBuffers& b) { b.packed_outputs[0] = PackedView(bits.bytes.data(), {4, 13}); }),
                        "packed_outputs[0]", {"[4, 2]", "uint8[4, 13]"});
  expect_argument_error(forward([&](ForwardBuffers& b) { b.packed_outputs[2] = other.view(); }), "packed_outputs[2]",
                        {"'m'", "not spike-valued"});
  expect_argument_error(forward([&](ForwardBuffers& b) { b.packed_outputs.pop_back(); }), "packed_outputs",
                        {"3 tensors", "2 tensors"});
  expect_argument_error(forward([&](ForwardBuffers& b) {
                          b.outputs[1] = TensorView();
                          b.packed_outputs[0] = PackedView();
                        }),
                        "outputs[1]", {"packed_outputs[1]", "no tensor"});
  EXPECT_NO_THROW(forward([&](ForwardBuffers& b) {  // packed instead of full width
    b.outputs[0] = TensorView();
  })());
  expect_argument_error(forward([&](ForwardBuffers& b) { b.packed_outputs[1] = PackedView(out0.bytes.data(), {4, 2}); }),
                        "outputs[0]", {"overlaps packed_outputs[1]"});
  expect_argument_error(forward([&](ForwardBuffers& b) { b.packed_outputs[0] = PackedView(nullptr, {4, 2}); }),
                        "packed_outputs[0]", {"non-null"});
  expect_argument_error(forward([&](ForwardBuffers& b) { b.packed_outputs[0] = PackedView(bits.bytes.data(), {4, 2}, {1, 1}); }),
                        "packed_outputs[0]", {"contiguous"});
}

TEST(PackedSpikes, RejectsSavedBuffersOfTheWrongPolicy) {
  SeededRng rng;
  const Program two = test_neuron("two_thresholds");
  Call s(two, DType::F32, 3, {20}, rng);
  Host y(DType::F32, s.seq), sum(DType::F32, s.seq);
  Bits lo(3, 20), hi(3, 20);
  auto forward = [&](const std::function<void(ForwardBuffers&)>& edit) {
    ForwardBuffers b;
    b.steps = 3;
    b.neuron_shape = {20};
    b.inputs = views(s.inputs);
    b.outputs = {y.view()};
    b.pack_spikes = true;
    b.saved = {TensorView(), TensorView()};
    b.packed_saved = {lo.view(), hi.view()};
    edit(b);
    return [&two, b] { cpu::forward(two, b); };
  };
  EXPECT_NO_THROW(forward([](ForwardBuffers&) {})());
  EXPECT_NO_THROW(forward([&](ForwardBuffers& b) {  // the default policy
    b.pack_spikes = false;
    b.saved = {sum.view()};
    b.packed_saved.clear();
  })());
  expect_argument_error(forward([&](ForwardBuffers& b) { b.pack_spikes = false; }), "saved", {"1 tensor", "2 tensors"});
  expect_argument_error(forward([&](ForwardBuffers& b) {
                          b.pack_spikes = false;
                          b.saved = {sum.view()};
                        }),
                        "packed_saved", {"pack_spikes is false"});
  expect_argument_error(forward([&](ForwardBuffers& b) { b.saved[1] = sum.view(); }), "saved[1]",
                        {"saved packed, in packed_saved[1]"});
  expect_argument_error(forward([&](ForwardBuffers& b) { b.packed_saved[0] = PackedView(); }), "packed_saved[0]",
                        {"[T, ceil(N / 8)] = [3, 3]", "no tensor"});
  expect_argument_error(forward([&](ForwardBuffers& b) { b.packed_saved.clear(); }), "packed_saved",
                        {"2 tensors", "no tensors"});
  expect_argument_error(forward([&](ForwardBuffers& b) { b.checkpoint_every = 2; }), "pack_spikes",
                        {"checkpoint_every = 2"});
  expect_argument_error(forward([&](ForwardBuffers& b) { b.packed_saved[1] = lo.view(); }), "packed_saved[0]",
                        {"overlaps packed_saved[1]"});

  // The backward reads what the policy's forward wrote.
  Host grad_y = random_host(rng, DType::F32, s.seq, -1, 1), grad_x(DType::F32, s.seq);
  auto backward = [&](const std::function<void(BackwardBuffers&)>& edit) {
    BackwardBuffers b;
    b.steps = 3;
    b.neuron_shape = {20};
    b.pack_spikes = true;
    b.saved = {TensorView(), TensorView()};
    b.packed_saved = {lo.view(), hi.view()};
    b.grad_outputs = {grad_y.view()};
    b.grad_inputs = {grad_x.view()};
    edit(b);
    return [&two, b] { cpu::backward(two, b); };
  };
  EXPECT_NO_THROW(backward([](BackwardBuffers&) {})());
  expect_argument_error(backward([&](BackwardBuffers& b) { b.packed_saved[1] = PackedView(hi.bytes.data(), {3, 20}); }),
                        "packed_saved[1]", {"[3, 3]", "uint8[3, 20]"});
  expect_argument_error(backward([&](BackwardBuffers& b) { b.packed_saved = {PackedView(), hi.view()}; }),
                        "packed_saved[0]", {"no tensor"});
  expect_argument_error(backward([&](BackwardBuffers& b) { b.checkpoint_every = 1; }), "pack_spikes",
                        {"checkpoint_every = 1"});
  expect_argument_error(backward([&](BackwardBuffers& b) { b.packed_saved[0] = PackedView(grad_x.bytes.data(), {3, 3}); }),
                        "grad_inputs[0]", {"overlaps packed_saved[0]"});
}

}  // namespace
}  // namespace spikejit
