// Autodiff: every op's rule and every surrogate against independent references, whole-neuron
// BPTT against finite differences (spikes replaced by an exact smooth stand-in) and against
// SpikingJelly's hand-written IF/LIF/PLIF backward, the save plan, and forward mode (the tangent
// neuron) against finite differences and as the transpose of the backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "spikejit/autodiff.h"
#include "spikejit/builder.h"
#include "spikejit/builtins.h"
#include "spikejit/error.h"
#include "spikejit/frontend.h"
#include "spikejit/ir.h"
#include "spikejit/program.h"
#include "support/random_seed.h"
#include "support/step_eval.h"

namespace spikejit {
namespace {

using ir::Op;
using ir::SurrogateKind;
using testing::Matrix;
using testing::SeededRng;

constexpr double kPi = 3.14159265358979323846;

// Central difference of f at x.
double central_difference(const std::function<double(double)>& f, double x, double h = 1e-6) {
  return (f(x + h) - f(x - h)) / (2.0 * h);
}

void expect_close(double got, double want, double tol, const std::string& what) {
  EXPECT_NEAR(got, want, tol * (1.0 + std::fabs(want))) << what;
}

// ---------------------------------------------------------------------------------------------
// (1) Every op's gradient rule.

ir::Node leaf(Op op, int index, ir::Type type = ir::Type::Float) {
  ir::Node n;
  n.op = op;
  n.index = index;
  n.type = type;
  return n;
}

ir::Node node(Op op, ir::Type type, ir::ValueId a, ir::ValueId b = -1, ir::ValueId c = -1) {
  ir::Node n;
  n.op = op;
  n.type = type;
  n.args[0] = a;
  n.args[1] = b;
  n.args[2] = c;
  return n;
}

bool is_bool_op(Op op) {
  switch (op) {
    case Op::Eq:
    case Op::Ne:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge:
    case Op::And:
    case Op::Or:
    case Op::Not:
    case Op::ToBool: return true;
    default: return false;
  }
}

// A forward step with three float inputs and one float output `op(...)`. Bool operands are
// `input > 0`; a Bool result is converted with `float`.
ir::Step op_step(Op op) {
  ir::Step s;
  s.num_inputs = 3;
  s.num_outputs = 1;
  for (int i = 0; i < 3; ++i) s.nodes.push_back(leaf(Op::Input, i));
  ir::Node zero;
  zero.op = Op::Literal;
  s.nodes.push_back(zero);  // %3
  auto positive = [&](ir::ValueId x) {
    s.nodes.push_back(node(Op::Gt, ir::Type::Bool, x, 3));
    return static_cast<ir::ValueId>(s.nodes.size() - 1);
  };
  ir::ValueId args[3] = {0, 1, 2};
  if (op == Op::And || op == Op::Or || op == Op::Not || op == Op::ToFloat) {
    args[0] = positive(0);
    args[1] = positive(1);
  }
  if (op == Op::Where) args[0] = positive(0);
  const int arity = ir::op_info(op).arity;
  s.nodes.push_back(node(op, is_bool_op(op) ? ir::Type::Bool : ir::Type::Float, args[0],
                         arity > 1 ? args[1] : -1, arity > 2 ? args[2] : -1));
  ir::ValueId out = static_cast<ir::ValueId>(s.nodes.size() - 1);
  if (is_bool_op(op)) {
    s.nodes.push_back(node(Op::ToFloat, ir::Type::Float, out));
    ++out;
  }
  s.outputs.push_back(out);
  return s;
}

double distance_to_integer(double x) { return std::fabs(x - std::round(x)); }

// The range each coordinate of `op`'s sample points is drawn from.
struct Range {
  double lo, hi;
};
std::vector<Range> domain(Op op) {
  std::vector<Range> r(3, Range{-3.0, 3.0});
  switch (op) {
    case Op::Log:
    case Op::Log2:
    case Op::Sqrt:
    case Op::Rsqrt:
    case Op::Log10: r[0] = {0.2, 3.0}; break;
    case Op::Log1p: r[0] = {-0.8, 3.0}; break;
    case Op::Asin:
    case Op::Acos:
    case Op::Atanh:
    case Op::Erfinv: r[0] = {-0.9, 0.9}; break;
    case Op::Ndtri: r[0] = {0.05, 0.95}; break;
    case Op::Acosh: r[0] = {1.1, 3.0}; break;
    case Op::Tan: r[0] = {-1.2, 1.2}; break;
    case Op::Pow: r[0] = {0.2, 3.0}, r[1] = {-2.0, 2.0}; break;
    default: break;
  }
  return r;
}

// True when `x` is away from the kinks and discontinuities of `op`.
bool away_from_kinks(Op op, const std::vector<double>& x) {
  const double a = x[0], b = x[1], c = x[2];
  switch (op) {
    case Op::Div: return std::fabs(b) > 0.3;
    case Op::Atan2:
    case Op::Hypot: return std::hypot(a, b) > 0.3;
    case Op::Reciprocal: return std::fabs(a) > 0.3;
    case Op::Fmod: return std::fabs(b) > 0.3 && distance_to_integer(a / b) > 0.05;
    case Op::Min:
    case Op::Max:
    case Op::Eq:
    case Op::Ne:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge: return std::fabs(a - b) > 0.05;
    case Op::Clamp: return std::fabs(a - b) > 0.05 && std::fabs(a - c) > 0.05;
    case Op::Abs:
    case Op::Relu:
    case Op::Sign:
    case Op::ToBool:
    case Op::Where:
    case Op::Not: return std::fabs(a) > 0.05;
    case Op::And:
    case Op::Or:
    case Op::ToFloat: return std::fabs(a) > 0.05 && std::fabs(b) > 0.05;
    case Op::Round: return distance_to_integer(a + 0.5) > 0.05;
    case Op::Floor:
    case Op::Ceil: return distance_to_integer(a) > 0.05;
    default: return true;
  }
}

// A random point of `op`'s domain, away from its kinks. Each coordinate is drawn once from its
// own range (the point is never edited after drawing).
std::vector<double> sample_point(Op op, SeededRng& rng) {
  const std::vector<Range> r = domain(op);
  for (;;) {
    std::vector<double> x;
    for (const Range& d : r) x.push_back(rng.uniform(d.lo, d.hi));
    if (away_from_kinks(op, x)) return x;
  }
}

// Gradients of output 0 w.r.t. the three inputs, given dL/d output = g.
std::vector<double> backward_at(const ir::Step& fwd, const ir::Step& bwd,
                                const std::vector<double>& x, double g) {
  testing::Sequence seq;
  seq.inputs = {x};
  Matrix go = {{g}};
  Matrix gs = {{}};
  return testing::run_backward(fwd, bwd, seq, go, gs, false).inputs[0];
}

double forward_at(const ir::Step& fwd, const std::vector<double>& x) {
  testing::Sequence seq;
  seq.inputs = {x};
  return testing::run_forward(fwd, seq, false).outputs[0][0];
}

std::vector<Op> differentiable_test_ops() {
  std::vector<Op> ops;
  for (int i = static_cast<int>(Op::Add); i <= static_cast<int>(Op::Detach); ++i)
    if (static_cast<Op>(i) != Op::Spike) ops.push_back(static_cast<Op>(i));
  return ops;
}

TEST(AutodiffRules, EveryOpMatchesCentralDifferences) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (Op op : differentiable_test_ops()) {
    SCOPED_TRACE(std::string("op ") + ir::op_info(op).name);
    const ir::Step fwd = op_step(op);
    const ir::Step bwd = autodiff::differentiate(fwd);
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<double> x = sample_point(op, rng);
      for (int i = 0; i < 3; ++i) {
        ASSERT_GE(x[i], domain(op)[i].lo) << "sample outside the domain";
        ASSERT_LE(x[i], domain(op)[i].hi) << "sample outside the domain";
      }
      const double g = rng.uniform(0.5, 2.0) * (rng.integer(0, 1) ? 1 : -1);
      const std::vector<double> grads = backward_at(fwd, bwd, x, g);
      ASSERT_EQ(grads.size(), 3u);
      for (int i = 0; i < 3; ++i) {
        double fd = central_difference(
            [&](double xi) {
              std::vector<double> p = x;
              p[i] = xi;
              return forward_at(fwd, p);
            },
            x[i]);
        if (op == Op::Detach) fd = 0.0;  // identity forward, stopped gradient
        std::ostringstream what;
        what << "d/d input " << i << " at (" << x[0] << ", " << x[1] << ", " << x[2] << ")";
        expect_close(grads[i], g * fd, 1e-6, what.str());
      }
    }
  }
}

// Conventions at ties and boundaries, as in torch.
TEST(AutodiffRules, TorchConventionsAtKinks) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  const double g = rng.uniform(0.5, 2.0), v = rng.uniform(-2.0, 2.0);
  auto grads = [&](Op op, std::vector<double> x) {
    ir::Step f = op_step(op);
    return backward_at(f, autodiff::differentiate(f), x, g);
  };
  EXPECT_EQ(grads(Op::Min, {v, v, 0}), (std::vector<double>{g / 2, g / 2, 0}));
  EXPECT_EQ(grads(Op::Max, {v, v, 0}), (std::vector<double>{g / 2, g / 2, 0}));
  EXPECT_EQ(grads(Op::Clamp, {v, v, v + 1}), (std::vector<double>{g, 0, 0}));
  EXPECT_EQ(grads(Op::Clamp, {v, v - 1, v}), (std::vector<double>{g, 0, 0}));
  EXPECT_EQ(grads(Op::Clamp, {v - 1, v, v + 1}), (std::vector<double>{0, g, 0}));
  EXPECT_EQ(grads(Op::Clamp, {v + 2, v, v + 1}), (std::vector<double>{0, 0, g}));
  EXPECT_EQ(grads(Op::Relu, {0, 0, 0})[0], 0.0);
  EXPECT_EQ(grads(Op::Abs, {0, 0, 0})[0], 0.0);
  EXPECT_EQ(grads(Op::Pow, {v, 0, 0})[0], 0.0);  // d/da a^0 = 0, also at a = 0
  EXPECT_EQ(grads(Op::Pow, {0, 0, 0})[1], 0.0);  // 0^b, b >= 0: masked like torch
  EXPECT_EQ(grads(Op::Pow, {0, 2.5, 0})[1], 0.0);
  EXPECT_EQ(grads(Op::Fmod, {-7.5, 2, 0})[1], 3 * g);  // trunc(-3.75) = -3
}

// ---------------------------------------------------------------------------------------------
// (2) Surrogates.

ir::Surrogate random_surrogate(SurrogateKind kind, SeededRng& rng) {
  ir::Surrogate s;
  s.kind = kind;
  const ir::SurrogateInfo& info = ir::surrogate_info(kind);
  for (const char* name : info.param_names) {
    const std::string p = name;
    double v = rng.uniform(0.5, 4.0);
    if (kind == SurrogateKind::QPseudoSpike) v = rng.uniform(1.2, 4.0);
    if (p == "n") v = rng.integer(1, 6);
    if (p == "T_period") v = rng.uniform(2.0, 10.0);
    if (p == "c" || p == "leak") v = rng.uniform(0.0, 0.2);
    if (kind == SurrogateKind::LogTailedReLU) v = rng.uniform(0.0, 0.2);
    s.params.push_back(v);
  }
  return s;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// g'(x), written from reference section 2.2.
double surrogate_formula(const ir::Surrogate& s, double x) {
  const std::vector<double>& p = s.params;
  const double ax = std::fabs(x);
  switch (s.kind) {
    case SurrogateKind::PiecewiseQuadratic: return ax <= 1.0 / p[0] ? p[0] - p[0] * p[0] * ax : 0.0;
    case SurrogateKind::PiecewiseExp: return p[0] / 2.0 * std::exp(-p[0] * ax);
    case SurrogateKind::Sigmoid: return p[0] * sigmoid(p[0] * x) * (1.0 - sigmoid(p[0] * x));
    case SurrogateKind::SoftSign: return 1.0 / (2.0 * p[0] * std::pow(1.0 / p[0] + ax, 2));
    case SurrogateKind::SuperSpike: return p[0] / std::pow(ax + 1.0, 2);
    case SurrogateKind::ATan: return p[0] / 2.0 / (1.0 + std::pow(kPi / 2.0 * p[0] * x, 2));
    case SurrogateKind::NonzeroSignLogAbs: return 1.0 / (1.0 / p[0] + ax);
    case SurrogateKind::Erf: return p[0] / std::sqrt(kPi) * std::exp(-std::pow(p[0] * x, 2));
    case SurrogateKind::PiecewiseLeakyReLU: return ax < p[0] ? 1.0 / (2.0 * p[0]) : p[1];
    case SurrogateKind::SquarewaveFourierSeries: {
      const double omega = 2.0 * kPi / p[1];
      double sum = 0.0;
      for (int i = 1; i < static_cast<int>(p[0]); ++i) sum += std::cos((2.0 * i - 1.0) * omega * x);
      return 4.0 / p[1] * sum;
    }
    case SurrogateKind::S2NN:
      return x < 0 ? p[0] * sigmoid(p[0] * x) * (1.0 - sigmoid(p[0] * x)) : p[1] / (x + 1.0);
    case SurrogateKind::QPseudoSpike: return std::pow(1.0 + 2.0 / (p[0] - 1.0) * ax, -p[0]);
    case SurrogateKind::LeakyKReLU: return x >= 0 ? p[1] : p[0];
    case SurrogateKind::FakeNumericalGradient: return x == 0 ? p[0] : std::fmin(1.0 / ax, p[0]);
    case SurrogateKind::LogTailedReLU: return x > 1 ? 1.0 / x : (x <= 0 ? p[0] : 1.0);
    case SurrogateKind::DeterministicPass: return 1.0;
    case SurrogateKind::Rect: return ax < 0.5 / p[0] ? p[0] : 0.0;
  }
  return NAN;
}

// SpikingJelly's primitive g(x) (spiking=False), where it has one, with its kinks.
bool primitive(const ir::Surrogate& s, double x, double* out, std::vector<double>* kinks) {
  const std::vector<double>& p = s.params;
  const double ax = std::fabs(x);
  switch (s.kind) {
    case SurrogateKind::PiecewiseQuadratic:
      *kinks = {-1.0 / p[0], 0.0, 1.0 / p[0]};
      *out = x < -1 / p[0] ? 0.0 : x > 1 / p[0] ? 1.0 : -p[0] * p[0] / 2 * x * ax + p[0] * x + 0.5;
      return true;
    case SurrogateKind::PiecewiseExp:
      *kinks = {0.0};
      *out = x < 0 ? 0.5 * std::exp(p[0] * x) : 1.0 - 0.5 * std::exp(-p[0] * x);
      return true;
    case SurrogateKind::Sigmoid: *out = sigmoid(p[0] * x); return true;
    case SurrogateKind::SoftSign: *out = (p[0] * x / (1 + p[0] * ax) + 1) / 2; return true;
    case SurrogateKind::ATan: *out = std::atan(kPi / 2 * p[0] * x) / kPi + 0.5; return true;
    case SurrogateKind::NonzeroSignLogAbs: {
      *kinks = {0.0};
      const double sg = x >= 0 ? 1.0 : -1.0;
      *out = sg * std::log(p[0] * sg * x + 1);
      return true;
    }
    case SurrogateKind::Erf: *out = std::erfc(-p[0] * x) / 2; return true;
    case SurrogateKind::PiecewiseLeakyReLU:
      *kinks = {-p[0], p[0]};
      *out = x < -p[0]  ? p[1] * x + p[1] * p[0]
             : x > p[0] ? p[1] * x - p[1] * p[0] + 1
                        : x / (2 * p[0]) + 0.5;
      return true;
    case SurrogateKind::SquarewaveFourierSeries: {
      const double omega = 2.0 * kPi / p[1];
      double sum = 0.0;
      for (int i = 1; i < static_cast<int>(p[0]); ++i)
        sum += std::sin((2.0 * i - 1.0) * omega * x) / (2.0 * i - 1.0);
      *out = 0.5 + 2.0 / kPi * sum;
      return true;
    }
    case SurrogateKind::QPseudoSpike:
      *kinks = {0.0};
      *out = x >= 0 ? 1 - 0.5 * std::pow(1 + 2 * x / (p[0] - 1), 1 - p[0])
                    : 0.5 * std::pow(1 - 2 * x / (p[0] - 1), 1 - p[0]);
      return true;
    case SurrogateKind::LeakyKReLU:
      *kinks = {0.0};
      *out = (x >= 0 ? p[1] : p[0]) * x;
      return true;
    case SurrogateKind::LogTailedReLU:
      *kinks = {0.0, 1.0};
      *out = x > 1 ? std::log(x) + 1 : (x >= 0 ? x : p[0] * x);
      return true;
    case SurrogateKind::DeterministicPass: *out = x; return true;
    case SurrogateKind::Rect:
      *kinks = {-0.5 / p[0], 0.5 / p[0]};
      *out = std::fmin(std::fmax(p[0] * x + 0.5, 0.0), 1.0);
      return true;
    // S2NN's primitive adds 1e-5 inside its log, so it is not exactly the backward's integral.
    case SurrogateKind::S2NN:
    case SurrogateKind::SuperSpike:
    case SurrogateKind::FakeNumericalGradient: return false;
  }
  return false;
}

// A step computing g'(input 0) with append_surrogate_derivative.
ir::Step surrogate_step(const ir::Surrogate& s) {
  ir::Step step;
  step.num_inputs = 1;
  step.num_outputs = 1;
  step.nodes.push_back(leaf(Op::Input, 0));
  step.outputs.push_back(autodiff::append_surrogate_derivative(step.nodes, s, 0));
  return step;
}

double eval_single(const ir::Step& s, double x) {
  testing::StepLeaves leaves;
  leaves.inputs = {x};
  return testing::eval_step(s, leaves, false)[s.outputs[0]];
}

// Points where surrogates switch branches, to check the boundary conventions.
std::vector<double> boundary_points(const ir::Surrogate& s) {
  std::vector<double> pts = {0.0, -0.0, 1.0, -1.0};
  for (double p : s.params) {
    if (p == 0.0) continue;
    for (double v : {1.0 / p, 0.5 / p, p}) {
      pts.push_back(v);
      pts.push_back(-v);
    }
  }
  return pts;
}

TEST(AutodiffSurrogates, DerivativeNodesMatchFormulas) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (SurrogateKind kind : ir::all_surrogates()) {
    for (int variant = 0; variant < 4; ++variant) {
      ir::Surrogate s = random_surrogate(kind, rng);
      if (variant == 0) s.params = ir::surrogate_info(kind).defaults;
      SCOPED_TRACE(std::string(ir::surrogate_info(kind).class_name) + " params " +
                   ::testing::PrintToString(s.params));
      const ir::Step step = surrogate_step(s);
      std::vector<double> xs = boundary_points(s);
      for (int i = 0; i < 200; ++i) xs.push_back(rng.uniform(-4.0, 4.0));
      for (double x : xs)
        expect_close(eval_single(step, x), surrogate_formula(s, x), 1e-12,
                     "x = " + std::to_string(x));
    }
  }
}

TEST(AutodiffSurrogates, DerivativeIsTheSlopeOfThePrimitive) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (SurrogateKind kind : ir::all_surrogates()) {
    const ir::Surrogate s = random_surrogate(kind, rng);
    double unused;
    std::vector<double> kinks;
    if (!primitive(s, 0.0, &unused, &kinks)) continue;
    SCOPED_TRACE(std::string(ir::surrogate_info(kind).class_name) + " params " +
                 ::testing::PrintToString(s.params));
    const ir::Step step = surrogate_step(s);
    for (int i = 0; i < 100; ++i) {
      const double x = rng.uniform(-3.0, 3.0);
      bool near_kink = false;
      for (double k : kinks) near_kink |= std::fabs(x - k) < 1e-3;
      if (near_kink) continue;
      const double slope = central_difference(
          [&](double v) {
            double y;
            primitive(s, v, &y, &kinks);
            return y;
          },
          x);
      expect_close(eval_single(step, x), slope, 1e-6, "x = " + std::to_string(x));
    }
  }
}

// Parameters from which a gradient would derive an infinite constant (1/alpha at alpha = 0, an
// overflowing alpha^2): an error naming the surrogate and its parameters, in reverse and forward
// mode alike, not an infinite literal (or, for the tangent, an internal verification error).
TEST(AutodiffSurrogates, DegenerateParametersAreNamedNotTurnedIntoInfinities) {
  const char* cases[] = {"piecewise_quadratic(alpha = 0)", "piecewise_quadratic(alpha = 1e300)", "rect(alpha = 0)",
                         "nonzero_sign_log_abs(alpha = 0)", "soft_sign(alpha = 1e-320)",
                         "piecewise_leaky_relu(w = 1e-320, c = 0.01)"};
  for (const char* surrogate : cases) {
    SCOPED_TRACE(surrogate);
    const std::string text = std::string("neuron t\ninput x\nstate v = 0\noutput s\nh = v + x\ns = spike(h - 1, ") +
                             surrogate + ")\nv = h - s\n";
    const ir::Neuron neuron = frontend::parse(text, "t.sj");
    for (int mode = 0; mode < 2; ++mode) {
      try {
        if (mode == 0) {
          Program(neuron).backward(false);
        } else {
          autodiff::tangent(neuron);
        }
        ADD_FAILURE() << "expected an ArgumentError, mode " << mode;
      } catch (const ArgumentError& e) {
        EXPECT_NE(std::string(e.what()).find("expected parameters from which its gradient derives finite constants"),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

// spike(x) differentiates to grad * g'(x) for every surrogate.
TEST(AutodiffSurrogates, SpikeRuleUsesTheSurrogate) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (SurrogateKind kind : ir::all_surrogates()) {
    const ir::Surrogate s = random_surrogate(kind, rng);
    SCOPED_TRACE(ir::surrogate_info(kind).class_name);
    ir::Step fwd;
    fwd.num_inputs = 1;
    fwd.num_outputs = 1;
    fwd.nodes.push_back(leaf(Op::Input, 0));
    ir::Node spike = node(Op::Spike, ir::Type::Float, 0);
    spike.surrogate = s;
    fwd.nodes.push_back(spike);
    fwd.outputs = {1};
    const ir::Step bwd = autodiff::differentiate(fwd);
    for (int i = 0; i < 50; ++i) {
      const double x = rng.uniform(-3.0, 3.0), g = rng.uniform(-2.0, 2.0);
      testing::Sequence seq;
      seq.inputs = {{x}};
      const double got = testing::run_backward(fwd, bwd, seq, {{g}}, {{}}, false).inputs[0][0];
      expect_close(got, g * surrogate_formula(s, x), 1e-12, "x = " + std::to_string(x));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// (3) Whole neurons over T steps.

std::string read_neuron_file(const std::string& name) {
  const char* dir = std::getenv("SPIKEJIT_SOURCE_DIR");
  if (dir == nullptr)
    throw std::runtime_error("SPIKEJIT_SOURCE_DIR is not set (run through ctest)");
  const std::string path = std::string(dir) + "/neurons/" + name + ".sj";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

ir::Neuron builtin(const std::string& name) {
  return frontend::parse(read_neuron_file(name), name + ".sj");
}

struct Variant {
  std::string label;
  ir::Neuron neuron;
};

// Every combination of the built-in's Bool options, with random float constants.
std::vector<Variant> builtin_variants(const std::string& name, SeededRng& rng) {
  const ir::Neuron base = builtin(name);
  std::vector<std::string> flags;
  for (const ir::ConstDecl& c : base.constants)
    if (c.type == ir::Type::Bool) flags.push_back(c.name);
  std::vector<Variant> out;
  for (int mask = 0; mask < (1 << flags.size()); ++mask) {
    std::vector<ir::ConstantOverride> over;
    std::string label = name;
    for (size_t i = 0; i < flags.size(); ++i) {
      const bool on = (mask >> i) & 1;
      over.push_back({flags[i], on ? 1.0 : 0.0});
      label += " " + flags[i] + "=" + (on ? "1" : "0");
    }
    for (const ir::ConstDecl& c : base.constants) {
      if (c.name == "v_threshold") over.push_back({c.name, rng.uniform(0.5, 1.5)});
      if (c.name == "v_reset") over.push_back({c.name, rng.uniform(-0.5, 0.2)});
      if (c.name == "tau") over.push_back({c.name, rng.uniform(1.2, 5.0)});
    }
    out.push_back({label, ir::with_constants(base, over)});
  }
  return out;
}

// An adaptive-threshold LIF: two states (v, threshold adaptation a).
ir::Neuron adaptive_lif() {
  NeuronBuilder b("alif");
  Value x = b.input("x");
  Value v = b.state("v", 0.0);
  Value a = b.state("a", 0.0);
  b.output("s");
  Value h = b.assign("h", v + (x - v) / 2.0);
  Value th = b.assign("th", a * 0.8 + 1.0);
  Value s = b.assign("s", b.spike(h - th, {SurrogateKind::ATan, {2.0}}));
  b.assign("v", h - s * th);
  b.assign("a", a * 0.9 + s * 0.3);
  return b.build();
}

// Izhikevich with v and u (dt = 0.5 ms), reset by the spike.
ir::Neuron izhikevich() {
  NeuronBuilder b("izhikevich");
  Value i_syn = b.input("i");
  Value v = b.state("v", -65.0);
  Value u = b.state("u", -13.0);
  b.output("s");
  Value dv = 0.04 * v * v + 5.0 * v + 140.0 - u + i_syn;
  Value vn = b.assign("vn", v + 0.5 * dv);
  Value un = b.assign("un", u + 0.5 * (0.02 * (0.2 * v - u)));
  Value s = b.assign("s", b.spike(vn - 30.0, {SurrogateKind::Sigmoid, {1.0}}));
  b.assign("v", (1.0 - s) * vn + s * -65.0);
  b.assign("u", un + s * 8.0);
  return b.build();
}

// Two inputs, two outputs, and a mix of ops on the state path.
ir::Neuron two_in_two_out() {
  NeuronBuilder b("mixer");
  Value x = b.input("x");
  Value y = b.input("y");
  Value v = b.state("v", 0.1);
  b.output("s");
  b.output("z");
  Value gate = b.op(Op::Sigmoid, {y});
  Value h =
      b.assign("h", v * (1.0 - gate) + gate * b.op(Op::Tanh, {x}) + 0.1 * b.op(Op::Exp, {-x * x}));
  Value s = b.assign("s", b.spike(h - 0.5, {SurrogateKind::Sigmoid, {4.0}}));
  b.assign("z",
           b.op(Op::Where, {b.op(Op::Gt, {y, b.literal(0.0)}), h * y, b.op(Op::Sin, {h}) - y}));
  b.assign("v", h - 0.5 * s + 0.01 * b.op(Op::Pow, {b.op(Op::Abs, {h}) + 1.0, b.literal(1.5)}));
  return b.build();
}

// A learnable per-neuron threshold and a learnable scalar time constant (1/tau = sigmoid(w)).
ir::Neuron learnable() {
  NeuronBuilder b("learnable");
  Value x = b.input("x");
  Value v = b.state("v", 0.0);
  Value theta = b.param("theta", ir::ParamKind::PerNeuron, 1.0);
  Value w = b.param("w", ir::ParamKind::Scalar, 0.0);
  b.output("s");
  Value r = b.assign("r", b.op(Op::Sigmoid, {w}));
  Value h = b.assign("h", v + (x - v) * r);
  Value s = b.assign("s", b.spike(h - theta, {SurrogateKind::Sigmoid, {4.0}}));
  b.assign("v", h - s * b.op(Op::Sqrt, {theta * theta + 0.5}));
  return b.build();
}

// The forward step with every spike's surrogate replaced by Sigmoid(k): its derivative is exactly
// that of the stand-in sigmoid(k x) the reference evaluator then uses for spike.
ir::Step smooth_forward(const ir::Neuron& n, double k) {
  ir::Step f = ir::lower(n);
  for (ir::Node& node : f.nodes)
    if (node.op == Op::Spike) node.surrogate = {SurrogateKind::Sigmoid, {k}};
  return f;
}

struct Problem {
  testing::Sequence seq;
  Matrix grad_outputs, grad_states;  // the loss weights
};

Problem random_problem(const ir::Step& f, int T, SeededRng& rng, double input_scale,
                       const std::vector<double>& state_offsets) {
  Problem p;
  for (int t = 0; t < T; ++t) {
    std::vector<double> x, go, gs;
    for (int i = 0; i < f.num_inputs; ++i) x.push_back(rng.uniform(-1.0, 1.5) * input_scale);
    for (int i = 0; i < f.num_outputs; ++i) go.push_back(rng.uniform(-1.0, 1.0));
    for (int i = 0; i < f.num_states; ++i) gs.push_back(rng.uniform(-1.0, 1.0));
    p.seq.inputs.push_back(x);
    p.grad_outputs.push_back(go);
    p.grad_states.push_back(gs);
  }
  for (int i = 0; i < f.num_states; ++i)
    p.seq.init_states.push_back(
        (i < static_cast<int>(state_offsets.size()) ? state_offsets[i] : 0.0) +
        rng.uniform(-0.5, 0.5));
  for (size_t i = 0; i < f.params.size(); ++i) p.seq.params.push_back(rng.uniform(0.3, 1.5));
  return p;
}

// The loss with detached values frozen at `base` (so that its derivative is the detached one).
double loss(const ir::Step& f, const Problem& p, const testing::Sequence& seq,
            const testing::ForwardTrace& base) {
  const testing::ForwardTrace tr = testing::run_forward(f, seq, true, &base);
  double l = 0.0;
  for (size_t t = 0; t < seq.inputs.size(); ++t) {
    for (int i = 0; i < f.num_outputs; ++i) l += p.grad_outputs[t][i] * tr.outputs[t][i];
    for (int i = 0; i < f.num_states; ++i) l += p.grad_states[t][i] * tr.states[t][i];
  }
  return l;
}

// BPTT through the backward step against central differences of the unrolled loss.
void check_bptt(const ir::Neuron& n, SeededRng& rng, double input_scale = 1.0,
                const std::vector<double>& state_offsets = {}) {
  const ir::Step f = smooth_forward(n, rng.uniform(1.0, 4.0));
  const ir::Step b = autodiff::differentiate(f);
  SCOPED_TRACE("backward:\n" + ir::to_string(b));
  const Problem p = random_problem(f, 7, rng, input_scale, state_offsets);
  const testing::SequenceGrads g =
      testing::run_backward(f, b, p.seq, p.grad_outputs, p.grad_states, true);
  const testing::ForwardTrace base = testing::run_forward(f, p.seq, true);
  testing::Sequence seq = p.seq;  // perturbed one slot at a time
  auto fd = [&](double* slot) {
    const double x0 = *slot;
    const double h = 1e-6 * (1.0 + std::fabs(x0));
    *slot = x0 + h;
    const double up = loss(f, p, seq, base);
    *slot = x0 - h;
    const double down = loss(f, p, seq, base);
    *slot = x0;
    return (up - down) / (2.0 * h);
  };
  for (size_t t = 0; t < seq.inputs.size(); ++t)
    for (int i = 0; i < f.num_inputs; ++i)
      expect_close(g.inputs[t][i], fd(&seq.inputs[t][i]), 1e-5,
                   "input " + std::to_string(i) + " at t = " + std::to_string(t));
  for (int i = 0; i < f.num_states; ++i)
    expect_close(g.init_states[i], fd(&seq.init_states[i]), 1e-5,
                 "initial state " + std::to_string(i));
  for (size_t i = 0; i < f.params.size(); ++i)
    expect_close(g.params[i], fd(&seq.params[i]), 1e-5, "param " + std::to_string(i));
}

TEST(AutodiffNeurons, BuiltinsMatchFiniteDifferences) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (const char* name : {"if", "lif", "plif"})
    for (const Variant& v : builtin_variants(name, rng)) {
      SCOPED_TRACE(v.label);
      check_bptt(v.neuron, rng);
    }
}

TEST(AutodiffNeurons, MultiStateNeuronsMatchFiniteDifferences) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  {
    SCOPED_TRACE("adaptive LIF");
    check_bptt(adaptive_lif(), rng);
  }
  {
    SCOPED_TRACE("Izhikevich");
    check_bptt(izhikevich(), rng, 10.0, {-65.0, -13.0});
  }
  {
    SCOPED_TRACE("two inputs, two outputs");
    check_bptt(two_in_two_out(), rng);
  }
  {
    SCOPED_TRACE("per-neuron and scalar params");
    check_bptt(learnable(), rng);
  }
}

// SpikingJelly's hand-written backward (reference section 1.4, store_v_seq mode) for IF/LIF/PLIF,
// with Heaviside spikes and the Sigmoid surrogate. Returns grad x, grad v_init, grad w (PLIF).
struct ReferenceGrads {
  std::vector<double> x;
  double v_init = 0.0, w = 0.0;
};

ReferenceGrads spikingjelly_backward(const std::string& kind, bool soft, bool detach,
                                     bool decay_input, double v_th, double v_reset, double r,
                                     double alpha, const std::vector<double>& x, double v0,
                                     const std::vector<double>& grad_s,
                                     const std::vector<double>& grad_v) {
  const size_t T = x.size();
  const double vr = soft ? 0.0 : v_reset;  // V_r'
  std::vector<double> h(T), v_prev(T);
  double v = v0;
  for (size_t t = 0; t < T; ++t) {
    v_prev[t] = v;
    if (kind == "if")
      h[t] = v + x[t];
    else if (decay_input)
      h[t] = v + (x[t] - (v - vr)) * r;
    else
      h[t] = v - (v - vr) * r + x[t];
    const double s = h[t] >= v_th ? 1.0 : 0.0;
    v = soft ? h[t] - s * v_th : s * v_reset + (1 - s) * h[t];
  }
  ReferenceGrads g;
  g.x.resize(T);
  double carry = 0.0, acc_r = 0.0;
  for (size_t t = T; t-- > 0;) {
    const double sg = alpha * sigmoid(alpha * (h[t] - v_th)) * (1 - sigmoid(alpha * (h[t] - v_th)));
    const double s = h[t] >= v_th ? 1.0 : 0.0;
    const double gv = carry + grad_v[t];
    double gh;
    if (soft && detach)
      gh = grad_s[t] * sg + gv;
    else if (soft)
      gh = (grad_s[t] - v_th * gv) * sg + gv;
    else if (detach)
      gh = grad_s[t] * sg + gv * (1 - s);
    else
      gh = (grad_s[t] + gv * (v_reset - h[t])) * sg + gv * (1 - s);
    if (kind == "if") {
      g.x[t] = gh;
      carry = gh;
    } else {
      g.x[t] = decay_input ? gh * r : gh;
      carry = gh * (1 - r);
      acc_r += decay_input ? gh * (h[t] - v_prev[t]) / r : gh * (vr - v_prev[t]);
    }
  }
  g.v_init = carry;
  g.w = acc_r * r * (1 - r);  // r = sigmoid(w)
  return g;
}

TEST(AutodiffNeurons, BuiltinsMatchSpikingJellysBackward) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (const std::string name : {"if", "lif", "plif"}) {
    const ir::Neuron base = builtin(name);
    for (int mask = 0; mask < 8; ++mask) {
      const bool soft = mask & 1, detach = mask & 2, decay_input = mask & 4;
      if (name == "if" && decay_input) continue;
      const double v_th = rng.uniform(0.5, 1.5), v_reset = soft ? 0.0 : rng.uniform(-0.5, 0.2);
      const double tau = rng.uniform(1.2, 5.0), alpha = rng.uniform(1.0, 5.0),
                   w = rng.uniform(-1.0, 1.0);
      SCOPED_TRACE(name + " soft=" + std::to_string(soft) + " detach=" + std::to_string(detach) +
                   " decay_input=" + std::to_string(decay_input));
      std::vector<ir::ConstantOverride> over = {{"soft_reset", double(soft)},
                                                {"detach_reset", double(detach)},
                                                {"v_threshold", v_th},
                                                {"v_reset", v_reset}};
      if (name != "if") over.push_back({"decay_input", double(decay_input)});
      if (name == "lif") over.push_back({"tau", tau});
      ir::Step f = ir::lower(ir::with_constants(base, over));
      for (ir::Node& node : f.nodes)
        if (node.op == Op::Spike) node.surrogate = {SurrogateKind::Sigmoid, {alpha}};
      const ir::Step b = autodiff::differentiate(f);

      const int T = 9;
      testing::Sequence seq;
      Matrix go, gs;
      std::vector<double> x, grad_s, grad_v;
      for (int t = 0; t < T; ++t) {
        x.push_back(rng.uniform(-0.5, 2.0));
        grad_s.push_back(rng.uniform(-1.0, 1.0));
        grad_v.push_back(rng.uniform(-1.0, 1.0));
        seq.inputs.push_back({x.back()});
        go.push_back({grad_s.back()});
        gs.push_back({grad_v.back()});
      }
      const double v0 = rng.uniform(-0.5, 0.9);
      seq.init_states = {v0};
      if (name == "plif") seq.params = {w};
      const testing::SequenceGrads got = testing::run_backward(f, b, seq, go, gs, false);
      const double r = name == "lif" ? 1.0 / tau : sigmoid(w);
      const ReferenceGrads want = spikingjelly_backward(name, soft, detach, decay_input, v_th,
                                                        v_reset, r, alpha, x, v0, grad_s, grad_v);
      for (int t = 0; t < T; ++t)
        expect_close(got.inputs[t][0], want.x[t], 1e-9, "grad x t=" + std::to_string(t));
      expect_close(got.init_states[0], want.v_init, 1e-9, "grad v_init");
      if (name == "plif") expect_close(got.params[0], want.w, 1e-9, "grad w");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// (4) The save plan.

TEST(AutodiffSavePlan, BuiltinsSaveOneValuePerStepPlifAtMostTwo) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (const char* name : {"if", "lif", "plif"})
    for (const Variant& v : builtin_variants(name, rng)) {
      const ir::Step b = autodiff::differentiate(ir::lower(v.neuron));
      SCOPED_TRACE(v.label + "\n" + ir::to_string(b));
      if (std::string(name) == "plif") {
        EXPECT_GE(b.saved.size(), 1u);
        EXPECT_LE(b.saved.size(), 2u);
      } else {
        EXPECT_EQ(b.saved.size(), 1u);
      }
    }
}

TEST(AutodiffSavePlan, LinearNeuronSavesNothing) {
  NeuronBuilder nb("leaky_integrator");
  Value x = nb.input("x");
  Value v = nb.state("v", 0.0);
  nb.output("y");
  Value h = nb.assign("v", v * 0.5 + x * 2.0);
  nb.assign("y", h * 3.0);
  const ir::Step b = autodiff::differentiate(ir::lower(nb.build()));
  EXPECT_TRUE(b.saved.empty()) << ir::to_string(b);
}

// PyTorch's requires_grad rule: comparisons, float(bool) and detach carry no gradient, rounding
// carries one (zero); a state fed only by its own previous value (a counter) carries one. An
// initial state that is never read, or a parameter read only by a comparison, gets none.
TEST(AutodiffGradientFlow, FollowsPyTorchsRequiresGradRule) {
  const Program hard = Program::from_text(R"(
neuron hard_threshold
input x
state v = 0, n = 0, k = 0
param theta = 1.0
output s, m, y
h = v + x
s = float(h >= theta)
m = float(h >= 2) + detach(h)
y = h * 2
v = h - s
n = floor(h)
k = k + 1
)");
  const ir::GradientFlow& flow = hard.gradient_flow();
  EXPECT_EQ(flow.outputs, (std::vector<bool>{false, false, true}));
  EXPECT_EQ(flow.states, (std::vector<bool>{true, true, true}));
  EXPECT_EQ(flow.arguments, (std::vector<bool>{true, true, false, true, false}));  // x; v, n, k; theta
  // Over a call with only some arguments requiring grad (x; v, n, k; theta), as a loop in PyTorch
  // gives, per output (s, m, y), final state and state sequence (v, n, k):
  using Flags = std::vector<bool>;
  EXPECT_EQ(flow.requires_grad({true, false, false, false, false}, 3),
            (Flags{false, false, true, true, true, false, true, true, false}));
  EXPECT_EQ(flow.requires_grad({false, false, false, true, true}, 3),
            (Flags{false, false, false, false, false, true, false, false, true}));
  EXPECT_EQ(flow.requires_grad({false, false, false, false, false}, 3), Flags(9, false));
  // T = 0: the initial states; the empty sequences as those of one step.
  EXPECT_EQ(flow.requires_grad({true, true, true, true, true}, 0),
            (Flags{false, false, true, true, true, true, true, true, true}));
  EXPECT_EQ(flow.requires_grad({true, false, false, false, false}, 0),
            (Flags{false, false, true, false, false, false, true, true, false}));
  EXPECT_EQ(flow.settles_after({true, false, false, false, false}), 1);
  EXPECT_THROW(flow.requires_grad({true}, 3), ArgumentError);
  EXPECT_THROW(flow.requires_grad({true, true, true, true, true}, -1), ArgumentError);
  // A state's requires_grad carries from step to step: k reads n, n only a comparison, so k's
  // value requires grad after one step (from n's initial value) and not after two.
  const Program relay = Program::from_text(R"(
neuron relay
input x
state k = 0, n = 0
output y
y = k * 3
k = n * 2
n = float(x >= 0)
)");
  const ir::GradientFlow& relayed = relay.gradient_flow();
  EXPECT_EQ(relayed.requires_grad({true, true, true}, 1), (Flags{true, true, false, true, false}));
  EXPECT_EQ(relayed.requires_grad({true, true, true}, 5), (Flags{true, false, false, true, false}));
  EXPECT_EQ(relayed.settles_after({true, true, true}), 2);
  // A gradient from x takes one step per state of a chain: a reads b, b reads x.
  const Program chain = Program::from_text(R"(
neuron chain
input x
state a = 0, b = 0
output y
y = a * 2
a = b
b = x
)");
  const ir::GradientFlow& chained = chain.gradient_flow();
  EXPECT_EQ(chained.requires_grad({true, false, false}, 1), (Flags{false, false, true, false, true}));
  EXPECT_EQ(chained.requires_grad({true, false, false}, 2), (Flags{false, true, true, true, true}));
  EXPECT_EQ(chained.requires_grad({true, false, false}, 9), (Flags{true, true, true, true, true}));
  EXPECT_EQ(chained.settles_after({true, false, false}), 3);
  EXPECT_EQ(chained.requires_grad({false, false, true}, 9), (Flags{true, false, false, true, false}));
  // Two states that swap values: a's flag passes to b and back, so it never settles.
  const Program swap = Program::from_text(R"(
neuron swap
input x
state a = 0, b = 0
output y
y = x * 2
t = a
a = b
b = t
)");
  const ir::GradientFlow& swapped = swap.gradient_flow();
  EXPECT_EQ(swapped.requires_grad({false, true, false}, 7), (Flags{false, false, true, true, true}));
  EXPECT_EQ(swapped.requires_grad({false, true, false}, 8), (Flags{false, true, false, true, true}));
  EXPECT_EQ(swapped.settles_after({false, true, false}), -1);
  EXPECT_EQ(swapped.settles_after({false, true, true}), 0);
  for (const ir::Neuron& n : {builtins::if_neuron(), builtins::lif_neuron(), builtins::plif_neuron()}) {
    const Program p(n);
    EXPECT_EQ(p.gradient_flow().outputs, std::vector<bool>{true}) << n.name;
    EXPECT_EQ(p.gradient_flow().states, std::vector<bool>{true}) << n.name;
    EXPECT_EQ(p.gradient_flow().arguments, std::vector<bool>(p.neuron().params.size() + 2, true)) << n.name;
  }
}

// Saved values and recomputation: the backward never reads forward inputs or states, and each
// saved slot names a node of the forward step.
TEST(AutodiffSavePlan, BackwardReadsOnlySavedGradsParamsAndLiterals) {
  for (const ir::Neuron& n : {adaptive_lif(), izhikevich(), two_in_two_out(), learnable()}) {
    const ir::Step f = ir::lower(n);
    const ir::Step b = autodiff::differentiate(f);
    SCOPED_TRACE(n.name + "\n" + ir::to_string(b));
    for (const ir::Node& node : b.nodes) {
      EXPECT_NE(node.op, Op::Input);
      EXPECT_NE(node.op, Op::State);
      if (node.op == Op::Saved) {
        EXPECT_LT(node.index, static_cast<int>(b.saved.size()));
      }
    }
    for (ir::ValueId id : b.saved) EXPECT_LT(id, static_cast<ir::ValueId>(f.nodes.size()));
    EXPECT_EQ(b.grad_inputs.size(), static_cast<size_t>(f.num_inputs));
    EXPECT_EQ(b.grad_prev_states.size(), static_cast<size_t>(f.num_states));
    EXPECT_EQ(b.grad_params.size(), f.params.size());
  }
}

// A value the backward needs that depends only on one input is saved as that input (or less).
TEST(AutodiffSavePlan, MinimumCutPrefersTheNeededValues) {
  NeuronBuilder nb("square");
  Value x = nb.input("x");
  Value v = nb.state("v", 0.0);
  nb.output("y");
  Value a = nb.assign("a", x + v);
  nb.assign("y", nb.op(Op::Exp, {a}));
  nb.assign("v", a);
  const ir::Step f = ir::lower(nb.build());
  const ir::Step b = autodiff::differentiate(f);
  // exp's rule reuses its result: saving exp(a) leaves nothing to recompute.
  ASSERT_EQ(b.saved.size(), 1u) << ir::to_string(b);
  EXPECT_EQ(f.nodes[b.saved[0]].op, Op::Exp) << ir::to_string(b);
}

// ---------------------------------------------------------------------------------------------
// (5) Forward mode: the tangent neuron.

struct Direction {
  Matrix inputs;                    // [T][num_inputs]
  std::vector<double> init_states;  // [num_states]
  std::vector<double> params;       // [params]
};

Direction random_direction(const ir::Step& f, int T, SeededRng& rng) {
  Direction d;
  for (int t = 0; t < T; ++t) {
    std::vector<double> dx;
    for (int i = 0; i < f.num_inputs; ++i) dx.push_back(rng.uniform(-1.0, 1.0));
    d.inputs.push_back(dx);
  }
  for (int i = 0; i < f.num_states; ++i) d.init_states.push_back(rng.uniform(-1.0, 1.0));
  for (size_t i = 0; i < f.params.size(); ++i) d.params.push_back(rng.uniform(-1.0, 1.0));
  return d;
}

std::vector<double> concat(std::vector<double> a, const std::vector<double>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The tangent neuron's sequence: each leaf followed by its tangent (the declaration order).
testing::Sequence with_tangents(const testing::Sequence& seq, const Direction& d) {
  testing::Sequence out;
  for (size_t t = 0; t < seq.inputs.size(); ++t) out.inputs.push_back(concat(seq.inputs[t], d.inputs[t]));
  out.init_states = concat(seq.init_states, d.init_states);
  out.params = concat(seq.params, d.params);
  return out;
}

// seq + h * d.
testing::Sequence moved(const testing::Sequence& seq, const Direction& d, double h) {
  testing::Sequence out = seq;
  for (size_t t = 0; t < seq.inputs.size(); ++t)
    for (size_t i = 0; i < seq.inputs[t].size(); ++i) out.inputs[t][i] += h * d.inputs[t][i];
  for (size_t i = 0; i < seq.init_states.size(); ++i) out.init_states[i] += h * d.init_states[i];
  for (size_t i = 0; i < seq.params.size(); ++i) out.params[i] += h * d.params[i];
  return out;
}

// The JVP of the tangent neuron against central differences along the direction, spikes replaced
// by the smooth stand-in (detached values frozen, as for the backward), and its primal results
// against the neuron's own.
void check_jvp(const ir::Neuron& n, SeededRng& rng, double input_scale = 1.0,
               const std::vector<double>& state_offsets = {}) {
  // The surrogates are replaced before the tangent is taken: its spike derivatives are theirs.
  ir::Neuron smooth = n;
  const double k = rng.uniform(1.0, 4.0);
  for (ir::Node& node : smooth.nodes)
    if (node.op == Op::Spike) node.surrogate = {SurrogateKind::Sigmoid, {k}};
  const ir::Step f = ir::lower(smooth);
  const ir::Step ft = ir::lower(autodiff::tangent(smooth));
  SCOPED_TRACE("tangent step:\n" + ir::to_string(ft));
  ASSERT_EQ(ft.num_inputs, 2 * f.num_inputs);
  ASSERT_EQ(ft.num_states, 2 * f.num_states);
  ASSERT_EQ(ft.num_outputs, 2 * f.num_outputs);
  ASSERT_EQ(ft.params.size(), 2 * f.params.size());
  const int T = 7;
  const Problem p = random_problem(f, T, rng, input_scale, state_offsets);
  const Direction d = random_direction(f, T, rng);
  const testing::ForwardTrace base = testing::run_forward(f, p.seq, true);
  const testing::ForwardTrace jvp = testing::run_forward(ft, with_tangents(p.seq, d), true);
  const double h = 1e-6;
  const testing::ForwardTrace up = testing::run_forward(f, moved(p.seq, d, h), true, &base);
  const testing::ForwardTrace down = testing::run_forward(f, moved(p.seq, d, -h), true, &base);
  for (int t = 0; t < T; ++t) {
    const std::string at = " at t = " + std::to_string(t);
    for (int i = 0; i < f.num_outputs; ++i) {
      EXPECT_EQ(jvp.outputs[t][i], base.outputs[t][i]) << "primal output " << i << at;
      expect_close(jvp.outputs[t][f.num_outputs + i], (up.outputs[t][i] - down.outputs[t][i]) / (2 * h), 1e-5,
                   "tangent of output " + std::to_string(i) + at);
    }
    for (int i = 0; i < f.num_states; ++i) {
      EXPECT_EQ(jvp.states[t][i], base.states[t][i]) << "primal state " << i << at;
      expect_close(jvp.states[t][f.num_states + i], (up.states[t][i] - down.states[t][i]) / (2 * h), 1e-5,
                   "tangent of state " + std::to_string(i) + at);
    }
  }
}

// With Heaviside spikes and any surrogate, the JVP and the backward are each other's transpose:
// <J d, u> = <d, J^T u> for the loss weights u of random_problem.
void check_jvp_transposes_backward(const ir::Neuron& n, SeededRng& rng) {
  const ir::Step f = ir::lower(n);
  const ir::Step ft = ir::lower(autodiff::tangent(n));
  const int T = 9;
  const Problem p = random_problem(f, T, rng, 1.5, {});
  const Direction d = random_direction(f, T, rng);
  const testing::ForwardTrace jvp = testing::run_forward(ft, with_tangents(p.seq, d), false);
  const testing::SequenceGrads g =
      testing::run_backward(f, autodiff::differentiate(f), p.seq, p.grad_outputs, p.grad_states, false);
  double forward_side = 0.0, backward_side = 0.0, scale = 0.0;
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < f.num_outputs; ++i) {
      forward_side += p.grad_outputs[t][i] * jvp.outputs[t][f.num_outputs + i];
      scale += std::fabs(p.grad_outputs[t][i] * jvp.outputs[t][f.num_outputs + i]);
    }
    for (int i = 0; i < f.num_states; ++i) {
      forward_side += p.grad_states[t][i] * jvp.states[t][f.num_states + i];
      scale += std::fabs(p.grad_states[t][i] * jvp.states[t][f.num_states + i]);
    }
    for (int i = 0; i < f.num_inputs; ++i) backward_side += g.inputs[t][i] * d.inputs[t][i];
  }
  for (int i = 0; i < f.num_states; ++i) backward_side += g.init_states[i] * d.init_states[i];
  for (size_t i = 0; i < f.params.size(); ++i) backward_side += g.params[i] * d.params[i];
  EXPECT_GT(scale, 0.0) << "the tangents are all zero";
  EXPECT_NEAR(forward_side, backward_side, 1e-9 * (1.0 + scale));
}

std::vector<Variant> forward_mode_neurons(SeededRng& rng) {
  std::vector<Variant> out;
  for (const char* name : {"if", "lif", "plif"})
    for (Variant& v : builtin_variants(name, rng)) out.push_back(std::move(v));
  out.push_back({"adaptive LIF", adaptive_lif()});
  out.push_back({"two inputs, two outputs", two_in_two_out()});
  out.push_back({"per-neuron and scalar params", learnable()});
  // A local rebound, and the old state read after its next value is bound.
  out.push_back({"rebound names", frontend::parse("neuron rebound\ninput x\nstate v = 0.2\noutput y\n"
                                                  "h = x * 2 + v\nh = h * tanh(h)\nold = v\n"
                                                  "v = h * 0.5\ny = h - x + old * v\n",
                                                  "rebound.sj")});
  return out;
}

TEST(AutodiffForwardMode, TangentsMatchFiniteDifferences) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (const Variant& v : forward_mode_neurons(rng)) {
    SCOPED_TRACE(v.label);
    check_jvp(v.neuron, rng);
  }
  SCOPED_TRACE("Izhikevich");
  check_jvp(izhikevich(), rng, 10.0, {-65.0, -13.0});
}

TEST(AutodiffForwardMode, TangentsTransposeTheBackward) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (const Variant& v : forward_mode_neurons(rng)) {
    SCOPED_TRACE(v.label);
    for (int trial = 0; trial < 3; ++trial) check_jvp_transposes_backward(v.neuron, rng);
  }
}

// ---------------------------------------------------------------------------------------------
// (6) The adjoint neuron: the backward step as a neuron, run backward in time.

// The adjoint neuron's forward over the reversed sequence against BPTT with the backward step.
void check_adjoint(const ir::Neuron& n, SeededRng& rng) {
  const ir::Step f = ir::lower(n);
  const ir::Step fa = ir::lower(autodiff::adjoint(n));
  SCOPED_TRACE("adjoint step:\n" + ir::to_string(fa));
  const int ni = f.num_inputs, ns = f.num_states, np = static_cast<int>(f.params.size());
  ASSERT_EQ(fa.num_inputs, ni + ns + f.num_outputs + ns);
  ASSERT_EQ(fa.num_states, ns + np);
  ASSERT_EQ(fa.num_outputs, ni);
  const int T = 8;
  const Problem p = random_problem(f, T, rng, 1.5, {});
  const testing::SequenceGrads want =
      testing::run_backward(f, autodiff::differentiate(f), p.seq, p.grad_outputs, p.grad_states, false);
  const testing::ForwardTrace trace = testing::run_forward(f, p.seq, false);
  testing::Sequence reversed;
  for (int t = T - 1; t >= 0; --t) {
    std::vector<double> in = p.seq.inputs[t];
    const std::vector<double>& before = t > 0 ? trace.states[t - 1] : p.seq.init_states;
    in.insert(in.end(), before.begin(), before.end());
    in.insert(in.end(), p.grad_outputs[t].begin(), p.grad_outputs[t].end());
    in.insert(in.end(), p.grad_states[t].begin(), p.grad_states[t].end());
    reversed.inputs.push_back(in);
  }
  reversed.init_states.assign(static_cast<size_t>(ns + np), 0.0);
  reversed.params = p.seq.params;
  const testing::ForwardTrace got = testing::run_forward(fa, reversed, false);
  double scale = 1.0;
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < ni; ++i) scale = std::max(scale, std::fabs(want.inputs[t][i]));
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < ni; ++i)
      expect_close(got.outputs[T - 1 - t][i], want.inputs[t][i], 1e-12 * scale,
                   "gradient of input " + std::to_string(i) + " at t = " + std::to_string(t));
  for (int j = 0; j < ns; ++j)
    expect_close(got.states[T - 1][j], want.init_states[j], 1e-12 * scale, "gradient of initial state " + std::to_string(j));
  for (int k = 0; k < np; ++k)
    expect_close(got.states[T - 1][ns + k], want.params[k], 1e-12 * scale * T, "gradient of parameter " + std::to_string(k));
}

TEST(AutodiffAdjoint, ReversedRunEqualsTheBackward) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (const Variant& v : forward_mode_neurons(rng)) {
    SCOPED_TRACE(v.label);
    for (int trial = 0; trial < 3; ++trial) check_adjoint(v.neuron, rng);
  }
}

TEST(AutodiffAdjoint, IsANeuronOfItsOwn) {
  // Its canonical text parses back to the same neuron, and it has an adjoint in turn.
  const ir::Neuron a = autodiff::adjoint(adaptive_lif());
  const ir::Neuron again = frontend::parse(frontend::print(a), "adjoint.sj");
  EXPECT_EQ(frontend::print(again), frontend::print(a));
  const ir::Neuron aa = autodiff::adjoint(a);
  EXPECT_EQ(aa.outputs.size(), a.inputs.size());
  EXPECT_EQ(aa.states.size(), a.states.size() + a.params.size());
}

TEST(AutodiffAdjoint, KeepsTheDrawsAndTheirNumbers) {
  // Stream 0 is not used by the step (lowering drops it): the adjoint still numbers stream 1 as 1.
  const ir::Neuron n = frontend::parse("neuron noisy\ninput x\nstate v = 0\noutput s\nunused = uniform()\n"
                                       "v = v * 0.5 + x + uniform()\ns = spike(v - 1, sigmoid(alpha = 4))\n",
                                       "noisy.sj");
  const Program a(autodiff::adjoint(n));
  EXPECT_TRUE(a.uses_random());
  std::vector<int32_t> streams;
  for (const ir::Node& node : a.forward().nodes)
    if (node.op == Op::Uniform) streams.push_back(node.index);
  EXPECT_EQ(streams, std::vector<int32_t>{1});
  EXPECT_EQ(frontend::print(frontend::parse(a.canonical(), "adjoint.sj")), a.canonical());
}

// op_step's computation as a neuron (inputs a, b, c; output y = op of them, Bool ops as floats).
ir::Neuron op_neuron(Op op) {
  NeuronBuilder b("one_op");
  std::vector<Value> args = {b.input("a"), b.input("b"), b.input("c")};
  b.output("y");
  auto positive = [&](const Value& v) { return b.op(Op::Gt, {v, b.literal(0.0)}); };
  if (op == Op::And || op == Op::Or || op == Op::Not || op == Op::ToFloat) {
    args[0] = positive(args[0]);
    args[1] = positive(args[1]);
  }
  if (op == Op::Where) args[0] = positive(args[0]);
  const int arity = ir::op_info(op).arity;
  Value y = arity == 1 ? b.op(op, {args[0]}) : arity == 2 ? b.op(op, {args[0], args[1]})
                                                          : b.op(op, {args[0], args[1], args[2]});
  b.assign("y", is_bool_op(op) ? b.op(Op::ToFloat, {y}) : y);
  return b.build();
}

TEST(AutodiffForwardMode, EveryOpMatchesCentralDifferences) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (Op op : differentiable_test_ops()) {
    SCOPED_TRACE(std::string("op ") + ir::op_info(op).name);
    const ir::Neuron n = op_neuron(op);
    const ir::Step f = ir::lower(n);
    const ir::Step ft = ir::lower(autodiff::tangent(n));
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<double> x = sample_point(op, rng);
      const std::vector<double> d = {rng.uniform(-1.0, 1.0), rng.uniform(-1.0, 1.0), rng.uniform(-1.0, 1.0)};
      testing::Sequence seq;
      seq.inputs = {concat(x, d)};
      const double jvp = testing::run_forward(ft, seq, false).outputs[0][1];
      const double h = 1e-6;
      std::vector<double> up = x, down = x;
      for (int i = 0; i < 3; ++i) {
        up[i] += h * d[i];
        down[i] -= h * d[i];
      }
      const double fd = op == Op::Detach ? 0.0 : (forward_at(f, up) - forward_at(f, down)) / (2 * h);
      std::ostringstream what;
      what << "along (" << d[0] << ", " << d[1] << ", " << d[2] << ") at (" << x[0] << ", " << x[1] << ", "
           << x[2] << ")";
      expect_close(jvp, fd, 1e-6, what.str());
    }
  }
}

// Tangent names never take a name of the neuron; the tangent neuron prints and parses back.
TEST(AutodiffForwardMode, TangentNamesAreFreshAndTheNeuronRoundTrips) {
  NeuronBuilder b("taken");
  Value x = b.input("x");
  Value v = b.state("v", 0.25);
  b.output("s");
  Value local = b.assign("x_tangent", x * 2.0);
  Value s = b.assign("s", b.spike(local + v - 1.0, {SurrogateKind::ATan, {2.0}}));
  b.assign("v", (v + x) * (1.0 - s));
  const ir::Neuron t = autodiff::tangent(b.build());
  ASSERT_EQ(t.inputs.size(), 2u);
  EXPECT_EQ(t.inputs[1].name, "x_tangent_");
  EXPECT_EQ(t.states[1].name, "v_tangent");
  EXPECT_EQ(t.states[1].init, 0.0);
  EXPECT_EQ(t.outputs[1].name, "s_tangent");
  const Program program(t);
  const Program reparsed = Program::from_text(program.canonical());
  EXPECT_EQ(reparsed.hash(), program.hash()) << program.canonical();
}

}  // namespace
}  // namespace spikejit
