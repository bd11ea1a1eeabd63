// GPU benchmark of the built-in neurons: inference and training (training forward + backward)
// for IF, LIF and PLIF at the sizes SpikingJelly was measured at (shared reference
// anchor-h200.md), fp32 and fp16, timed with CUDA events on one stream. Reports the median time,
// the minimal bytes, their fraction of the device copy bandwidth measured in the same run (of a
// 1 GiB copy, and of a copy of the same size), the kernels' own bytes (saved values included),
// and the cold-compile and warm-lookup cost per neuron.
//
//   bench_cuda_neurons [--quick] [--csv FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "cuda_timing.h"
#include "runtime/driver_api.h"
#include "spikejit/builtins.h"
#include "spikejit/cuda.h"
#include "spikejit/program.h"
#include "spikejit/runtime.h"

using namespace spikejit;
using runtime::CUdeviceptr;
using runtime::check_cuda;
using runtime::driver;

namespace {

using bench::DeviceBuffer;
using bench::copy_bandwidth;
using bench::median_ms;
using bench::print_device_and_bandwidth;

struct Case {
  const char* dtype;
  int64_t steps, neurons;
  double sj_infer, sj_train;  // SpikingJelly triton LIF on the H200, ms (anchor-h200.md)
};

const Case kCases[] = {
    {"float32", 4, 4194304, 0.350, 2.024},  {"float32", 8, 4194304, 0.110, 1.894},
    {"float32", 16, 4194304, 0.281, 1.590}, {"float32", 32, 4194304, 0.288, 2.135},
    {"float32", 64, 4194304, 0.556, 2.756}, {"float32", 256, 16384, 0.225, 2.265},
    {"float32", 1024, 4096, 0.399, 2.566},  {"float16", 4, 4194304, 0.205, 2.077},
    {"float16", 8, 4194304, 0.245, 2.192},  {"float16", 16, 4194304, 0.303, 1.926},
    {"float16", 32, 4194304, 0.292, 2.237}, {"float16", 64, 4194304, 0.359, 2.068},
    {"float16", 256, 16384, 0.110, 1.913},  {"float16", 1024, 4096, 0.401, 1.769},
};

struct Result {
  std::string neuron, dtype, mode;
  int64_t steps, neurons;
  double ms, bytes, fraction, sj_ms;
  double kernel_bytes;        // what the kernels really move (every saved value included)
  double same_size_fraction;  // bytes / ms against a copy moving the same number of bytes
};

Program builtin(const std::string& name) {
  if (name == "if") return Program(builtins::if_neuron());
  if (name == "lif") return Program(builtins::lif_neuron());
  return Program(builtins::plif_neuron());
}

std::vector<Result> run_case(const std::string& name, const Case& c, double bandwidth) {
  const Program program = builtin(name);
  const DType dtype = std::strcmp(c.dtype, "float16") == 0 ? DType::F16 : DType::F32;
  const size_t elem = dtype_size(dtype);
  const int64_t T = c.steps, N = c.neurons;
  const size_t seq = size_t(T) * size_t(N) * elem, row = size_t(N) * elem;
  const std::vector<int64_t> seq_shape{T, N}, row_shape{N}, scalar_shape{1};
  const size_t saved_count = program.backward().saved.size();
  const bool has_param = !program.forward().params.empty();

  DeviceBuffer x(seq), s(seq), v_last(row), grad_s(seq), grad_x(seq), grad_v0(row);
  DeviceBuffer param(elem), grad_param(elem);
  // A saved input is not written by the training forward: the backward reads x itself.
  const std::vector<int>& saved_inputs = program.saved_inputs();
  size_t computed_saved = 0;
  for (int input : saved_inputs) computed_saved += input < 0;
  std::vector<std::unique_ptr<DeviceBuffer>> saved;
  for (size_t i = 0; i < saved_count; ++i) saved.push_back(std::make_unique<DeviceBuffer>(saved_inputs[i] < 0 ? seq : 0));

  ForwardBuffers infer;
  infer.steps = T;
  infer.neuron_shape = {N};
  infer.inputs = {TensorView(x.data(), dtype, seq_shape)};
  if (has_param) infer.params = {TensorView(param.data(), dtype, scalar_shape)};
  infer.outputs = {TensorView(s.data(), dtype, seq_shape)};
  infer.final_states = {TensorView(v_last.data(), dtype, row_shape)};

  ForwardBuffers train = infer;
  for (size_t i = 0; i < saved_count; ++i)
    train.saved.push_back(saved_inputs[i] < 0 ? TensorView(saved[i]->data(), dtype, seq_shape) : TensorView());

  BackwardBuffers back;
  back.steps = T;
  back.neuron_shape = {N};
  back.saved = train.saved;
  for (size_t i = 0; i < saved_count; ++i)
    if (saved_inputs[i] >= 0) back.saved[i] = infer.inputs[static_cast<size_t>(saved_inputs[i])];
  back.params = infer.params;
  back.grad_outputs = {TensorView(grad_s.data(), dtype, seq_shape)};
  back.grad_inputs = {TensorView(grad_x.data(), dtype, seq_shape)};
  back.grad_initial_states = {TensorView(grad_v0.data(), dtype, row_shape)};
  if (has_param) back.grad_params = {TensorView(grad_param.data(), dtype, scalar_shape)};

  const int reps = 30;
  const double infer_ms = median_ms(reps, [&] { cuda::forward(program, infer, nullptr, 0); });
  const double train_ms = median_ms(reps, [&] {
    cuda::forward(program, train, nullptr, 0);
    cuda::backward(program, back, nullptr, 0);
  });
  // Minimal bytes as anchor-h200.md counts them: inference reads x and writes s; training
  // moves x, s, h forward and grad s, h, grad x backward.
  const double infer_bytes = 2.0 * double(seq);
  const double train_bytes = 6.0 * double(seq);
  // The kernels' own traffic: training writes and reads back every computed saved value and
  // reads saved inputs again in the backward.
  const double train_kernel_bytes =
      (4.0 + 2.0 * double(computed_saved) + double(saved_count - computed_saved)) * double(seq);
  auto fraction = [&](double bytes, double ms) { return bytes / (ms * 1e-3) / bandwidth; };
  auto same_size = [&](double bytes, double ms) {
    return bytes / (ms * 1e-3) / copy_bandwidth(static_cast<size_t>(bytes));
  };
  const bool anchored = name == "lif";
  return {
      {name, c.dtype, "infer", T, N, infer_ms, infer_bytes, fraction(infer_bytes, infer_ms),
       anchored ? c.sj_infer : 0.0, infer_bytes, same_size(infer_bytes, infer_ms)},
      {name, c.dtype, "train", T, N, train_ms, train_bytes, fraction(train_bytes, train_ms),
       anchored ? c.sj_train : 0.0, train_kernel_bytes, same_size(train_bytes, train_ms)},
  };
}

// Cold: generate + NVRTC + load of the inference kernel with an empty disk cache (a fresh
// process-level program, so the memory cache misses too). Warm: host time of a launch whose
// kernel is cached (N = 1, T = 1: the launch itself is negligible).
void compile_times(const std::string& name) {
  builtins::Options options;
  options.v_threshold = 0.75 + 0.01 * double(std::rand() % 100);  // a neuron never compiled before
  const Program program = name == "if"    ? Program(builtins::if_neuron(options))
                          : name == "lif" ? Program(builtins::lif_neuron(options))
                                          : Program(builtins::plif_neuron(options));
  DeviceBuffer x(4), s(4), param(4);
  ForwardBuffers b;
  b.steps = 1;
  b.neuron_shape = {1};
  b.inputs = {TensorView(x.data(), DType::F32, {1, 1})};
  if (!program.forward().params.empty()) b.params = {TensorView(param.data(), DType::F32, {1})};
  b.outputs = {TensorView(s.data(), DType::F32, {1, 1})};
  auto t0 = std::chrono::steady_clock::now();
  cuda::forward(program, b, nullptr, 0);
  check_cuda(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  auto t1 = std::chrono::steady_clock::now();
  const int calls = 2000;
  for (int i = 0; i < calls; ++i) cuda::forward(program, b, nullptr, 0);
  auto t2 = std::chrono::steady_clock::now();
  check_cuda(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  std::printf("| %s | %.1f | %.2f |\n", name.c_str(),
              std::chrono::duration<double, std::milli>(t1 - t0).count(),
              std::chrono::duration<double, std::micro>(t2 - t1).count() / calls);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string csv;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
      csv = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_cuda_neurons [--quick] [--csv FILE]\n");
      return 2;
    }
  }
  std::string why;
  if (!cuda::available(&why)) {
    std::fprintf(stderr, "bench_cuda_neurons: CUDA is not available: %s\n", why.c_str());
    return 1;
  }
  try {
    runtime::ContextGuard guard(0);
    const double bandwidth = print_device_and_bandwidth();

    std::printf("| neuron | dtype | mode | T | N | ms | %% of copy BW | %% of same-size copy | "
                "kernel bytes / minimal | SpikingJelly triton ms | speed-up |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    std::vector<Result> all;
    for (const char* neuron : {"lif", "if", "plif"}) {
      for (const Case& c : kCases) {
        if (quick && c.steps != 32 && c.steps != 1024) continue;
        for (const Result& r : run_case(neuron, c, bandwidth)) {
          all.push_back(r);
          std::printf("| %s | %s | %s | %lld | %lld | %.4f | %.1f | %.1f | %.2f | %s | %s |\n",
                      r.neuron.c_str(), r.dtype.c_str(), r.mode.c_str(), (long long)r.steps,
                      (long long)r.neurons, r.ms, 100.0 * r.fraction, 100.0 * r.same_size_fraction,
                      r.kernel_bytes / r.bytes,
                      r.sj_ms > 0 ? std::to_string(r.sj_ms).substr(0, 5).c_str() : "-",
                      r.sj_ms > 0 ? (std::to_string(r.sj_ms / r.ms).substr(0, 5) + "x").c_str() : "-");
          std::fflush(stdout);
        }
      }
    }
    std::printf("\n| neuron | cold compile + load, ms | warm launch (host), us |\n|---|---|---|\n");
    for (const char* neuron : {"if", "lif", "plif"}) compile_times(neuron);
    if (!csv.empty()) {
      std::ofstream out(csv);
      out << "neuron,dtype,mode,T,N,ms,bytes,fraction_of_copy_bw,spikingjelly_triton_ms,"
             "kernel_bytes,fraction_of_same_size_copy\n";
      for (const Result& r : all) {
        out << r.neuron << ',' << r.dtype << ',' << r.mode << ',' << r.steps << ',' << r.neurons
            << ',' << r.ms << ',' << r.bytes << ',' << r.fraction << ',' << r.sj_ms << ','
            << r.kernel_bytes << ',' << r.same_size_fraction << '\n';
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_neurons: %s\n", e.what());
    return 1;
  }
  return 0;
}
