// IR basics: op and surrogate tables, NeuronBuilder, ir::verify, defaults/overrides, errors,
// SHA-256, values derived from a Program.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/sha256.h"
#include "ir/checks.h"
#include "spikejit/builder.h"
#include "spikejit/error.h"
#include "spikejit/ir.h"
#include "spikejit/program.h"

namespace spikejit {
namespace {

using ir::Op;
using ir::SurrogateKind;
using ir::Type;

// --- SHA-256 ---------------------------------------------------------------------------------

std::string pattern(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += static_cast<char>((i * 7 + 3) % 256);
  return s;
}

TEST(Sha256, StandardVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                       "klmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Lengths around the padding boundaries; digests from an independent implementation.
TEST(Sha256, PaddingBoundaries) {
  EXPECT_EQ(sha256_hex(pattern(55)), "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b");
  EXPECT_EQ(sha256_hex(pattern(56)), "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27");
  EXPECT_EQ(sha256_hex(pattern(63)), "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055");
  EXPECT_EQ(sha256_hex(pattern(64)), "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241");
  EXPECT_EQ(sha256_hex(pattern(65)), "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e");
  EXPECT_EQ(sha256_hex(pattern(119)), "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e");
  EXPECT_EQ(sha256_hex(pattern(120)), "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5");
}

// --- errors ----------------------------------------------------------------------------------

TEST(Errors, ArgumentErrorNamesArgumentExpectedAndGot) {
  ArgumentError e("x_seq", "a float32 tensor of shape [T, 4, 16]", "float16[8, 4, 15]");
  EXPECT_STREQ(e.what(),
               "argument 'x_seq': expected a float32 tensor of shape [T, 4, 16], got float16[8, 4, 15]");
  EXPECT_EQ(e.argument(), "x_seq");
  const Error& base = e;
  EXPECT_NE(std::string(base.what()).find("x_seq"), std::string::npos);
}

TEST(Errors, DiagnosticFormatAndParseErrorJoin) {
  Diagnostic d{"lif.sj", 3, 7, "unknown name 'y'", "h = v + y"};
  EXPECT_EQ(format_diagnostic(d), "lif.sj:3:7: error: unknown name 'y'\n  h = v + y\n        ^");
  Diagnostic tab{"f", 1, 3, "bad", "\tx@"};
  EXPECT_EQ(format_diagnostic(tab), "f:1:3: error: bad\n  \tx@\n  \t ^");
  Diagnostic no_location{"lif", 0, 0, "state 'v' is never assigned", ""};
  EXPECT_EQ(format_diagnostic(no_location), "lif: error: state 'v' is never assigned");

  ParseError e({d, no_location});
  EXPECT_EQ(std::string(e.what()), format_diagnostic(d) + "\n" + format_diagnostic(no_location));
  ASSERT_EQ(e.diagnostics().size(), 2u);
  EXPECT_EQ(e.diagnostics()[0].column, 7);
}

// --- op and surrogate tables -----------------------------------------------------------------

TEST(Ops, TableNamesArityAndLookup) {
  EXPECT_STREQ(ir::op_info(Op::Add).name, "add");
  EXPECT_EQ(ir::op_info(Op::Clamp).arity, 3);
  EXPECT_EQ(ir::op_info(Op::Where).arity, 3);
  EXPECT_STREQ(ir::op_info(Op::ToFloat).name, "float");
  EXPECT_TRUE(ir::is_leaf(Op::Literal));
  EXPECT_TRUE(ir::is_leaf(Op::GradState));
  EXPECT_FALSE(ir::is_leaf(Op::Neg));

  int non_leaf = 0;
  for (int i = 0; i <= static_cast<int>(Op::Detach); ++i) {
    Op op = static_cast<Op>(i);
    Op found = Op::Literal;
    bool known = ir::op_from_name(ir::op_info(op).name, &found);
    if (ir::is_leaf(op)) {
      EXPECT_FALSE(known) << ir::op_info(op).name;
    } else {
      ++non_leaf;
      ASSERT_TRUE(known) << ir::op_info(op).name;
      EXPECT_EQ(found, op);
    }
  }
  EXPECT_EQ(non_leaf, static_cast<int>(Op::Detach) - static_cast<int>(Op::GradState));
  Op unused;
  EXPECT_FALSE(ir::op_from_name("Add", &unused));
  EXPECT_FALSE(ir::op_from_name("", &unused));
  // Codes the tables do not know (an enum cast from a number) are errors, not reads past them.
  EXPECT_THROW(ir::op_info(static_cast<Op>(250)), ArgumentError);
  EXPECT_THROW(ir::surrogate_info(static_cast<ir::SurrogateKind>(77)), ArgumentError);
}

struct ExpectedSurrogate {
  SurrogateKind kind;
  const char* name;
  const char* class_name;
  std::vector<std::string> params;
  std::vector<double> defaults;
};

TEST(Surrogates, SpikingJellyNamesParamsAndDefaults) {
  const std::vector<ExpectedSurrogate> expected = {
      {SurrogateKind::PiecewiseQuadratic, "piecewise_quadratic", "PiecewiseQuadratic", {"alpha"}, {1}},
      {SurrogateKind::PiecewiseExp, "piecewise_exp", "PiecewiseExp", {"alpha"}, {1}},
      {SurrogateKind::Sigmoid, "sigmoid", "Sigmoid", {"alpha"}, {4}},
      {SurrogateKind::SoftSign, "soft_sign", "SoftSign", {"alpha"}, {2}},
      {SurrogateKind::SuperSpike, "super_spike", "SuperSpike", {"alpha"}, {1}},
      {SurrogateKind::ATan, "atan", "ATan", {"alpha"}, {2}},
      {SurrogateKind::NonzeroSignLogAbs, "nonzero_sign_log_abs", "NonzeroSignLogAbs", {"alpha"}, {1}},
      {SurrogateKind::Erf, "erf", "Erf", {"alpha"}, {2}},
      {SurrogateKind::PiecewiseLeakyReLU, "piecewise_leaky_relu", "PiecewiseLeakyReLU", {"w", "c"}, {1, 0.01}},
      {SurrogateKind::SquarewaveFourierSeries, "squarewave_fourier_series", "SquarewaveFourierSeries",
       {"n", "T_period"}, {2, 8}},
      {SurrogateKind::S2NN, "s2nn", "S2NN", {"alpha", "beta"}, {4, 1}},
      {SurrogateKind::QPseudoSpike, "q_pseudo_spike", "QPseudoSpike", {"alpha"}, {2}},
      {SurrogateKind::LeakyKReLU, "leaky_k_relu", "LeakyKReLU", {"leak", "k"}, {0, 1}},
      {SurrogateKind::FakeNumericalGradient, "fake_numerical_gradient", "FakeNumericalGradient", {"alpha"}, {0.3}},
      {SurrogateKind::LogTailedReLU, "log_tailed_relu", "LogTailedReLU", {"alpha"}, {0}},
      {SurrogateKind::DeterministicPass, "deterministic_pass", "DeterministicPass", {}, {}},
      {SurrogateKind::Rect, "rect", "Rect", {"alpha"}, {1}},
  };
  ASSERT_EQ(ir::all_surrogates().size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const ExpectedSurrogate& e = expected[i];
    SCOPED_TRACE(e.name);
    EXPECT_EQ(ir::all_surrogates()[i], e.kind);
    const ir::SurrogateInfo& info = ir::surrogate_info(e.kind);
    EXPECT_STREQ(info.name, e.name);
    EXPECT_STREQ(info.class_name, e.class_name);
    ASSERT_EQ(info.param_names.size(), e.params.size());
    for (size_t j = 0; j < e.params.size(); ++j) EXPECT_EQ(info.param_names[j], e.params[j]);
    EXPECT_EQ(info.defaults, e.defaults);
    SurrogateKind by_name = SurrogateKind::Rect, by_class = SurrogateKind::Rect;
    ASSERT_TRUE(ir::surrogate_from_name(e.name, &by_name));
    ASSERT_TRUE(ir::surrogate_from_name(e.class_name, &by_class));
    EXPECT_EQ(by_name, e.kind);
    EXPECT_EQ(by_class, e.kind);
    EXPECT_EQ(ir::surrogate_problem({e.kind, e.defaults}), "");
  }
  SurrogateKind unused;
  EXPECT_FALSE(ir::surrogate_from_name("sigmoidd", &unused));
  EXPECT_FALSE(ir::surrogate_from_name("SIGMOID", &unused));
}

TEST(Surrogates, ParameterConstraints) {
  EXPECT_NE(ir::surrogate_problem({SurrogateKind::SoftSign, {0.0}}), "");
  EXPECT_NE(ir::surrogate_problem({SurrogateKind::SoftSign, {-1.0}}), "");
  EXPECT_NE(ir::surrogate_problem({SurrogateKind::PiecewiseLeakyReLU, {0.0, 0.01}}), "");
  EXPECT_NE(ir::surrogate_problem({SurrogateKind::SquarewaveFourierSeries, {2.5, 8}}), "");
  EXPECT_NE(ir::surrogate_problem({SurrogateKind::SquarewaveFourierSeries, {0, 8}}), "");
  EXPECT_EQ(ir::surrogate_problem({SurrogateKind::SquarewaveFourierSeries, {5, 8}}), "");
  EXPECT_NE(ir::surrogate_problem({SurrogateKind::QPseudoSpike, {1.0}}), "");
  EXPECT_EQ(ir::surrogate_problem({SurrogateKind::QPseudoSpike, {3.0}}), "");
  EXPECT_NE(ir::surrogate_problem({SurrogateKind::Sigmoid, {}}), "");
  EXPECT_NE(ir::surrogate_problem({SurrogateKind::Sigmoid, {4, 1}}), "");
  EXPECT_NE(ir::surrogate_problem({SurrogateKind::Sigmoid, {std::nan("")}}), "");
}

// --- builder ---------------------------------------------------------------------------------

// The lif example of builder.h.
ir::Neuron build_lif() {
  NeuronBuilder b("lif");
  Value x = b.input("x");
  Value v = b.state("v", 0.0);
  Value tau = b.constant("tau", 2.0);
  b.output("s");
  Value h = b.assign("h", v + (x - v) / tau);
  Value s = b.assign("s", b.spike(h - 1.0, {SurrogateKind::Sigmoid, {4.0}}));
  b.assign("v", h - s);
  return b.build();
}

TEST(Builder, RecordsDeclarationsLeavesAndBody) {
  ir::Neuron n = build_lif();
  EXPECT_EQ(n.name, "lif");
  ASSERT_EQ(n.inputs.size(), 1u);
  ASSERT_EQ(n.states.size(), 1u);
  ASSERT_EQ(n.constants.size(), 1u);
  ASSERT_EQ(n.outputs.size(), 1u);
  ASSERT_EQ(n.body.size(), 3u);
  EXPECT_EQ(n.body[0].name, "h");
  EXPECT_EQ(n.body[2].name, "v");
  EXPECT_EQ(n.nodes[0].op, Op::Input);
  EXPECT_EQ(n.nodes[1].op, Op::State);
  EXPECT_EQ(n.nodes[2].op, Op::Constant);
  EXPECT_EQ(n.nodes[2].index, 0);
  // Every operand refers to an earlier node.
  for (size_t k = 0; k < n.nodes.size(); ++k)
    for (int i = 0; i < ir::op_info(n.nodes[k].op).arity; ++i) EXPECT_LT(n.nodes[k].args[i], int(k));
  const ir::Node& spike = n.nodes[n.body[1].value];
  EXPECT_EQ(spike.op, Op::Spike);
  EXPECT_EQ(spike.surrogate, (ir::Surrogate{SurrogateKind::Sigmoid, {4.0}}));
}

TEST(Builder, TypesFollowOps) {
  NeuronBuilder b("t");
  Value x = b.input("x");
  Value flag = b.bool_constant("flag", true);
  Value cmp = b.op(Op::Lt, {x, b.literal(1)});
  Value both = b.op(Op::And, {cmp, flag});
  Value pick_bool = b.op(Op::Where, {both, cmp, flag});
  Value pick_float = b.op(Op::Where, {both, x, x * 2.0});
  Value f = b.op(Op::ToFloat, {pick_bool});
  Value t = b.op(Op::ToBool, {x});
  const ir::Neuron& n = b.peek();
  EXPECT_EQ(n.nodes[flag.id()].type, Type::Bool);
  EXPECT_EQ(n.nodes[cmp.id()].type, Type::Bool);
  EXPECT_EQ(n.nodes[both.id()].type, Type::Bool);
  EXPECT_EQ(n.nodes[pick_bool.id()].type, Type::Bool);
  EXPECT_EQ(n.nodes[pick_float.id()].type, Type::Float);
  EXPECT_EQ(n.nodes[f.id()].type, Type::Float);
  EXPECT_EQ(n.nodes[t.id()].type, Type::Bool);
}

TEST(Builder, RefReturnsLatestBinding) {
  NeuronBuilder b("t");
  Value x = b.input("x");
  Value v = b.state("v");
  EXPECT_EQ(b.ref("v").id(), v.id());
  Value next = b.assign("v", v + x);
  EXPECT_EQ(b.ref("v").id(), next.id());
  EXPECT_TRUE(b.has("x"));
  EXPECT_FALSE(b.has("y"));
  EXPECT_THROW(b.ref("y"), ArgumentError);
}

TEST(Builder, RejectsMisuseImmediately) {
  NeuronBuilder a("a"), b("b");
  Value xa = a.input("x");
  Value xb = b.input("x");
  EXPECT_THROW(xa + xb, ArgumentError);
  EXPECT_THROW(a.op(Op::Add, {xa}), ArgumentError);
  EXPECT_THROW(a.op(Op::Literal, {}), ArgumentError);
  EXPECT_THROW(a.assign("y", Value()), ArgumentError);
  EXPECT_THROW(a.state("v", "undeclared"), ArgumentError);
}

TEST(Builder, StateInitialValueFromConstant) {
  NeuronBuilder b("t");
  Value x = b.input("x");
  b.constant("v_reset", -0.25);
  b.state("v", "v_reset");
  b.state("u", 0.75);
  b.output("v");
  b.assign("v", x);
  b.assign("u", x);
  ir::Neuron n = b.build();
  EXPECT_EQ(n.states[0].init_constant, 0);
  EXPECT_EQ(ir::state_default(n, 0), -0.25);
  EXPECT_EQ(ir::state_default(n, 1), 0.75);
  EXPECT_THROW(ir::state_default(n, 2), ArgumentError);

  ir::Neuron changed = ir::with_constants(n, {{"v_reset", 0.5}});
  EXPECT_EQ(ir::state_default(changed, 0), 0.5);
  EXPECT_EQ(ir::state_default(n, 0), -0.25);  // the original is untouched
}

TEST(Verify, WithConstantsRejectsUnknownAndBadValues) {
  NeuronBuilder b("t");
  Value x = b.input("x");
  b.constant("tau", 2.0);
  b.bool_constant("soft", false);
  b.output("y");
  b.assign("y", x);
  ir::Neuron n = b.build();
  try {
    ir::with_constants(n, {{"tua", 1.0}});
    FAIL() << "unknown constant accepted";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("'tua'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tau, soft"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ir::with_constants(n, {{"soft", 0.5}}), ArgumentError);
  EXPECT_THROW(ir::with_constants(n, {{"tau", INFINITY}}), ArgumentError);
  ir::Neuron m = ir::with_constants(n, {{"soft", 1}, {"tau", 3}});
  EXPECT_EQ(m.constants[0].value, 3);
  EXPECT_EQ(m.constants[1].value, 1);
}

// --- verify ----------------------------------------------------------------------------------

// The messages of the ParseError that verify throws for `n` (none if it passes).
std::vector<std::string> problems(const ir::Neuron& n) {
  try {
    ir::verify(n);
  } catch (const ParseError& e) {
    std::vector<std::string> out;
    for (const Diagnostic& d : e.diagnostics()) {
      EXPECT_EQ(d.line, 0);
      out.push_back(d.message);
    }
    return out;
  }
  return {};
}

bool contains(const std::vector<std::string>& messages, const std::string& part) {
  for (const std::string& m : messages)
    if (m.find(part) != std::string::npos) return true;
  return false;
}

TEST(Verify, AcceptsValidNeuron) { EXPECT_TRUE(problems(build_lif()).empty()); }

TEST(Verify, ReportsEveryProblemAtOnce) {
  NeuronBuilder b("bad");
  Value x = b.input("x");
  b.input("x");                         // duplicate declaration
  b.state("v");                         // never assigned
  b.state("u");
  Value flag = b.bool_constant("flag", true);
  b.constant("c", 1.0);
  b.output("s");                        // never assigned
  b.output("o");
  b.assign("o", x + flag);              // type error
  b.assign("c", x);                     // assignment to a constant
  b.assign("u", b.op(Op::Lt, {x, x}));  // a state gets a Bool
  try {
    b.build();
    FAIL() << "invalid neuron accepted";
  } catch (const ParseError& e) {
    std::vector<std::string> m;
    for (const Diagnostic& d : e.diagnostics()) m.push_back(d.message);
    EXPECT_TRUE(contains(m, "duplicate declaration of 'x'"));
    EXPECT_TRUE(contains(m, "state 'v' is never assigned"));
    EXPECT_TRUE(contains(m, "output 's' is never assigned"));
    EXPECT_TRUE(contains(m, "'+' needs Float operands, but its right operand is Bool"));
    EXPECT_TRUE(contains(m, "cannot assign to 'c'"));
    EXPECT_TRUE(contains(m, "'u' must be assigned a Float value"));
    EXPECT_EQ(m.size(), 6u) << e.what();
  }
}

TEST(Verify, TypeErrorsNameTheOp) {
  NeuronBuilder b("t");
  Value x = b.input("x");
  Value flag = b.bool_constant("flag", false);
  b.output("y");
  b.assign("a", b.op(Op::Exp, {flag}));
  b.assign("b", b.op(Op::And, {x, flag}));
  b.assign("c", b.op(Op::Where, {x, x, x}));
  b.assign("d", b.op(Op::Where, {flag, x, flag}));
  b.assign("e", b.op(Op::ToFloat, {x}));
  b.assign("f", b.op(Op::Not, {x}));
  b.assign("y", x);
  auto m = problems(b.peek());
  EXPECT_TRUE(contains(m, "'exp' needs Float arguments, but argument 1 is Bool"));
  EXPECT_TRUE(contains(m, "'and' needs Bool operands, but its left operand is Float"));
  EXPECT_TRUE(contains(m, "'where' needs Bool arguments, but argument 1 is Float"));
  EXPECT_TRUE(contains(m, "'where' needs branches of one type, but they are Float and Bool"));
  EXPECT_TRUE(contains(m, "'float' needs Bool arguments, but argument 1 is Float"));
  EXPECT_TRUE(contains(m, "'not' needs Bool arguments, but its operand is Float"));
  EXPECT_EQ(m.size(), 6u);
}

TEST(Verify, StructuralProblems) {
  NeuronBuilder b("t");
  Value x = b.input("x");
  b.output("y");
  b.assign("y", b.op(Op::Neg, {x}));
  ir::Neuron good = b.build();

  ir::Neuron n = good;
  n.nodes.back().args[0] = static_cast<int32_t>(n.nodes.size());  // a later node
  EXPECT_TRUE(contains(problems(n), "not an earlier one"));
  n = good;
  n.nodes.back().args[1] = 0;  // an operand slot beyond the arity
  EXPECT_TRUE(contains(problems(n), "takes 1 operand"));
  n = good;
  n.nodes[0].index = 3;
  EXPECT_TRUE(contains(problems(n), "out of range"));
  n = good;
  n.nodes[0].op = Op::Saved;
  EXPECT_TRUE(contains(problems(n), "cannot contain 'saved'"));
  n = good;
  n.nodes.back().type = Type::Bool;
  EXPECT_TRUE(contains(problems(n), "has type Bool but computes Float"));
  n = good;
  n.outputs.clear();
  EXPECT_TRUE(contains(problems(n), "declares no output"));
  n = good;
  n.body[0].value = 99;
  EXPECT_TRUE(contains(problems(n), "refers to no node"));
  n = good;
  n.name = "two words";
  EXPECT_TRUE(contains(problems(n), "not a valid name"));
  n = good;
  n.inputs[0].name = "and";
  EXPECT_TRUE(contains(problems(n), "'and' is not a valid name"));
  n = good;
  n.nodes.push_back(ir::Node{});  // a literal
  n.nodes.back().value = std::numeric_limits<double>::infinity();
  n.body[0].value = static_cast<ir::ValueId>(n.nodes.size() - 1);
  EXPECT_TRUE(contains(problems(n), "literal must be finite"));
  n = good;  // enum codes from numbers the enums do not have
  n.nodes.back().type = static_cast<Type>(7);
  EXPECT_TRUE(contains(problems(n), "node 1 has an unknown type"));
  n = good;
  n.params.push_back({"w", static_cast<ir::ParamKind>(9), 0.0});
  EXPECT_TRUE(contains(problems(n), "param 'w' has an unknown kind"));
}

TEST(Verify, AssignmentsToInputsAndParamsAndBoolStateInit) {
  NeuronBuilder b("t");
  Value x = b.input("x");
  Value w = b.param("w", ir::ParamKind::PerNeuron, 1.0);
  b.bool_constant("flag", true);
  b.state("v", "flag");
  b.output("v");
  b.assign("v", x * w);
  b.assign("x", b.literal(1));
  b.assign("w", b.literal(2));
  auto m = problems(b.peek());
  EXPECT_TRUE(contains(m, "cannot assign to 'x'"));
  EXPECT_TRUE(contains(m, "cannot assign to 'w'"));
  EXPECT_TRUE(contains(m, "the initial value of state 'v' must be a Float constant, 'flag' is Bool"));
  EXPECT_EQ(m.size(), 3u);
}

TEST(Verify, SurrogateParameters) {
  NeuronBuilder b("t");
  Value x = b.input("x");
  b.output("a");
  b.assign("a", b.spike(x, {SurrogateKind::PiecewiseLeakyReLU, {1.0}}));
  b.assign("b", b.spike(x, {SurrogateKind::SoftSign, {-2.0}}));
  auto m = problems(b.peek());
  EXPECT_TRUE(contains(m, "'piecewise_leaky_relu' takes 2 parameter(s), got 1"));
  EXPECT_TRUE(contains(m, "'soft_sign' needs alpha > 0"));
}

TEST(Verify, OldStateValueAfterReassignmentIsRejectedUnlessNamed) {
  NeuronBuilder b("t");
  Value x = b.input("x");
  Value v = b.state("v");
  b.output("y");
  b.assign("v", v + x);
  b.assign("y", v * 2.0);  // the previous v, which no name denotes any more
  EXPECT_TRUE(contains(problems(b.peek()), "uses the old value of 'v' after 'v' was reassigned"));

  NeuronBuilder c("t");
  Value cx = c.input("x");
  Value cv = c.state("v");
  c.output("y");
  c.assign("v_old", cv);
  c.assign("v", cv + cx);
  c.assign("y", cv * 2.0);  // written as v_old * 2
  EXPECT_TRUE(problems(c.peek()).empty());
}

TEST(Verify, ExpressionsDeeperThanTheParserAcceptsAreRejected) {
  NeuronBuilder b("t");
  Value x = b.input("x");
  b.output("y");
  Value e = x;
  for (int i = 0; i < ir::kMaxExpressionDepth + 5; ++i) e = e * 1.5 + x;
  b.assign("y", e);
  EXPECT_TRUE(contains(problems(b.peek()), "nests deeper than"));

  // Sharing unnamed values doubles the written text at every level.
  NeuronBuilder d("t");
  Value dx = d.input("x");
  d.output("y");
  Value de = dx;
  for (int i = 0; i < 40; ++i) de = de + de;
  d.assign("y", de);
  EXPECT_TRUE(contains(problems(d.peek()), "too large to write out"));

  // The same chain with names every few levels is fine.
  NeuronBuilder c("t");
  Value cx = c.input("x");
  c.output("y");
  Value ce = cx;
  for (int i = 0; i < ir::kMaxExpressionDepth + 5; ++i) {
    ce = ce * 1.5 + cx;
    if (i % 10 == 0) ce = c.assign("t" + std::to_string(i), ce);
  }
  c.assign("y", ce);
  EXPECT_TRUE(problems(c.peek()).empty());
}

// --- Program::derived -------------------------------------------------------------------------

const char kOwnerA = 0, kOwnerB = 0;
const char* const kAccumulator = "neuron n\ninput x\nstate v = 0\noutput s\nv = v + x\ns = v\n";

TEST(ProgramDerived, MadeOncePerOwnerAndVariantSharedByCopiesAndThreads) {
  const Program program = Program::from_text(kAccumulator);
  std::atomic<int> made{0};
  auto make = [&](int value) {
    return [&made, value] {
      ++made;
      return std::vector<int>{value};
    };
  };
  const std::vector<int>& a = program.derived<std::vector<int>>(&kOwnerA, 0, make(1));
  EXPECT_EQ(a, std::vector<int>{1});
  const Program copy = program;  // shares the derived values
  EXPECT_EQ(&copy.derived<std::vector<int>>(&kOwnerA, 0, make(9)), &a);
  EXPECT_EQ(program.derived<std::vector<int>>(&kOwnerA, 1, make(2)), std::vector<int>{2});
  EXPECT_EQ(program.derived<std::vector<int>>(&kOwnerB, 0, make(3)), std::vector<int>{3});
  EXPECT_EQ(made.load(), 3);

  std::vector<std::thread> threads;
  std::vector<const std::vector<int>*> seen(8);
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&, i] { seen[i] = &program.derived<std::vector<int>>(&kOwnerB, 7, make(7)); });
  }
  for (std::thread& t : threads) t.join();
  for (const std::vector<int>* value : seen) EXPECT_EQ(value, seen[0]);
  EXPECT_EQ(*seen[0], std::vector<int>{7});
  EXPECT_EQ(made.load(), 4);

  // Another program of the same text has values of its own.
  const Program other = Program::from_text(kAccumulator);
  EXPECT_EQ(other.derived<std::vector<int>>(&kOwnerA, 0, make(5)), std::vector<int>{5});
}

TEST(ProgramDerived, AFailedMakeKeepsNothingAndTheNextCallTriesAgain) {
  const Program program = Program::from_text(kAccumulator);
  EXPECT_THROW(program.derived<int>(&kOwnerA, 0, []() -> int { throw std::runtime_error("no"); }),
               std::runtime_error);
  EXPECT_EQ(program.derived<int>(&kOwnerA, 0, [] { return 4; }), 4);
}

// The fused CPU steps derive the lane programs while being derived themselves.
TEST(ProgramDerived, AMakeMayDeriveOtherValues) {
  const Program program = Program::from_text(kAccumulator);
  const int& outer = program.derived<int>(&kOwnerA, 0, [&] {
    return program.derived<int>(&kOwnerB, 0, [] { return 20; }) + 1;
  });
  EXPECT_EQ(outer, 21);
  EXPECT_EQ(program.derived<int>(&kOwnerB, 0, [] { return 99; }), 20);
  EXPECT_EQ(&program.derived<int>(&kOwnerA, 0, [] { return 99; }), &outer);
}

}  // namespace
}  // namespace spikejit
