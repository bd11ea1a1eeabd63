// Surrogate derivatives g'(x) as IR nodes: SpikingJelly's backward formulas (surrogate.py).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "autodiff/emitter.h"
#include "spikejit/autodiff.h"
#include "spikejit/error.h"

namespace spikejit::autodiff {
namespace {

using ir::Op;
using ir::ValueId;

constexpr double kPi = 3.14159265358979323846;

// The value of parameter `name` of `s` (SpikingJelly's default when the list is short).
double param(const ir::Surrogate& s, const char* name) {
  const ir::SurrogateInfo& info = surrogate_info(s.kind);
  for (size_t i = 0; i < info.param_names.size(); ++i) {
    if (std::strcmp(info.param_names[i], name) != 0) continue;
    if (i < s.params.size()) return s.params[i];
    if (i < info.defaults.size()) return info.defaults[i];
  }
  throw Error(std::string("surrogate '") + info.name + "' has no parameter '" + name + "'");
}

class SurrogateEmitter {
 public:
  SurrogateEmitter(std::vector<ir::Node>& nodes, const ir::Surrogate& s, ValueId x)
      : e_(nodes), s_(s), x_(x) {}

  ValueId emit() {
    Emitter& e = e_;
    const ValueId x = x_;
    switch (s_.kind) {
      case ir::SurrogateKind::PiecewiseQuadratic: {
        const double a = p("alpha");
        ValueId ax = e.abs(x);
        ValueId ramp = e.add(e.mul(lit(-a * a), ax), lit(a));
        return e.where(e.op(Op::Gt, ax, lit(1.0 / a)), lit(0.0), ramp);
      }
      case ir::SurrogateKind::PiecewiseExp: {
        const double a = p("alpha");
        return e.mul(lit(a / 2.0), exp(e.mul(lit(-a), e.abs(x))));
      }
      case ir::SurrogateKind::Sigmoid: return sigmoid_slope(p("alpha"));
      case ir::SurrogateKind::SoftSign: {
        const double a = p("alpha");
        ValueId d = e.add(lit(1.0 / a), e.abs(x));
        return e.div(lit(1.0), e.mul(lit(2.0 * a), e.mul(d, d)));
      }
      case ir::SurrogateKind::SuperSpike: {
        ValueId d = e.add(e.abs(x), lit(1.0));
        return e.div(lit(p("alpha")), e.mul(d, d));
      }
      case ir::SurrogateKind::ATan: {
        const double a = p("alpha");
        ValueId z = e.mul(lit(kPi / 2.0 * a), x);
        return e.div(lit(a / 2.0), e.add(lit(1.0), e.mul(z, z)));
      }
      case ir::SurrogateKind::NonzeroSignLogAbs:
        return e.div(lit(1.0), e.add(lit(1.0 / p("alpha")), e.abs(x)));
      case ir::SurrogateKind::Erf: {
        const double a = p("alpha");
        ValueId ax = e.mul(x, lit(a));
        return e.mul(exp(e.neg(e.mul(ax, ax))), lit(a / std::sqrt(kPi)));
      }
      case ir::SurrogateKind::PiecewiseLeakyReLU: {
        const double w = p("w");
        return e.where(e.op(Op::Lt, e.abs(x), lit(w)), lit(1.0 / (2.0 * w)), lit(p("c")));
      }
      case ir::SurrogateKind::SquarewaveFourierSeries: return fourier_series();
      case ir::SurrogateKind::S2NN: {
        ValueId tail = e.div(lit(p("beta")), e.add(x, lit(1.0)));
        return e.where(e.op(Op::Lt, x, lit(0.0)), sigmoid_slope(p("alpha")), tail);
      }
      case ir::SurrogateKind::QPseudoSpike: {
        const double a = p("alpha");
        ValueId base = e.add(lit(1.0), e.mul(lit(2.0 / (a - 1.0)), e.abs(x)));
        return e.op(Op::Pow, base, lit(-a));
      }
      case ir::SurrogateKind::LeakyKReLU:
        return e.where(e.op(Op::Ge, x, lit(0.0)), lit(p("k")), lit(p("leak")));
      case ir::SurrogateKind::FakeNumericalGradient:
        return e.op(Op::Min, e.op(Op::Reciprocal, e.abs(x)), lit(p("alpha")));
      case ir::SurrogateKind::LogTailedReLU: {
        ValueId inner = e.where(e.op(Op::Le, x, lit(0.0)), lit(p("alpha")), lit(1.0));
        return e.where(e.op(Op::Gt, x, lit(1.0)), e.op(Op::Reciprocal, x), inner);
      }
      case ir::SurrogateKind::DeterministicPass: return lit(1.0);
      case ir::SurrogateKind::Rect: {
        const double a = p("alpha");
        return e.where(e.op(Op::Lt, e.abs(x), lit(0.5 / a)), lit(a), lit(0.0));
      }
    }
    throw Error("unknown surrogate kind " + std::to_string(static_cast<int>(s_.kind)));
  }

 private:
  double p(const char* name) const { return param(s_, name); }
  // A constant the gradient derives from the parameters (1/alpha, ...): finite, or the
  // parameters are degenerate (alpha = 0 and the like; SpikingJelly divides by zero there too).
  ValueId lit(double v) {
    if (!std::isfinite(v)) {
      const ir::SurrogateInfo& info = ir::surrogate_info(s_.kind);
      std::string params;
      for (size_t i = 0; i < s_.params.size(); ++i) {
        char value[32];
        std::snprintf(value, sizeof value, "%.17g", s_.params[i]);
        params += (i ? ", " : "") + std::string(info.param_names[i]) + " = " + value;
      }
      throw ArgumentError("surrogate " + std::string(info.name),
                          "parameters from which its gradient derives finite constants (no division by a value "
                          "near 0, no overflow)",
                          params);
    }
    return e_.literal(v);
  }
  ValueId exp(ValueId v) { return e_.op(Op::Exp, v); }

  // alpha * sigmoid(alpha x) * (1 - sigmoid(alpha x)): the slope of sigmoid(alpha x).
  ValueId sigmoid_slope(double alpha) {
    ValueId sg = e_.op(Op::Sigmoid, e_.mul(x_, lit(alpha)));
    return e_.mul(e_.mul(e_.sub(lit(1.0), sg), sg), lit(alpha));
  }

  // 4/T * sum_{i=1}^{n-1} cos((2i - 1) * omega * x), omega = 2 pi / T.
  ValueId fourier_series() {
    const double n = p("n"), period = p("T_period");
    if (!(n == std::floor(n) && n >= 1.0 && n <= 1024.0))
      throw ArgumentError("SquarewaveFourierSeries n", "an integer in [1, 1024]",
                          std::to_string(n));
    const double omega = 2.0 * kPi / period;
    ValueId sum = -1;
    for (int i = 1; i < static_cast<int>(n); ++i) {
      ValueId term = e_.op(Op::Cos, e_.mul(lit((2.0 * i - 1.0) * omega), x_));
      sum = sum < 0 ? term : e_.add(sum, term);
    }
    return sum < 0 ? lit(0.0) : e_.mul(sum, lit(4.0 / period));
  }

  Emitter e_;
  const ir::Surrogate& s_;
  ValueId x_;
};

}  // namespace

ValueId append_surrogate_derivative(std::vector<ir::Node>& nodes, const ir::Surrogate& s,
                                    ValueId x) {
  return SurrogateEmitter(nodes, s, x).emit();
}

}  // namespace spikejit::autodiff
