// Random draws inside neurons (uniform()): the generator against its published known answers,
// the executor's draws against the generator, the statistics of the draws, seeds, the save
// policies (per step saves what depends on a draw, checkpoints draw again: the same gradients),
// forward-mode tangents, the text format and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ir/random.h"
#include "spikejit/autodiff.h"
#include "spikejit/buffers.h"
#include "spikejit/builder.h"
#include "spikejit/cpu.h"
#include "spikejit/error.h"
#include "spikejit/frontend.h"
#include "spikejit/program.h"
#include "support/random_seed.h"
#include "support/test_neurons.h"

namespace spikejit {
namespace {

// Random123's known-answer vectors for Philox4x32-10 (counter words, key words, output words).
TEST(Philox, MatchesThePublishedKnownAnswers) {
  struct Case {
    ir::PhiloxBlock counter;
    uint32_t key0, key1;
    ir::PhiloxBlock expected;
  };
  const Case cases[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Case& c : cases) {
    const ir::PhiloxBlock out = ir::philox4x32_10(c.counter, c.key0, c.key1);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(out.w[w], c.expected.w[w]) << "word " << w;
  }
}

TEST(Philox, DrawsAreOnTheGridOfTwoToTheMinus24InTheUnitInterval) {
  const uint64_t seed = testing::test_seed();
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1} << 33}) {
    for (int64_t t = 0; t < 64; ++t) {
      const float u = ir::uniform_draw(seed, n, t, 0);
      EXPECT_GE(u, 0.0f);
      EXPECT_LT(u, 1.0f);
      EXPECT_EQ(std::ldexp(u, 24), std::floor(std::ldexp(u, 24)));
      EXPECT_EQ(u, ir::uniform_draw(seed, n, t, 0)) << "a pure function of its coordinates";
    }
  }
  // The high word of the group index counts.
  EXPECT_NE(ir::uniform_draw(seed, 5, 0, 0), ir::uniform_draw(seed, 5 + (int64_t{1} << 34), 0, 0));
}

// The executor's vectorized draws (four neurons per block of the generator) equal the scalar
// definition from any first neuron, for any count.
TEST(Philox, VectorDrawsEqualScalarDraws) {
  const uint64_t seed = testing::test_seed();
  for (int64_t first : {int64_t{0}, int64_t{4}, int64_t{5}, int64_t{514}, (int64_t{1} << 34) - 6}) {
    for (int64_t count : {1, 3, 4, 7, 128, 129, 300}) {
      std::vector<float> f(count, NAN);
      std::vector<double> d(count, NAN);
      ir::uniform_draws(f.data(), seed, 3, 2, first, count);
      ir::uniform_draws(d.data(), seed, 3, 2, first, count);
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(f[i], ir::uniform_draw(seed, first + i, 3, 2)) << "first " << first << " i " << i;
        ASSERT_EQ(d[i], static_cast<double>(f[i]));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Calls of the CPU executor in float64 on contiguous vectors.

struct Call {
  int64_t T, N;
  std::vector<double> x, theta, s, noise, v_final;
  std::vector<double> checkpoints;  // checkpoint_every > 0
  std::vector<std::vector<double>> saved;
  uint64_t seed;
};

TensorView view(std::vector<double>& v, std::vector<int64_t> shape) { return TensorView(v.data(), DType::F64, std::move(shape)); }

std::vector<double> random_values(uint64_t seed, size_t n, double lo, double hi) {
  std::vector<double> v(n);
  uint64_t z = seed;
  for (double& e : v) {  // SplitMix64: any well-mixed sequence will do
    z += 0x9E3779B97F4A7C15ull;
    uint64_t r = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    r = (r ^ (r >> 27)) * 0x94D049BB133111EBull;
    r ^= r >> 31;
    e = lo + (hi - lo) * static_cast<double>(r >> 11) * 0x1p-53;
  }
  return v;
}

// Forward (training when `checkpoint_every` >= 0, else inference) of noisy_threshold.
Call run_forward(const Program& p, int64_t T, int64_t N, uint64_t seed, int64_t checkpoint_every) {
  Call c{T, N, random_values(seed ^ 1, T * N, -0.5, 1.5), {0.8}, std::vector<double>(T * N, NAN),
         std::vector<double>(T * N, NAN), std::vector<double>(N, NAN), {}, {}, seed};
  ForwardBuffers b;
  b.steps = T;
  b.neuron_shape = {N};
  b.inputs = {view(c.x, {T, N})};
  b.params = {view(c.theta, {1})};
  b.outputs = {view(c.s, {T, N}), view(c.noise, {T, N})};
  b.final_states = {view(c.v_final, {N})};
  b.seed = &c.seed;
  if (checkpoint_every > 0) {
    c.checkpoints.assign(((T + checkpoint_every - 1) / checkpoint_every) * N, NAN);
    b.saved = {view(c.checkpoints, {(T + checkpoint_every - 1) / checkpoint_every, N})};
    b.checkpoint_every = checkpoint_every;
  } else if (checkpoint_every == 0) {
    c.saved.assign(p.backward().saved.size(), std::vector<double>(T * N, NAN));
    for (auto& s : c.saved) b.saved.push_back(view(s, {T, N}));
  }
  cpu::forward(p, b);
  return c;
}

struct Grads {
  std::vector<double> x, theta;
};

Grads run_backward(const Program& p, Call& c, int64_t checkpoint_every, const std::vector<double>& grad_s) {
  Grads g{std::vector<double>(c.T * c.N, NAN), {NAN}};
  std::vector<double> gs = grad_s;
  BackwardBuffers b;
  b.steps = c.T;
  b.neuron_shape = {c.N};
  b.params = {view(c.theta, {1})};
  b.grad_outputs = {view(gs, {c.T, c.N}), TensorView()};
  b.grad_inputs = {view(g.x, {c.T, c.N})};
  b.grad_params = {view(g.theta, {1})};
  b.seed = &c.seed;
  if (checkpoint_every > 0) {
    b.saved = {view(c.checkpoints, {(c.T + checkpoint_every - 1) / checkpoint_every, c.N})};
    b.inputs = {view(c.x, {c.T, c.N})};
    b.checkpoint_every = checkpoint_every;
  } else {
    for (auto& s : c.saved) b.saved.push_back(view(s, {c.T, c.N}));
  }
  cpu::backward(p, b);
  return g;
}

TEST(RandomNeuron, TheExecutorDrawsWhatTheGeneratorGives) {
  const Program p = testing::test_neuron("noisy_threshold");
  ASSERT_TRUE(p.uses_random());
  EXPECT_FALSE(Program::from_file(std::string(std::getenv("SPIKEJIT_SOURCE_DIR") ? std::getenv("SPIKEJIT_SOURCE_DIR")
                                                                                  : ".") +
                                  "/neurons/lif.sj")
                   .uses_random());
  const int64_t T = 9, N = 1300;  // several blocks of lanes, the last one partial
  const Call c = run_forward(p, T, N, testing::test_seed(), -1);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n)
      ASSERT_EQ(c.noise[t * N + n], static_cast<double>(ir::uniform_draw(c.seed, n, t, 0))) << "t " << t << " n " << n;
}

TEST(RandomNeuron, DrawsAreUniformAndIndependentAcrossNeuronsStepsAndStreams) {
  // Two streams as outputs: first and second moments, and correlations between neighbours in
  // time, in neurons and across streams, each within 5 standard errors.
  const Program p = Program::from_text(
      "neuron two_streams\ninput x\nstate v = 0\noutput a\noutput b\na = uniform()\nb = uniform()\nv = v + x\n");
  const int64_t T = 64, N = 4096, count = T * N;
  std::vector<double> x(count, 0.25), a(count, NAN), b(count, NAN);
  uint64_t seed = testing::test_seed();
  ForwardBuffers fb;
  fb.steps = T;
  fb.neuron_shape = {N};
  fb.inputs = {view(x, {T, N})};
  fb.outputs = {view(a, {T, N}), view(b, {T, N})};
  fb.seed = &seed;
  cpu::forward(p, fb);
  double mean = 0, second = 0;
  for (double u : a) {
    mean += u;
    second += u * u;
  }
  mean /= count;
  const double variance = second / count - mean * mean;
  const double se_mean = std::sqrt(1.0 / 12 / count);
  EXPECT_NEAR(mean, 0.5, 5 * se_mean);
  EXPECT_NEAR(variance, 1.0 / 12, 5 * std::sqrt(1.0 / 180 / count));  // var of (u - 1/2)^2 is 1/180
  auto correlation = [&](const std::vector<double>& u, const std::vector<double>& w, int64_t dt, int64_t dn) {
    double sum = 0;
    int64_t pairs = 0;
    for (int64_t t = 0; t + dt < T; ++t)
      for (int64_t n = 0; n + dn < N; ++n, ++pairs) sum += (u[t * N + n] - 0.5) * (w[(t + dt) * N + n + dn] - 0.5);
    return std::make_pair(sum / pairs * 12, 5 / std::sqrt(static_cast<double>(pairs)));
  };
  for (auto [r, bound] : {correlation(a, a, 1, 0), correlation(a, a, 0, 1), correlation(a, b, 0, 0)})
    EXPECT_LT(std::abs(r), bound);
  // Another seed, other draws.
  std::vector<double> again(count, NAN), other(count, NAN);
  seed += 1;
  fb.outputs = {view(again, {T, N}), view(other, {T, N})};
  cpu::forward(p, fb);
  int64_t equal = 0;
  for (int64_t i = 0; i < count; ++i) equal += again[i] == a[i];
  EXPECT_LT(equal, count / 1000);
}

TEST(RandomNeuron, InferenceAndTrainingForwardDrawTheSame) {
  const Program p = testing::test_neuron("noisy_threshold");
  const uint64_t seed = testing::test_seed();
  const Call inference = run_forward(p, 12, 70, seed, -1);
  const Call per_step = run_forward(p, 12, 70, seed, 0);
  const Call checkpoints = run_forward(p, 12, 70, seed, 5);
  EXPECT_EQ(inference.s, per_step.s);
  EXPECT_EQ(inference.noise, per_step.noise);
  EXPECT_EQ(inference.s, checkpoints.s);
  EXPECT_EQ(inference.v_final, checkpoints.v_final);
}

TEST(RandomNeuron, CheckpointsDrawAgainAndGiveThePerStepGradients) {
  const Program p = testing::test_neuron("noisy_threshold");
  const uint64_t seed = testing::test_seed();
  const int64_t T = 13, N = 150;
  const std::vector<double> grad_s = random_values(seed ^ 2, T * N, -1, 1);
  Call per_step = run_forward(p, T, N, seed, 0);
  const Grads want = run_backward(p, per_step, 0, grad_s);
  for (int64_t k : {1, 4, 13, 20}) {
    Call c = run_forward(p, T, N, seed, k);
    const Grads got = run_backward(p, c, k, grad_s);
    EXPECT_EQ(got.x, want.x) << "checkpoint_every " << k;
    EXPECT_NEAR(got.theta[0], want.theta[0], 1e-12 * std::abs(want.theta[0]) + 1e-12) << "checkpoint_every " << k;
  }
}

// The gradient with the draws fixed (the same seed) against central differences of the loss
// sum(grad_s * s) in float64, where spike is smooth: a sigmoid surrogate's function.
TEST(RandomNeuron, GradientsWithFixedDrawsMatchCentralDifferences) {
  const Program p = Program::from_text(
      "neuron smooth_noisy\ninput x\nstate v = 0\nparam theta = 1.0\noutput y\n"
      "u = uniform()\nh = 0.5 * v + x * (0.5 + u)\ny = sigmoid(4 * (h - theta + 0.3 * (uniform() - 0.5)))\n"
      "v = h * (1 - y)\n");
  const uint64_t seed = testing::test_seed();
  const int64_t T = 6, N = 5;
  std::vector<double> x = random_values(seed ^ 3, T * N, -0.5, 1.5), theta = {0.9};
  const std::vector<double> w = random_values(seed ^ 4, T * N, -1, 1);
  uint64_t key = seed;
  auto loss = [&](std::vector<double>& xs, std::vector<double>& th) {
    std::vector<double> y(T * N, NAN);
    ForwardBuffers b;
    b.steps = T;
    b.neuron_shape = {N};
    b.inputs = {view(xs, {T, N})};
    b.params = {view(th, {1})};
    b.outputs = {view(y, {T, N})};
    b.seed = &key;
    cpu::forward(p, b);
    double l = 0;
    for (int64_t i = 0; i < T * N; ++i) l += w[i] * y[i];
    return l;
  };
  std::vector<double> y(T * N, NAN), gx(T * N, NAN), gtheta = {NAN};
  std::vector<std::vector<double>> saved(p.backward().saved.size(), std::vector<double>(T * N, NAN));
  ForwardBuffers fb;
  fb.steps = T;
  fb.neuron_shape = {N};
  fb.inputs = {view(x, {T, N})};
  fb.params = {view(theta, {1})};
  fb.outputs = {view(y, {T, N})};
  for (auto& s : saved) fb.saved.push_back(view(s, {T, N}));
  fb.seed = &key;
  cpu::forward(p, fb);
  std::vector<double> grad_y = w;
  BackwardBuffers bb;
  bb.steps = T;
  bb.neuron_shape = {N};
  for (auto& s : saved) bb.saved.push_back(view(s, {T, N}));
  bb.params = {view(theta, {1})};
  bb.grad_outputs = {view(grad_y, {T, N})};
  bb.grad_inputs = {view(gx, {T, N})};
  bb.grad_params = {view(gtheta, {1})};
  cpu::backward(p, bb);  // per step: no seed needed
  const double eps = 1e-6;
  for (int64_t i = 0; i < T * N; ++i) {
    std::vector<double> plus = x, minus = x;
    plus[i] += eps;
    minus[i] -= eps;
    const double numeric = (loss(plus, theta) - loss(minus, theta)) / (2 * eps);
    EXPECT_NEAR(gx[i], numeric, 1e-7 + 1e-6 * std::abs(numeric)) << "x[" << i << "]";
  }
  std::vector<double> tp = {theta[0] + eps}, tm = {theta[0] - eps};
  const double numeric = (loss(x, tp) - loss(x, tm)) / (2 * eps);
  EXPECT_NEAR(gtheta[0], numeric, 1e-7 + 1e-6 * std::abs(numeric));
}

TEST(RandomNeuron, TheTangentNeuronDrawsTheSameAndHasNoTangentThroughTheDraws) {
  const Program p = testing::test_neuron("noisy_threshold");
  const Program t(autodiff::tangent(p.neuron()));
  EXPECT_TRUE(t.uses_random());
  // Its text reads back as the same neuron: the draws keep their streams.
  EXPECT_EQ(Program::from_text(t.canonical()).hash(), t.hash());
  const Program q(autodiff::tangent(Program::from_text(
                                        "neuron product\ninput x\nstate v = 0\noutput y\ny = x * uniform()\nv = v\n")
                                        .neuron()));
  EXPECT_EQ(Program::from_text(q.canonical()).hash(), q.hash());
}

TEST(RandomNeuron, TheTextFormatNumbersDrawsInOrderAndPrintsThemBack) {
  const Program p = Program::from_text(
      "neuron n\ninput x\nstate v = 0\noutput y\ny = uniform() - uniform()\nv = v + x * uniform()\n");
  int streams = 0;
  for (const ir::Node& node : p.forward().nodes) streams += node.op == ir::Op::Uniform;
  EXPECT_EQ(streams, 3) << "each uniform() is its own stream, never merged";
  EXPECT_NE(p.canonical().find("y = uniform() - uniform()"), std::string::npos) << p.canonical();
  EXPECT_EQ(Program::from_text(p.canonical()).hash(), p.hash());
  try {
    Program::from_text("neuron n\ninput x\nstate v = 0\noutput y\ny = uniform(x)\nv = v\n");
    FAIL() << "expected a ParseError";
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("'uniform' takes no arguments, got 1"), std::string::npos) << e.what();
  }
}

TEST(RandomNeuron, ABuilderDrawUsedTwiceWithoutANameIsRefused) {
  NeuronBuilder b("twice");
  Value x = b.input("x");
  b.state("v", 0.0);
  b.output("y");
  Value u = b.uniform();
  b.assign("y", u * x + u);
  b.assign("v", x);
  try {
    Program p(b.build());
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("assign each draw to a name"), std::string::npos) << e.what();
  }
  NeuronBuilder named("named");
  Value xn = named.input("x");
  named.state("v", 0.0);
  named.output("y");
  Value d = named.assign("d", named.uniform());
  named.assign("y", d * xn + d);
  named.assign("v", xn);
  EXPECT_TRUE(Program(named.build()).uses_random());
}

TEST(RandomNeuron, CallsWithoutASeedAreRefused) {
  const Program p = testing::test_neuron("noisy_threshold");
  std::vector<double> x(8, 0.5), theta = {1.0}, s(8), noise(8);
  ForwardBuffers b;
  b.steps = 2;
  b.neuron_shape = {4};
  b.inputs = {view(x, {2, 4})};
  b.params = {view(theta, {1})};
  b.outputs = {view(s, {2, 4}), view(noise, {2, 4})};
  try {
    cpu::forward(p, b);
    FAIL() << "expected an ArgumentError";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("seed"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("uniform()"), std::string::npos) << e.what();
  }
  // A checkpointed backward draws again: it needs the seed too.
  Call c = run_forward(p, 2, 4, 7, 2);
  BackwardBuffers bb;
  std::vector<double> gs(8, 1.0), gx(8);
  bb.steps = 2;
  bb.neuron_shape = {4};
  bb.saved = {view(c.checkpoints, {1, 4})};
  bb.inputs = {view(c.x, {2, 4})};
  bb.params = {view(c.theta, {1})};
  bb.grad_outputs = {view(gs, {2, 4}), TensorView()};
  bb.grad_inputs = {view(gx, {2, 4})};
  bb.checkpoint_every = 2;
  EXPECT_THROW(cpu::backward(p, bb), ArgumentError);
}

}  // namespace
}  // namespace spikejit
