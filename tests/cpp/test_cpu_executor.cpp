// The CPU executor against references written here: a per-element scalar interpreter of the
// forward / backward Step (same ops, same order, so results agree to rounding of the reductions),
// and SpikingJelly's IF / LIF / PLIF equations written out directly in double precision.
// Also: buffer validation, fp16 / bf16 conversions, parallel_for.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/parallel.h"
#include "ir/scalar_ops.h"
#include "spikejit/buffers.h"
#include "spikejit/builtins.h"
#include "spikejit/cpu.h"
#include "spikejit/error.h"
#include "spikejit/program.h"
#include "spikejit/tensor.h"
#include "support/cpu_runs.h"
#include "support/strided_views.h"
#include "support/test_neurons.h"

namespace spikejit {
namespace {

using namespace testing::cpu_runs;

// ---------------------------------------------------------------------------------------------
// Neurons

// Two inputs, two states (one with a named default), a per-neuron and a scalar parameter, two
// outputs, and a wide mix of ops.
const char* kAdaptiveText = R"(
neuron adaptive
input x
input y
state v = 0.25
state a = a0
const a0 = 0.1, beta = 0.9
param theta[neuron] = 1.0
param g = 0.5
output s
output m
h = v * beta + x * g + 0.5 * tanh(y)
s = spike(h - theta - a, atan(alpha = 2))
a = a * 0.8 + s * 0.2 + 0.01 * sigmoid(y)
v = where(s > 0.5, h - theta, h)
m = min(h, clamp(y, -1, 1)) + exp(-abs(x)) * g
)";

// The next states are each other's previous values: the executor must not update in place.
const char* kSwapText = R"(
neuron swap
input x
state p = 1
state q = 0.5
output o
o = p * x + q * q
t = p
p = q + 0.5 * x
q = t
)";

// The backward's swap: b's gradient carry is a's incoming one as it is (b feeds only a), and a's
// (zero: nothing reads a) is written first: the carries must not be updated in place.
const char* kRelayText = R"(
neuron relay
input x
state a = 0.5
state b = 0.2
output o
o = x * x
a = b
b = x * 0.5
)";

// A state that nothing reads but itself, an output that is a state, a learnable scale.
const char* kCounterText = R"(
neuron counter
input x
state c = 0
state u = 0
param k = 1.5
output level
output count
u = u * 0.5 + k * x
c = c + float(u > 1)
level = u
count = c
)";

Program lif_program(double tau, bool decay_input, std::optional<double> v_reset, bool detach_reset,
                    ir::Surrogate sg = {ir::SurrogateKind::Sigmoid, {4.0}}) {
  builtins::Options o;
  o.tau = tau;
  o.decay_input = decay_input;
  o.v_reset = v_reset;
  o.detach_reset = detach_reset;
  o.v_threshold = 1.0;
  o.surrogate = sg;
  return Program(builtins::lif_neuron(o));
}

struct NamedProgram {
  std::string name;
  Program program;
};

std::vector<NamedProgram> all_programs() {
  builtins::Options plif;
  plif.init_tau = 3.0;
  plif.v_reset = std::nullopt;
  return {
      {"if", Program(builtins::if_neuron({}))},
      {"lif", lif_program(2.0, true, 0.0, false)},
      {"lif_soft_detach", lif_program(3.0, false, std::nullopt, true)},
      {"plif_soft", Program(builtins::plif_neuron(plif))},
      {"adaptive", Program::from_text(kAdaptiveText)},
      {"swap", Program::from_text(kSwapText)},
      {"relay", Program::from_text(kRelayText)},
      {"counter", Program::from_text(kCounterText)},
      {"invariants", testing::test_neuron("invariants")},
  };
}

// ---------------------------------------------------------------------------------------------
// Reference: a per-element interpreter of Steps

template <class F>
std::vector<F> eval_step(const ir::Step& s, const std::function<F(const ir::Node&)>& leaf) {
  std::vector<F> v(s.nodes.size());
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const ir::Node& n = s.nodes[i];
    if (n.op == ir::Op::Literal) {
      v[i] = static_cast<F>(n.value);
    } else if (ir::is_leaf(n.op)) {
      v[i] = leaf(n);
    } else {
      const int arity = ir::op_info(n.op).arity;
      const F a = v[n.args[0]];
      const F b = arity > 1 ? v[n.args[1]] : F(0);
      const F c = arity > 2 ? v[n.args[2]] : F(0);
      v[i] = ir::apply_op<F>(n.op, a, b, c);
    }
  }
  return v;
}

struct RefForward {
  std::vector<std::vector<double>> outputs, state_seqs, final_states, saved;  // flat [t * N + n]
};

template <class F>
RefForward reference_forward(const Problem& s) {
  const ir::Step& f = s.program.forward();
  const std::vector<ir::ValueId>& saved_ids = s.program.backward().saved;
  const int64_t T = s.steps, N = s.neurons;
  RefForward r;
  r.outputs.assign(f.num_outputs, std::vector<double>(T * N));
  r.state_seqs.assign(f.num_states, std::vector<double>(T * N));
  r.final_states.assign(f.num_states, std::vector<double>(N));
  r.saved.assign(saved_ids.size(), std::vector<double>(T * N));
  for (int64_t n = 0; n < N; ++n) {
    std::vector<F> state(f.num_states);
    for (int i = 0; i < f.num_states; ++i) {
      state[i] = s.initial_states.empty() ? static_cast<F>(ir::state_default(s.program.neuron(), i))
                                          : static_cast<F>(s.initial_states[i].get(n));
    }
    for (int64_t t = 0; t < T; ++t) {
      const int64_t at = t * N + n;
      const std::vector<F> v = eval_step<F>(f, [&](const ir::Node& leaf) -> F {
        if (leaf.op == ir::Op::Input) return static_cast<F>(s.inputs[leaf.index].get(at));
        if (leaf.op == ir::Op::State) return state[leaf.index];
        EXPECT_EQ(leaf.op, ir::Op::Param);
        return static_cast<F>(s.param(leaf.index, n));
      });
      for (int i = 0; i < f.num_outputs; ++i) r.outputs[i][at] = v[f.outputs[i]];
      for (size_t i = 0; i < saved_ids.size(); ++i) r.saved[i][at] = v[saved_ids[i]];
      for (int i = 0; i < f.num_states; ++i) state[i] = v[f.next_states[i]];
      for (int i = 0; i < f.num_states; ++i) r.state_seqs[i][at] = state[i];
    }
    for (int i = 0; i < f.num_states; ++i) r.final_states[i][n] = state[i];
  }
  return r;
}

struct RefBackward {
  std::vector<std::vector<double>> grad_inputs, grad_initial_states, grad_params;
};

template <class F>
RefBackward reference_backward(const Problem& s, const std::vector<Buffer>& saved, const Upstream& up) {
  const ir::Step& f = s.program.forward();
  const ir::Step& b = s.program.backward();
  const int64_t T = s.steps, N = s.neurons;
  RefBackward r;
  r.grad_inputs.assign(f.num_inputs, std::vector<double>(T * N));
  r.grad_initial_states.assign(f.num_states, std::vector<double>(N));
  for (size_t k = 0; k < f.params.size(); ++k) {
    r.grad_params.emplace_back(f.params[k] == ir::ParamKind::PerNeuron ? N : 1, 0.0);
  }
  auto value = [](const std::optional<Buffer>& buf, int64_t i) { return buf ? buf->get(i) : 0.0; };
  for (int64_t n = 0; n < N; ++n) {
    std::vector<F> carry(f.num_states);
    for (int i = 0; i < f.num_states; ++i) carry[i] = static_cast<F>(value(up.grad_final_states[i], n));
    std::vector<F> per_neuron(f.params.size(), F(0));
    for (int64_t t = T - 1; t >= 0; --t) {
      const int64_t at = t * N + n;
      const std::vector<F> v = eval_step<F>(b, [&](const ir::Node& leaf) -> F {
        switch (leaf.op) {
          case ir::Op::Saved:
            return static_cast<F>(saved[leaf.index].get(at));
          case ir::Op::GradOutput:
            return static_cast<F>(value(up.grad_outputs[leaf.index], at));
          case ir::Op::GradState:
            return carry[leaf.index] + static_cast<F>(value(up.grad_state_seqs[leaf.index], at));
          case ir::Op::Param:
            return static_cast<F>(s.param(leaf.index, n));
          default:
            ADD_FAILURE() << "unexpected leaf in the backward step";
            return F(0);
        }
      });
      for (int i = 0; i < f.num_inputs; ++i) r.grad_inputs[i][at] = v[b.grad_inputs[i]];
      for (int i = 0; i < f.num_states; ++i) carry[i] = v[b.grad_prev_states[i]];
      for (size_t k = 0; k < f.params.size(); ++k) per_neuron[k] += v[b.grad_params[k]];
    }
    for (int i = 0; i < f.num_states; ++i) r.grad_initial_states[i][n] = carry[i];
    for (size_t k = 0; k < f.params.size(); ++k) {
      r.grad_params[k][f.params[k] == ir::ParamKind::PerNeuron ? n : 0] += per_neuron[k];
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Running the executor

// Tolerances against the interpreter: elementwise results agree to rounding of the storage dtype;
// reductions over t and neurons run in a different order.
struct Tolerance {
  double rtol, atol;
};
Tolerance elementwise(bool f64) { return f64 ? Tolerance{1e-12, 1e-12} : Tolerance{2e-6, 1e-6}; }
Tolerance reduction(bool f64) { return f64 ? Tolerance{1e-12, 1e-12} : Tolerance{1e-6, 1e-6}; }
// A sum that lands near a rounding boundary of the storage dtype may round either way.
double storage_rtol(DType d) { return d == DType::F16 ? 1e-3 : d == DType::BF16 ? 8e-3 : 0.0; }

void check_forward(const Problem& s, const ForwardRun& run, bool f64) {
  const RefForward ref = f64 ? reference_forward<double>(s) : reference_forward<float>(s);
  const Tolerance tol = elementwise(f64);
  for (size_t i = 0; i < run.outputs.size(); ++i) {
    expect_close(run.outputs[i], ref.outputs[i], tol.rtol, tol.atol, "outputs[" + std::to_string(i) + "]");
  }
  for (size_t i = 0; i < run.state_seqs.size(); ++i) {
    expect_close(run.state_seqs[i], ref.state_seqs[i], tol.rtol, tol.atol,
                 "state_seqs[" + std::to_string(i) + "]");
  }
  for (size_t i = 0; i < run.final_states.size(); ++i) {
    expect_close(run.final_states[i], ref.final_states[i], tol.rtol, tol.atol,
                 "final_states[" + std::to_string(i) + "]");
  }
  for (size_t i = 0; i < run.saved.size(); ++i) {
    expect_close(run.saved[i], ref.saved[i], tol.rtol, tol.atol, "saved[" + std::to_string(i) + "]");
  }
}

void check_backward(const Problem& s, const std::vector<Buffer>& saved, const Upstream& up,
                    const BackwardRun& run, bool f64) {
  const RefBackward ref =
      f64 ? reference_backward<double>(s, saved, up) : reference_backward<float>(s, saved, up);
  const Tolerance tol = elementwise(f64), sum = reduction(f64);
  for (size_t i = 0; i < run.grad_inputs.size(); ++i) {
    expect_close(run.grad_inputs[i], ref.grad_inputs[i], tol.rtol, tol.atol,
                 "grad_inputs[" + std::to_string(i) + "]");
  }
  for (size_t i = 0; i < run.grad_initial_states.size(); ++i) {
    expect_close(run.grad_initial_states[i], ref.grad_initial_states[i], tol.rtol, tol.atol,
                 "grad_initial_states[" + std::to_string(i) + "]");
  }
  for (size_t k = 0; k < run.grad_params.size(); ++k) {
    // Per-neuron sums over t run in the same order as here; scalar ones add neurons differently.
    const bool scalar = s.program.forward().params[k] == ir::ParamKind::Scalar;
    const Tolerance t = scalar ? sum : tol;
    const double storage = scalar ? storage_rtol(run.grad_params[k].dtype()) : 0.0;
    expect_close(run.grad_params[k], ref.grad_params[k], t.rtol + storage, t.atol,
                 "grad_params[" + std::to_string(k) + "]");
  }
}

// ---------------------------------------------------------------------------------------------
// Forward and backward of every neuron against the interpreter

struct Shape {
  int64_t steps;
  std::vector<int64_t> neuron_shape;
};

TEST(CpuExecutor, EveryNeuronEveryDtypeMatchesTheInterpreter) {
  const std::vector<Shape> shapes = {{7, {1000}}, {1, {3, 5, 7}}, {4, {513}}, {3, {1}}};
  for (const NamedProgram& np : all_programs()) {
    for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      for (const Shape& shape : shapes) {
        Random rng;
        SCOPED_TRACE(np.name + " " + dtype_name(dtype) + " T=" + std::to_string(shape.steps) + " " +
                     rng.trace());
        Problem s = make_problem(np.program, shape.steps, shape.neuron_shape, dtype, rng);
        const bool f64 = dtype == DType::F64;
        ForwardRun fwd = run_forward(s, {dtype, true, true, true, {}});
        for (auto* group : {&fwd.outputs, &fwd.state_seqs, &fwd.final_states, &fwd.saved}) {
          for (const Buffer& b : *group) expect_finite(b, "forward result");
        }
        check_forward(s, fwd, f64);

        Upstream up = make_upstream(s, dtype, rng, true, true, true);
        BackwardRun bwd = run_backward(s, fwd.saved, up, dtype);
        for (auto* group : {&bwd.grad_inputs, &bwd.grad_initial_states, &bwd.grad_params}) {
          for (const Buffer& b : *group) expect_finite(b, "backward result");
        }
        check_backward(s, fwd.saved, up, bwd, f64);
      }
    }
  }
}

TEST(CpuExecutor, InferenceKindsWriteTheSameValuesAsTraining) {
  for (const NamedProgram& np : all_programs()) {
    Random rng;
    SCOPED_TRACE(np.name + " " + rng.trace());
    Problem s = make_problem(np.program, 6, {700}, DType::F32, rng);
    const ForwardRun training = run_forward(s, {DType::F32, true, true, true, {}});
    const ForwardRun with_seqs = run_forward(s, {DType::F32, true, false, false, {}});
    const ForwardRun final_only = run_forward(s, {DType::F32, false, true, false, {}});
    const ForwardRun outputs_only = run_forward(s, {DType::F32, false, false, false, {}});
    for (size_t i = 0; i < training.outputs.size(); ++i) {
      EXPECT_TRUE(with_seqs.outputs[i].same_bits(training.outputs[i]));
      EXPECT_TRUE(final_only.outputs[i].same_bits(training.outputs[i]));
      EXPECT_TRUE(outputs_only.outputs[i].same_bits(training.outputs[i]));
    }
    for (size_t i = 0; i < training.state_seqs.size(); ++i) {
      EXPECT_TRUE(with_seqs.state_seqs[i].same_bits(training.state_seqs[i]));
      EXPECT_TRUE(final_only.final_states[i].same_bits(training.final_states[i]));
    }
    check_forward(s, final_only, false);
  }
}

// A [T, ...] buffer with its rows in reverse order.
Buffer reversed_rows(const Buffer& b, int64_t steps) {
  Buffer out = b;
  const int64_t row = steps == 0 ? 0 : b.numel() / steps;
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t n = 0; n < row; ++n) out.set((steps - 1 - t) * row + n, b.get(t * row + n));
  return out;
}

TEST(CpuExecutor, ReverseEqualsAForwardOverReversedSequences) {
  for (const NamedProgram& np : all_programs()) {
    if (np.program.uses_random()) continue;  // (draws follow the row index, not the order of the steps)
    for (int64_t steps : {0, 1, 7}) {
      Random rng;
      SCOPED_TRACE(np.name + " T = " + std::to_string(steps) + " " + rng.trace());
      Problem s = make_problem(np.program, steps, {3, 70}, DType::F32, rng);
      Problem flipped = s;
      for (Buffer& x : flipped.inputs) x = reversed_rows(x, steps);
      ForwardRequest q{DType::F32, true, true, false, {}};
      const ForwardRun want = run_forward(flipped, q);
      q.reverse = true;
      const ForwardRun got = run_forward(s, q);
      for (size_t i = 0; i < got.outputs.size(); ++i)
        EXPECT_TRUE(got.outputs[i].same_bits(reversed_rows(want.outputs[i], steps))) << "output " << i;
      for (size_t i = 0; i < got.state_seqs.size(); ++i) {
        EXPECT_TRUE(got.state_seqs[i].same_bits(reversed_rows(want.state_seqs[i], steps))) << "state seq " << i;
        EXPECT_TRUE(got.final_states[i].same_bits(want.final_states[i])) << "final state " << i;
      }
    }
  }
}

TEST(CpuExecutor, ReverseIsForInferenceOnly) {
  Random rng;
  Problem s = make_problem(all_programs()[0].program, 4, {5}, DType::F32, rng);
  ForwardRequest q;
  q.reverse = true;  // a training forward (q.training)
  try {
    run_forward(s, q);
    FAIL() << "a reversed training forward was accepted";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "reverse");
  }
}

TEST(CpuExecutor, DefaultInitialStatesWhenNoneAreGiven) {
  for (const NamedProgram& np : all_programs()) {
    Random rng;
    SCOPED_TRACE(np.name + " " + rng.trace());
    Problem s = make_problem(np.program, 5, {37}, DType::F32, rng, /*with_initial_states=*/false);
    const ForwardRun run = run_forward(s, {DType::F32, true, true, true, {}});
    check_forward(s, run, false);

    // Entries that are present but absent tensors also take the defaults.
    ForwardBuffers fb;
    fb.steps = s.steps;
    fb.neuron_shape = s.neuron_shape;
    fb.inputs = views(s.inputs);
    fb.initial_states.assign(s.program.forward().num_states, TensorView());
    fb.params = views(s.params);
    std::vector<Buffer> outputs;
    for (int i = 0; i < s.program.forward().num_outputs; ++i) outputs.emplace_back(DType::F32, s.seq_shape());
    fb.outputs = views(outputs);
    cpu::forward(s.program, fb);
    for (size_t i = 0; i < outputs.size(); ++i) EXPECT_TRUE(outputs[i].same_bits(run.outputs[i]));
  }
}

TEST(CpuExecutor, MixedStorageDtypes) {
  Random rng;
  SCOPED_TRACE(rng.trace());
  Problem s = make_problem(Program::from_text(kAdaptiveText), 5, {4, 130}, DType::F16, rng);
  s.inputs[1] = Buffer(DType::BF16, s.seq_shape());
  s.inputs[1].randomize(rng, -1, 3);
  s.initial_states[0] = Buffer(DType::F32, s.neuron_shape);
  s.initial_states[0].randomize(rng, -0.5, 0.9);
  const ForwardRun run = run_forward(s, {DType::BF16, true, true, true, {}});
  check_forward(s, run, false);
}

TEST(CpuExecutor, ComputeF64OnF32Storage) {
  Random rng;
  SCOPED_TRACE(rng.trace());
  Problem s = make_problem(Program::from_text(kAdaptiveText), 6, {300}, DType::F32, rng);
  cpu::Options o;
  o.compute = cpu::Compute::F64;
  const ForwardRun run = run_forward(s, {DType::F64, true, true, true, o});
  check_forward(s, run, true);
  cpu::Options f32;
  f32.compute = cpu::Compute::F32;
  const ForwardRun single = run_forward(s, {DType::F64, true, true, true, f32});
  check_forward(s, single, false);
}

// A missing gradient is zero: every combination of absent groups equals passing zeros (up to
// the sign of zeros: a zero sequence gradient added to a carried -0 gives +0).
TEST(CpuExecutor, AbsentGradientsEqualZeros) {
  for (const NamedProgram& np : all_programs()) {
    Random rng;
    SCOPED_TRACE(np.name + " " + rng.trace());
    Problem s = make_problem(np.program, 5, {600}, DType::F32, rng);
    ForwardRun fwd = run_forward(s, {DType::F32, false, true, true, {}});
    for (int mask = 0; mask < 8; ++mask) {
      SCOPED_TRACE("present groups mask " + std::to_string(mask));
      Upstream absent = make_upstream(s, DType::F32, rng, mask & 1, mask & 2, mask & 4);
      Upstream zeros = absent;
      for (auto* group : {&zeros.grad_outputs, &zeros.grad_state_seqs, &zeros.grad_final_states}) {
        for (size_t i = 0; i < group->size(); ++i) {
          if ((*group)[i]) continue;
          const bool sequence = group != &zeros.grad_final_states;
          (*group)[i] = Buffer(DType::F32, sequence ? s.seq_shape() : s.neuron_shape);
          (*group)[i]->fill(0.0);
        }
      }
      const BackwardRun a = run_backward(s, fwd.saved, absent, DType::F32);
      const BackwardRun z = run_backward(s, fwd.saved, zeros, DType::F32);
      for (size_t i = 0; i < a.grad_inputs.size(); ++i)
        EXPECT_TRUE(a.grad_inputs[i].same_values(z.grad_inputs[i]));
      for (size_t i = 0; i < a.grad_initial_states.size(); ++i) {
        EXPECT_TRUE(a.grad_initial_states[i].same_values(z.grad_initial_states[i]));
      }
      for (size_t k = 0; k < a.grad_params.size(); ++k)
        EXPECT_TRUE(a.grad_params[k].same_values(z.grad_params[k]));
      check_backward(s, fwd.saved, absent, a, false);
    }

    // Empty vectors are absent groups too, and outputs the caller does not want may be left out.
    Upstream up = make_upstream(s, DType::F32, rng, true, false, false);
    const BackwardRun full = run_backward(s, fwd.saved, up, DType::F32);
    BackwardBuffers bb;
    bb.steps = s.steps;
    bb.neuron_shape = s.neuron_shape;
    bb.saved = views(fwd.saved);
    bb.params = views(s.params);
    for (auto& g : up.grad_outputs) bb.grad_outputs.push_back(g->view());
    std::vector<Buffer> grad_inputs;
    for (int i = 0; i < s.program.forward().num_inputs; ++i)
      grad_inputs.emplace_back(DType::F32, s.seq_shape());
    bb.grad_inputs = views(grad_inputs);
    cpu::backward(s.program, bb);
    for (size_t i = 0; i < grad_inputs.size(); ++i)
      EXPECT_TRUE(grad_inputs[i].same_bits(full.grad_inputs[i]));
  }
}

// Sequence gradients broadcast over T and/or S (stride 0, like PyTorch's expanded gradient of
// y.sum()) give the same bits as the same values written out in full.
TEST(CpuExecutor, BroadcastSequenceGradientsEqualTheirDenseCopies) {
  struct Layout {
    const char* name;
    bool same_each_step, same_each_neuron;
  };
  const Layout layouts[] = {
      {"same each step", true, false}, {"same each neuron", false, true}, {"one value", true, true}};
  for (const NamedProgram& np : all_programs()) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (const Layout& layout : layouts) {
        Random rng;
        SCOPED_TRACE(np.name + " " + dtype_name(dtype) + " " + layout.name + " " + rng.trace());
        Problem s = make_problem(np.program, 4, {5, 601}, dtype, rng);
        ForwardRun fwd = run_forward(s, {dtype, false, true, true, {}});
        const ir::Step& f = s.program.forward();
        const int64_t T = s.steps, N = s.neurons;
        // The compact values, their broadcast views and the dense copies.
        std::vector<int64_t> compact_shape;
        if (!layout.same_each_step) compact_shape.push_back(T);
        if (!layout.same_each_neuron) compact_shape.push_back(N);
        std::vector<int64_t> strides = {layout.same_each_step ? 0 : (layout.same_each_neuron ? 1 : N)};
        strides.push_back(layout.same_each_neuron ? 0 : s.neuron_shape[1]);
        strides.push_back(layout.same_each_neuron ? 0 : 1);
        std::vector<Buffer> compact;
        Upstream dense = make_upstream(s, dtype, rng, true, true, false);
        for (auto* group : {&dense.grad_outputs, &dense.grad_state_seqs}) {
          for (auto& g : *group) {
            compact.emplace_back(dtype, compact_shape);
            compact.back().randomize(rng, -1.0, 1.0);
            for (int64_t t = 0; t < T; ++t) {
              for (int64_t n = 0; n < N; ++n) {
                const int64_t at = (layout.same_each_step ? 0 : t) * (layout.same_each_neuron ? 1 : N) +
                                   (layout.same_each_neuron ? 0 : n);
                g->set(t * N + n, compact.back().get(at));
              }
            }
          }
        }
        const BackwardRun want = run_backward(s, fwd.saved, dense, dtype);

        BackwardBuffers bb;
        bb.steps = T;
        bb.neuron_shape = s.neuron_shape;
        bb.saved = views(fwd.saved);
        bb.params = views(s.params);
        size_t next = 0;
        for (auto* group : {&bb.grad_outputs, &bb.grad_state_seqs}) {
          const int count = group == &bb.grad_outputs ? f.num_outputs : f.num_states;
          for (int i = 0; i < count; ++i, ++next)
            group->push_back(TensorView(compact[next].data(), dtype, s.seq_shape(), strides));
        }
        BackwardRun got = want;
        for (auto* group : {&got.grad_inputs, &got.grad_initial_states, &got.grad_params}) {
          for (Buffer& b : *group) b.poison();
        }
        bb.grad_inputs = views(got.grad_inputs);
        bb.grad_initial_states = views(got.grad_initial_states);
        bb.grad_params = views(got.grad_params);
        cpu::backward(s.program, bb, {});
        for (size_t i = 0; i < got.grad_inputs.size(); ++i)
          EXPECT_TRUE(got.grad_inputs[i].same_bits(want.grad_inputs[i])) << "grad_inputs " << i;
        for (size_t i = 0; i < got.grad_initial_states.size(); ++i)
          EXPECT_TRUE(got.grad_initial_states[i].same_bits(want.grad_initial_states[i])) << "grad_states " << i;
        for (size_t k = 0; k < got.grad_params.size(); ++k)
          EXPECT_TRUE(got.grad_params[k].same_bits(want.grad_params[k])) << "grad_params " << k;
      }
    }
  }
}

// Inputs, initial states and per-neuron parameters read through strided views (broadcasts,
// transposes, slices; ReadLayout) give the same bits as their contiguous copies: inference,
// training per step (a saved input read through its view) and with checkpoints. N = 6 x 101
// neurons: blocks of lanes cross the runs of the views.
TEST(CpuExecutor, StridedReadsEqualTheirDenseCopies) {
  using namespace testing::strided_views;
  const int64_t T = 5, B = 6, C = 101;
  for (const NamedProgram& np : all_programs()) {
    for (DType dtype : {DType::F32, DType::BF16}) {
      for (Layout layout : kLayouts) {
        Random rng;
        SCOPED_TRACE(np.name + " " + dtype_name(dtype) + " " + layout_name(layout) + " " + rng.trace());
        Problem s = make_problem(np.program, T, {B, C}, dtype, rng);
        const ir::Step& f = s.program.forward();
        std::vector<Strided> strided;
        for (Buffer& x : s.inputs) {
          strided.push_back(make_strided(layout, true, T, B, C, dtype, rng, -1.0, 3.0));
          x = dense_copy(strided.back());
        }
        for (Buffer& v : s.initial_states) {
          strided.push_back(make_strided(layout, false, T, B, C, dtype, rng, -0.5, 0.9));
          v = dense_copy(strided.back());
        }
        for (size_t k = 0; k < f.params.size(); ++k) {
          if (f.params[k] != ir::ParamKind::PerNeuron) continue;
          const double init = s.program.neuron().params[k].init;
          strided.push_back(make_strided(layout, false, T, B, C, dtype, rng, init - 0.4, init + 0.4));
          s.params[k] = dense_copy(strided.back());
        }
        Upstream up = make_upstream(s, dtype, rng, true, true, true);
        for (int64_t every : {int64_t{0}, int64_t{2}}) {
          SCOPED_TRACE("checkpoint_every " + std::to_string(every));
          const ForwardRequest request{dtype, true, true, true, {}, every};
          s.input_views.clear();
          s.state_views.clear();
          s.param_views.clear();
          ForwardRun dense = run_forward(s, request);
          const BackwardRun dense_grads = run_backward(s, dense.saved, up, dtype, {}, every);
          size_t next = 0;
          for (size_t i = 0; i < s.inputs.size(); ++i) s.input_views.push_back(strided[next++].view());
          for (size_t i = 0; i < s.initial_states.size(); ++i) s.state_views.push_back(strided[next++].view());
          s.param_views = views(s.params);
          for (size_t k = 0; k < f.params.size(); ++k) {
            if (f.params[k] == ir::ParamKind::PerNeuron) s.param_views[k] = strided[next++].view();
          }
          ForwardRun got = run_forward(s, request);
          const BackwardRun grads = run_backward(s, got.saved, up, dtype, {}, every);
          for (auto [a, b] : {std::pair{&got.outputs, &dense.outputs}, {&got.state_seqs, &dense.state_seqs},
                              {&got.final_states, &dense.final_states}}) {
            for (size_t i = 0; i < a->size(); ++i) EXPECT_TRUE((*a)[i].same_bits((*b)[i])) << "forward result " << i;
          }
          for (auto [a, b] : {std::pair{&grads.grad_inputs, &dense_grads.grad_inputs},
                              {&grads.grad_initial_states, &dense_grads.grad_initial_states},
                              {&grads.grad_params, &dense_grads.grad_params}}) {
            for (size_t i = 0; i < a->size(); ++i) EXPECT_TRUE((*a)[i].same_bits((*b)[i])) << "gradient " << i;
          }
        }
      }
    }
  }
}

Program find_program(const std::string& name) {
  for (const NamedProgram& np : all_programs()) {
    if (np.name == name) return np.program;
  }
  throw Error("no test program named " + name);
}

// Blocks have a fixed size, so even sums over neurons have the same bits for any thread count
// (fp64 shows a change of summation order in the last bits, where fp32 storage could hide it).
TEST(CpuExecutor, SameBitsForAnyThreadCount) {
  for (const char* name : {"plif_soft", "adaptive", "counter"}) {
    for (DType dtype : {DType::F32, DType::F64}) {
      Random rng;
      SCOPED_TRACE(std::string(name) + " " + dtype_name(dtype) + " " + rng.trace());
      Problem s = make_problem(find_program(name), 9, {5, 4001}, dtype, rng);
      Upstream up = make_upstream(s, dtype, rng, true, true, true);
      std::optional<ForwardRun> first_fwd;
      std::optional<BackwardRun> first_bwd;
      for (int threads : {1, 2, 3, 7, 0}) {
        SCOPED_TRACE("threads " + std::to_string(threads));
        cpu::Options o;
        o.threads = threads;
        ForwardRun fwd = run_forward(s, {dtype, true, true, true, o});
        BackwardRun bwd = run_backward(s, fwd.saved, up, dtype, o);
        if (!first_fwd) {
          first_fwd = fwd;
          first_bwd = bwd;
          continue;
        }
        for (size_t i = 0; i < fwd.outputs.size(); ++i)
          EXPECT_TRUE(fwd.outputs[i].same_bits(first_fwd->outputs[i]));
        for (size_t i = 0; i < fwd.saved.size(); ++i)
          EXPECT_TRUE(fwd.saved[i].same_bits(first_fwd->saved[i]));
        for (size_t i = 0; i < bwd.grad_inputs.size(); ++i) {
          EXPECT_TRUE(bwd.grad_inputs[i].same_bits(first_bwd->grad_inputs[i]));
        }
        for (size_t k = 0; k < bwd.grad_params.size(); ++k) {
          EXPECT_TRUE(bwd.grad_params[k].same_bits(first_bwd->grad_params[k])) << "grad_params[" << k << "]";
        }
      }
    }
  }
}

// T = 0 and N = 0 write what must be written: final states = initial states, gradients of the
// initial states = gradients of the final states, parameter gradients = 0.
TEST(CpuExecutor, EmptySequencesAndEmptyLayers) {
  for (const NamedProgram& np : all_programs()) {
    for (const Shape& shape : std::vector<Shape>{{0, {300}}, {0, {2, 3}}, {4, {0}}, {0, {0}}, {3, {5, 0}}}) {
      Random rng;
      SCOPED_TRACE(np.name + " T=" + std::to_string(shape.steps) + " " + rng.trace());
      Problem s = make_problem(np.program, shape.steps, shape.neuron_shape, DType::F32, rng);
      ForwardRun fwd = run_forward(s, {DType::F32, true, true, true, {}});
      for (size_t i = 0; i < fwd.final_states.size(); ++i) {
        for (int64_t n = 0; n < s.neurons && shape.steps == 0; ++n) {
          EXPECT_EQ(fwd.final_states[i].get(n), s.initial_states[i].get(n));
        }
      }
      check_forward(s, fwd, false);
      Upstream up = make_upstream(s, DType::F32, rng, true, true, true);
      BackwardRun bwd = run_backward(s, fwd.saved, up, DType::F32);
      for (size_t i = 0; i < bwd.grad_initial_states.size(); ++i) {
        for (int64_t n = 0; n < s.neurons && shape.steps == 0; ++n) {
          EXPECT_EQ(bwd.grad_initial_states[i].get(n), up.grad_final_states[i]->get(n));
        }
      }
      for (const Buffer& g : bwd.grad_params) {
        for (int64_t i = 0; i < g.numel(); ++i) EXPECT_EQ(g.get(i), 0.0);
      }
      check_backward(s, fwd.saved, up, bwd, false);
    }
  }
}

TEST(CpuExecutor, NanAndInfPropagateLikeTheInterpreter) {
  for (const NamedProgram& np : all_programs()) {
    Random rng;
    SCOPED_TRACE(np.name + " " + rng.trace());
    Problem s = make_problem(np.program, 4, {50}, DType::F32, rng);
    const double specials[] = {std::numeric_limits<double>::quiet_NaN(),
                               std::numeric_limits<double>::infinity(),
                               -std::numeric_limits<double>::infinity()};
    for (int k = 0; k < 3; ++k) s.inputs[0].set(k * 7 + 3, specials[k]);
    ForwardRun fwd = run_forward(s, {DType::F32, true, true, true, {}});
    check_forward(s, fwd, false);
    Upstream up = make_upstream(s, DType::F32, rng, true, true, true);
    BackwardRun bwd = run_backward(s, fwd.saved, up, DType::F32);
    check_backward(s, fwd.saved, up, bwd, false);
  }
}

// ---------------------------------------------------------------------------------------------
// IF / LIF / PLIF against SpikingJelly's equations (reference section 1.3 / 1.4), in fp64.

struct LifCase {
  enum Kind { IF, LIF, PLIF } kind;
  double tau_or_init_tau;
  bool decay_input;
  std::optional<double> v_reset;
  bool detach_reset;
  ir::Surrogate surrogate;
};

double surrogate_grad(const ir::Surrogate& sg, double x) {
  const double alpha = sg.params[0];
  if (sg.kind == ir::SurrogateKind::Sigmoid) {
    const double s = 1.0 / (1.0 + std::exp(-alpha * x));
    return alpha * s * (1.0 - s);
  }
  const double z = M_PI / 2.0 * alpha * x;  // ATan
  return alpha / 2.0 / (1.0 + z * z);
}

TEST(CpuExecutor, BuiltinsMatchSpikingJellyEquations) {
  const ir::Surrogate sigmoid{ir::SurrogateKind::Sigmoid, {4.0}}, atan{ir::SurrogateKind::ATan, {2.0}};
  std::vector<LifCase> cases;
  for (bool detach : {false, true}) {
    for (std::optional<double> reset :
         {std::optional<double>(0.0), std::optional<double>(-0.2), std::optional<double>()}) {
      cases.push_back({LifCase::IF, 0, true, reset, detach, sigmoid});
      for (bool decay : {true, false}) {
        cases.push_back({LifCase::LIF, 3.0, decay, reset, detach, atan});
        cases.push_back({LifCase::PLIF, 2.5, decay, reset, detach, sigmoid});
      }
    }
  }
  for (const LifCase& c : cases) {
    Random rng;
    SCOPED_TRACE("kind " + std::to_string(c.kind) + " decay " + std::to_string(c.decay_input) + " reset " +
                 (c.v_reset ? std::to_string(*c.v_reset) : "soft") + " detach " +
                 std::to_string(c.detach_reset) + " " + rng.trace());
    builtins::Options o;
    o.v_threshold = 0.8;
    o.v_reset = c.v_reset;
    o.detach_reset = c.detach_reset;
    o.surrogate = c.surrogate;
    o.decay_input = c.decay_input;
    o.tau = c.tau_or_init_tau;
    o.init_tau = c.tau_or_init_tau;
    Program p(c.kind == LifCase::IF    ? builtins::if_neuron(o)
              : c.kind == LifCase::LIF ? builtins::lif_neuron(o)
                                       : builtins::plif_neuron(o));
    Problem s = make_problem(p, 8, {2, 150}, DType::F64, rng);
    ForwardRun fwd = run_forward(s, {DType::F64, true, true, true, {}});
    Upstream up = make_upstream(s, DType::F64, rng, true, true, true);
    BackwardRun bwd = run_backward(s, fwd.saved, up, DType::F64);

    const int64_t T = s.steps, N = s.neurons;
    const double v_th = o.v_threshold, v_reset = c.v_reset.value_or(0.0);
    const double r =
        c.kind == LifCase::PLIF ? 1.0 / (1.0 + std::exp(-s.params[0].get(0))) : 1.0 / c.tau_or_init_tau;
    std::vector<double> spikes(T * N), vseq(T * N), vfinal(N), grad_x(T * N), grad_v0(N);
    double grad_w = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      std::vector<double> h(T), v_prev(T);
      double v = s.initial_states[0].get(n);
      for (int64_t t = 0; t < T; ++t) {
        const double x = s.inputs[0].get(t * N + n);
        v_prev[t] = v;
        if (c.kind == LifCase::IF) {
          h[t] = v + x;
        } else if (c.decay_input) {
          h[t] = v + (x - (v - v_reset)) * r;
        } else {
          h[t] = v - (v - v_reset) * r + x;
        }
        const double sp = h[t] >= v_th ? 1.0 : 0.0;
        v = c.v_reset ? (1.0 - sp) * h[t] + sp * v_reset : h[t] - sp * v_th;
        spikes[t * N + n] = sp;
        vseq[t * N + n] = v;
      }
      vfinal[n] = v;
      double carry = up.grad_final_states[0]->get(n);
      for (int64_t t = T - 1; t >= 0; --t) {
        const double sg = surrogate_grad(c.surrogate, h[t] - v_th);
        const double sp = h[t] >= v_th ? 1.0 : 0.0;
        const double grad_s = up.grad_outputs[0]->get(t * N + n);
        const double g_v = carry + up.grad_state_seqs[0]->get(t * N + n);
        double grad_h;
        if (!c.v_reset) {
          grad_h = c.detach_reset ? grad_s * sg + g_v : (grad_s - v_th * g_v) * sg + g_v;
        } else {
          grad_h = c.detach_reset ? grad_s * sg + g_v * (1 - sp)
                                  : (grad_s + g_v * (v_reset - h[t])) * sg + g_v * (1 - sp);
        }
        if (c.kind == LifCase::IF) {
          grad_x[t * N + n] = grad_h;
          carry = grad_h;
        } else {
          grad_x[t * N + n] = c.decay_input ? grad_h * r : grad_h;
          carry = grad_h * (1 - r);
          const double dh_dr = c.decay_input ? (h[t] - v_prev[t]) / r : (v_reset - v_prev[t]);
          grad_w += grad_h * dh_dr * r * (1 - r);
        }
      }
      grad_v0[n] = carry;
    }
    expect_close(fwd.outputs[0], spikes, 0, 0, "spikes");
    expect_close(fwd.state_seqs[0], vseq, 1e-12, 1e-12, "v_seq");
    expect_close(fwd.final_states[0], vfinal, 1e-12, 1e-12, "v_final");
    expect_close(bwd.grad_inputs[0], grad_x, 1e-10, 1e-10, "grad_x");
    expect_close(bwd.grad_initial_states[0], grad_v0, 1e-10, 1e-10, "grad_v_init");
    if (c.kind == LifCase::PLIF) expect_close(bwd.grad_params[0], {grad_w}, 1e-9, 1e-9, "grad_w");
  }
}

// ---------------------------------------------------------------------------------------------
// Checkpoints (checkpoint_every = k > 0): the training forward stores the states before steps
// 0, k, 2k, ...; the backward recomputes each segment. With fp32 / fp64 storage the per-step
// policy saves exactly what the recomputation yields, so every result has the same bits.

std::vector<double> values_of(const Buffer& b) {
  std::vector<double> v(static_cast<size_t>(b.numel()));
  for (int64_t i = 0; i < b.numel(); ++i) v[static_cast<size_t>(i)] = b.get(i);
  return v;
}

// Row j of the checkpoint of state i: the state before step j*k, from its sequence [T, N]
// (flat) and the problem's initial states (or the declared default).
std::vector<double> expected_checkpoint(const Problem& s, const std::vector<double>& state_seq, int i,
                                        int64_t k) {
  const int64_t rows = (s.steps + k - 1) / k, N = s.neurons;
  std::vector<double> want(static_cast<size_t>(rows * N));
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t n = 0; n < N; ++n) {
      want[static_cast<size_t>(j * N + n)] =
          j > 0 ? state_seq[static_cast<size_t>((j * k - 1) * N + n)]
                : s.initial_states.empty() ? ir::state_default(s.program.neuron(), i)
                                           : s.initial_states[static_cast<size_t>(i)].get(n);
    }
  }
  return want;
}

// An absent initial state starts from its declared default as a given state of the call's
// dtype holds it (rounded through that dtype), as the CUDA kernels do: the same bits as passing
// a buffer filled with the default. (With 16-bit storage an unrounded 0.1 moved h by 5e-5 and
// flipped spikes against the GPU.)
TEST(CpuExecutor, AnAbsentInitialStateIsItsDefaultAsAGivenStateHoldsIt) {
  const Program p = Program::from_text(
      "neuron d\ninput x\nstate v = 0.1\noutput s\noutput m\nh = v * 0.5 + x\ns = spike(h - 1)\nm = h\n"
      "v = h * (1 - s)\n");
  for (DType dtype : {DType::F16, DType::BF16, DType::F32, DType::F64}) {
    for (cpu::Compute compute : {cpu::Compute::Auto, cpu::Compute::F64}) {
      Random rng;
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (compute == cpu::Compute::F64 ? " compute f64 " : " ") +
                   rng.trace());
      Problem s = make_problem(p, 4, {300}, dtype, rng, /*with_initial_states=*/false);
      cpu::Options o;
      o.compute = compute;
      const ForwardRun absent = run_forward(s, {dtype, true, true, true, o});
      s.initial_states = {Buffer(dtype, s.neuron_shape)};
      for (int64_t n = 0; n < s.neurons; ++n) s.initial_states[0].set(n, 0.1);
      const ForwardRun given = run_forward(s, {dtype, true, true, true, o});
      expect_same_bits(absent.outputs, given.outputs, "outputs");
      expect_same_bits(absent.state_seqs, given.state_seqs, "state_seqs");
      expect_same_bits(absent.final_states, given.final_states, "final_states");
      expect_same_bits(absent.saved, given.saved, "saved");
    }
  }
}

TEST(CpuCheckpoint, SameBitsAsSavingPerStep) {
  const int64_t T = 10;  // not a multiple of 3 or 7
  for (const NamedProgram& np : all_programs()) {
    for (DType dtype : {DType::F64, DType::F32}) {
      for (int64_t k : {int64_t(1), int64_t(2), int64_t(3), int64_t(7), T, T + 5}) {
        Random rng;
        SCOPED_TRACE(np.name + " " + dtype_name(dtype) + " k=" + std::to_string(k) + " " + rng.trace());
        // Two blocks of lanes, the second partial; initial states given on odd k only.
        Problem s = make_problem(np.program, T, {3, 200}, dtype, rng, k % 2 == 1);
        const bool seqs = k % 3 != 0;
        const ForwardRun per_step = run_forward(s, {dtype, true, true, true, {}});
        const ForwardRun ck = run_forward(s, {dtype, seqs, true, true, {}, k});
        expect_same_bits(ck.outputs, per_step.outputs, "outputs");
        expect_same_bits(ck.final_states, per_step.final_states, "final_states");
        if (seqs) expect_same_bits(ck.state_seqs, per_step.state_seqs, "state_seqs");
        ASSERT_EQ(ck.saved.size(), static_cast<size_t>(s.program.forward().num_states));
        for (size_t i = 0; i < ck.saved.size(); ++i) {
          expect_close(ck.saved[i], expected_checkpoint(s, values_of(per_step.state_seqs[i]), int(i), k), 0, 0,
                       "checkpoint " + std::to_string(i));
        }
        // Every combination of absent gradient groups, one per k.
        const int mask = static_cast<int>(k % 8);
        Upstream up = make_upstream(s, dtype, rng, mask & 1, mask & 2, mask & 4);
        std::vector<Buffer> per_step_saved = per_step.saved, checkpoints = ck.saved;
        const BackwardRun want = run_backward(s, per_step_saved, up, dtype);
        const BackwardRun got = run_backward(s, checkpoints, up, dtype, {}, k);
        expect_same_bits(got.grad_inputs, want.grad_inputs, "grad_inputs");
        expect_same_bits(got.grad_initial_states, want.grad_initial_states, "grad_initial_states");
        expect_same_bits(got.grad_params, want.grad_params, "grad_params");
      }
    }
  }
}

// fp16 / bf16 storage: checkpoints are fp32 and the recomputed saved values stay fp32 (what
// the CUDA kernels do), so the backward equals the interpreter fed with unrounded saved values.
TEST(CpuCheckpoint, HalfStorageRecomputesUnroundedValues) {
  for (const NamedProgram& np : all_programs()) {
    for (DType dtype : {DType::F16, DType::BF16}) {
      for (int64_t k : {int64_t(1), int64_t(4), int64_t(9)}) {
        Random rng;
        SCOPED_TRACE(np.name + " " + dtype_name(dtype) + " k=" + std::to_string(k) + " " + rng.trace());
        Problem s = make_problem(np.program, 9, {517}, dtype, rng);
        const ForwardRun ck = run_forward(s, {dtype, true, true, true, {}, k});
        ForwardRun sequences = ck;
        sequences.saved.clear();  // checked below
        check_forward(s, sequences, false);
        const RefForward ref = reference_forward<float>(s);
        const Tolerance tol = elementwise(false);
        for (size_t i = 0; i < ck.saved.size(); ++i) {
          EXPECT_EQ(ck.saved[i].dtype(), DType::F32);
          expect_close(ck.saved[i], expected_checkpoint(s, ref.state_seqs[i], int(i), k), tol.rtol, tol.atol,
                       "checkpoint " + std::to_string(i));
        }
        std::vector<Buffer> unrounded;  // fp64 buffers hold the fp32 values exactly
        for (const std::vector<double>& v : ref.saved) {
          unrounded.emplace_back(DType::F64, s.seq_shape());
          for (size_t e = 0; e < v.size(); ++e) unrounded.back().set(static_cast<int64_t>(e), v[e]);
        }
        Upstream up = make_upstream(s, dtype, rng, true, k != 4, k != 1);
        std::vector<Buffer> checkpoints = ck.saved;
        const BackwardRun got = run_backward(s, checkpoints, up, dtype, {}, k);
        check_backward(s, unrounded, up, got, false);
      }
    }
  }
}

TEST(CpuCheckpoint, EmptyAndSingleSteps) {
  for (const NamedProgram& np : all_programs()) {
    for (const Shape& shape : std::vector<Shape>{{0, {300}}, {1, {300}}, {1, {1}}, {4, {0}}, {0, {0}}}) {
      for (int64_t k : {int64_t(1), int64_t(3)}) {
        Random rng;
        SCOPED_TRACE(np.name + " T=" + std::to_string(shape.steps) + " k=" + std::to_string(k) + " " +
                     rng.trace());
        Problem s = make_problem(np.program, shape.steps, shape.neuron_shape, DType::F64, rng);
        const ForwardRun per_step = run_forward(s, {DType::F64, true, true, true, {}});
        const ForwardRun ck = run_forward(s, {DType::F64, true, true, true, {}, k});
        expect_same_bits(ck.outputs, per_step.outputs, "outputs");
        expect_same_bits(ck.final_states, per_step.final_states, "final_states");
        for (const Buffer& c : ck.saved) EXPECT_EQ(c.numel(), (shape.steps + k - 1) / k * s.neurons);
        Upstream up = make_upstream(s, DType::F64, rng, true, true, true);
        std::vector<Buffer> per_step_saved = per_step.saved, checkpoints = ck.saved;
        const BackwardRun want = run_backward(s, per_step_saved, up, DType::F64);
        const BackwardRun got = run_backward(s, checkpoints, up, DType::F64, {}, k);
        expect_same_bits(got.grad_inputs, want.grad_inputs, "grad_inputs");
        expect_same_bits(got.grad_initial_states, want.grad_initial_states, "grad_initial_states");
        expect_same_bits(got.grad_params, want.grad_params, "grad_params");
      }
    }
  }
}

// Computing in fp64 on fp32 storage: the checkpoints are fp64; any thread count, same bits.
TEST(CpuCheckpoint, ComputeF64CheckpointsAndThreadCounts) {
  Random rng;
  SCOPED_TRACE(rng.trace());
  Problem s = make_problem(find_program("adaptive"), 13, {5, 401}, DType::F32, rng);
  cpu::Options f64;
  f64.compute = cpu::Compute::F64;
  const ForwardRun per_step = run_forward(s, {DType::F64, false, true, true, f64});
  Upstream up = make_upstream(s, DType::F32, rng, true, true, true);
  std::vector<Buffer> per_step_saved = per_step.saved;
  const BackwardRun want = run_backward(s, per_step_saved, up, DType::F64, f64);
  for (int threads : {1, 2, 3, 0}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    cpu::Options o = f64;
    o.threads = threads;
    ForwardRun ck = run_forward(s, {DType::F64, false, true, true, o, 5});
    for (const Buffer& c : ck.saved) EXPECT_EQ(c.dtype(), DType::F64);
    expect_same_bits(ck.outputs, per_step.outputs, "outputs");
    const BackwardRun got = run_backward(s, ck.saved, up, DType::F64, o, 5);
    expect_same_bits(got.grad_inputs, want.grad_inputs, "grad_inputs");
    expect_same_bits(got.grad_params, want.grad_params, "grad_params");
  }
}

TEST(CpuCheckpoint, SavedLayout) {
  const Program p = Program::from_text(kAdaptiveText);  // 2 states
  const std::vector<SavedBuffer> per_step = saved_layout(p, 10, {3, 4}, DType::F16, 0);
  ASSERT_EQ(per_step.size(), p.backward().saved.size());
  for (const SavedBuffer& b : per_step) {
    EXPECT_EQ(b.shape, (std::vector<int64_t>{10, 3, 4}));
    EXPECT_EQ(b.dtype, DType::F16);
  }
  for (DType storage : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const std::vector<SavedBuffer> ck = saved_layout(p, 10, {3, 4}, storage, 3);
    ASSERT_EQ(ck.size(), 2u);
    for (const SavedBuffer& b : ck) {
      EXPECT_EQ(b.shape, (std::vector<int64_t>{4, 3, 4}));
      EXPECT_EQ(b.dtype, storage == DType::F64 ? DType::F64 : DType::F32);
      EXPECT_EQ(b.dtype, checkpoint_dtype(storage));
    }
  }
  EXPECT_EQ(saved_layout(p, 0, {5}, DType::F32, 4)[0].shape, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(saved_layout(p, 12, {}, DType::F32, 12)[0].shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(saved_layout(p, 12, {2}, DType::F32, kMaxCheckpointEvery)[0].shape, (std::vector<int64_t>{1, 2}));
  auto rejected = [&](int64_t steps, std::vector<int64_t> shape, DType storage, int64_t k, const std::string& arg) {
    try {
      saved_layout(p, steps, shape, storage, k);
      ADD_FAILURE() << "accepted " << arg;
    } catch (const ArgumentError& e) {
      EXPECT_EQ(e.argument(), arg) << e.what();
    }
  };
  rejected(10, {3}, DType::F32, -1, "checkpoint_every");
  rejected(10, {3}, DType::F32, kMaxCheckpointEvery + 1, "checkpoint_every");
  rejected(-1, {3}, DType::F32, 2, "steps");
  rejected(10, {-3}, DType::F32, 2, "neuron_shape");
  rejected(10, {3}, static_cast<DType>(7), 2, "storage");
}

// ---------------------------------------------------------------------------------------------
// Validation

class Validation : public ::testing::Test {
 protected:
  void SetUp() override { fwd_ = run_forward(s_, {DType::F32, true, true, true, {}}); }

  ForwardBuffers forward_buffers() {
    ForwardBuffers b;
    b.steps = s_.steps;
    b.neuron_shape = s_.neuron_shape;
    b.inputs = views(s_.inputs);
    b.initial_states = views(s_.initial_states);
    b.params = views(s_.params);
    b.outputs = views(fwd_.outputs);
    b.state_seqs = views(fwd_.state_seqs);
    b.final_states = views(fwd_.final_states);
    b.saved = views(fwd_.saved);
    return b;
  }

  BackwardBuffers backward_buffers() {
    if (grads_.empty()) {
      for (int i = 0; i < 2; ++i) grads_.emplace_back(DType::F32, s_.seq_shape());  // grad_outputs
      for (int i = 0; i < 2; ++i) grads_.emplace_back(DType::F32, s_.seq_shape());  // grad_inputs
      grads_.emplace_back(DType::F32, s_.neuron_shape);          // grad_params[0] (per neuron)
      grads_.emplace_back(DType::F32, std::vector<int64_t>{1});  // grad_params[1] (scalar)
      for (Buffer& g : grads_) g.randomize(rng_, -1, 1);
    }
    BackwardBuffers b;
    b.steps = s_.steps;
    b.neuron_shape = s_.neuron_shape;
    b.saved = views(fwd_.saved);
    b.params = views(s_.params);
    b.grad_outputs = {grads_[0].view(), grads_[1].view()};
    b.grad_inputs = {grads_[2].view(), grads_[3].view()};
    b.grad_params = {grads_[4].view(), grads_[5].view()};
    return b;
  }

  template <class Buffers>
  void expect_rejected(const Buffers& b, const std::string& argument, const std::string& text = "") {
    SCOPED_TRACE("argument " + argument);
    try {
      validate(s_.program, b);
      ADD_FAILURE() << "validate accepted bad buffers";
    } catch (const ArgumentError& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(argument), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
    // The executor validates before touching anything.
    if constexpr (std::is_same_v<Buffers, ForwardBuffers>) {
      EXPECT_THROW(cpu::forward(s_.program, b), ArgumentError);
    } else {
      EXPECT_THROW(cpu::backward(s_.program, b), ArgumentError);
    }
  }

  Random rng_;
  Problem s_ = make_problem(Program::from_text(kAdaptiveText), 3, {2, 8}, DType::F32, rng_);
  ForwardRun fwd_;
  std::vector<Buffer> grads_;
};

TEST_F(Validation, ValidBuffersPass) {
  SCOPED_TRACE(rng_.trace());
  EXPECT_NO_THROW(validate(s_.program, forward_buffers()));
  EXPECT_NO_THROW(validate(s_.program, backward_buffers()));
}

TEST_F(Validation, WrongCounts) {
  SCOPED_TRACE(rng_.trace());
  ForwardBuffers b = forward_buffers();
  b.inputs.pop_back();
  expect_rejected(b, "inputs", "2 tensors");
  b = forward_buffers();
  b.outputs.push_back(b.outputs[0]);
  expect_rejected(b, "outputs");
  b = forward_buffers();
  b.state_seqs.pop_back();
  expect_rejected(b, "state_seqs");
  b = forward_buffers();
  b.initial_states.pop_back();
  expect_rejected(b, "initial_states");
  b = forward_buffers();
  b.params.pop_back();
  expect_rejected(b, "params");
  b = forward_buffers();
  b.saved.pop_back();
  expect_rejected(b, "saved");
  BackwardBuffers g = backward_buffers();
  g.grad_outputs.pop_back();
  expect_rejected(g, "grad_outputs");
  g = backward_buffers();
  g.grad_params.pop_back();
  expect_rejected(g, "grad_params");
  g = backward_buffers();
  g.saved.clear();
  expect_rejected(g, "saved");
}

TEST_F(Validation, WrongShapes) {
  SCOPED_TRACE(rng_.trace());
  Buffer short_seq(DType::F32, {2, 2, 8}), flat(DType::F32, {16}), scalar(DType::F32, {}),
      pair(DType::F32, {2});
  ForwardBuffers b = forward_buffers();
  b.outputs[0] = short_seq.view();
  expect_rejected(b, "outputs[0]", "[T, *S] = [3, 2, 8]");
  b = forward_buffers();
  b.initial_states[1] = flat.view();
  expect_rejected(b, "initial_states[1]", "float32[16]");
  b = forward_buffers();
  b.params[0] = scalar.view();  // per-neuron parameter
  expect_rejected(b, "params[0]");
  b = forward_buffers();
  b.params[1] = pair.view();  // scalar parameter
  expect_rejected(b, "params[1]", "[] or [1]");
  b = forward_buffers();
  b.final_states[0] = short_seq.view();
  expect_rejected(b, "final_states[0]");
  BackwardBuffers g = backward_buffers();
  g.grad_params[0] = scalar.view();
  expect_rejected(g, "grad_params[0]");
  g = backward_buffers();
  g.grad_inputs[1] = flat.view();
  expect_rejected(g, "grad_inputs[1]");
  b = forward_buffers();
  b.steps = -1;
  expect_rejected(b, "steps");
  b = forward_buffers();
  b.neuron_shape = {2, -8};
  expect_rejected(b, "neuron_shape");
  b = forward_buffers();
  b.steps = int64_t(1) << 40;
  b.neuron_shape = {int64_t(1) << 30};
  expect_rejected(b, "steps");
}

TEST_F(Validation, MissingDtypeNullAndStrides) {
  SCOPED_TRACE(rng_.trace());
  ForwardBuffers b = forward_buffers();
  b.inputs[0] = TensorView();
  expect_rejected(b, "inputs[0]", "no tensor");
  b = forward_buffers();
  b.outputs[1] = TensorView();
  expect_rejected(b, "outputs[1]");
  b = forward_buffers();
  b.inputs[1].dtype = static_cast<DType>(9);
  expect_rejected(b, "inputs[1]", "dtype");
  b = forward_buffers();
  b.state_seqs[0].data = nullptr;
  expect_rejected(b, "state_seqs[0]", "null");
  b = forward_buffers();
  b.inputs[0].strides = {16, -8, 1};
  expect_rejected(b, "inputs[0]", "non-negative strides");
  b = forward_buffers();
  b.outputs[0].strides = {16, 8, 1};
  EXPECT_NO_THROW(validate(s_.program, b));
  b.outputs[0].strides = {32, 16, 2};
  expect_rejected(b, "outputs[0]", "expected a contiguous tensor");
  BackwardBuffers g = backward_buffers();
  g.grad_params[1].strides = {4};  // size-1 dimensions may have any stride
  EXPECT_NO_THROW(validate(s_.program, g));
  g = backward_buffers();
  g.grad_inputs[0].strides = {1, 1, 1};
  expect_rejected(g, "grad_inputs[0]", "expected a contiguous tensor");
}

// Read-only buffers may be strided views (ReadLayout), at most kMaxStridedReads in one call;
// written ones, scalar parameters and gradients (but for the broadcast sequence gradients) not.
TEST_F(Validation, StridedReadsOnlyWhereAllowed) {
  SCOPED_TRACE(rng_.trace());
  ForwardBuffers b = forward_buffers();
  b.inputs[0].strides = {1, 3, 6};  // transposed
  b.inputs[1].strides = {0, 8, 1};  // the same each step
  b.initial_states[0].strides = {0, 1};  // one value per channel
  b.params[0].strides = {0, 0};  // per neuron: one value for all
  EXPECT_NO_THROW(validate(s_.program, b));
  BackwardBuffers g = backward_buffers();
  g.saved[0].strides = {1, 1, 1};  // the per-step backward only reads what was saved
  g.params[0].strides = {1, 2};
  EXPECT_NO_THROW(validate(s_.program, g));
  g.grad_final_states = {TensorView(grads_[0].data(), DType::F32, s_.neuron_shape, {0, 1}), TensorView()};
  expect_rejected(g, "grad_final_states[0]", "expected a contiguous tensor");
  g = backward_buffers();
  g.grad_params[0].strides = {0, 1};
  expect_rejected(g, "grad_params[0]", "expected a contiguous tensor");
  // A strided view spans from its first element to its last: a written buffer may not overlap it.
  b = forward_buffers();
  b.inputs[0] = TensorView(b.outputs[0].data, DType::F32, b.inputs[0].shape, {0, 0, 0});
  expect_rejected(b, "outputs[0]", "overlaps inputs[0]");

  // kMaxStridedReads + 1 strided inputs.
  std::string text = "neuron many\n";
  std::string sum = "0";
  for (int i = 0; i <= kMaxStridedReads; ++i) {
    text += "input x" + std::to_string(i) + "\n";
    sum += " + x" + std::to_string(i);
  }
  text += "state v = 0\noutput s\nv = v + " + sum + "\ns = spike(v - 1.0, atan(alpha = 2))\n";
  const Program many = Program::from_text(text);
  Buffer x(DType::F32, {1}), out(DType::F32, s_.seq_shape());
  x.randomize(rng_, 0.0, 1.0);
  ForwardBuffers m;
  m.steps = s_.steps;
  m.neuron_shape = s_.neuron_shape;
  for (int i = 0; i <= kMaxStridedReads; ++i) {
    m.inputs.push_back(TensorView(x.data(), DType::F32, s_.seq_shape(), {0, 0, 0}));
  }
  m.outputs = {out.view()};
  try {
    validate(many, m);
    ADD_FAILURE() << "validate accepted " << kMaxStridedReads + 1 << " strided views";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "inputs[" + std::to_string(kMaxStridedReads) + "]") << e.what();
    EXPECT_NE(std::string(e.what()).find("at most " + std::to_string(kMaxStridedReads) + " strided views"),
              std::string::npos) << e.what();
  }
  Buffer dense(DType::F32, s_.seq_shape());
  m.inputs.back() = dense.view();  // kMaxStridedReads strided views and a contiguous tensor
  EXPECT_NO_THROW(validate(many, m));
}

// Dimensions of S merge where their strides chain (a broadcast run included); size-1 ones drop.
TEST(ReadLayoutTest, MergesChainedDimensionsAndLimitsTheRest) {
  ReadLayout l;
  // [T, B, C, H, W] = [4, 2, 3, 5, 7] expanded from a per-step, per-channel [4, 1, 3, 1, 1].
  ASSERT_TRUE(read_layout(TensorView(nullptr, DType::F32, {4, 2, 3, 5, 7}, {3, 0, 1, 0, 0}), true, &l));
  EXPECT_EQ(l.step_stride, 3);
  ASSERT_EQ(l.dims, 3);
  EXPECT_EQ(l.sizes[0], 35);
  EXPECT_EQ(l.strides[0], 0);
  EXPECT_EQ(l.sizes[1], 3);
  EXPECT_EQ(l.strides[1], 1);
  EXPECT_EQ(l.sizes[2], 2);
  EXPECT_EQ(l.strides[2], 0);
  EXPECT_EQ(l.offset(2, 105 + 35 + 1), 2 * 3 + 1);  // step 2, neuron (b = 1, c = 1, hw = 1): channel 1
  // Contiguous: one dimension; size-1 dimensions drop whatever their stride.
  ASSERT_TRUE(read_layout(TensorView(nullptr, DType::F32, {2, 1, 6}, {6, 99, 1}), false, &l));
  ASSERT_EQ(l.dims, 1);
  EXPECT_EQ(l.sizes[0], 12);
  EXPECT_EQ(l.strides[0], 1);
  // Five dimensions that do not chain: one too many; a negative stride: none.
  EXPECT_FALSE(read_layout(TensorView(nullptr, DType::F32, {2, 2, 2, 2, 2}, {1, 2, 4, 8, 16}), false, &l));
  ASSERT_TRUE(read_layout(TensorView(nullptr, DType::F32, {2, 2, 2, 2}, {1, 2, 4, 8}), false, &l));
  EXPECT_EQ(l.dims, 4);
  EXPECT_FALSE(read_layout(TensorView(nullptr, DType::F32, {3, 2}, {2, -1}), false, &l));
}

// Only the CPU executor reads broadcast gradients; the GPU launcher validates without them.
TEST_F(Validation, BroadcastSequenceGradientsOnlyWhereAllowed) {
  SCOPED_TRACE(rng_.trace());
  for (const std::vector<int64_t>& strides :
       std::vector<std::vector<int64_t>>{{0, 0, 0}, {0, 8, 1}, {1, 0, 0}, {16, 0, 0}}) {
    BackwardBuffers g = backward_buffers();
    g.grad_outputs[1].strides = strides;
    const bool ok = strides[0] != 16;  // one value per step must advance one element per step
    if (ok) {
      EXPECT_NO_THROW(validate(s_.program, g, true));
      EXPECT_NO_THROW(cpu::backward(s_.program, g));
    } else {
      EXPECT_THROW(validate(s_.program, g, true), ArgumentError);
    }
    try {
      validate(s_.program, g);
      ADD_FAILURE() << "strict validation accepted a broadcast";
    } catch (const ArgumentError& e) {
      EXPECT_EQ(e.argument(), "grad_outputs[1]");
    }
  }
  auto rejected = [&](const BackwardBuffers& b, const std::string& argument, const std::string& text) {
    try {
      validate(s_.program, b, true);
      ADD_FAILURE() << "validate accepted bad buffers, expected an error naming " << argument;
    } catch (const ArgumentError& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
    EXPECT_THROW(cpu::backward(s_.program, b), ArgumentError);
  };
  BackwardBuffers g = backward_buffers();
  g.grad_outputs[0].strides = {0, 0, 1};  // broadcast over part of S only
  rejected(g, "grad_outputs[0]", "broadcast over T and/or S");
  g = backward_buffers();
  g.grad_params[0].strides = {0, 0};  // written gradients are contiguous
  rejected(g, "grad_params[0]", "expected a contiguous tensor");
  // A broadcast of one value covers one element: a written buffer may not hold it, but may
  // start right after it. (Validation only; nothing runs on these pointers.)
  g = backward_buffers();
  char* grad_input = static_cast<char*>(g.grad_inputs[0].data);
  g.grad_outputs[0] =
      TensorView(grad_input + 47 * sizeof(float), DType::F32, g.grad_outputs[0].shape, {0, 0, 0});
  rejected(g, "grad_inputs[0]", "overlaps grad_outputs[0]");
  g.grad_outputs[0].data = grad_input - sizeof(float);
  EXPECT_NO_THROW(validate(s_.program, g, true));
}

TEST_F(Validation, MixedDtypesAreAccepted) {
  SCOPED_TRACE(rng_.trace());
  Buffer x16(DType::F16, s_.seq_shape()), state_bf(DType::BF16, s_.neuron_shape),
      out64(DType::F64, s_.seq_shape());
  ForwardBuffers b = forward_buffers();
  b.inputs[0] = x16.view();
  b.initial_states[1] = state_bf.view();
  b.outputs[0] = out64.view();
  EXPECT_NO_THROW(validate(s_.program, b));
}

TEST_F(Validation, CheckpointPolicy) {
  SCOPED_TRACE(rng_.trace());
  std::vector<Buffer> checkpoints;  // k = 2, T = 3: [2, *S] per state
  for (int i = 0; i < 2; ++i) checkpoints.emplace_back(DType::F32, std::vector<int64_t>{2, 2, 8});
  ForwardBuffers f = forward_buffers();
  f.saved = views(checkpoints);
  f.checkpoint_every = 2;
  EXPECT_NO_THROW(validate(s_.program, f));
  BackwardBuffers g = backward_buffers();
  g.saved = views(checkpoints);
  g.inputs = views(s_.inputs);
  g.checkpoint_every = 2;
  EXPECT_NO_THROW(validate(s_.program, g));

  for (int64_t bad : {int64_t(-1), int64_t(kMaxCheckpointEvery + 1), int64_t(1) << 40}) {
    ForwardBuffers fb = f;
    fb.checkpoint_every = bad;
    expect_rejected(fb, "checkpoint_every", "got " + std::to_string(bad));
    BackwardBuffers gb = g;
    gb.checkpoint_every = bad;
    expect_rejected(gb, "checkpoint_every", "0 (save per step) or a checkpoint interval from 1 to 256");
  }
  Buffer full_seq(DType::F32, s_.seq_shape()), half(DType::F16, {2, 2, 8}), short_seq(DType::F32, {2, 2, 8});
  ForwardBuffers fb = f;
  fb.saved.pop_back();
  expect_rejected(fb, "saved", "one checkpoint per state");
  fb = f;
  fb.saved.clear();  // a checkpointed call is a training forward
  expect_rejected(fb, "saved", "2 tensors");
  fb = f;
  fb.saved[1] = full_seq.view();
  expect_rejected(fb, "saved[1]", "[ceil(T/k), *S] = [2, 2, 8]");
  fb = f;
  fb.saved[0] = half.view();
  expect_rejected(fb, "saved[0]", "float32 or float64");
  fb = f;
  fb.saved[0] = TensorView(fwd_.outputs[0].data(), DType::F32, {2, 2, 8});
  expect_rejected(fb, "outputs[0]", "saved[0]");

  BackwardBuffers gb = g;
  gb.inputs.clear();
  expect_rejected(gb, "inputs", "recomputed");
  gb = g;
  gb.inputs[1] = short_seq.view();
  expect_rejected(gb, "inputs[1]", "[T, *S] = [3, 2, 8]");
  gb = g;
  gb.saved[0] = full_seq.view();
  expect_rejected(gb, "saved[0]", "[ceil(T/k), *S]");
  gb = g;
  gb.grad_inputs[0] = gb.inputs[0];
  expect_rejected(gb, "grad_inputs[0]", "inputs[0]");
  gb = backward_buffers();  // per step: the inputs are not read, so they may not be given
  gb.inputs = views(s_.inputs);
  expect_rejected(gb, "inputs", "only with checkpoints");

  // Checkpoints are in the compute dtype of the call.
  cpu::Options f64;
  f64.compute = cpu::Compute::F64;
  try {
    cpu::forward(s_.program, f, f64);
    ADD_FAILURE() << "float32 checkpoints accepted for a float64 computation";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "saved[0]") << e.what();
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cpu::backward(s_.program, g, f64), ArgumentError);
}

TEST_F(Validation, OverlappingWrittenBuffers) {
  SCOPED_TRACE(rng_.trace());
  ForwardBuffers b = forward_buffers();
  b.outputs[0] = b.inputs[1];
  expect_rejected(b, "outputs[0]", "inputs[1]");
  b = forward_buffers();
  b.final_states[1] = b.initial_states[1];  // in place is not allowed
  expect_rejected(b, "final_states[1]", "initial_states[1]");
  b = forward_buffers();
  b.saved[0] = b.outputs[1];
  expect_rejected(b, "outputs[1]", "saved[0]");
  // Partial overlap: an output starting in the middle of another.
  Buffer big(DType::F32, {2 * 3 * 16});
  b = forward_buffers();
  b.outputs[0] = TensorView(big.data(), DType::F32, s_.seq_shape());
  b.outputs[1] = TensorView(static_cast<float*>(big.data()) + 47, DType::F32, s_.seq_shape());
  expect_rejected(b, "outputs[0]", "outputs[1]");
  b.outputs[1] = TensorView(static_cast<float*>(big.data()) + 48, DType::F32, s_.seq_shape());
  EXPECT_NO_THROW(validate(s_.program, b));
  // Reads may overlap each other.
  b = forward_buffers();
  b.inputs[1] = b.inputs[0];
  EXPECT_NO_THROW(validate(s_.program, b));
  BackwardBuffers g = backward_buffers();
  g.grad_inputs[0] = g.saved[0];
  expect_rejected(g, "grad_inputs[0]", "saved[0]");
  g = backward_buffers();
  g.grad_inputs[1] = g.grad_outputs[0];
  expect_rejected(g, "grad_inputs[1]", "grad_outputs[0]");
}

// ---------------------------------------------------------------------------------------------
// fp16 / bf16 conversions and TensorView

// The value of a finite half bit pattern, decoded from the definition.
double half_value(uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double magnitude = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

// Nearest representable value, ties to the even code; `max_code` is the largest finite code and
// `overflow` the threshold from which a magnitude rounds to infinity.
template <class Value>
uint16_t nearest_code(double f, uint16_t max_code, double overflow, uint16_t inf_code, Value value) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(f);
  if (a >= overflow) return sign | inf_code;
  uint16_t lo = 0, hi = max_code;  // largest code with value <= a
  while (lo < hi) {
    const uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (value(mid) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (lo == max_code) return sign | lo;
  const double below = a - value(lo), above = value(lo + 1) - a;
  const uint16_t pick = below < above ? lo : above < below ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
  return sign | pick;
}

TEST(Tensor, HalfDecodesEveryPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    const int e = (h >> 10) & 0x1F;
    if (e == 0x1F) {
      if (h & 0x3FF) {
        EXPECT_TRUE(std::isnan(f)) << h;
        EXPECT_EQ(float_to_half(f) & 0x7E00, 0x7E00) << "NaN stays NaN: " << h;
      } else {
        EXPECT_EQ(f, (h & 0x8000) ? -INFINITY : INFINITY) << h;
      }
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), half_value(static_cast<uint16_t>(h))) << h;
    ASSERT_EQ(float_to_half(f), h) << "round trip " << h;
  }
}

TEST(Tensor, HalfRoundsToNearestEven) {
  Random rng;
  SCOPED_TRACE(rng.trace());
  auto value = [](uint16_t c) { return half_value(c); };
  auto check = [&](float f) {
    const uint16_t want = nearest_code(f, 0x7BFF, 65520.0, 0x7C00, value);
    ASSERT_EQ(float_to_half(f), want) << "f = " << f;
  };
  // Every midpoint between neighbours (ties) and the floats right beside it.
  for (uint16_t c = 0; c < 0x7BFF; ++c) {
    const float mid = static_cast<float>((half_value(c) + half_value(c + 1)) / 2);
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      check(f);
      check(-f);
    }
  }
  for (float f : {65504.0f, 65519.99f, 65520.0f, 1e30f, 1e-30f, 0.0f, -0.0f, 2.9802322e-8f, 2.9802326e-8f})
    check(f);
  for (int i = 0; i < 200000; ++i) {
    const float f =
        static_cast<float>(std::ldexp(rng.uniform(-1, 1), static_cast<int>(rng.uniform(-30, 18))));
    check(f);
  }
  EXPECT_EQ(float_to_half(INFINITY), 0x7C00);
  EXPECT_EQ(float_to_half(-INFINITY), 0xFC00);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
}

TEST(Tensor, BFloat16RoundsToNearestEven) {
  Random rng;
  SCOPED_TRACE(rng.trace());
  auto value = [](uint16_t c) {
    uint32_t bits = static_cast<uint32_t>(c) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return static_cast<double>(f);
  };
  const double overflow = (value(0x7F7F) + std::ldexp(1.0, 128)) / 2;
  for (int i = 0; i < 300000; ++i) {
    uint32_t bits = rng.bits();
    if ((bits & 0x7F800000u) == 0x7F800000u) continue;      // Inf / NaN below
    if (i % 3 == 0) bits = (bits & 0xFFFF0000u) | 0x8000u;  // exact ties
    float f;
    std::memcpy(&f, &bits, 4);
    ASSERT_EQ(float_to_bfloat16(f), nearest_code(f, 0x7F7F, overflow, 0x7F80, value)) << "bits " << bits;
  }
  for (uint32_t c = 0; c < 0x10000; ++c) {
    const float f = bfloat16_to_float(static_cast<uint16_t>(c));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(f))));
    } else {
      ASSERT_EQ(float_to_bfloat16(f), c);
    }
  }
  EXPECT_EQ(float_to_bfloat16(3.4e38f), 0x7F80);  // rounds past the largest finite value
  EXPECT_EQ(float_to_bfloat16(-INFINITY), 0xFF80);
  uint32_t nan_bits = 0x7F800001u;  // a signalling NaN whose payload sits in the dropped bits
  float nan;
  std::memcpy(&nan, &nan_bits, 4);
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(nan))));
}

TEST(Tensor, ViewHelpers) {
  float data[24];
  TensorView v(data, DType::F32, {2, 3, 4});
  EXPECT_EQ(v.numel(), 24);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.describe(), "float32[2, 3, 4]");
  v.strides = {12, 4, 1};
  EXPECT_TRUE(v.is_contiguous());
  v.strides = {1, 2, 6};
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_EQ(v.describe(), "float32[2, 3, 4] with strides [1, 2, 6]");
  v.strides = {4, 1};
  EXPECT_FALSE(v.is_contiguous());
  TensorView scalar(data, DType::BF16, {});
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.describe(), "bfloat16[]");
  TensorView empty(nullptr, DType::F16, {3, 0}, {7, 7});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_TRUE(empty.is_contiguous());
  EXPECT_EQ(TensorView().describe(), "no tensor");
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_STREQ(dtype_name(DType::F16), "float16");
}

// ---------------------------------------------------------------------------------------------
// parallel_for

TEST(ParallelFor, RunsEveryIndexOnce) {
  for (int threads : {0, 1, 2, 3, 7}) {
    for (int64_t count : {0, 1, 5, 1000}) {
      std::vector<std::atomic<int>> hits(count);
      parallel_for(count, threads, [&](int64_t i) { hits[i]++; });
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " index " << i;
    }
  }
}

TEST(ParallelFor, ConcurrentAndNestedCalls) {
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < 20; ++round) {
        parallel_for(8, 3, [&](int64_t) { parallel_for(10, 2, [&](int64_t j) { total += j; }); });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 20 * 8 * 45);
}

TEST(ParallelFor, RethrowsTheBodysException) {
  std::atomic<int> ran{0};
  EXPECT_THROW(parallel_for(100, 4,
                            [&](int64_t i) {
                              ran++;
                              if (i == 17) throw Error("index 17");
                            }),
               Error);
  EXPECT_GE(ran.load(), 1);
  // The pool still works afterwards.
  std::atomic<int> after{0};
  parallel_for(50, 4, [&](int64_t) { after++; });
  EXPECT_EQ(after.load(), 50);
}

// A forked child (a data-loader worker, say) gets a working pool of its own.
TEST(ParallelFor, WorksInAForkedChild) {
  std::atomic<int> warm{0};
  parallel_for(64, 4, [&](int64_t) { warm++; });
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::atomic<int> hits{0};
    parallel_for(1000, 4, [&](int64_t) { hits++; });
    _exit(hits.load() == 1000 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// ---------------------------------------------------------------------------------------------
// Program

TEST(ProgramTest, FromTextFileAndIdentity) {
  const Program a = Program::from_text(kSwapText);
  EXPECT_EQ(a.neuron().name, "swap");
  EXPECT_EQ(a.forward().num_states, 2);
  EXPECT_EQ(&a.backward(), &a.backward());  // derived once
  EXPECT_EQ(a.hash().size(), 64u);
  const Program b = Program::from_text(a.canonical());
  EXPECT_EQ(b.canonical(), a.canonical());
  EXPECT_EQ(b.hash(), a.hash());
  EXPECT_NE(Program::from_text(kCounterText).hash(), a.hash());

  const char* dir = std::getenv("SPIKEJIT_SOURCE_DIR");
  if (dir != nullptr) {
    const Program lif = Program::from_file(std::string(dir) + "/neurons/lif.sj");
    EXPECT_EQ(lif.neuron().name, "lif");
  }
  try {
    Program::from_file("no/such/dir/neuron.sj");
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/dir/neuron.sj"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Program::from_text("neuron broken\ninput x\noutput y\ny = x +\n"), ParseError);
}

TEST(ProgramTest, BackwardIsDerivedOnceUnderConcurrency) {
  const Program p = Program::from_text(kAdaptiveText);
  std::vector<const ir::Step*> seen(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) threads.emplace_back([&, i] { seen[i] = &p.backward(); });
  for (std::thread& t : threads) t.join();
  for (const ir::Step* s : seen) EXPECT_EQ(s, seen[0]);
  EXPECT_EQ(seen[0]->grad_params.size(), 2u);
}

}  // namespace
}  // namespace spikejit
