// Conformance of the built-in IF / LIF / PLIF neurons with SpikingJelly, over every option
// combination: the CPU executor against a direct per-step implementation of the reference
// equations (forward: reference §1.3, backward recurrence: §1.4) written here.
//
// fp64: spikes equal; v and every gradient within 1e-12 relative (kF64).
// fp32: the reference evaluated in fp32 with the same expressions as SpikingJelly's torch backend;
//       spikes equal, v and gradients within 1e-5 relative (kF32; the backward's order of
//       operations differs from the reference's). "Relative" is |got - want| <= rel * (|want| +
//       max |want| over the tensor); dL/dw, a sum, is scaled by the sum of its terms' magnitudes.
//       dL/dv_init ends a chain of T steps whose terms can cancel (N = 1, T = 14: 2e-5 apart), so
//       its scale also takes the largest gradient along that chain, max |dL/dx|.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "spikejit/builtins.h"
#include "spikejit/cpu.h"
#include "spikejit/error.h"
#include "spikejit/frontend.h"
#include "spikejit/program.h"
#include "support/random_seed.h"

namespace spikejit {
namespace {

using builtins::Options;
using ir::SurrogateKind;

enum class Kind { IF, LIF, PLIF };

struct Case {
  Kind kind;
  Options options;
  bool state_seq;  // store_v_seq: the whole v sequence (else only the final v)
};

std::string case_name(const Case& c);
void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

const char* kind_name(Kind k) { return k == Kind::IF ? "IF" : k == Kind::LIF ? "LIF" : "PLIF"; }

// Every surrogate that SpikingJelly's neuron kernels support, each with a non-default alpha.
const std::vector<ir::Surrogate>& surrogates() {
  static const std::vector<ir::Surrogate> all = {
      {SurrogateKind::Sigmoid, {4.0}},        {SurrogateKind::ATan, {2.5}},
      {SurrogateKind::PiecewiseQuadratic, {1.5}}, {SurrogateKind::Erf, {2.0}},
      {SurrogateKind::SuperSpike, {1.2}},     {SurrogateKind::SoftSign, {2.0}},
      {SurrogateKind::PiecewiseExp, {0.8}},
  };
  return all;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (Kind kind : {Kind::IF, Kind::LIF, Kind::PLIF}) {
    for (std::optional<double> v_reset : {std::optional<double>(), std::optional<double>(0.0),
                                          std::optional<double>(-0.2)}) {
      for (bool detach : {false, true}) {
        for (bool decay : {true, false}) {
          if (kind == Kind::IF && !decay) continue;  // IF has no decay_input
          for (double v_th : {1.0, 0.5}) {
            for (double tau : {2.0, 5.0}) {
              if (kind == Kind::IF && tau != 2.0) continue;  // nor tau
              for (const ir::Surrogate& sg : surrogates()) {
                for (bool state_seq : {true, false}) {
                  Case c{kind, Options{}, state_seq};
                  c.options.v_threshold = v_th;
                  c.options.v_reset = v_reset;
                  c.options.detach_reset = detach;
                  c.options.decay_input = decay;
                  c.options.tau = tau;
                  c.options.init_tau = tau;
                  c.options.surrogate = sg;
                  cases.push_back(c);
                }
              }
            }
          }
        }
      }
    }
  }
  return cases;
}

std::string case_name(const Case& c) {
  const Options& o = c.options;
  std::ostringstream s;
  s << kind_name(c.kind) << "_"
    << (!o.v_reset ? "soft" : *o.v_reset == 0.0 ? "hard0" : "hardm02")
    << (o.detach_reset ? "_detach" : "") << "_th" << (o.v_threshold == 1.0 ? "1" : "05");
  if (c.kind != Kind::IF) s << (o.decay_input ? "_decay" : "_nodecay") << "_tau" << o.tau;
  s << "_" << ir::surrogate_info(o.surrogate.kind).name << (c.state_seq ? "_vseq" : "_vlast");
  return s.str();
}

// ---------------------------------------------------------------------------------------------
// The reference, written from the equations (independent of the IR, autodiff and executor).

// sg'(x): reference §2.1 / §2.2.
template <class F>
F surrogate_derivative(const ir::Surrogate& sg, F x) {
  const F a = static_cast<F>(sg.params[0]);
  const F pi = static_cast<F>(3.14159265358979323846);
  switch (sg.kind) {
    case SurrogateKind::Sigmoid: {
      const F s = F(1) / (F(1) + std::exp(-a * x));
      return a * s * (F(1) - s);
    }
    case SurrogateKind::ATan: {
      const F z = pi / F(2) * a * x;
      return a / F(2) / (F(1) + z * z);
    }
    case SurrogateKind::PiecewiseQuadratic:
      return std::fabs(x) <= F(1) / a ? a - a * a * std::fabs(x) : F(0);
    case SurrogateKind::PiecewiseExp: return a / F(2) * std::exp(-a * std::fabs(x));
    case SurrogateKind::SoftSign: {
      const F d = F(1) / a + std::fabs(x);
      return F(1) / (F(2) * a * d * d);
    }
    case SurrogateKind::SuperSpike: {
      const F d = std::fabs(x) + F(1);
      return a / (d * d);
    }
    case SurrogateKind::Erf: return a / std::sqrt(pi) * std::exp(-(a * x) * (a * x));
    default: ADD_FAILURE() << "no reference for this surrogate"; return F(0);
  }
}

// Caller data of one case; sequences are [T * N], time-major.
template <class F>
struct Data {
  int64_t T = 0, N = 0;
  std::vector<F> x, v_init, grad_s, grad_v;  // grad_v: [T*N] (state_seq) or [N] (final)
  F w = 0;                                  // PLIF's parameter
};

template <class F>
struct Results {
  std::vector<F> s, v;        // v: [T*N] (state_seq) or [N]
  std::vector<F> grad_x, grad_v_init;
  F grad_w = 0;
  double grad_w_scale = 0;  // sum of |terms| of grad_w (its rounding scale)
};

template <class F>
Results<F> reference(const Case& c, const Data<F>& d) {
  const Options& o = c.options;
  const bool soft = !o.v_reset.has_value();
  const F v_th = static_cast<F>(o.v_threshold);
  const F v_reset = soft ? F(0) : static_cast<F>(*o.v_reset);  // V_r' of §1.3
  const F tau = static_cast<F>(o.tau);
  const F r = c.kind == Kind::PLIF ? F(1) / (F(1) + std::exp(-d.w)) : F(1) / tau;
  const int64_t T = d.T, N = d.N;

  Results<F> out;
  out.s.assign(T * N, F(0));
  out.v.assign(c.state_seq ? T * N : N, F(0));
  out.grad_x.assign(T * N, F(0));
  out.grad_v_init.assign(N, F(0));
  std::vector<F> h(T * N), v_prev(T * N);  // h[t] and v[t-1]
  double grad_r = 0;

  for (int64_t n = 0; n < N; ++n) {
    F v = d.v_init[n];
    for (int64_t t = 0; t < T; ++t) {
      const int64_t i = t * N + n;
      const F x = d.x[i];
      F ht;  // charge, in the torch backend's expression order
      if (c.kind == Kind::IF) {
        ht = v + x;
      } else if (c.kind == Kind::LIF) {
        ht = o.decay_input ? v + (x - (v - v_reset)) / tau : v - (v - v_reset) / tau + x;
      } else {
        ht = o.decay_input ? v + (x - (v - v_reset)) * r : v - (v - v_reset) * r + x;
      }
      const F s = (ht - v_th >= F(0)) ? F(1) : F(0);
      v_prev[i] = v;
      h[i] = ht;
      v = soft ? ht - s * v_th : (F(1) - s) * ht + s * v_reset;
      out.s[i] = s;
      if (c.state_seq) out.v[i] = v;
    }
    if (!c.state_seq) out.v[n] = v;

    // §1.4: the reverse recurrence.
    F carry = c.state_seq ? F(0) : d.grad_v[n];
    F acc_r = 0;
    double acc_scale = 0;
    for (int64_t t = T - 1; t >= 0; --t) {
      const int64_t i = t * N + n;
      const F sg = surrogate_derivative(o.surrogate, h[i] - v_th);
      const F g_v = carry + (c.state_seq ? d.grad_v[i] : F(0));
      const F grad_s = d.grad_s[i];
      const F s = out.s[i];
      F grad_h;
      if (soft) {
        grad_h = o.detach_reset ? grad_s * sg + g_v : (grad_s - v_th * g_v) * sg + g_v;
      } else {
        grad_h = o.detach_reset ? grad_s * sg + g_v * (F(1) - s)
                                : (grad_s + g_v * (v_reset - h[i])) * sg + g_v * (F(1) - s);
      }
      if (c.kind == Kind::IF) {
        out.grad_x[i] = grad_h;
        carry = grad_h;
      } else {
        out.grad_x[i] = o.decay_input ? grad_h * r : grad_h;
        carry = grad_h * (F(1) - r);
      }
      if (c.kind == Kind::PLIF) {
        // dh/dr: (h[t] - v[t-1]) / r = x - (v[t-1] - V_r') with decay_input, else V_r' - v[t-1].
        const F dh_dr = o.decay_input ? d.x[i] - (v_prev[i] - v_reset) : v_reset - v_prev[i];
        acc_r += grad_h * dh_dr;
        acc_scale += std::fabs(static_cast<double>(grad_h * dh_dr));
      }
    }
    out.grad_v_init[n] = carry;
    grad_r += acc_r;
    out.grad_w_scale += acc_scale * static_cast<double>(r * (F(1) - r));
  }
  out.grad_w = static_cast<F>(grad_r) * r * (F(1) - r);  // dL/dw = dL/dr * r * (1 - r)
  return out;
}

// ---------------------------------------------------------------------------------------------
// spikejit's CPU executor on the same data.

template <class F>
constexpr DType dtype_of() {
  return sizeof(F) == 8 ? DType::F64 : DType::F32;
}

template <class F>
TensorView view(std::vector<F>& v, std::vector<int64_t> shape) {
  return TensorView(v.data(), dtype_of<F>(), std::move(shape));
}

template <class F>
Results<F> run_spikejit(const Program& program, const Case& c, Data<F> d, bool* inference_matches) {
  const int64_t T = d.T, N = d.N;
  const std::vector<int64_t> seq = {T, N}, one = {N};
  Results<F> out;
  out.s.assign(T * N, F(-7));  // poisoned: every element must be written
  out.v.assign(c.state_seq ? T * N : N, F(-7));
  out.grad_x.assign(T * N, F(-7));
  out.grad_v_init.assign(N, F(-7));
  std::vector<F> w = {d.w}, grad_w = {F(-7)};

  ForwardBuffers f;
  f.steps = T;
  f.neuron_shape = {N};
  f.inputs = {view(d.x, seq)};
  f.initial_states = {view(d.v_init, one)};
  if (c.kind == Kind::PLIF) f.params = {view(w, {1})};
  f.outputs = {view(out.s, seq)};
  if (c.state_seq) {
    f.state_seqs = {view(out.v, seq)};
  } else {
    f.final_states = {view(out.v, one)};
  }

  // Inference first (no saved values); the training forward must produce the same bits.
  cpu::forward(program, f);
  const std::vector<F> inference_s = out.s, inference_v = out.v;

  std::vector<std::vector<F>> saved(program.backward().saved.size(), std::vector<F>(T * N));
  for (std::vector<F>& b : saved) f.saved.push_back(view(b, seq));
  cpu::forward(program, f);
  *inference_matches = inference_s == out.s && inference_v == out.v;

  BackwardBuffers b;
  b.steps = T;
  b.neuron_shape = {N};
  b.saved = f.saved;
  b.params = f.params;
  b.grad_outputs = {view(d.grad_s, seq)};
  if (c.state_seq) {
    b.grad_state_seqs = {view(d.grad_v, seq)};
  } else {
    b.grad_final_states = {view(d.grad_v, one)};
  }
  b.grad_inputs = {view(out.grad_x, seq)};
  b.grad_initial_states = {view(out.grad_v_init, one)};
  if (c.kind == Kind::PLIF) b.grad_params = {view(grad_w, {1})};
  cpu::backward(program, b);
  out.grad_w = grad_w[0];
  return out;
}

// ---------------------------------------------------------------------------------------------
// Comparison.

struct Tolerance {
  double rel;  // |got - want| <= rel * (|want| + max |want| over the tensor)
};
constexpr Tolerance kF64{1e-12};
constexpr Tolerance kF32{1e-5};  // observed: within 1e-6 over repeated runs

template <class F>
double max_abs(const std::vector<F>& values) {
  double m = 0;
  for (F v : values) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

// `chain_scale`: a magnitude the values were computed through (0: none beyond their own).
template <class F>
::testing::AssertionResult close(const char* what, const std::vector<F>& got, const std::vector<F>& want,
                                 Tolerance tol, int64_t N, double chain_scale = 0) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": size differs";
  const double scale = std::max(max_abs(want), chain_scale);
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool ok = tol.rel == 0 ? g == w : std::fabs(g - w) <= tol.rel * (std::fabs(w) + scale);
    if (!ok && bad++ == 0) first = static_cast<int64_t>(i);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " elements differ; first at t=" << first / N
         << " n=" << first % N << ": got " << static_cast<double>(got[first]) << ", want "
         << static_cast<double>(want[first]);
}

template <class F>
Data<F> random_data(const Case& c, std::mt19937_64& rng) {
  Data<F> d;
  d.T = std::uniform_int_distribution<int64_t>(1, 24)(rng);
  d.N = std::uniform_int_distribution<int64_t>(1, 700)(rng);
  // Drive around the threshold so that neurons fire often but not always.
  const double th = c.options.v_threshold;
  std::normal_distribution<double> x_dist(c.kind == Kind::IF ? 0.3 * th : 0.9 * th, th);
  std::normal_distribution<double> unit(0.0, 1.0);
  auto fill = [&](std::vector<F>& v, int64_t n, std::normal_distribution<double>& dist) {
    v.resize(n);
    for (F& e : v) e = static_cast<F>(dist(rng));
  };
  fill(d.x, d.T * d.N, x_dist);
  fill(d.v_init, d.N, unit);
  for (F& v : d.v_init) v *= F(0.5);
  fill(d.grad_s, d.T * d.N, unit);
  fill(d.grad_v, c.state_seq ? d.T * d.N : d.N, unit);
  // PLIF: w from init_tau, as the module initialises it (checks the built-in's default too).
  d.w = static_cast<F>(-std::log(c.options.init_tau - 1.0));
  return d;
}

template <class F>
Data<F> cast_data(const Data<double>& d) {
  Data<F> out;
  out.T = d.T;
  out.N = d.N;
  out.x.assign(d.x.begin(), d.x.end());
  out.v_init.assign(d.v_init.begin(), d.v_init.end());
  out.grad_s.assign(d.grad_s.begin(), d.grad_s.end());
  out.grad_v.assign(d.grad_v.begin(), d.grad_v.end());
  out.w = static_cast<F>(d.w);
  return out;
}

ir::Neuron make_neuron(const Case& c) {
  switch (c.kind) {
    case Kind::IF: return builtins::if_neuron(c.options);
    case Kind::LIF: return builtins::lif_neuron(c.options);
    case Kind::PLIF: break;
  }
  return builtins::plif_neuron(c.options);
}

template <class F>
void check_case(const Program& program, const Case& c, const Data<F>& d, Tolerance tol) {
  SCOPED_TRACE(std::string("T=") + std::to_string(d.T) + " N=" + std::to_string(d.N) +
               (sizeof(F) == 8 ? " float64" : " float32"));
  const Results<F> want = reference(c, d);
  bool inference_matches = false;
  const Results<F> got = run_spikejit(program, c, d, &inference_matches);
  EXPECT_TRUE(inference_matches) << "inference and training forward differ";
  EXPECT_TRUE(close("s", got.s, want.s, Tolerance{0}, d.N));
  EXPECT_TRUE(close("v", got.v, want.v, tol, d.N));
  EXPECT_TRUE(close("grad_x", got.grad_x, want.grad_x, tol, d.N));
  EXPECT_TRUE(close("grad_v_init", got.grad_v_init, want.grad_v_init, tol, d.N, max_abs(want.grad_x)));
  if (c.kind == Kind::PLIF) {
    EXPECT_NEAR(got.grad_w, want.grad_w, tol.rel * (std::fabs(want.grad_w) + want.grad_w_scale))
        << "grad_w";
  }
}

class BuiltinConformance : public ::testing::TestWithParam<Case> {};

TEST_P(BuiltinConformance, MatchesReferenceEquations) {
  const Case& c = GetParam();
  const uint64_t seed = testing::test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed) + " (SPIKEJIT_TEST_SEED replays it)");
  std::mt19937_64 rng(seed);
  const Program program(make_neuron(c));
  const Data<double> d = random_data<double>(c, rng);
  check_case<double>(program, c, d, kF64);
  check_case<float>(program, c, cast_data<float>(d), kF32);
}

INSTANTIATE_TEST_SUITE_P(AllOptions, BuiltinConformance, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// ---------------------------------------------------------------------------------------------
// The definitions and the options.

std::string canonical_of_file(const std::string& name) {
  return frontend::print(frontend::parse(builtins::definition_text(name), name));
}

TEST(Builtins, DefaultOptionsGiveTheShippedDefinitions) {
  EXPECT_EQ(frontend::print(builtins::if_neuron()), canonical_of_file("if"));
  EXPECT_EQ(frontend::print(builtins::lif_neuron()), canonical_of_file("lif"));
  EXPECT_EQ(frontend::print(builtins::plif_neuron()), canonical_of_file("plif"));
}

TEST(Builtins, DefinitionTextNamesTheNeuron) {
  EXPECT_NE(std::string(builtins::definition_text("lif")).find("neuron lif"), std::string::npos);
  EXPECT_NE(std::string(builtins::definition_text("plif")).find("param w"), std::string::npos);
}

TEST(Builtins, UnknownNameIsAnArgumentError) {
  try {
    builtins::definition_text("alif");
    FAIL() << "no throw";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "name");
    EXPECT_NE(std::string(e.what()).find("alif"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("lif"), std::string::npos) << e.what();
  }
}

void expect_argument_error(const std::string& argument, void (*make)()) {
  try {
    make();
    ADD_FAILURE() << "no ArgumentError for " << argument;
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), argument) << e.what();
  }
}

TEST(Builtins, OptionsAreValidatedLikeSpikingJelly) {
  expect_argument_error("tau", [] { Options o; o.tau = 1.0; builtins::lif_neuron(o); });
  expect_argument_error("tau", [] { Options o; o.tau = 0.5; builtins::lif_neuron(o); });
  expect_argument_error("tau", [] { Options o; o.tau = NAN; builtins::lif_neuron(o); });
  expect_argument_error("init_tau", [] { Options o; o.init_tau = 1.0; builtins::plif_neuron(o); });
  expect_argument_error("v_threshold", [] { Options o; o.v_threshold = INFINITY; builtins::if_neuron(o); });
  expect_argument_error("v_reset", [] { Options o; o.v_reset = NAN; builtins::lif_neuron(o); });
  expect_argument_error("surrogate", [] {
    Options o;
    o.surrogate = {SurrogateKind::ATan, {}};
    builtins::if_neuron(o);
  });
  // LIF's tau is not IF's business, PLIF's init_tau not LIF's.
  Options o;
  o.init_tau = 0.5;
  EXPECT_NO_THROW(builtins::lif_neuron(o));
  o.tau = 0.5;
  EXPECT_NO_THROW(builtins::if_neuron(o));
}

TEST(Builtins, OptionsReachTheNeuron) {
  Options o;
  o.surrogate = {SurrogateKind::Erf, {3.0}};
  o.init_tau = 3.0;
  const ir::Neuron n = builtins::plif_neuron(o);
  int spikes = 0;
  for (const ir::Node& node : n.nodes) {
    if (node.op != ir::Op::Spike) continue;
    ++spikes;
    EXPECT_TRUE(node.surrogate == o.surrogate);
  }
  EXPECT_EQ(spikes, 1);
  ASSERT_EQ(n.params.size(), 1u);
  EXPECT_DOUBLE_EQ(n.params[0].init, -std::log(2.0));
  // Soft reset: v starts at 0 and the leak goes towards 0.
  o.v_reset.reset();
  EXPECT_EQ(ir::state_default(builtins::lif_neuron(o), 0), 0.0);
  o.v_reset = -0.25;
  EXPECT_EQ(ir::state_default(builtins::lif_neuron(o), 0), -0.25);
}

// Without initial states, v starts at v_reset (0 under soft reset), like SpikingJelly's modules.
TEST(Builtins, DefaultInitialStateIsVReset) {
  for (std::optional<double> v_reset : {std::optional<double>(), std::optional<double>(-0.3)}) {
    Options o;
    o.v_reset = v_reset;
    const Program program(builtins::lif_neuron(o));
    const int64_t T = 5, N = 9;
    const uint64_t seed = testing::test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed) + " (SPIKEJIT_TEST_SEED replays it)");
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> dist(0.8, 1.0);
    std::vector<double> x(T * N), s_default(T * N), s_given(T * N), v_default(N), v_given(N);
    for (double& e : x) e = dist(rng);
    std::vector<double> v_init(N, v_reset.value_or(0.0));
    ForwardBuffers f;
    f.steps = T;
    f.neuron_shape = {N};
    f.inputs = {view(x, {T, N})};
    f.outputs = {view(s_default, {T, N})};
    f.final_states = {view(v_default, {N})};
    cpu::forward(program, f);
    f.initial_states = {view(v_init, {N})};
    f.outputs = {view(s_given, {T, N})};
    f.final_states = {view(v_given, {N})};
    cpu::forward(program, f);
    EXPECT_EQ(s_default, s_given);
    EXPECT_EQ(v_default, v_given);
  }
}

// SpikingJelly's other neurons ship too; any shipped neuron takes its options as constants.
TEST(Builtins, EveryShippedNeuronIsListedAndVerifies) {
  const std::vector<std::string> names = builtins::shipped_names();
  EXPECT_EQ(names, (std::vector<std::string>{"activation_aware_if", "clif", "cubalif", "dsr", "eif", "few_spike",
                                           "gated_lif", "if", "ilif", "izhikevich", "klif", "lif", "mpbn_lif",
                                           "nonspiking", "plif", "qif", "raf", "stbif", "ternary"}));
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const ir::Neuron n = builtins::shipped_neuron(name);
    EXPECT_EQ(n.name, name);
    EXPECT_EQ(frontend::print(n), canonical_of_file(name));
    EXPECT_NO_THROW(Program{n});
  }
}

TEST(Builtins, ShippedNeuronsTakeConstantsAndASurrogate) {
  const ir::Surrogate atan{SurrogateKind::ATan, {3.0}};
  const ir::Neuron n = builtins::shipped_neuron("izhikevich", {{"a", 0.2}, {"soft_reset", 1}, {"v_reset", 0}}, atan);
  for (const ir::ConstDecl& c : n.constants) {
    if (c.name == "a") {
      EXPECT_EQ(c.value, 0.2);
    } else if (c.name == "soft_reset") {
      EXPECT_EQ(c.value, 1.0);
    }
  }
  for (const ir::Node& node : n.nodes) {
    if (node.op == ir::Op::Spike) {
      EXPECT_TRUE(node.surrogate == atan);
    }
  }
  // The same options through the LIF builtin and through its constants: the same neuron.
  Options o;
  o.tau = 3.0;
  o.v_reset.reset();
  o.surrogate = atan;
  EXPECT_EQ(frontend::print(builtins::lif_neuron(o)),
            frontend::print(builtins::shipped_neuron(
                "lif", {{"tau", 3.0}, {"v_reset", 0.0}, {"soft_reset", 1}, {"decay_input", 1}, {"detach_reset", 0},
                        {"v_threshold", 1.0}}, atan)));
  expect_argument_error("constants", [] { builtins::shipped_neuron("clif", {{"v_reset", 0.0}}); });
  expect_argument_error("detach_reset", [] { builtins::shipped_neuron("ilif", {{"detach_reset", 0.5}}); });
  expect_argument_error("surrogate", [] {
    builtins::shipped_neuron("qif", {}, ir::Surrogate{SurrogateKind::Sigmoid, {}});
  });
  expect_argument_error("name", [] { builtins::shipped_neuron("alif"); });
}

}  // namespace
}  // namespace spikejit
