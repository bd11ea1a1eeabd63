// Owned test tensors in any storage dtype and whole CPU executor calls on random problems:
// what the executor's tests and the fused-step tests share.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "spikejit/buffers.h"
#include "spikejit/cpu.h"
#include "spikejit/program.h"
#include "spikejit/tensor.h"
#include "support/random_seed.h"

namespace spikejit::testing::cpu_runs {


struct Random {
  uint32_t seed = static_cast<uint32_t>(test_seed());  // SPIKEJIT_TEST_SEED replays one
  std::mt19937 gen{seed};
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  uint32_t bits() { return static_cast<uint32_t>(gen()); }
  std::string trace() const { return "random seed " + std::to_string(seed); }
};

inline double round_to(DType d, double v) {
  switch (d) {
    case DType::F32:
      return static_cast<float>(v);
    case DType::F64:
      return v;
    case DType::F16:
      return half_to_float(float_to_half(static_cast<float>(v)));
    case DType::BF16:
      return bfloat16_to_float(float_to_bfloat16(static_cast<float>(v)));
  }
  return v;
}

// An owned tensor in any storage dtype.
class Buffer {
 public:
  Buffer() = default;
  Buffer(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
    storage_.resize((numel() * static_cast<int64_t>(dtype_size(dtype)) + 7) / 8);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return n;
  }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  void* data() { return storage_.data(); }

  double get(int64_t i) const {
    const void* p = storage_.data();
    switch (dtype_) {
      case DType::F32:
        return static_cast<const float*>(p)[i];
      case DType::F64:
        return static_cast<const double*>(p)[i];
      case DType::F16:
        return half_to_float(static_cast<const uint16_t*>(p)[i]);
      case DType::BF16:
        return bfloat16_to_float(static_cast<const uint16_t*>(p)[i]);
    }
    return 0;
  }
  void set(int64_t i, double v) {
    void* p = storage_.data();
    switch (dtype_) {
      case DType::F32:
        static_cast<float*>(p)[i] = static_cast<float>(v);
        return;
      case DType::F64:
        static_cast<double*>(p)[i] = v;
        return;
      case DType::F16:
        static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v));
        return;
      case DType::BF16:
        static_cast<uint16_t*>(p)[i] = float_to_bfloat16(static_cast<float>(v));
        return;
    }
  }
  void fill(double v) {
    for (int64_t i = 0; i < numel(); ++i) set(i, v);
  }
  void randomize(Random& rng, double lo, double hi) {
    for (int64_t i = 0; i < numel(); ++i) set(i, rng.uniform(lo, hi));
  }
  void poison() { fill(std::numeric_limits<double>::quiet_NaN()); }
  bool same_bits(const Buffer& o) const {
    return dtype_ == o.dtype_ && shape_ == o.shape_ && storage_ == o.storage_;
  }
  // Equal values: bit for bit, except that +0 and -0 are equal (and NaN equals NaN).
  bool same_values(const Buffer& o) const {
    if (dtype_ != o.dtype_ || shape_ != o.shape_) return false;
    for (int64_t i = 0; i < numel(); ++i) {
      const double a = get(i), b = o.get(i);
      if (!(a == b || (std::isnan(a) && std::isnan(b)))) return false;
    }
    return true;
  }
  TensorView view() { return TensorView(storage_.data(), dtype_, shape_); }

 private:
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  std::vector<double> storage_;  // doubles keep every dtype aligned
};

inline std::vector<TensorView> views(std::vector<Buffer>& buffers) {
  std::vector<TensorView> out;
  for (Buffer& b : buffers) out.push_back(b.view());
  return out;
}

// Compares `got` with reference values (rounded to got's dtype); NaN matches NaN, Inf itself.
inline void expect_close(const Buffer& got, const std::vector<double>& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  int failures = 0;
  for (int64_t i = 0; i < got.numel() && failures < 5; ++i) {
    const double g = got.get(i), w = round_to(got.dtype(), want[i]);
    if (g == w || (std::isnan(g) && std::isnan(w))) continue;
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      ADD_FAILURE() << what << "[" << i << "]: got " << g << ", expected " << w;
      ++failures;
    }
  }
}

inline void expect_finite(const Buffer& b, const std::string& what) {
  for (int64_t i = 0; i < b.numel(); ++i) {
    if (!std::isfinite(b.get(i))) {
      ADD_FAILURE() << what << "[" << i << "] was not written (or is not finite): " << b.get(i);
      return;
    }
  }
}

// One problem instance: a program and its inputs, initial states and parameters.
struct Problem {
  Program program;
  uint64_t seed = 0x5eed5eed;  // of the random draws, for neurons that draw
  int64_t steps = 0;
  std::vector<int64_t> neuron_shape;
  int64_t neurons = 0;
  std::vector<Buffer> inputs, initial_states, params;
  // When not empty, the calls read these views instead of the buffers above (strided views of
  // the same values: support/strided_views.h).
  std::vector<TensorView> input_views, state_views, param_views;

  std::vector<TensorView> read_inputs() { return input_views.empty() ? views(inputs) : input_views; }
  std::vector<TensorView> read_states() { return state_views.empty() ? views(initial_states) : state_views; }
  std::vector<TensorView> read_params() { return param_views.empty() ? views(params) : param_views; }

  std::vector<int64_t> seq_shape() const {
    std::vector<int64_t> s = {steps};
    s.insert(s.end(), neuron_shape.begin(), neuron_shape.end());
    return s;
  }
  std::vector<int64_t> param_shape(size_t k) const {
    return program.forward().params[k] == ir::ParamKind::PerNeuron ? neuron_shape : std::vector<int64_t>{};
  }
  double param(size_t k, int64_t n) const {
    return params[k].get(program.forward().params[k] == ir::ParamKind::PerNeuron ? n : 0);
  }
};

inline Problem make_problem(const Program& p, int64_t steps, std::vector<int64_t> neuron_shape, DType dtype,
                     Random& rng, bool with_initial_states = true) {
  Problem s{p, 0x5eed5eed, steps, std::move(neuron_shape), 1, {}, {}, {}, {}, {}, {}};
  for (int64_t d : s.neuron_shape) s.neurons *= d;
  const ir::Step& f = p.forward();
  for (int i = 0; i < f.num_inputs; ++i) {
    s.inputs.emplace_back(dtype, s.seq_shape());
    s.inputs.back().randomize(rng, -1.0, 3.0);
  }
  if (with_initial_states) {
    for (int i = 0; i < f.num_states; ++i) {
      s.initial_states.emplace_back(dtype, s.neuron_shape);
      s.initial_states.back().randomize(rng, -0.5, 0.9);
    }
  }
  for (size_t k = 0; k < f.params.size(); ++k) {
    s.params.emplace_back(dtype, s.param_shape(k));
    const double init = p.neuron().params[k].init;
    s.params.back().randomize(rng, init - 0.4, init + 0.4);
  }
  return s;
}

// Upstream gradients; an empty Buffer (numel 0 of shape {}) never appears: absent ones are null.
struct Upstream {
  std::vector<std::optional<Buffer>> grad_outputs, grad_state_seqs, grad_final_states;
};

struct ForwardRun {
  std::vector<Buffer> outputs, state_seqs, final_states, saved;
};

struct ForwardRequest {
  DType dtype = DType::F32;  // of everything written (checkpoints: the compute dtype)
  bool state_seqs = true, final_states = true, training = true;
  cpu::Options options;
  int64_t checkpoint_every = 0;  // training with checkpoints: `saved` holds them
  bool reverse = false;          // inference: the steps last to first
};

inline bool computes_in_f64(const Problem& s, const ForwardRequest& q) {
  const bool f64_buffers = q.dtype == DType::F64 || (!s.inputs.empty() && s.inputs[0].dtype() == DType::F64);
  return q.options.compute == cpu::Compute::F64 || (q.options.compute == cpu::Compute::Auto && f64_buffers);
}

inline ForwardRun run_forward(Problem& s, const ForwardRequest& q) {
  const ir::Step& f = s.program.forward();
  ForwardRun r;
  for (int i = 0; i < f.num_outputs; ++i) r.outputs.emplace_back(q.dtype, s.seq_shape());
  for (int i = 0; q.state_seqs && i < f.num_states; ++i) r.state_seqs.emplace_back(q.dtype, s.seq_shape());
  for (int i = 0; q.final_states && i < f.num_states; ++i)
    r.final_states.emplace_back(q.dtype, s.neuron_shape);
  if (q.training && q.checkpoint_every > 0) {
    std::vector<int64_t> shape = s.neuron_shape;
    shape.insert(shape.begin(), (s.steps + q.checkpoint_every - 1) / q.checkpoint_every);
    const DType compute = computes_in_f64(s, q) ? DType::F64 : DType::F32;
    for (int i = 0; i < f.num_states; ++i) r.saved.emplace_back(compute, shape);
  } else {
    const size_t saved = q.training ? s.program.backward().saved.size() : 0;
    for (size_t i = 0; i < saved; ++i) r.saved.emplace_back(q.dtype, s.seq_shape());
  }
  for (auto* group : {&r.outputs, &r.state_seqs, &r.final_states, &r.saved}) {
    for (Buffer& b : *group) b.poison();
  }
  ForwardBuffers fb;
  fb.steps = s.steps;
  fb.neuron_shape = s.neuron_shape;
  fb.inputs = s.read_inputs();
  fb.initial_states = s.read_states();
  fb.params = s.read_params();
  fb.outputs = views(r.outputs);
  fb.state_seqs = views(r.state_seqs);
  fb.final_states = views(r.final_states);
  fb.saved = views(r.saved);
  fb.checkpoint_every = q.checkpoint_every;
  fb.reverse = q.reverse;
  if (s.program.uses_random()) fb.seed = &s.seed;
  cpu::forward(s.program, fb, q.options);
  return r;
}

struct BackwardRun {
  std::vector<Buffer> grad_inputs, grad_initial_states, grad_params;
};

// `checkpoint_every` > 0: `saved` holds checkpoints, and the backward reads the inputs too.
inline BackwardRun run_backward(Problem& s, std::vector<Buffer>& saved, Upstream& up, DType dtype,
                         const cpu::Options& options = {}, int64_t checkpoint_every = 0) {
  const ir::Step& f = s.program.forward();
  BackwardRun r;
  for (int i = 0; i < f.num_inputs; ++i) r.grad_inputs.emplace_back(dtype, s.seq_shape());
  for (int i = 0; i < f.num_states; ++i) r.grad_initial_states.emplace_back(dtype, s.neuron_shape);
  for (size_t k = 0; k < f.params.size(); ++k) r.grad_params.emplace_back(dtype, s.param_shape(k));
  for (auto* group : {&r.grad_inputs, &r.grad_initial_states, &r.grad_params}) {
    for (Buffer& b : *group) b.poison();
  }
  auto optional_views = [](std::vector<std::optional<Buffer>>& buffers) {
    std::vector<TensorView> out;
    for (auto& b : buffers) out.push_back(b ? b->view() : TensorView());
    return out;
  };
  BackwardBuffers bb;
  bb.steps = s.steps;
  bb.neuron_shape = s.neuron_shape;
  bb.saved = views(saved);
  if (checkpoint_every == 0 && !s.input_views.empty()) {  // a saved input is the input as the forward read it
    const std::vector<int>& input_of = s.program.saved_inputs(false);
    for (size_t i = 0; i < bb.saved.size(); ++i) {
      if (input_of[i] >= 0) bb.saved[i] = s.input_views[static_cast<size_t>(input_of[i])];
    }
  }
  bb.params = s.read_params();
  bb.grad_outputs = optional_views(up.grad_outputs);
  bb.grad_state_seqs = optional_views(up.grad_state_seqs);
  bb.grad_final_states = optional_views(up.grad_final_states);
  bb.grad_inputs = views(r.grad_inputs);
  bb.grad_initial_states = views(r.grad_initial_states);
  bb.grad_params = views(r.grad_params);
  if (checkpoint_every > 0) bb.inputs = s.read_inputs();
  bb.checkpoint_every = checkpoint_every;
  if (s.program.uses_random() && checkpoint_every > 0) bb.seed = &s.seed;
  cpu::backward(s.program, bb, options);
  return r;
}

// Random upstream gradients; `present` selects which groups are given.
inline Upstream make_upstream(const Problem& s, DType dtype, Random& rng, bool outputs, bool state_seqs,
                       bool finals) {
  const ir::Step& f = s.program.forward();
  Upstream u;
  auto make = [&](bool on, std::vector<int64_t> shape) -> std::optional<Buffer> {
    if (!on) return std::nullopt;
    Buffer b(dtype, std::move(shape));
    b.randomize(rng, -1.0, 1.0);
    return b;
  };
  for (int i = 0; i < f.num_outputs; ++i) u.grad_outputs.push_back(make(outputs, s.seq_shape()));
  for (int i = 0; i < f.num_states; ++i) u.grad_state_seqs.push_back(make(state_seqs, s.seq_shape()));
  for (int i = 0; i < f.num_states; ++i) u.grad_final_states.push_back(make(finals, s.neuron_shape));
  return u;
}

inline void expect_same_bits(const std::vector<Buffer>& got, const std::vector<Buffer>& want,
                             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].same_bits(want[i])) << what << "[" << i << "]";
}

// The training forward and the backward of `s` under two sets of options that must not change
// a bit: every result compared. With checkpoints, the upstream gradients are those of the states.
inline void expect_same_training_calls(Problem& s, DType dtype, const cpu::Options& want_options,
                                       const cpu::Options& got_options, int64_t checkpoint_every, Random& rng) {
  const ForwardRun want = run_forward(s, {dtype, true, true, true, want_options, checkpoint_every});
  const ForwardRun got = run_forward(s, {dtype, true, true, true, got_options, checkpoint_every});
  expect_same_bits(got.outputs, want.outputs, "outputs");
  expect_same_bits(got.state_seqs, want.state_seqs, "state_seqs");
  expect_same_bits(got.final_states, want.final_states, "final_states");
  expect_same_bits(got.saved, want.saved, "saved");
  const bool all = checkpoint_every == 0;
  Upstream up = make_upstream(s, dtype, rng, all, true, !all);
  std::vector<Buffer> saved_want = want.saved, saved_got = got.saved;
  const BackwardRun grads_want = run_backward(s, saved_want, up, dtype, want_options, checkpoint_every);
  const BackwardRun grads_got = run_backward(s, saved_got, up, dtype, got_options, checkpoint_every);
  expect_same_bits(grads_got.grad_inputs, grads_want.grad_inputs, "grad_inputs");
  expect_same_bits(grads_got.grad_initial_states, grads_want.grad_initial_states, "grad_initial_states");
  expect_same_bits(grads_got.grad_params, grads_want.grad_params, "grad_params");
}

}  // namespace spikejit::testing::cpu_runs
