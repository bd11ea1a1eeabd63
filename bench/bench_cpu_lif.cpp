// LIF training step (forward that saves for backward, then backward) at T = 32, N = 65536, fp32:
// the spikejit CPU executor against the plain per-step loop a user would write in C++.
// Reports time per iteration and neuron-steps per second (items_per_second).
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "spikejit/builtins.h"
#include "spikejit/cpu.h"
#include "spikejit/program.h"

namespace {

constexpr int64_t kSteps = 32;
constexpr int64_t kNeurons = 65536;
constexpr float kTau = 2.0f, kThreshold = 1.0f, kReset = 0.0f, kAlpha = 4.0f;

struct Data {
  std::vector<float> x, v0, grad_s;  // inputs, initial potentials, upstream gradient of the spikes
  Data() : x(kSteps * kNeurons), v0(kNeurons), grad_s(kSteps * kNeurons) {
    std::mt19937 gen(42);
    std::uniform_real_distribution<float> input(-1.0f, 3.0f), unit(-1.0f, 1.0f);
    for (float& e : x) e = input(gen);
    for (float& e : v0) e = 0.5f * unit(gen);
    for (float& e : grad_s) e = unit(gen);
  }
};

const Data& data() {
  static const Data d;
  return d;
}

void report(benchmark::State& state) {
  state.SetItemsProcessed(state.iterations() * kSteps * kNeurons);
  state.counters["neuron_steps_per_s"] = benchmark::Counter(static_cast<double>(kSteps * kNeurons),
                                                            benchmark::Counter::kIsIterationInvariantRate);
}

// Forward (saving h) and backward written as two plain loops over t and neurons, single thread.
void BM_PlainLoopLifTrain(benchmark::State& state) {
  const Data& d = data();
  std::vector<float> s(kSteps * kNeurons), h(kSteps * kNeurons), v(kNeurons), grad_x(kSteps * kNeurons),
      grad_v(kNeurons);
  for (auto _ : state) {
    v = d.v0;
    for (int64_t t = 0; t < kSteps; ++t) {
      for (int64_t n = 0; n < kNeurons; ++n) {
        const int64_t i = t * kNeurons + n;
        const float charged = v[n] + (d.x[i] - (v[n] - kReset)) / kTau;
        const float spike = charged >= kThreshold ? 1.0f : 0.0f;
        v[n] = (1.0f - spike) * charged + spike * kReset;
        h[i] = charged;
        s[i] = spike;
      }
    }
    std::fill(grad_v.begin(), grad_v.end(), 0.0f);
    for (int64_t t = kSteps - 1; t >= 0; --t) {
      for (int64_t n = 0; n < kNeurons; ++n) {
        const int64_t i = t * kNeurons + n;
        const float sig = 1.0f / (1.0f + std::exp(-kAlpha * (h[i] - kThreshold)));
        const float sg = kAlpha * sig * (1.0f - sig);
        const float spike = h[i] >= kThreshold ? 1.0f : 0.0f;
        const float grad_h = (d.grad_s[i] + grad_v[n] * (kReset - h[i])) * sg + grad_v[n] * (1.0f - spike);
        grad_x[i] = grad_h / kTau;
        grad_v[n] = grad_h * (1.0f - 1.0f / kTau);
      }
    }
    benchmark::DoNotOptimize(grad_x.data());
    benchmark::DoNotOptimize(grad_v.data());
    benchmark::DoNotOptimize(s.data());
  }
  report(state);
}

// The executor with `threads` threads (0: all hardware threads).
void BM_SpikejitLifTrain(benchmark::State& state) {
  using namespace spikejit;
  const Data& d = data();
  const Program program(builtins::lif_neuron({}));
  const size_t saved_count = program.backward().saved.size();
  cpu::Options options;
  options.threads = static_cast<int>(state.range(0));
  const std::vector<int64_t> seq = {kSteps, kNeurons}, layer = {kNeurons};
  std::vector<float> x = d.x, v0 = d.v0, grad_s = d.grad_s;
  std::vector<float> s(kSteps * kNeurons), v_last(kNeurons), grad_x(kSteps * kNeurons), grad_v0(kNeurons);
  std::vector<std::vector<float>> saved(saved_count, std::vector<float>(kSteps * kNeurons));

  ForwardBuffers fb;
  fb.steps = kSteps;
  fb.neuron_shape = layer;
  fb.inputs = {TensorView(x.data(), DType::F32, seq)};
  fb.initial_states = {TensorView(v0.data(), DType::F32, layer)};
  fb.outputs = {TensorView(s.data(), DType::F32, seq)};
  fb.final_states = {TensorView(v_last.data(), DType::F32, layer)};
  BackwardBuffers bb;
  bb.steps = kSteps;
  bb.neuron_shape = layer;
  for (auto& buffer : saved) {
    fb.saved.push_back(TensorView(buffer.data(), DType::F32, seq));
    bb.saved.push_back(TensorView(buffer.data(), DType::F32, seq));
  }
  bb.grad_outputs = {TensorView(grad_s.data(), DType::F32, seq)};
  bb.grad_inputs = {TensorView(grad_x.data(), DType::F32, seq)};
  bb.grad_initial_states = {TensorView(grad_v0.data(), DType::F32, layer)};

  for (auto _ : state) {
    cpu::forward(program, fb, options);
    cpu::backward(program, bb, options);
    benchmark::DoNotOptimize(grad_x.data());
    benchmark::DoNotOptimize(grad_v0.data());
  }
  report(state);
}

}  // namespace

BENCHMARK(BM_PlainLoopLifTrain)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SpikejitLifTrain)
    ->Arg(1)
    ->Arg(0)
    ->ArgName("threads")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

BENCHMARK_MAIN();
