// A custom neuron from C++: an adaptive-threshold LIF written in spikejit's text format, with a
// learnable threshold per neuron. Runs inference on the CPU, then trains the thresholds with
// surrogate-gradient BPTT (training forward + backward) so that the neurons fire at a target rate.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "spikejit/cpu.h"
#include "spikejit/program.h"

using spikejit::DType;
using spikejit::TensorView;

static const char* const kNeuron = R"(
neuron adaptive_threshold
input x
state v = 0
state a = 0                       # threshold raise, grows with each spike and decays
param theta[neuron] = 1.0         # learnable base threshold, one per neuron
const tau = 2.0, tau_a = 20.0, beta = 0.2
output s

h = v + (x - v) / tau
s = spike(h - (theta + a), sigmoid(alpha = 4))
v = h * (1 - s)                   # hard reset to 0
a = a - a / tau_a + beta * s
)";

static double mean(const std::vector<float>& values) {
  double sum = 0;
  for (float v : values) sum += v;
  return sum / values.size();
}

int main() {
  const spikejit::Program program = spikejit::Program::from_text(kNeuron, "adaptive_threshold");
  const int64_t T = 64, N = 4096;

  std::mt19937 rng(7);
  std::normal_distribution<float> noise(1.0f, 1.0f);
  std::vector<float> x(T * N), theta(N, 1.0f), s(T * N), v(N), a(N);
  for (float& xi : x) xi = noise(rng);

  // Every buffer is caller-owned memory; sequences are [T, N], states and theta are [N].
  spikejit::ForwardBuffers fwd;
  fwd.steps = T;
  fwd.neuron_shape = {N};
  fwd.inputs = {TensorView(x.data(), DType::F32, {T, N})};
  fwd.params = {TensorView(theta.data(), DType::F32, {N})};
  fwd.outputs = {TensorView(s.data(), DType::F32, {T, N})};
  fwd.final_states = {TensorView(v.data(), DType::F32, {N}), TensorView(a.data(), DType::F32, {N})};

  // Inference (no `saved` buffers): spikes and final states.
  spikejit::cpu::forward(program, fwd);
  const double initial_rate = mean(s);
  std::printf("inference: firing rate %.4f, mean threshold raise at the end %.4f\n", initial_rate, mean(a));

  // Training: the forward also writes what the backward needs (`saved`); the backward turns
  // dL/ds into dL/dx and dL/dtheta. Loss: L = sum over neurons of (rate_i - target)^2, where
  // rate_i is neuron i's mean of s over time.
  const double target = 0.05, learning_rate = 2.0;
  std::vector<std::vector<float>> saved(program.backward().saved.size(), std::vector<float>(T * N));
  std::vector<float> grad_s(T * N), grad_x(T * N), grad_theta(N);
  for (auto& buffer : saved) fwd.saved.push_back(TensorView(buffer.data(), DType::F32, {T, N}));

  spikejit::BackwardBuffers bwd;
  bwd.steps = T;
  bwd.neuron_shape = {N};
  bwd.saved = fwd.saved;
  bwd.params = fwd.params;
  bwd.grad_outputs = {TensorView(grad_s.data(), DType::F32, {T, N})};
  bwd.grad_inputs = {TensorView(grad_x.data(), DType::F32, {T, N})};
  bwd.grad_params = {TensorView(grad_theta.data(), DType::F32, {N})};

  double rate = initial_rate;
  for (int step = 0; step <= 40; ++step) {
    spikejit::cpu::forward(program, fwd);
    rate = mean(s);
    for (int64_t i = 0; i < N; ++i) {
      double rate_i = 0;
      for (int64_t t = 0; t < T; ++t) rate_i += s[t * N + i] / T;
      for (int64_t t = 0; t < T; ++t) grad_s[t * N + i] = static_cast<float>(2 * (rate_i - target) / T);
    }
    spikejit::cpu::backward(program, bwd);
    for (int64_t i = 0; i < N; ++i) theta[i] -= static_cast<float>(learning_rate * grad_theta[i]);
    if (step % 10 == 0) {
      std::printf("training step %2d: firing rate %.4f (target %.2f), mean threshold %.4f\n", step, rate,
                  target, mean(theta));
    }
  }
  // Fails (as a test) unless training moved the rate most of the way to the target.
  const bool ok = std::abs(rate - target) < 0.5 * std::abs(initial_rate - target);
  std::printf("%s\n", ok ? "ok: training moved the firing rate towards the target" : "FAILED: no progress");
  return ok ? 0 : 1;
}
