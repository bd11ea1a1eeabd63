// The exact messages of the errors docs/errors.md lists that only the C++ API reaches: overlapping
// and strided buffers, a bad backward workspace, the CUDA launcher's dtype rules, bad arch
// strings, parse diagnostics, and
// a missing driver or NVRTC met through the public API (in a forked child, because each library
// is opened once per process).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "spikejit/buffers.h"
#include "spikejit/builtins.h"
#include "spikejit/compress.h"
#include "spikejit/cpu.h"
#include "spikejit/cuda.h"
#include "spikejit/error.h"
#include "spikejit/program.h"
#include "spikejit/runtime.h"

namespace spikejit {
namespace {

// The message of the spikejit::Error `body` throws ("" if it throws none), computed in a child
// process with `name=value` set, so the parent's already-opened libraries do not interfere.
std::string error_in_child(const char* name, const std::string& value, const std::function<void()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    setenv(name, value.c_str(), 1);
    std::string message;
    try {
      body();
    } catch (const Error& e) {
      message = e.what();
    }
    ssize_t unused = write(fds[1], message.data(), message.size());
    (void)unused;
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string message;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0) message.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child crashed";
  return message;
}

std::string fresh_tag() {
  std::random_device device;
  return std::to_string((static_cast<uint64_t>(device()) << 32) | device());
}

std::string argument_message(const std::function<void()>& body) {
  try {
    body();
  } catch (const ArgumentError& e) {
    return e.what();
  }
  return "(no ArgumentError)";
}

// LIF inference over T x N host buffers filled with random currents.
struct LifCall {
  static constexpr int64_t T = 3, N = 8;
  Program lif{builtins::lif_neuron()};
  std::vector<float> x, s, v;
  ForwardBuffers f;
  LifCall() : x(T * N), s(T * N), v(N) {
    std::mt19937 rng(std::random_device{}());
    std::normal_distribution<float> normal(0.5f, 1.0f);
    for (float& value : x) value = normal(rng);
    f.steps = T;
    f.neuron_shape = {N};
    f.inputs = {TensorView(x.data(), DType::F32, {T, N})};
    f.outputs = {TensorView(s.data(), DType::F32, {T, N})};
    f.final_states = {TensorView(v.data(), DType::F32, {N})};
  }
};

TEST(Errors, OverlappingWrittenBuffersAreRejected) {
  LifCall c;
  c.f.final_states = {TensorView(c.s.data() + 4, DType::F32, {LifCall::N})};  // inside the spikes
  EXPECT_EQ(argument_message([&] { cpu::forward(c.lif, c.f); }),
            "argument 'outputs[0]': expected memory that overlaps no other buffer, got memory that "
            "overlaps final_states[0]");
  // Writing over an input is as wrong.
  LifCall d;
  d.f.outputs = {TensorView(d.x.data(), DType::F32, {LifCall::T, LifCall::N})};
  EXPECT_EQ(argument_message([&] { cpu::forward(d.lif, d.f); }),
            "argument 'outputs[0]': expected memory that overlaps no other buffer, got memory that "
            "overlaps inputs[0]");
}

TEST(Errors, StridedBuffersAreRejectedWhereTheyCannotBeRead) {
  LifCall c;
  // A transposed view of the same memory: read in place as an input, refused as an output.
  c.f.inputs = {TensorView(c.x.data(), DType::F32, {LifCall::T, LifCall::N}, {1, LifCall::T})};
  EXPECT_EQ(argument_message([&] { cpu::forward(c.lif, c.f); }), "(no ArgumentError)");
  c.f.outputs = {TensorView(c.s.data(), DType::F32, {LifCall::T, LifCall::N}, {1, LifCall::T})};
  EXPECT_EQ(argument_message([&] { cpu::forward(c.lif, c.f); }),
            "argument 'outputs[0]': expected a contiguous tensor, got float32[3, 8] with strides [1, 3]");
  LifCall d;
  d.f.inputs = {TensorView(d.x.data(), DType::F32, {LifCall::T, LifCall::N}, {LifCall::N, -1})};
  EXPECT_EQ(argument_message([&] { cpu::forward(d.lif, d.f); }),
            "argument 'inputs[0]': expected a contiguous tensor or a strided view with non-negative strides whose "
            "dimensions of S merge into at most 4 (kMaxReadDims), got float32[3, 8] with strides [8, -1]");
}

TEST(Errors, ShapeAndCountMismatches) {
  LifCall c;
  c.f.final_states = {TensorView(c.v.data(), DType::F32, {LifCall::N - 1})};
  EXPECT_EQ(argument_message([&] { cpu::forward(c.lif, c.f); }),
            "argument 'final_states[0]': expected shape [*S] = [8], got float32[7]");
  LifCall d;
  d.f.inputs.push_back(d.f.inputs[0]);
  EXPECT_EQ(argument_message([&] { cpu::forward(d.lif, d.f); }),
            "argument 'inputs': expected 1 tensor (one per input), got 2 tensors");
}

TEST(Errors, BackwardWorkspaceIsChecked) {
  constexpr int64_t T = 2, N = 130;
  const Program plif{builtins::plif_neuron()};
  EXPECT_EQ(backward_workspace_elements(plif, N), 3);  // one scalar parameter, ceil(130 / 64)
  EXPECT_EQ(backward_workspace_elements(Program{builtins::lif_neuron()}, N), 0);
  EXPECT_EQ(backward_workspace_elements(plif, std::numeric_limits<int64_t>::max()),
            std::numeric_limits<int64_t>::max() / 64 + 1);
  EXPECT_EQ(argument_message([&] { backward_workspace_elements(plif, -1); }),
            "argument 'neurons': expected N >= 0, got -1");
  // A per-step PLIF backward on random values, then its workspace made wrong in turn.
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal(0.5f, 1.0f);
  std::vector<std::vector<float>> saved;
  BackwardBuffers b;
  b.steps = T;
  b.neuron_shape = {N};
  for (const SavedBuffer& layout : saved_layout(plif, T, {N}, DType::F32, 0)) {
    saved.emplace_back(static_cast<size_t>(shape_numel(layout.shape)));
    for (float& value : saved.back()) value = normal(rng);
    b.saved.emplace_back(saved.back().data(), DType::F32, layout.shape);
  }
  std::vector<float> w{0.3f}, grad_s(T * N, 1.0f), grad_x(T * N), grad_w(1);
  std::vector<double> scratch(4);
  b.params = {TensorView(w.data(), DType::F32, {})};
  b.grad_outputs = {TensorView(grad_s.data(), DType::F32, {T, N})};
  b.grad_inputs = {TensorView(grad_x.data(), DType::F32, {T, N})};
  b.grad_params = {TensorView(grad_w.data(), DType::F32, {})};
  b.workspace = TensorView(scratch.data(), DType::F64, {3});
  cpu::backward(plif, b);  // checked, not used by the CPU
  b.workspace = TensorView(scratch.data(), DType::F64, {2});
  EXPECT_EQ(argument_message([&] { cpu::backward(plif, b); }),
            "argument 'workspace': expected a contiguous float64 [n] tensor with n >= 3 "
            "(backward_workspace_elements), got float64[2]");
  b.workspace = TensorView(scratch.data(), DType::F32, {4});
  EXPECT_EQ(argument_message([&] { cpu::backward(plif, b); }),
            "argument 'workspace': expected a contiguous float64 [n] tensor with n >= 3 "
            "(backward_workspace_elements), got float32[4]");
  b.workspace = TensorView(grad_x.data(), DType::F64, {3});  // inside dL/dx
  EXPECT_EQ(argument_message([&] { cpu::backward(plif, b); }),
            "argument 'grad_inputs[0]': expected memory that overlaps no other buffer, got memory that "
            "overlaps workspace");
}

TEST(Errors, CudaLauncherTakesOneDtypeAndNoFloat64) {
  // Checked before the driver is touched, so these messages are the same on any machine.
  LifCall c;
  std::vector<uint16_t> half(LifCall::N);
  c.f.final_states = {TensorView(half.data(), DType::F16, {LifCall::N})};
  EXPECT_EQ(argument_message([&] { cuda::forward(c.lif, c.f, nullptr, 0); }),
            "argument 'final_states[0]': expected dtype float32 like inputs[0] (one dtype per call), "
            "got float16[8]");
  LifCall d;
  std::vector<double> x64(LifCall::T * LifCall::N, 0.5);
  d.f.inputs = {TensorView(x64.data(), DType::F64, {LifCall::T, LifCall::N})};
  EXPECT_EQ(argument_message([&] { cuda::forward(d.lif, d.f, nullptr, 0); }),
            "argument 'inputs[0]': expected dtype float32, float16 or bfloat16 (the CUDA backend), "
            "got float64[3, 8]");
}

// Sizes and shapes of the public helpers: a negative count or dimension, or a shape of more than
// 2^63 - 1 elements, is an ArgumentError naming it, not a nonsense size.
TEST(Errors, NegativeOrOverflowingSizesAreRejected) {
  EXPECT_EQ(packed_bytes(0), 0);
  EXPECT_EQ(packed_bytes(9), 2);
  EXPECT_EQ(packed_row_bytes(16), 2);
  EXPECT_NE(argument_message([] { packed_bytes(-1); }).find("'numel': expected a count >= 0, got -1"), std::string::npos);
  EXPECT_NE(argument_message([] { packed_row_bytes(-8); }).find("'neurons': expected a count >= 0, got -8"),
            std::string::npos);
  const int64_t big = int64_t{1} << 32;
  EXPECT_EQ(shape_numel({big, big / 2 - 1}), big * (big / 2 - 1));
  EXPECT_EQ(shape_numel({big, big, 0}), 0);  // empty, whatever the other dimensions
  EXPECT_NE(argument_message([&] { shape_numel({big, big}); }).find("at most 2^63 - 1 elements"), std::string::npos);
  EXPECT_NE(argument_message([] { TensorView(nullptr, DType::F32, {3, -2}).numel(); })
                .find("'shape': expected dimensions >= 0, got [3, -2]"),
            std::string::npos);
  EXPECT_NE(argument_message([] { SpikeView(nullptr, SpikeDType::F32, {-1}).numel(); }).find("dimensions >= 0"),
            std::string::npos);
}

TEST(Errors, MalformedArchIsAnArgumentError) {
  EXPECT_EQ(argument_message([] { runtime::compile_for_arch("__global__ void k() {}", "k", "90"); }),
            "argument 'arch': expected sm_<digits> or compute_<digits> (e.g. sm_90), got '90'");
}

TEST(Errors, ParseErrorsCarryLineColumnAndCaret) {
  const std::string text =
      "neuron lif\ninput x\nstate v = 0\noutput s\nh = v + y\ns = spike(h - 1)\nv = h * (1 - s)\n";
  try {
    Program::from_text(text, "lif.sj");
    FAIL() << "a bad neuron parsed";
  } catch (const ParseError& e) {
    EXPECT_EQ(std::string(e.what()), "lif.sj:5:9: error: unknown name 'y'\n  h = v + y\n          ^");
    ASSERT_EQ(e.diagnostics().size(), 1u);
    EXPECT_EQ(e.diagnostics()[0].line, 5);
    EXPECT_EQ(e.diagnostics()[0].column, 9);
  }
}

TEST(Errors, NoDriverThroughCudaForward) {
  const std::string bogus = "/nonexistent-" + fresh_tag() + "/libcuda.so.1";
  const std::string message = error_in_child("SPIKEJIT_CUDA_DRIVER_PATH", bogus, [] {
    LifCall c;  // host pointers: the driver fails to open before any is used
    cuda::forward(c.lif, c.f, nullptr, 0);
  });
  EXPECT_EQ(message, "cannot open the CUDA driver library (libcuda); tried, in order:\n  " + bogus +
                         ": cannot open shared object file: No such file or directory");
}

TEST(Errors, NoNvrtcThroughCompileForArch) {
  const std::string bogus = "/nonexistent-" + fresh_tag() + "/libnvrtc.so.13";
  const std::string message = error_in_child("SPIKEJIT_NVRTC_PATH", bogus, [] {
    runtime::compile_for_arch("extern \"C\" __global__ void k() {}", "k", "sm_90");
  });
  EXPECT_EQ(message, "cannot open the NVRTC library (libnvrtc); tried, in order:\n  " + bogus +
                         ": cannot open shared object file: No such file or directory");
}

}  // namespace
}  // namespace spikejit
