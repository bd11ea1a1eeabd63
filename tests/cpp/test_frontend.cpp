// The neuron text format: the shipped neurons, canonical print and hash, every diagnostic with
// its location, builder equivalence, and random expression round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "ir/checks.h"
#include "ir/scalar_ops.h"
#include "support/random_seed.h"
#include "spikejit/builder.h"
#include "spikejit/error.h"
#include "spikejit/frontend.h"

namespace spikejit {
namespace {

using frontend::parse;
using frontend::print;
using ir::Op;

std::string read_neuron_file(const std::string& stem) {
  const char* dir = std::getenv("SPIKEJIT_SOURCE_DIR");
  EXPECT_NE(dir, nullptr) << "SPIKEJIT_SOURCE_DIR is not set (CTest sets it)";
  std::ifstream in(std::string(dir ? dir : ".") + "/neurons/" + stem + ".sj");
  EXPECT_TRUE(in.good()) << stem;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The diagnostics of the ParseError that parsing `text` throws.
std::vector<Diagnostic> diagnostics_of(const std::string& text) {
  try {
    parse(text, "test.sj");
  } catch (const ParseError& e) {
    return e.diagnostics();
  }
  ADD_FAILURE() << "accepted:\n" << text;
  return {};
}

// The single diagnostic of `text`, checked to sit at line:col and to contain `message`.
void expect_error(const std::string& text, int line, int col, const std::string& message) {
  SCOPED_TRACE(text);
  std::vector<Diagnostic> d = diagnostics_of(text);
  ASSERT_EQ(d.size(), 1u) << ParseError(d).what();
  EXPECT_EQ(d[0].file, "test.sj");
  EXPECT_EQ(d[0].line, line) << d[0].message;
  EXPECT_EQ(d[0].column, col) << d[0].message;
  EXPECT_NE(d[0].message.find(message), std::string::npos) << d[0].message;
}

const char* kHeader = "neuron t\ninput x\nstate v = 0\nconst c = 2, flag = true\noutput s\n";

// kHeader plus `body`, then `v = x` and `s = x` so that only the body's problems show.
std::string with_body(const std::string& body) { return std::string(kHeader) + body + "v = x\ns = x\n"; }

// --- the shipped neurons ---------------------------------------------------------------------

TEST(ShippedNeurons, ParseWithExpectedDeclarations) {
  for (const char* stem : {"if", "lif", "plif"}) {
    SCOPED_TRACE(stem);
    ir::Neuron n = parse(read_neuron_file(stem), std::string(stem) + ".sj");
    EXPECT_EQ(n.name, stem);
    ASSERT_EQ(n.inputs.size(), 1u);
    EXPECT_EQ(n.inputs[0].name, "x");
    ASSERT_EQ(n.states.size(), 1u);
    EXPECT_EQ(n.states[0].name, "v");
    ASSERT_GE(n.states[0].init_constant, 0);
    EXPECT_EQ(n.constants[n.states[0].init_constant].name, "v_reset");
    ASSERT_EQ(n.outputs.size(), 1u);
    EXPECT_EQ(n.outputs[0].name, "s");
    EXPECT_EQ(n.body.back().name, "v");
    std::map<std::string, const ir::ConstDecl*> constants;
    for (const auto& c : n.constants) constants[c.name] = &c;
    EXPECT_EQ(constants.at("v_threshold")->value, 1.0);
    EXPECT_EQ(constants.at("soft_reset")->type, ir::Type::Bool);
    EXPECT_EQ(constants.at("detach_reset")->value, 0.0);
    bool has_spike = false;
    for (const auto& node : n.nodes) {
      if (node.op != Op::Spike) continue;
      has_spike = true;
      EXPECT_EQ(node.surrogate, (ir::Surrogate{ir::SurrogateKind::Sigmoid, {4.0}}));
    }
    EXPECT_TRUE(has_spike);
  }
  ir::Neuron lif = parse(read_neuron_file("lif"));
  EXPECT_EQ(lif.constants.size(), 6u);
  ir::Neuron plif = parse(read_neuron_file("plif"));
  ASSERT_EQ(plif.params.size(), 1u);
  EXPECT_EQ(plif.params[0].name, "w");
  EXPECT_EQ(plif.params[0].kind, ir::ParamKind::Scalar);
}

TEST(ShippedNeurons, CanonicalPrintIsAFixedPoint) {
  for (const char* stem : {"if", "lif", "plif"}) {
    SCOPED_TRACE(stem);
    std::string once = print(parse(read_neuron_file(stem)));
    EXPECT_EQ(print(parse(once)), once);
    EXPECT_EQ(frontend::hash(parse(once)), frontend::hash(parse(read_neuron_file(stem))));
  }
}

TEST(ShippedNeurons, CanonicalTextOfLif) {
  EXPECT_EQ(print(parse(read_neuron_file("lif"))),
            "neuron lif\n"
            "input x\n"
            "state v = v_reset\n"
            "const decay_input = true\n"
            "const detach_reset = false\n"
            "const soft_reset = false\n"
            "const tau = 2\n"
            "const v_reset = 0\n"
            "const v_threshold = 1\n"
            "output s\n"
            "\n"
            "h = where(decay_input, v + (x - (v - v_reset)) / tau, v - (v - v_reset) / tau + x)\n"
            "s = spike(h - v_threshold, sigmoid(alpha=4))\n"
            "s_reset = where(detach_reset, detach(s), s)\n"
            "v = where(soft_reset, h - s_reset * v_threshold, (1 - s_reset) * h + s_reset * v_reset)\n");
}

// --- canonical form and hash -----------------------------------------------------------------

const char* kLifSource =
    "neuron lif\n"
    "input x\n"
    "state v = v_reset\n"
    "const tau = 2.0, v_th = 1.0\n"
    "const v_reset = 0.0\n"
    "output s\n"
    "h = v + (x - v) / tau\n"
    "s = spike(h - v_th, sigmoid(alpha = 4))\n"
    "v = h - s * v_th\n";

TEST(Hash, InvariantUnderWhitespaceCommentsAndConstOrder) {
  std::string reformatted =
      "# a comment line\n"
      "\n"
      "   neuron   lif   # trailing comment\n"
      "output s\n"
      "const v_reset = 0\n"
      "const v_th=1.000, tau=2e0\n"
      "\tinput x\r\n"
      "state v=v_reset\n"
      "\n"
      "h=v+((x-v)/tau)   # extra parentheses\n"
      "s = spike( h-v_th , Sigmoid )\n"
      "v = (h) - (s*v_th)\n";
  ir::Neuron a = parse(kLifSource), b = parse(reformatted);
  EXPECT_EQ(print(a), print(b));
  EXPECT_EQ(frontend::hash(a), frontend::hash(b));
  EXPECT_EQ(frontend::hash(a).size(), 64u);
  EXPECT_EQ(frontend::hash(a), sha256_hex(print(a)));
}

TEST(Hash, ChangesWithAConstantValueOrTheBody) {
  std::string base = print(parse(kLifSource));
  std::string tau3 = kLifSource;
  tau3.replace(tau3.find("tau = 2.0"), 9, "tau = 3.0");
  std::string other_alpha = kLifSource;
  other_alpha.replace(other_alpha.find("alpha = 4"), 9, "alpha = 5");
  std::string other_body = kLifSource;
  other_body.replace(other_body.find("s * v_th"), 8, "v_th * s");
  std::string h = frontend::hash(parse(kLifSource));
  EXPECT_NE(frontend::hash(parse(tau3)), h);
  EXPECT_NE(frontend::hash(parse(other_alpha)), h);
  EXPECT_NE(frontend::hash(parse(other_body)), h);
}

TEST(Print, MinimalParenthesesKeepStructure) {
  struct Case {
    const char* in;
    const char* out;
  };
  const Case cases[] = {
      {"a - (b - c)", "a - (b - c)"},
      {"(a - b) - c", "a - b - c"},
      {"a / (b / c)", "a / (b / c)"},
      {"(a / b) / c", "a / b / c"},
      {"a - (b + c)", "a - (b + c)"},
      {"a + (b + c)", "a + (b + c)"},
      {"(a + b) * c", "(a + b) * c"},
      {"a * (b * c)", "a * (b * c)"},
      {"a + b * c", "a + b * c"},
      {"-(a + b)", "-(a + b)"},
      {"-a * b", "-a * b"},
      {"-(a * b)", "-(a * b)"},
      {"- -a", "--a"},
      {"a - -1", "a - -1"},
      {"a * -(1)", "a * -1"},
      {"-(2) - 3", "-2 - 3"},
      {"a - (-1.5e-3)", "a - -0.0015"},
      {"exp(-(a))", "exp(-a)"},
      {"float(a < b and (b < a or not a == b))", "float(a < b and (b < a or not a == b))"},
      {"float((a < b and b < a) or a == b)", "float(a < b and b < a or a == b)"},
      {"float(not (a < b and b < a))", "float(not (a < b and b < a))"},
      {"float((a + 1) * 2 >= b - 3)", "float((a + 1) * 2 >= b - 3)"},
      {"float(where(a > b, true, false))", "float(where(a > b, true, false))"},
      {"clamp(a, -1, 1e20)", "clamp(a, -1, 1e+20)"},
      {"0.1 + 1e-7 + 123456789", "0.1 + 1e-07 + 123456789"},
      {"spike(a, PiecewiseLeakyReLU)", "spike(a, piecewise_leaky_relu(w=1, c=0.01))"},
      {"spike(a, s2nn(beta=2))", "spike(a, s2nn(alpha=4, beta=2))"},
      {"spike(a, deterministic_pass)", "spike(a, deterministic_pass())"},
      {"spike(a, squarewave_fourier_series(T_period = -4, n = 3))",
       "spike(a, squarewave_fourier_series(n=3, T_period=-4))"},
      {"spike(a)", "spike(a, sigmoid(alpha=4))"},
  };
  for (const Case& c : cases) {
    std::string text = std::string("neuron t\ninput a, b, c\noutput y\ny = ") + c.in + "\n";
    SCOPED_TRACE(text);
    std::string printed = print(parse(text));
    std::string expected = std::string("neuron t\ninput a\ninput b\ninput c\noutput y\n\ny = ") + c.out + "\n";
    EXPECT_EQ(printed, expected);
    EXPECT_EQ(print(parse(printed)), printed);
  }
}

TEST(Print, DeclarationsInCanonicalOrder) {
  std::string text =
      "neuron n\noutput o\nparam theta[neuron] = -1.5\nconst z = 1, a = false\nstate v = -0.5, u = a2\n"
      "input y\nconst a2 = 3\ninput x\nparam w\n"
      "o = x + y * theta + w + z\nv = o\nu = float(a)\n";
  EXPECT_EQ(print(parse(text)),
            "neuron n\ninput y\ninput x\nstate v = -0.5\nstate u = a2\nparam theta[neuron] = -1.5\n"
            "param w = 0\nconst a = false\nconst a2 = 3\nconst z = 1\noutput o\n\n"
            "o = x + y * theta + w + z\nv = o\nu = float(a)\n");
}

TEST(Print, NamesFollowTheLatestBinding) {
  std::string text =
      "neuron n\ninput x\nstate v\noutput y\n"
      "old = v\nv = v + x\nk = 2\ny = v * old * k + 2\nv = v\n";
  std::string printed = print(parse(text));
  EXPECT_NE(printed.find("y = v * old * k + 2\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("v = v\n"), std::string::npos) << printed;
  EXPECT_EQ(print(parse(printed)), printed);
}

// --- diagnostics -----------------------------------------------------------------------------

TEST(Diagnostics, UnknownName) {
  expect_error(with_body("h = x + y\n"), 6, 9, "unknown name 'y'");
  expect_error(with_body("h = later + 1\nlater = x\n"), 6, 5, "'later' is used before it is assigned (line 7)");
}

TEST(Diagnostics, UnknownFunction) { expect_error(with_body("h = 1 + expp(x)\n"), 6, 9, "unknown function 'expp'"); }

TEST(Diagnostics, WrongArity) {
  expect_error(with_body("h = min(x)\n"), 6, 5, "'min' takes 2 arguments, got 1");
  expect_error(with_body("h = x * exp(x, 1)\n"), 6, 9, "'exp' takes 1 argument, got 2");
  expect_error(with_body("h = spike(x, sigmoid, 1)\n"), 6, 23, "spike takes a value and a surrogate");
}

TEST(Diagnostics, UnknownSurrogateAndBadParameters) {
  expect_error(with_body("h = spike(x, sigmod(alpha=2))\n"), 6, 14, "unknown surrogate 'sigmod'");
  expect_error(with_body("h = spike(x, sigmoid(beta=2))\n"), 6, 22, "has no parameter 'beta' (it takes alpha)");
  expect_error(with_body("h = spike(x, atan(alpha=2, alpha=3))\n"), 6, 28, "'alpha' given twice");
  expect_error(with_body("h = spike(x, SoftSign(alpha=-1))\n"), 6, 14, "'soft_sign' needs alpha > 0");
  expect_error(with_body("h = spike(x, q_pseudo_spike(alpha = 1))\n"), 6, 14, "alpha != 1");
  expect_error(with_body("h = spike(x, sigmoid(4))\n"), 6, 22, "a surrogate parameter written name = number");
}

TEST(Diagnostics, TypeErrors) {
  expect_error(with_body("h = x + flag\n"), 6, 7, "'+' needs Float operands, but its right operand is Bool");
  expect_error(with_body("h = where(x, 1, 2)\n"), 6, 5, "'where' needs Bool arguments, but argument 1 is Float");
  expect_error(with_body("h = not x\n"), 6, 5, "'not' needs Bool arguments, but its operand is Float");
  expect_error(with_body("h = 1\nb = h < 2 and h\n"), 7, 11, "'and' needs Bool operands, but its right operand is Float");
  expect_error(std::string(kHeader) + "v = x > 1\ns = x\n", 6, 1, "'v' must be assigned a Float value");
}

TEST(Diagnostics, StateOrOutputNeverAssigned) {
  expect_error(std::string(kHeader) + "s = x\n", 3, 7, "state 'v' is never assigned");
  expect_error(std::string(kHeader) + "v = x\n", 5, 8, "output 's' is never assigned");
  expect_error("neuron t\ninput x\nstate v\nv = x\n", 1, 1, "declares no output");
}

TEST(Diagnostics, DuplicateDeclaration) {
  expect_error(with_body("input c\n"), 6, 7, "duplicate declaration of 'c'");
  expect_error(std::string(kHeader) + "const c = 3\nv = x\ns = x\n", 6, 7, "duplicate declaration of 'c'");
  expect_error(std::string(kHeader) + "output s\nv = x\ns = x\n", 6, 8, "duplicate declaration of output 's'");
}

TEST(Diagnostics, AssignmentToInputOrConstant) {
  expect_error(with_body("x = 1\n"), 6, 1, "cannot assign to 'x'");
  expect_error(with_body("c = x\n"), 6, 1, "cannot assign to 'c'");
  expect_error("neuron t\ninput x\nconst f = true\nstate v = f\noutput v\nv = x\n", 4, 7,
               "must be a Float constant, 'f' is Bool");
  expect_error("neuron t\ninput x\nstate v = f\noutput v\nv = x\n", 3, 11, "unknown constant 'f'");
}

TEST(Parse, AByteOrderMarkIsSkipped) {
  const ir::Neuron plain = frontend::parse("neuron t\ninput x\noutput s\ns = x\n", "t.sj");
  const ir::Neuron marked = frontend::parse("\xEF\xBB\xBFneuron t\ninput x\noutput s\ns = x\n", "t.sj");
  EXPECT_EQ(frontend::print(marked), frontend::print(plain));
}

TEST(Diagnostics, BadNumber) {
  expect_error(with_body("h = 1e+ * x\n"), 6, 5, "bad number '1e+'");
  expect_error(with_body("h = 2x\n"), 6, 5, "bad number '2x'");
  expect_error(with_body("h = 1.2.3\n"), 6, 5, "bad number '1.2.3'");
  expect_error(with_body("h = x * 1e999\n"), 6, 9, "bad number '1e999'");
  expect_error("neuron t\ninput x\nconst k = 0x10\noutput s\ns = x\n", 3, 11, "bad number '0x10'");
}

TEST(Diagnostics, UnexpectedToken) {
  expect_error(with_body("h = x +\n"), 6, 8, "expected an expression, got end of line");
  expect_error(with_body("h = (x + 1\n"), 6, 11, "expected ')', got end of line");
  expect_error(with_body("h = x $ 1\n"), 6, 7, "unexpected character '$'");
  expect_error(with_body("h = x 1\n"), 6, 7, "expected end of line, got number 1");
  expect_error(with_body("h = x < 1 < 2\n"), 6, 11, "comparisons cannot be chained");
  expect_error(with_body("state = 1\n"), 6, 7, "expected a name, got '='");
  expect_error(with_body("input and\n"), 6, 7, "'and' is a keyword");
  expect_error(with_body("h == x\n"), 6, 1, "expected a declaration");
  expect_error(with_body("param p[channel] = 1\n"), 6, 9, "expected 'neuron'");
  expect_error("input x\nneuron t\noutput s\ns = x\n", 1, 1, "expected 'neuron NAME' as the first line");
  expect_error("neuron t\ninput x\noutput s\nneuron u\ns = x\n", 4, 1, "one neuron");
  expect_error("", 1, 1, "empty input");
  // Control bytes are named, never written raw (an ESC would drive the terminal); the source
  // line shows '?' in their place, so the caret still lines up.
  expect_error(with_body(std::string("h = x \x1b[31m 1\n")), 6, 7, "unexpected character '\\x1b'");
  expect_error(with_body(std::string("h = x \0 1\n", 10)), 6, 7, "unexpected character '\\x00'");
  const std::vector<Diagnostic> d = diagnostics_of(with_body(std::string("h = x \x1b 1\n")));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_NE(format_diagnostic(d[0]).find("\n  h = x ? 1\n        ^"), std::string::npos) << format_diagnostic(d[0]);
  expect_error("# only a comment\n\n", 1, 1, "empty input");
}

TEST(Diagnostics, MultipleErrorsInOneException) {
  std::string text =
      "neuron t\n"           // 1
      "input x\n"            // 2
      "state v\n"            // 3  never assigned
      "const c = 1, c = 2\n"  // 4  duplicate
      "output s\n"           // 5
      "h = x + y\n"          // 6  unknown name
      "k = h $ 2\n"          // 7  unexpected character
      "m = foo(k) + bar(x)\n"  // 8  two unknown functions
      "s = spike(h, nope)\n";  // 9  unknown surrogate
  std::vector<Diagnostic> d = diagnostics_of(text);
  ASSERT_EQ(d.size(), 7u) << ParseError(d).what();
  const std::pair<int, int> where[] = {{3, 7}, {4, 14}, {6, 9}, {7, 7}, {8, 5}, {8, 14}, {9, 14}};
  for (size_t i = 0; i < d.size(); ++i) {
    EXPECT_EQ(d[i].line, where[i].first) << d[i].message;
    EXPECT_EQ(d[i].column, where[i].second) << d[i].message;
  }
  // A line with an error still binds its name: no follow-on errors about h, k or m.
  try {
    parse(text, "multi.sj");
  } catch (const ParseError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("multi.sj:6:9: error: unknown name 'y'\n  h = x + y\n          ^"), std::string::npos)
        << what;
  }
}

TEST(Diagnostics, ErrorsInsideAnExpressionDoNotCascade) {
  // `h` fails (unknown name); its later Bool use must not add a type error.
  std::vector<Diagnostic> d = diagnostics_of(with_body("h = where(q, 1, 2)\ng = not h\n"));
  ASSERT_EQ(d.size(), 1u) << ParseError(d).what();
  EXPECT_EQ(d[0].line, 6);
}

TEST(Diagnostics, DeepNestingIsAnErrorNotACrash) {
  std::string deep = "neuron t\ninput x\noutput s\ns = " + std::string(5000, '(') + "x" +
                     std::string(5000, ')') + "\n";
  EXPECT_NE(diagnostics_of(deep).at(0).message.find("nested too deeply"), std::string::npos);
  std::string minus = "neuron t\ninput x\noutput s\ns = " + std::string(5000, '-') + "x\n";
  EXPECT_NE(diagnostics_of(minus).at(0).message.find("nested too deeply"), std::string::npos);
  std::string chain = "neuron t\ninput x\noutput s\ns = x";
  for (int i = 0; i < 5000; ++i) chain += " + x";
  EXPECT_NE(diagnostics_of(chain + "\n").at(0).message.find("nested too deeply"), std::string::npos);
  std::string calls = "neuron t\ninput x\noutput s\ns = ";
  for (int i = 0; i < 5000; ++i) calls += "exp(";
  calls += "x" + std::string(5000, ')') + "\n";
  EXPECT_NE(diagnostics_of(calls).at(0).message.find("nested too deeply"), std::string::npos);
  // Just inside the limit is fine.
  std::string ok = "neuron t\ninput x\noutput s\ns = x";
  for (int i = 1; i < ir::kMaxExpressionDepth; ++i) ok += " + x";
  EXPECT_NO_THROW(parse(ok + "\n"));
}

// --- builder equivalence ---------------------------------------------------------------------

TEST(Builder, SameNeuronAsParsedText) {
  // Declared in the order the parser declares: inputs, constants, states, params.
  NeuronBuilder b("lif");
  Value x = b.input("x");
  Value tau = b.constant("tau", 2.0);
  Value v_th = b.constant("v_th", 1.0);
  b.constant("v_reset", 0.0);
  Value v = b.state("v", "v_reset");
  b.output("s");
  Value h = b.assign("h", v + (x - v) / tau);
  Value s = b.assign("s", b.spike(h - v_th, {ir::SurrogateKind::Sigmoid, {4.0}}));
  b.assign("v", h - s * v_th);
  std::string text = kLifSource;
  ir::Neuron built = b.build(), parsed = parse(text);
  EXPECT_EQ(print(built), print(parsed));
  EXPECT_EQ(frontend::hash(built), frontend::hash(parsed));
  // Same graph, node by node.
  ASSERT_EQ(built.nodes.size(), parsed.nodes.size());
  for (size_t k = 0; k < built.nodes.size(); ++k) {
    EXPECT_EQ(built.nodes[k].op, parsed.nodes[k].op) << k;
    EXPECT_EQ(built.nodes[k].value, parsed.nodes[k].value) << k;
    for (int i = 0; i < 3; ++i) EXPECT_EQ(built.nodes[k].args[i], parsed.nodes[k].args[i]) << k;
  }
}

// --- random expression round trips -----------------------------------------------------------

// Evaluates a neuron's step with the shared scalar semantics: the final binding of every state
// and output. Independent of the printer and the parser.
std::vector<double> evaluate(const ir::Neuron& n, const std::vector<double>& inputs,
                             const std::vector<double>& states, const std::vector<double>& params) {
  std::vector<double> value(n.nodes.size());
  for (size_t k = 0; k < n.nodes.size(); ++k) {
    const ir::Node& node = n.nodes[k];
    switch (node.op) {
      case Op::Literal: value[k] = node.value; break;
      case Op::Constant: value[k] = n.constants[node.index].value; break;
      case Op::Input: value[k] = inputs[node.index]; break;
      case Op::State: value[k] = states[node.index]; break;
      case Op::Param: value[k] = params[node.index]; break;
      default: {
        double a[3] = {0, 0, 0};
        for (int i = 0; i < ir::op_info(node.op).arity; ++i) a[i] = value[node.args[i]];
        value[k] = ir::apply_op(node.op, a[0], a[1], a[2]);
      }
    }
  }
  std::map<std::string, double> last;
  for (const ir::Assignment& a : n.body) last[a.name] = value[a.value];
  std::vector<double> out;
  for (const auto& s : n.states) out.push_back(last.at(s.name));
  for (const auto& o : n.outputs) out.push_back(last.at(o.name));
  return out;
}

class RandomNeuron {
 public:
  explicit RandomNeuron(testing::SeededRng& rng) : rng_(rng), b_("random") {}

  ir::Neuron make() {
    floats_ = {b_.input("x"), b_.input("y"), b_.constant("c", pick_number()),
               b_.param("w", ir::ParamKind::Scalar, 0.5), b_.param("p", ir::ParamKind::PerNeuron, -2)};
    Value v = b_.state("v", pick_number());
    floats_.push_back(v);
    bools_ = {b_.bool_constant("flag", rng_.integer(0, 1) == 1)};
    b_.output("o1");
    b_.output("o2");
    int locals = rng_.integer(0, 4);
    for (int i = 0; i < locals; ++i) {
      if (rng_.integer(0, 2) == 0) {
        bools_.push_back(b_.assign("b" + std::to_string(i), gen(ir::Type::Bool, 4)));
      } else {
        floats_.push_back(b_.assign("t" + std::to_string(i), gen(ir::Type::Float, 4)));
      }
    }
    Value next = b_.assign("v", gen(ir::Type::Float, 5));
    // The previous v is no longer nameable; the new one is.
    for (Value& f : floats_)
      if (f.id() == v.id()) f = next;
    b_.assign("o1", gen(ir::Type::Float, 5));
    b_.assign("o2", gen(ir::Type::Float, 5));
    return b_.build();
  }

 private:
  double pick_number() {
    switch (rng_.integer(0, 4)) {
      case 0: return rng_.integer(-3, 3);
      case 1: return rng_.integer(-20, 20) / 10.0;
      case 2: return rng_.uniform(-5, 5);
      case 3: return std::ldexp(rng_.uniform(0.5, 1), rng_.integer(-40, 40));
      default: return -std::ldexp(rng_.uniform(0.5, 1), rng_.integer(-40, 40));
    }
  }

  Value gen(ir::Type type, int depth) {
    if (depth == 0 || rng_.integer(0, 4) == 0) return leaf(type);
    if (type == ir::Type::Bool) {
      switch (rng_.integer(0, 4)) {
        case 0: return b_.op(Op::And, {gen(type, depth - 1), gen(type, depth - 1)});
        case 1: return b_.op(Op::Or, {gen(type, depth - 1), gen(type, depth - 1)});
        case 2: return b_.op(Op::Not, {gen(type, depth - 1)});
        case 3: return b_.op(Op::ToBool, {gen(ir::Type::Float, depth - 1)});
        default: {
          static const Op compare[] = {Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge};
          return b_.op(compare[rng_.integer(0, 5)], {gen(ir::Type::Float, depth - 1), gen(ir::Type::Float, depth - 1)});
        }
      }
    }
    static const Op binary[] = {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Add, Op::Sub, Op::Mul,
                                Op::Div, Op::Min, Op::Max, Op::Pow, Op::Fmod};
    static const Op unary[] = {Op::Neg, Op::Neg, Op::Exp, Op::Tanh, Op::Abs, Op::Sigmoid, Op::Floor,
                               Op::Round, Op::Detach, Op::Sqrt, Op::Reciprocal, Op::Relu};
    switch (rng_.integer(0, 5)) {
      case 0: case 1: case 2:
        return b_.op(binary[rng_.integer(0, 11)], {gen(type, depth - 1), gen(type, depth - 1)});
      case 3: return b_.op(unary[rng_.integer(0, 11)], {gen(type, depth - 1)});
      case 4: {
        int kind = rng_.integer(0, 3);
        if (kind == 0) return b_.op(Op::Where, {gen(ir::Type::Bool, depth - 1), gen(type, depth - 1), gen(type, depth - 1)});
        if (kind == 1) return b_.op(Op::ToFloat, {gen(ir::Type::Bool, depth - 1)});
        if (kind == 2) return b_.op(Op::Clamp, {gen(type, depth - 1), gen(type, depth - 1), gen(type, depth - 1)});
        return b_.spike(gen(type, depth - 1), random_surrogate());
      }
      default: return gen(type, depth - 1);
    }
  }

  ir::Surrogate random_surrogate() {
    const auto& kinds = ir::all_surrogates();
    ir::Surrogate s{kinds[rng_.integer(0, static_cast<int>(kinds.size()) - 1)], {}};
    s.params = ir::surrogate_info(s.kind).defaults;
    if (!s.params.empty() && s.kind != ir::SurrogateKind::SquarewaveFourierSeries &&
        s.kind != ir::SurrogateKind::QPseudoSpike)
      s.params[0] = rng_.uniform(0.1, 5);
    return s;
  }

  Value leaf(ir::Type type) {
    if (type == ir::Type::Bool) {
      if (rng_.integer(0, 3) == 0) {
        Value t = b_.literal(rng_.integer(0, 1));
        b_.raw().nodes[t.id()].type = ir::Type::Bool;
        return t;
      }
      return bools_[rng_.integer(0, static_cast<int>(bools_.size()) - 1)];
    }
    if (rng_.integer(0, 2) == 0) return b_.literal(pick_number());
    return floats_[rng_.integer(0, static_cast<int>(floats_.size()) - 1)];
  }

  testing::SeededRng& rng_;
  NeuronBuilder b_;
  std::vector<Value> floats_, bools_;
};

bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

TEST(RoundTrip, RandomExpressionsPrintParsePrintAndKeepTheirValue) {
  testing::SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (int iteration = 0; iteration < 300; ++iteration) {
    ir::Neuron original = RandomNeuron(rng).make();
    std::string text = print(original);
    SCOPED_TRACE(text);
    ir::Neuron reparsed = parse(text);
    ASSERT_EQ(print(reparsed), text);
    // The printed text means the same computation: same values, bit for bit, at random points.
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<double> inputs = {rng.uniform(-3, 3), rng.uniform(-3, 3)};
      std::vector<double> states = {rng.uniform(-3, 3)};
      std::vector<double> params = {rng.uniform(-3, 3), rng.uniform(-3, 3)};
      std::vector<double> a = evaluate(original, inputs, states, params);
      std::vector<double> b = evaluate(reparsed, inputs, states, params);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(same_value(a[i], b[i])) << a[i] << " vs " << b[i];
    }
  }
}

TEST(RoundTrip, NumbersReadBackExactly) {
  testing::SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (int i = 0; i < 200; ++i) {
    double value = std::ldexp(rng.uniform(-1, 1), rng.integer(-300, 300));
    NeuronBuilder b("n");
    Value x = b.input("x");
    b.constant("k", value);
    b.output("y");
    b.assign("y", x * value);
    std::string text = print(b.build());
    ir::Neuron back = parse(text);
    EXPECT_EQ(back.constants[0].value, value) << text;
    EXPECT_EQ(back.nodes[back.body[0].value].op, Op::Mul);
    EXPECT_EQ(back.nodes[back.nodes[back.body[0].value].args[1]].value, value) << text;
  }
}

}  // namespace
}  // namespace spikejit
