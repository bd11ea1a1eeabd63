// Saved inputs: when the save plan keeps an input for the backward, the training forward need
// not write it (its buffer may be absent) and the backward reads the input sequence itself. The
// results must be the same bits as when every saved value is written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "spikejit/builtins.h"
#include "spikejit/cpu.h"
#include "spikejit/error.h"
#include "spikejit/program.h"
#include "support/random_seed.h"

namespace spikejit {
namespace {

using testing::SeededRng;

struct Host {
  std::vector<float> data;
  std::vector<int64_t> shape;
  Host(std::vector<int64_t> s, float fill) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    data.assign(static_cast<size_t>(n), fill);
  }
  TensorView view() { return TensorView(data.data(), DType::F32, shape); }
};

bool same_bits(const Host& a, const Host& b) {
  return a.data.size() == b.data.size() &&
         std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0;
}

// Everything a training forward + backward of a one-input, one-state, one-output neuron with
// one scalar parameter produces.
struct TrainingResults {
  std::vector<Host> results;
};

TrainingResults train(const Program& p, Host& x, Host& w, Host& grad_s, bool write_saved_inputs) {
  const int64_t T = x.shape[0], N = x.shape[1];
  const float poison = std::nanf("");
  Host s({T, N}, poison), v_last({N}, poison), grad_x({T, N}, poison), grad_v0({N}, poison),
      grad_w({1}, poison);
  std::vector<Host> saved;
  for (size_t i = 0; i < p.backward().saved.size(); ++i) saved.emplace_back(std::vector<int64_t>{T, N}, poison);

  ForwardBuffers f;
  f.steps = T;
  f.neuron_shape = {N};
  f.inputs = {x.view()};
  f.params = {w.view()};
  f.outputs = {s.view()};
  f.final_states = {v_last.view()};
  BackwardBuffers b;
  b.steps = T;
  b.neuron_shape = {N};
  b.params = f.params;
  for (size_t i = 0; i < saved.size(); ++i) {
    const int input = p.saved_inputs()[i];
    const bool absent = input >= 0 && !write_saved_inputs;
    f.saved.push_back(absent ? TensorView() : saved[i].view());
    b.saved.push_back(absent ? f.inputs[static_cast<size_t>(input)] : saved[i].view());
  }
  b.grad_outputs = {grad_s.view()};
  b.grad_inputs = {grad_x.view()};
  b.grad_initial_states = {grad_v0.view()};
  b.grad_params = {grad_w.view()};
  cpu::forward(p, f);
  cpu::backward(p, b);
  return {{s, v_last, grad_x, grad_v0, grad_w}};
}

TEST(SavedInputs, PlifKeepsItsInputInsteadOfAComputedValue) {
  // PLIF needs h and x - v per step; saving x (read again, never written) and v is cheaper.
  const Program plif(builtins::plif_neuron());
  EXPECT_EQ(plif.saved_inputs(), (std::vector<int>{0, -1}));
  const Program lif(builtins::lif_neuron());
  EXPECT_EQ(lif.saved_inputs(), (std::vector<int>{-1}));  // h alone
}

TEST(SavedInputs, AbsentSavedInputGivesTheSameBits) {
  SeededRng rng;
  SCOPED_TRACE(rng.trace());
  for (bool soft_reset : {false, true}) {
    for (bool decay_input : {false, true}) {
      builtins::Options o;
      o.decay_input = decay_input;
      if (soft_reset) o.v_reset.reset();
      const Program p(builtins::plif_neuron(o));
      const int64_t T = rng.integer(1, 20), N = rng.integer(1, 1500);
      Host x({T, N}, 0), w({1}, static_cast<float>(rng.uniform(-1, 1))), grad_s({T, N}, 0);
      for (float& e : x.data) e = static_cast<float>(rng.uniform(-1, 3));
      for (float& e : grad_s.data) e = static_cast<float>(rng.uniform(-1, 1));
      const TrainingResults full = train(p, x, w, grad_s, true);
      const TrainingResults lean = train(p, x, w, grad_s, false);
      const char* names[] = {"s", "v_last", "grad_x", "grad_v0", "grad_w"};
      for (size_t i = 0; i < full.results.size(); ++i)
        EXPECT_TRUE(same_bits(full.results[i], lean.results[i])) << names[i];
    }
  }
}

TEST(SavedInputs, OnlyInputsMayBeAbsent) {
  const Program p(builtins::plif_neuron());
  Host x({4, 8}, 0.5f), w({1}, 0.0f), s({4, 8}, 0), v({4, 8}, 0);
  ForwardBuffers f;
  f.steps = 4;
  f.neuron_shape = {8};
  f.inputs = {x.view()};
  f.params = {w.view()};
  f.outputs = {s.view()};
  f.saved = {TensorView(), TensorView()};  // saved[1] is v, a computed value
  try {
    cpu::forward(p, f);
    FAIL() << "an absent computed saved value was accepted";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("saved[1]"), std::string::npos) << e.what();
  }
  f.saved = {TensorView(), v.view()};
  EXPECT_NO_THROW(cpu::forward(p, f));
}

}  // namespace
}  // namespace spikejit
