// The op table and the surrogate table of the IR.
#include <cmath>
#include <string>

#include "ir/checks.h"
#include "spikejit/error.h"
#include "spikejit/ir.h"

namespace spikejit::ir {
namespace {

constexpr OpInfo kOps[] = {
#define SPIKEJIT_IR_INFO(name, text, arity) {text, arity},
    SPIKEJIT_IR_OPS(SPIKEJIT_IR_INFO)
#undef SPIKEJIT_IR_INFO
};
constexpr int kNumOps = sizeof(kOps) / sizeof(kOps[0]);

// SpikingJelly's surrogate classes (spikingjelly.activation_based.surrogate), same defaults.
const SurrogateInfo kSurrogates[] = {
    {"piecewise_quadratic", "PiecewiseQuadratic", {"alpha"}, {1.0}},
    {"piecewise_exp", "PiecewiseExp", {"alpha"}, {1.0}},
    {"sigmoid", "Sigmoid", {"alpha"}, {4.0}},
    {"soft_sign", "SoftSign", {"alpha"}, {2.0}},
    {"super_spike", "SuperSpike", {"alpha"}, {1.0}},
    {"atan", "ATan", {"alpha"}, {2.0}},
    {"nonzero_sign_log_abs", "NonzeroSignLogAbs", {"alpha"}, {1.0}},
    {"erf", "Erf", {"alpha"}, {2.0}},
    {"piecewise_leaky_relu", "PiecewiseLeakyReLU", {"w", "c"}, {1.0, 0.01}},
    {"squarewave_fourier_series", "SquarewaveFourierSeries", {"n", "T_period"}, {2.0, 8.0}},
    {"s2nn", "S2NN", {"alpha", "beta"}, {4.0, 1.0}},
    {"q_pseudo_spike", "QPseudoSpike", {"alpha"}, {2.0}},
    {"leaky_k_relu", "LeakyKReLU", {"leak", "k"}, {0.0, 1.0}},
    {"fake_numerical_gradient", "FakeNumericalGradient", {"alpha"}, {0.3}},
    {"log_tailed_relu", "LogTailedReLU", {"alpha"}, {0.0}},
    {"deterministic_pass", "DeterministicPass", {}, {}},
    {"rect", "Rect", {"alpha"}, {1.0}},
};
constexpr int kNumSurrogates = sizeof(kSurrogates) / sizeof(kSurrogates[0]);
static_assert(kNumSurrogates == static_cast<int>(SurrogateKind::Rect) + 1,
              "one table row per SurrogateKind");

}  // namespace

const OpInfo& op_info(Op op) {
  const int index = static_cast<int>(op);
  if (index >= kNumOps) {  // (an enum value cast from a number the table does not know)
    throw ArgumentError("op", "an ir::Op code below " + std::to_string(kNumOps), std::to_string(index));
  }
  return kOps[index];
}

bool is_leaf(Op op) { return op_info(op).arity == 0; }

bool op_from_name(const std::string& name, Op* out) {
  for (int i = 0; i < kNumOps; ++i) {
    if (kOps[i].arity > 0 && name == kOps[i].name) {
      *out = static_cast<Op>(i);
      return true;
    }
  }
  return false;
}

const SurrogateInfo& surrogate_info(SurrogateKind kind) {
  const int index = static_cast<int>(kind);
  if (index >= kNumSurrogates) {
    throw ArgumentError("surrogate", "an ir::SurrogateKind code below " + std::to_string(kNumSurrogates),
                        std::to_string(index));
  }
  return kSurrogates[index];
}

const std::vector<SurrogateKind>& all_surrogates() {
  static const std::vector<SurrogateKind> kinds = [] {
    std::vector<SurrogateKind> out;
    for (int i = 0; i < kNumSurrogates; ++i) out.push_back(static_cast<SurrogateKind>(i));
    return out;
  }();
  return kinds;
}

bool surrogate_from_name(const std::string& name, SurrogateKind* out) {
  for (int i = 0; i < kNumSurrogates; ++i) {
    if (name == kSurrogates[i].name || name == kSurrogates[i].class_name) {
      *out = static_cast<SurrogateKind>(i);
      return true;
    }
  }
  return false;
}

std::string surrogate_problem(const Surrogate& s) {
  const SurrogateInfo& info = surrogate_info(s.kind);
  if (s.params.size() != info.param_names.size()) {
    return "surrogate '" + std::string(info.name) + "' takes " +
           std::to_string(info.param_names.size()) + " parameter(s), got " +
           std::to_string(s.params.size());
  }
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (!std::isfinite(s.params[i]))
      return "surrogate parameter '" + std::string(info.param_names[i]) + "' must be finite";
  }
  auto bad = [&](const char* rule) {
    return "surrogate '" + std::string(info.name) + "' needs " + rule;
  };
  switch (s.kind) {
    case SurrogateKind::SoftSign:
      if (!(s.params[0] > 0)) return bad("alpha > 0");
      break;
    case SurrogateKind::PiecewiseLeakyReLU:
      if (!(s.params[0] > 0)) return bad("w > 0");
      break;
    case SurrogateKind::SquarewaveFourierSeries:
      if (!(s.params[0] >= 1 && std::floor(s.params[0]) == s.params[0] && s.params[0] <= 1e6))
        return bad("an integer n >= 1");
      if (s.params[1] == 0) return bad("T_period != 0");
      break;
    case SurrogateKind::QPseudoSpike:
      if (s.params[0] == 1) return bad("alpha != 1");
      break;
    default:
      break;
  }
  return "";
}

}  // namespace spikejit::ir
