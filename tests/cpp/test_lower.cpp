// Lowering (Neuron -> Step) and Step simplification.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ir/scalar_ops.h"
#include "spikejit/builder.h"
#include "spikejit/error.h"
#include "spikejit/ir.h"
#include "support/random_seed.h"
#include "support/step_eval.h"

namespace spikejit {
namespace {

using ir::Op;
using testing::SeededRng;

int count_op(const ir::Step& s, Op op) {
  int n = 0;
  for (const ir::Node& node : s.nodes) n += node.op == op;
  return n;
}

void expect_topological(const ir::Step& s) {
  for (size_t i = 0; i < s.nodes.size(); ++i)
    for (int a = 0; a < ir::op_info(s.nodes[i].op).arity; ++a) {
      EXPECT_GE(s.nodes[i].args[a], 0);
      EXPECT_LT(s.nodes[i].args[a], static_cast<ir::ValueId>(i));
    }
  for (const ir::Node& node : s.nodes) EXPECT_NE(node.op, Op::Constant);
}

// One step of `s` at random points equals the direct formula `want`.
template <class F>
void expect_step_computes(const ir::Step& s, SeededRng& rng, F want) {
  for (int i = 0; i < 50; ++i) {
    testing::StepLeaves leaves;
    for (int k = 0; k < s.num_inputs; ++k) leaves.inputs.push_back(rng.uniform(-2, 2));
    for (int k = 0; k < s.num_states; ++k) leaves.states.push_back(rng.uniform(-2, 2));
    const std::vector<double> val = testing::eval_step(s, leaves, false);
    std::vector<double> outs, next;
    for (ir::ValueId id : s.outputs) outs.push_back(val[id]);
    for (ir::ValueId id : s.next_states) next.push_back(val[id]);
    want(leaves.inputs, leaves.states, outs, next);
  }
}

TEST(Lower, SubstitutesConstantsAndTakesTheLastBindings) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  const double tau = rng.uniform(1.5, 4.0), th = rng.uniform(0.5, 1.5);
  NeuronBuilder b("lif");
  Value x = b.input("x");
  Value v = b.state("v", 0.0);
  Value c_tau = b.constant("tau", tau);
  Value c_th = b.constant("v_th", th);
  Value soft = b.bool_constant("soft", true);
  b.output("s");
  Value h = b.assign("h", v + (x - v) / c_tau);
  Value s = b.assign("s", b.spike(h - c_th, {ir::SurrogateKind::Sigmoid, {4.0}}));
  b.assign("v", b.op(Op::Where, {soft, h - s * c_th, (1.0 - s) * h}));
  b.assign("v", b.ref("v") * 1.0);  // rebinding: the last one is the next state
  const ir::Step step = ir::lower(b.build());
  SCOPED_TRACE(ir::to_string(step));
  expect_topological(step);
  EXPECT_EQ(step.num_inputs, 1);
  EXPECT_EQ(step.num_states, 1);
  EXPECT_EQ(step.num_outputs, 1);
  EXPECT_EQ(count_op(step, Op::Where), 0);  // folded on the Bool constant
  EXPECT_EQ(count_op(step, Op::Mul), 1);    // `* 1` removed, s * v_th kept
  expect_step_computes(step, rng, [&](auto& in, auto& st, auto& out, auto& next) {
    const double hh = st[0] + (in[0] - st[0]) / tau;
    const double ss = hh - th >= 0 ? 1.0 : 0.0;
    EXPECT_EQ(out[0], ss);
    EXPECT_EQ(next[0], hh - ss * th);
  });
}

TEST(Lower, UnassignedOutputThrows) {
  NeuronBuilder b("broken");
  b.input("x");
  b.output("y");
  EXPECT_THROW(ir::lower(b.peek()), Error);
}

ir::Node leaf(Op op, int index) {
  ir::Node n;
  n.op = op;
  n.index = index;
  return n;
}
ir::Node lit(double v, ir::Type t = ir::Type::Float) {
  ir::Node n;
  n.op = Op::Literal;
  n.value = v;
  n.type = t;
  return n;
}
ir::Node op(Op o, ir::ValueId a, ir::ValueId b = -1, ir::ValueId c = -1,
            ir::Type t = ir::Type::Float) {
  ir::Node n;
  n.op = o;
  n.args[0] = a;
  n.args[1] = b;
  n.args[2] = c;
  n.type = t;
  return n;
}

TEST(Simplify, FoldsLiteralsWithTheSharedScalarSemantics) {
  ir::Step s;
  s.nodes = {lit(2.5),
             op(Op::Round, 0),
             lit(-3.5),
             op(Op::Round, 2),
             op(Op::Add, 1, 3),
             op(Op::Spike, 2),
             lit(1.0, ir::Type::Bool),
             op(Op::Not, 6, -1, -1, ir::Type::Bool)};
  s.outputs = {4, 5, 7};
  ir::simplify(s);
  ASSERT_EQ(s.nodes.size(), 3u) << ir::to_string(s);
  EXPECT_EQ(s.nodes[s.outputs[0]].value, 2.0 + -4.0);  // half to even
  EXPECT_EQ(s.nodes[s.outputs[1]].value, 0.0);         // heaviside(-3.5)
  EXPECT_EQ(s.nodes[s.outputs[2]].type, ir::Type::Bool);
  EXPECT_EQ(s.nodes[s.outputs[2]].value, 0.0);
}

TEST(Simplify, KeepsOnlyIdentitiesExactInIeee) {
  ir::Step s;
  s.num_inputs = 1;
  s.nodes = {leaf(Op::Input, 0), lit(0.0),          lit(-0.0),
             lit(1.0),           op(Op::Add, 0, 1),  // x + 0: -0 + 0 = +0, kept
             op(Op::Add, 0, 2),                      // x + -0 -> x
             op(Op::Sub, 0, 1),                      // x - 0 -> x
             op(Op::Mul, 3, 0),                      // 1 * x -> x
             op(Op::Div, 0, 3),                      // x / 1 -> x
             op(Op::Neg, 0),     op(Op::Neg, 9)};    // -(-x) -> x
  s.outputs = {4, 5, 6, 7, 8, 10};
  ir::simplify(s);
  SCOPED_TRACE(ir::to_string(s));
  EXPECT_EQ(s.nodes[s.outputs[0]].op, Op::Add);
  for (size_t i = 1; i < s.outputs.size(); ++i) EXPECT_EQ(s.nodes[s.outputs[i]].op, Op::Input) << i;
}

// x / d and x * (1 / d) have the same bits for random bit patterns x and the divisors the
// rewrite below accepts (NaN results: any NaN).
template <class F, class Bits>
void expect_division_is_reciprocal_product(std::mt19937_64& bits) {
  for (int i = 0; i < 200000; ++i) {
    const Bits pattern = static_cast<Bits>(bits());
    F x;
    std::memcpy(&x, &pattern, sizeof x);
    for (F d : {F(2), F(-0.25), F(0x1p126), F(0x1p-126)}) {
      const F q = ir::apply_op<F>(Op::Div, x, d, F(0));
      const F p = ir::apply_op<F>(Op::Mul, x, F(1) / d, F(0));
      EXPECT_TRUE(std::memcmp(&q, &p, sizeof q) == 0 || (std::isnan(q) && std::isnan(p)))
          << x << " / " << d << " = " << q << ", * (1 / d) = " << p;
    }
  }
}

TEST(Simplify, DividesByPowersOfTwoAsMultiplicationsByTheirReciprocals) {
  ir::Step s;
  s.num_inputs = 1;
  s.nodes = {leaf(Op::Input, 0), lit(2.0),           lit(-0.25),         lit(3.0),
             lit(0x1p127),       lit(0x1p126),       lit(0.0),           lit(INFINITY),
             op(Op::Div, 0, 1),                      // x / 2 -> x * 0.5
             op(Op::Div, 0, 2),                      // x / -0.25 -> x * -4
             op(Op::Div, 0, 3),                      // x / 3: 1/3 is inexact, kept
             op(Op::Div, 0, 4),                      // x / 2^127: 2^-127 is no normal float, kept
             op(Op::Div, 0, 5),                      // x / 2^126 -> x * 2^-126
             op(Op::Div, 0, 6),                      // x / 0: kept
             op(Op::Div, 0, 7)};                     // x / inf: kept
  s.outputs = {8, 9, 10, 11, 12, 13, 14};
  ir::simplify(s);
  SCOPED_TRACE(ir::to_string(s));
  const Op want[] = {Op::Mul, Op::Mul, Op::Div, Op::Div, Op::Mul, Op::Div, Op::Div};
  const double reciprocal[] = {0.5, -4.0, 0.0, 0.0, 0x1p-126, 0.0, 0.0};
  for (size_t i = 0; i < s.outputs.size(); ++i) {
    const ir::Node& n = s.nodes[s.outputs[i]];
    EXPECT_EQ(n.op, want[i]) << i;
    if (n.op == Op::Mul) {
      EXPECT_EQ(s.nodes[n.args[1]].value, reciprocal[i]) << i;
    }
  }

  // The rewrite's premise in both compute types, on bit patterns of every class (denormals,
  // infinities, NaN).
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  std::mt19937_64 bits(static_cast<uint64_t>(rng.integer(0, 1 << 30)));
  expect_division_is_reciprocal_product<float, uint32_t>(bits);
  expect_division_is_reciprocal_product<double, uint64_t>(bits);
}

TEST(Simplify, MergesDuplicatesRemovesDeadCodeAndRemapsEveryResult) {
  ir::Step s;
  s.num_inputs = 2;
  s.nodes = {leaf(Op::Input, 0),      leaf(Op::Input, 1), op(Op::Mul, 0, 1), op(Op::Exp, 0),
             op(Op::Mul, 0, 1),       leaf(Op::Input, 1), op(Op::Mul, 0, 5), op(Op::Sub, 2, 4),
             leaf(Op::GradOutput, 0), op(Op::Add, 8, 6)};
  s.outputs = {6};
  s.grad_inputs = {9, 7};
  s.saved = {42};  // forward ids: never remapped
  ir::simplify(s);
  SCOPED_TRACE(ir::to_string(s));
  expect_topological(s);
  EXPECT_EQ(count_op(s, Op::Mul), 1);
  EXPECT_EQ(count_op(s, Op::Exp), 0);
  EXPECT_EQ(count_op(s, Op::Input), 2);
  EXPECT_EQ(s.nodes[s.grad_inputs[0]].op, Op::Add);
  EXPECT_EQ(s.nodes[s.grad_inputs[1]].op, Op::Sub);
  EXPECT_EQ(s.nodes[s.grad_inputs[1]].args[0], s.nodes[s.grad_inputs[1]].args[1]);
  EXPECT_EQ(s.saved, std::vector<ir::ValueId>{42});
  const ir::Step again = [&] {
    ir::Step c = s;
    ir::simplify(c);
    return c;
  }();
  EXPECT_EQ(ir::to_string(again), ir::to_string(s));  // idempotent
}

TEST(StepInvariant, LiteralsParametersAndWhatIsComputedFromThemAlone) {
  const std::vector<ir::Node> nodes = {
      leaf(Op::Param, 0),    // %0 w
      leaf(Op::Input, 0),    // %1 x
      op(Op::Sigmoid, 0),    // %2 sigmoid(w)
      leaf(Op::State, 0),    // %3 v
      op(Op::Mul, 2, 3),     // %4 sigmoid(w) * v
      lit(2.0),              // %5 2
      op(Op::Sub, 2, 5),     // %6 sigmoid(w) - 2
      leaf(Op::Uniform, 0),  // %7 a draw
      op(Op::Add, 6, 7),     // %8 (sigmoid(w) - 2) + draw
      op(Op::Neg, 6),        // %9 -(sigmoid(w) - 2)
      op(Op::Mul, 1, 9),     // %10 x * %9
  };
  const std::vector<bool> want = {true, false, true, false, false, true, true, false, false, true, false};
  EXPECT_EQ(ir::step_invariant(nodes), want);
}

TEST(Simplify, SelectsWhereBranches) {
  ir::Step s;
  s.num_inputs = 2;
  s.nodes = {leaf(Op::Input, 0),
             leaf(Op::Input, 1),
             lit(0.0, ir::Type::Bool),
             op(Op::Where, 2, 0, 1),
             op(Op::Gt, 0, 1, -1, ir::Type::Bool),
             op(Op::Where, 4, 1, 1)};
  s.outputs = {3, 5};
  ir::simplify(s);
  EXPECT_EQ(s.nodes[s.outputs[0]].op, Op::Input);
  EXPECT_EQ(s.nodes[s.outputs[0]].index, 1);
  EXPECT_EQ(s.outputs[1], s.outputs[0]);
  EXPECT_EQ(s.nodes.size(), 1u);
}

TEST(Simplify, RejectsForwardReferences) {
  ir::Step s;
  s.nodes = {op(Op::Neg, 1), leaf(Op::Input, 0)};
  s.outputs = {0};
  EXPECT_THROW(ir::simplify(s), Error);
}

TEST(StepText, ListsNodesAndResults) {
  ir::Step s;
  s.num_inputs = 1;
  s.num_outputs = 1;
  ir::Node spike = op(Op::Spike, 0);
  spike.surrogate = {ir::SurrogateKind::ATan, {2.0}};
  s.nodes = {leaf(Op::Input, 0), spike, lit(0.5), op(Op::Add, 1, 2)};
  s.outputs = {3};
  const std::string text = ir::to_string(s);
  EXPECT_NE(text.find("%0 = input 0"), std::string::npos) << text;
  EXPECT_NE(text.find("%1 = spike %0, atan(alpha=2) : float"), std::string::npos) << text;
  EXPECT_NE(text.find("%2 = literal 0.5 : float"), std::string::npos) << text;
  EXPECT_NE(text.find("%3 = add %1, %2 : float"), std::string::npos) << text;
  EXPECT_NE(text.find("output 0 = %3"), std::string::npos) << text;
}

}  // namespace
}  // namespace spikejit
