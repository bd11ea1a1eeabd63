// Gradient rules, following torch's autograd formulas (tools/autograd/derivatives.yaml) so that
// ties, masks and special cases match: min/max split ties half and half, clamp routes the
// gradient to the bound that was taken, pow masks the cases torch masks.
#include "autodiff/rules.h"

#include <cmath>
#include <string>

#include "spikejit/autodiff.h"
#include "spikejit/error.h"

namespace spikejit::autodiff {
namespace {

using ir::Op;
using ir::ValueId;

constexpr double kPi = 3.14159265358979323846;

ArgGrads grads(ValueId a, ValueId b = -1, ValueId c = -1) {
  ArgGrads r;
  r.of[0] = a;
  r.of[1] = b;
  r.of[2] = c;
  return r;
}

// The arguments of node `y` (copied: emitting may reallocate the node list).
struct Args {
  Args(const Emitter& e, ValueId y)
      : a(e.node(y).args[0]), b(e.node(y).args[1]), c(e.node(y).args[2]) {}
  ValueId a, b, c;
};

ArgGrads no_grad(Emitter&, ValueId, ValueId) { return {}; }

ArgGrads add_rule(Emitter&, ValueId, ValueId g) { return grads(g, g); }

ArgGrads sub_rule(Emitter& e, ValueId, ValueId g) { return grads(g, e.neg(g)); }

ArgGrads mul_rule(Emitter& e, ValueId y, ValueId g) {
  Args x(e, y);
  return grads(e.mul(g, x.b), e.mul(g, x.a));
}

// d(a/b)/db = -(a/b)/b, written with the result like torch.
ArgGrads div_rule(Emitter& e, ValueId y, ValueId g) {
  Args x(e, y);
  return grads(e.div(g, x.b), e.mul(e.neg(g), e.div(y, x.b)));
}

ArgGrads neg_rule(Emitter& e, ValueId, ValueId g) { return grads(e.neg(g)); }

ArgGrads reciprocal_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.mul(e.neg(g), e.mul(y, y)));
}

// fmod(a, b) = a - trunc(a / b) * b.
ArgGrads fmod_rule(Emitter& e, ValueId y, ValueId g) {
  Args x(e, y);
  ValueId q = e.div(x.a, x.b);
  ValueId trunc = e.where(e.op(Op::Lt, q, e.literal(0.0)), e.op(Op::Ceil, q), e.op(Op::Floor, q));
  return grads(g, e.mul(e.neg(g), trunc));
}

// torch masks the exponent-0 case for the base and the 0^(b>=0) case for the exponent.
ArgGrads pow_rule(Emitter& e, ValueId y, ValueId g) {
  Args x(e, y);
  ValueId zero = e.literal(0.0);
  ValueId b_minus_1 = e.sub(x.b, e.literal(1.0));
  ValueId ga =
      e.where(e.op(Op::Eq, x.b, zero), zero, e.mul(g, e.mul(x.b, e.op(Op::Pow, x.a, b_minus_1))));
  ValueId base_zero = e.op(Op::And, e.op(Op::Eq, x.a, zero), e.op(Op::Ge, x.b, zero));
  ValueId gb = e.where(base_zero, zero, e.mul(g, e.mul(y, e.op(Op::Log, x.a))));
  return grads(ga, gb);
}

// torch.minimum / torch.maximum: the gradient goes to the selected argument, half each on a tie.
ArgGrads min_max_rule(Emitter& e, ValueId y, ValueId g, Op a_loses) {
  Args x(e, y);
  ValueId zero = e.literal(0.0);
  ValueId half = e.mul(g, e.literal(0.5));
  ValueId tie = e.op(Op::Eq, x.a, x.b);
  ValueId ga = e.where(e.op(a_loses, x.a, x.b), zero, e.where(tie, half, g));
  ValueId gb = e.where(e.op(a_loses, x.b, x.a), zero, e.where(tie, half, g));
  return grads(ga, gb);
}
ArgGrads min_rule(Emitter& e, ValueId y, ValueId g) { return min_max_rule(e, y, g, Op::Gt); }
ArgGrads max_rule(Emitter& e, ValueId y, ValueId g) { return min_max_rule(e, y, g, Op::Lt); }

// clamp(x, lo, hi) = min(max(x, lo), hi), as torch: the gradient follows the value taken, and
// hi is taken whenever lo > hi.
ArgGrads clamp_rule(Emitter& e, ValueId y, ValueId g) {
  Args x(e, y);
  ValueId zero = e.literal(0.0);
  ValueId gx = e.where(e.op(Op::And, e.op(Op::Ge, x.a, x.b), e.op(Op::Le, x.a, x.c)), g, zero);
  ValueId glo = e.where(e.op(Op::And, e.op(Op::Lt, x.a, x.b), e.op(Op::Lt, x.b, x.c)), g, zero);
  ValueId ghi = e.where(e.op(Op::Or, e.op(Op::Gt, x.a, x.c), e.op(Op::Lt, x.c, x.b)), g, zero);
  return grads(gx, glo, ghi);
}

ArgGrads exp_rule(Emitter& e, ValueId y, ValueId g) { return grads(e.mul(g, y)); }

ArgGrads log_rule(Emitter& e, ValueId y, ValueId g) { return grads(e.div(g, Args(e, y).a)); }

ArgGrads log2_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.div(g, e.mul(Args(e, y).a, e.literal(std::log(2.0)))));
}

ArgGrads sqrt_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.div(g, e.mul(e.literal(2.0), y)));
}

ArgGrads rsqrt_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.mul(e.mul(e.literal(-0.5), g), e.mul(e.mul(y, y), y)));
}

ArgGrads sigmoid_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.mul(e.mul(g, e.sub(e.literal(1.0), y)), y));
}

ArgGrads tanh_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.mul(g, e.sub(e.literal(1.0), e.mul(y, y))));
}

ArgGrads sin_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.mul(g, e.op(Op::Cos, Args(e, y).a)));
}

ArgGrads cos_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.mul(g, e.neg(e.op(Op::Sin, Args(e, y).a))));
}

// d erf(x) = 2/sqrt(pi) * exp(-x^2).
ArgGrads erf_rule(Emitter& e, ValueId y, ValueId g) {
  ValueId a = Args(e, y).a;
  ValueId bell = e.op(Op::Exp, e.neg(e.mul(a, a)));
  return grads(e.mul(e.mul(e.literal(2.0 / std::sqrt(kPi)), bell), g));
}

// d erfinv(x) = sqrt(pi)/2 * exp(erfinv(x)^2), from the result itself.
ArgGrads erfinv_rule(Emitter& e, ValueId y, ValueId g) {
  ValueId swell = e.op(Op::Exp, e.mul(y, y));
  return grads(e.mul(e.mul(e.literal(std::sqrt(kPi) / 2.0), swell), g));
}

// d ndtri(p) = sqrt(2 pi) * exp(ndtri(p)^2 / 2), the reciprocal of the normal density at the result.
ArgGrads ndtri_rule(Emitter& e, ValueId y, ValueId g) {
  ValueId swell = e.op(Op::Exp, e.mul(e.literal(0.5), e.mul(y, y)));
  return grads(e.mul(e.mul(e.literal(std::sqrt(2.0 * kPi)), swell), g));
}

ArgGrads erfc_rule(Emitter& e, ValueId y, ValueId g) {
  ValueId a = Args(e, y).a;
  ValueId bell = e.op(Op::Exp, e.neg(e.mul(a, a)));
  return grads(e.mul(e.mul(e.literal(-2.0 / std::sqrt(kPi)), bell), g));
}

ArgGrads log1p_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.div(g, e.add(Args(e, y).a, e.literal(1.0))));
}

ArgGrads expm1_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.mul(g, e.add(y, e.literal(1.0))));
}

ArgGrads exp2_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.mul(g, e.mul(y, e.literal(std::log(2.0)))));
}

ArgGrads log10_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.div(g, e.mul(Args(e, y).a, e.literal(std::log(10.0)))));
}

ArgGrads tan_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.mul(g, e.add(e.literal(1.0), e.mul(y, y))));
}

ArgGrads atan_rule(Emitter& e, ValueId y, ValueId g) {
  ValueId a = Args(e, y).a;
  return grads(e.div(g, e.add(e.mul(a, a), e.literal(1.0))));
}

// asin and acos: +-1 / sqrt(1 - x^2).
ArgGrads asin_acos_rule(Emitter& e, ValueId y, ValueId g, bool negate) {
  ValueId a = Args(e, y).a;
  ValueId d = e.op(Op::Rsqrt, e.sub(e.literal(1.0), e.mul(a, a)));
  return grads(e.mul(g, negate ? e.neg(d) : d));
}
ArgGrads asin_rule(Emitter& e, ValueId y, ValueId g) { return asin_acos_rule(e, y, g, false); }
ArgGrads acos_rule(Emitter& e, ValueId y, ValueId g) { return asin_acos_rule(e, y, g, true); }

ArgGrads sinh_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.mul(g, e.op(Op::Cosh, Args(e, y).a)));
}

ArgGrads cosh_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.mul(g, e.op(Op::Sinh, Args(e, y).a)));
}

// asinh and acosh: 1 / sqrt(x^2 +- 1).
ArgGrads asinh_acosh_rule(Emitter& e, ValueId y, ValueId g, Op plus_or_minus) {
  ValueId a = Args(e, y).a;
  return grads(e.mul(g, e.op(Op::Rsqrt, e.op(plus_or_minus, e.mul(a, a), e.literal(1.0)))));
}
ArgGrads asinh_rule(Emitter& e, ValueId y, ValueId g) { return asinh_acosh_rule(e, y, g, Op::Add); }
ArgGrads acosh_rule(Emitter& e, ValueId y, ValueId g) { return asinh_acosh_rule(e, y, g, Op::Sub); }

ArgGrads atanh_rule(Emitter& e, ValueId y, ValueId g) {
  ValueId a = Args(e, y).a;
  return grads(e.div(g, e.sub(e.literal(1.0), e.mul(a, a))));
}

// atan2(a, b): d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2).
ArgGrads atan2_rule(Emitter& e, ValueId y, ValueId g) {
  Args x(e, y);
  ValueId r = e.op(Op::Reciprocal, e.add(e.mul(x.a, x.a), e.mul(x.b, x.b)));
  return grads(e.mul(g, e.mul(x.b, r)), e.mul(g, e.mul(e.neg(x.a), r)));
}

// hypot(a, b): d/da = a / hypot, d/db = b / hypot.
ArgGrads hypot_rule(Emitter& e, ValueId y, ValueId g) {
  Args x(e, y);
  return grads(e.mul(g, e.div(x.a, y)), e.mul(g, e.div(x.b, y)));
}

ArgGrads abs_rule(Emitter& e, ValueId y, ValueId g) {
  return grads(e.mul(g, e.op(Op::Sign, Args(e, y).a)));
}

// torch's threshold_backward: zero where the input is <= 0 (NaN passes the gradient).
ArgGrads relu_rule(Emitter& e, ValueId y, ValueId g) {
  ValueId zero = e.literal(0.0);
  return grads(e.where(e.op(Op::Le, Args(e, y).a, zero), zero, g));
}

ArgGrads where_rule(Emitter& e, ValueId y, ValueId g) {
  Args x(e, y);
  ValueId zero = e.literal(0.0);
  return grads(-1, e.where(x.a, g, zero), e.where(x.a, zero, g));
}

ArgGrads spike_rule(Emitter& e, ValueId y, ValueId g) {
  const ir::Node spike = e.node(y);
  return grads(e.mul(g, append_surrogate_derivative(e.nodes(), spike.surrogate, spike.args[0])));
}

}  // namespace

GradRule grad_rule(Op op) {
  switch (op) {
    case Op::Literal:
    case Op::Constant:
    case Op::Input:
    case Op::State:
    case Op::Param:
    case Op::Saved:
    case Op::GradOutput:
    case Op::GradState:
    case Op::Uniform:
      throw Error(std::string("no gradient rule for the leaf op '") + ir::op_info(op).name + "'");
    case Op::Add: return add_rule;
    case Op::Sub: return sub_rule;
    case Op::Mul: return mul_rule;
    case Op::Div: return div_rule;
    case Op::Neg: return neg_rule;
    case Op::Reciprocal: return reciprocal_rule;
    case Op::Fmod: return fmod_rule;
    case Op::Pow: return pow_rule;
    case Op::Min: return min_rule;
    case Op::Max: return max_rule;
    case Op::Clamp: return clamp_rule;
    case Op::Exp: return exp_rule;
    case Op::Log: return log_rule;
    case Op::Log2: return log2_rule;
    case Op::Sqrt: return sqrt_rule;
    case Op::Rsqrt: return rsqrt_rule;
    case Op::Sigmoid: return sigmoid_rule;
    case Op::Tanh: return tanh_rule;
    case Op::Sin: return sin_rule;
    case Op::Cos: return cos_rule;
    case Op::Erf: return erf_rule;
    case Op::Abs: return abs_rule;
    case Op::Log1p: return log1p_rule;
    case Op::Expm1: return expm1_rule;
    case Op::Exp2: return exp2_rule;
    case Op::Log10: return log10_rule;
    case Op::Tan: return tan_rule;
    case Op::Atan: return atan_rule;
    case Op::Asin: return asin_rule;
    case Op::Acos: return acos_rule;
    case Op::Sinh: return sinh_rule;
    case Op::Cosh: return cosh_rule;
    case Op::Asinh: return asinh_rule;
    case Op::Acosh: return acosh_rule;
    case Op::Atanh: return atanh_rule;
    case Op::Erfc: return erfc_rule;
    case Op::Erfinv: return erfinv_rule;
    case Op::Ndtri: return ndtri_rule;
    case Op::Atan2: return atan2_rule;
    case Op::Hypot: return hypot_rule;
    case Op::Relu: return relu_rule;
    case Op::Where: return where_rule;
    case Op::Spike: return spike_rule;
    // Piecewise constant, Bool-valued or gradient-stopping: no contribution.
    case Op::Sign:
    case Op::Round:
    case Op::Floor:
    case Op::Ceil:
    case Op::Eq:
    case Op::Ne:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge:
    case Op::And:
    case Op::Or:
    case Op::Not:
    case Op::ToFloat:
    case Op::ToBool:
    case Op::Detach: return no_grad;
  }
  throw Error("no gradient rule for op " + std::to_string(static_cast<int>(op)));
}

}  // namespace spikejit::autodiff
