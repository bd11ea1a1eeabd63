// Forward mode from C++: how much do a LIF population's spikes and final potentials move when the
// input current is scaled up? That is the Jacobian-vector product along the direction d = x (a
// relative change of gain), and the tangent neuron computes it in one pass: its inputs are x and
// d, its outputs the spikes and their tangents (spike's derivative is the surrogate's, as in the
// backward). The example then checks the JVP against reverse mode: for any weights u on the
// outputs and w on the final states, <J d, (u, w)> must equal <d, J^T (u, w)>.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "spikejit/autodiff.h"
#include "spikejit/cpu.h"
#include "spikejit/program.h"

using spikejit::DType;
using spikejit::TensorView;

static const char* const kNeuron = R"(
neuron lif
input x
state v = 0
const tau = 2.0, v_threshold = 1.0
output s

h = v + (x - v) / tau
s = spike(h - v_threshold, sigmoid(alpha = 4))
v = h * (1 - s)
)";

static double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

int main() {
  const spikejit::Program lif = spikejit::Program::from_text(kNeuron, "lif");
  const spikejit::Program tangent(spikejit::autodiff::tangent(lif.neuron()));
  const int64_t T = 32, N = 2048;

  std::mt19937 rng(11);
  std::normal_distribution<float> current(0.9f, 1.0f), weight(0.0f, 1.0f);
  std::vector<float> x(T * N), s(T * N), v(N), ds(T * N), dv(N);
  for (float& xi : x) xi = current(rng);
  const std::vector<float>& d = x;  // the direction: scale every input current

  // Forward mode: inference of the tangent neuron, each input and output followed by its tangent.
  spikejit::ForwardBuffers jvp;
  jvp.steps = T;
  jvp.neuron_shape = {N};
  jvp.inputs = {TensorView(x.data(), DType::F32, {T, N}), TensorView(const_cast<float*>(d.data()), DType::F32, {T, N})};
  jvp.outputs = {TensorView(s.data(), DType::F32, {T, N}), TensorView(ds.data(), DType::F32, {T, N})};
  jvp.final_states = {TensorView(v.data(), DType::F32, {N}), TensorView(dv.data(), DType::F32, {N})};
  spikejit::cpu::forward(tangent, jvp);
  double rate = 0, rate_tangent = 0;
  for (int64_t i = 0; i < T * N; ++i) {
    rate += s[i] / (T * N);
    rate_tangent += ds[i] / (T * N);
  }
  std::printf("firing rate %.4f; its derivative with respect to the input gain %.4f\n", rate, rate_tangent);

  // Reverse mode on the neuron itself: the training forward, then the backward of the weights.
  std::vector<float> u(T * N), w(N), s2(T * N), v2(N), grad_x(T * N);
  for (float& ui : u) ui = weight(rng);
  for (float& wi : w) wi = weight(rng);
  std::vector<std::vector<float>> saved(lif.backward().saved.size(), std::vector<float>(T * N));
  spikejit::ForwardBuffers train;
  train.steps = T;
  train.neuron_shape = {N};
  train.inputs = {TensorView(x.data(), DType::F32, {T, N})};
  train.outputs = {TensorView(s2.data(), DType::F32, {T, N})};
  train.final_states = {TensorView(v2.data(), DType::F32, {N})};
  for (auto& buffer : saved) train.saved.push_back(TensorView(buffer.data(), DType::F32, {T, N}));
  spikejit::cpu::forward(lif, train);
  spikejit::BackwardBuffers back;
  back.steps = T;
  back.neuron_shape = {N};
  back.saved = train.saved;
  back.grad_outputs = {TensorView(u.data(), DType::F32, {T, N})};
  back.grad_final_states = {TensorView(w.data(), DType::F32, {N})};
  back.grad_inputs = {TensorView(grad_x.data(), DType::F32, {T, N})};
  spikejit::cpu::backward(lif, back);

  const double forward_side = dot(ds, u) + dot(dv, w), reverse_side = dot(d, grad_x);
  const bool same_spikes = s == s2;
  const bool agree = std::abs(forward_side - reverse_side) <= 1e-4 * (1.0 + std::abs(reverse_side));
  std::printf("<J d, (u, w)> = %.6g, <d, J^T (u, w)> = %.6g\n", forward_side, reverse_side);
  const bool ok = same_spikes && agree && rate > 0 && rate_tangent != 0;
  std::printf("%s\n", ok ? "ok: forward and reverse mode agree" : "FAILED: the modes disagree");
  return ok ? 0 : 1;
}
