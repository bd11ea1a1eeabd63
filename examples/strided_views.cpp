// Strided views from C++: a layer of [B, C, H, W] neurons with one threshold per channel and one
// input frame shown at every step. Neither is copied out to [T, B, C, H, W]: the threshold is a
// view with stride 0 over B, H and W, the input a view with stride 0 over T, and the kernels read
// both where they lie. Prints each channel's firing rate, which falls as its threshold rises.
#include <cstdio>
#include <random>
#include <vector>

#include "spikejit/cpu.h"
#include "spikejit/program.h"

using spikejit::DType;
using spikejit::TensorView;

static const char* const kNeuron = R"(
neuron lif_theta
input x
state v = 0
param theta[neuron] = 1.0
output s
h = v + (x - v) / 2.0
s = spike(h - theta, sigmoid(alpha = 4))
v = h * (1 - s)
)";

int main() {
  const spikejit::Program program = spikejit::Program::from_text(kNeuron, "lif_theta");
  const int64_t T = 16, B = 4, C = 6, H = 8, W = 8, N = B * C * H * W;

  std::mt19937 rng(11);
  std::uniform_real_distribution<float> pixel(0.5f, 2.5f);
  std::vector<float> frame(N), theta(C), s(T * N);
  for (float& p : frame) p = pixel(rng);
  for (int64_t c = 0; c < C; ++c) theta[c] = 0.5f + 0.3f * static_cast<float>(c);

  spikejit::ForwardBuffers fwd;
  fwd.steps = T;
  fwd.neuron_shape = {B, C, H, W};
  // Strides in elements: the frame at every step (stride 0 over T), theta per channel (stride 0
  // over B, H and W). Outputs are contiguous.
  fwd.inputs = {TensorView(frame.data(), DType::F32, {T, B, C, H, W}, {0, C * H * W, H * W, W, 1})};
  fwd.params = {TensorView(theta.data(), DType::F32, {B, C, H, W}, {0, 1, 0, 0})};
  fwd.outputs = {TensorView(s.data(), DType::F32, {T, B, C, H, W})};
  spikejit::cpu::forward(program, fwd);

  std::printf("channel  threshold  firing rate\n");
  for (int64_t c = 0; c < C; ++c) {
    double spikes = 0;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t i = 0; i < H * W; ++i) spikes += s[((t * B + b) * C + c) * H * W + i];
      }
    }
    std::printf("%7lld  %9.2f  %11.3f\n", static_cast<long long>(c), theta[c], spikes / (T * B * H * W));
  }
  return 0;
}
