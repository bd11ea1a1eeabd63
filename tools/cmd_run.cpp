// spikejit run FILE --steps T --neurons N: simulates a neuron on random input with the CPU
// executor and reports what it did and how fast.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <thread>

#include "cli.h"
#include "commands.h"
#include "host_tensor.h"
#include "spikejit/cpu.h"

namespace spikejit::cli {

static const char* const kAbout =
    "usage: spikejit run FILE --steps T --neurons N [options]\n"
    "\n"
    "Simulates N neurons for T steps on the CPU with Gaussian random inputs, starting from the\n"
    "default initial states and parameter values. Prints the firing rate of each spike output\n"
    "(the mean of other outputs) and the throughput in neuron-steps per second.\n"
    "With --train it runs the training forward and the backward (random output gradients) and\n"
    "also prints the gradient of each parameter.\n"
    "\n";

static const char* const kOptions =
    "  --steps T        time steps (>= 1)\n"
    "  --neurons N      neurons (>= 1)\n"
    "  --seed S         random seed of the inputs and of the neuron's uniform() draws\n"
    "                   (default: a fresh one, printed)\n"
    "  --threads K      worker threads (default 0: all hardware threads)\n"
    "  --fused F        auto (default), on or off: the neuron's step compiled by the host C++\n"
    "                   compiler (same results, faster; auto: for >= 2^20 neuron-steps) or interpreted\n"
    "  --dtype D        storage: float32 (default), float16, bfloat16, float64\n"
    "  --mean M --std S input distribution (default mean 1, std 1)\n"
    "  --repeat R       time R runs and report the fastest (default 3)\n"
    "  --train          training forward + backward instead of inference\n";

namespace {

using Clock = std::chrono::steady_clock;

std::vector<HostTensor> make_tensors(size_t count, DType dtype, const std::vector<int64_t>& shape) {
  std::vector<HostTensor> tensors;
  for (size_t i = 0; i < count; ++i) tensors.emplace_back(dtype, shape);
  return tensors;
}

std::vector<TensorView> views(std::vector<HostTensor>& tensors) {
  std::vector<TensorView> v;
  for (HostTensor& t : tensors) v.push_back(t.view());
  return v;
}

void fill_normal(HostTensor& t, std::mt19937_64& rng, double mean, double std) {
  std::normal_distribution<double> dist(mean, std);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, dist(rng));
}

// Runs `work` `repeat` times and returns the fastest wall time in seconds.
template <class Work>
double best_seconds(int64_t repeat, Work work) {
  double best = std::numeric_limits<double>::infinity();
  for (int64_t r = 0; r < repeat; ++r) {
    const auto start = Clock::now();
    work();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

void report_output(const std::string& name, const HostTensor& t) {
  double sum = 0.0;
  bool binary = true;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.get(i);
    sum += v;
    binary = binary && (v == 0.0 || v == 1.0);
  }
  std::printf("output %s: %s %.6f\n", name.c_str(), binary ? "firing rate" : "mean",
              sum / static_cast<double>(t.numel()));
}

// The training forward + backward with random output gradients; prints each parameter's
// gradient and returns the fastest time of `repeat` runs.
double time_training(const Program& program, ForwardBuffers& fwd, DType dtype, std::mt19937_64& rng,
                     int64_t repeat, const cpu::Options& options) {
  const ir::Neuron& neuron = program.neuron();
  const std::vector<int64_t> seq_shape = {fwd.steps, fwd.neuron_shape[0]}, state_shape = fwd.neuron_shape;
  std::vector<HostTensor> saved = make_tensors(program.backward().saved.size(), dtype, seq_shape);
  std::vector<HostTensor> grad_outputs = make_tensors(neuron.outputs.size(), dtype, seq_shape);
  for (HostTensor& g : grad_outputs) fill_normal(g, rng, 0.0, 1.0);
  std::vector<HostTensor> grad_inputs = make_tensors(neuron.inputs.size(), dtype, seq_shape);
  std::vector<HostTensor> grad_initial = make_tensors(neuron.states.size(), dtype, state_shape);
  std::vector<HostTensor> grad_params;
  for (const TensorView& p : fwd.params) grad_params.emplace_back(dtype, p.shape);

  fwd.saved = views(saved);
  BackwardBuffers bwd;
  bwd.steps = fwd.steps;
  bwd.neuron_shape = fwd.neuron_shape;
  bwd.saved = fwd.saved;
  // A saved input is not written by the forward: the backward reads the input itself.
  for (size_t i = 0; i < saved.size(); ++i) {
    if (const int input = program.saved_inputs()[i]; input >= 0) {
      fwd.saved[i] = TensorView();
      bwd.saved[i] = fwd.inputs[static_cast<size_t>(input)];
    }
  }
  bwd.params = fwd.params;
  bwd.seed = fwd.seed;
  bwd.grad_outputs = views(grad_outputs);
  bwd.grad_inputs = views(grad_inputs);
  bwd.grad_initial_states = views(grad_initial);
  bwd.grad_params = views(grad_params);
  const double seconds = best_seconds(repeat, [&] {
    cpu::forward(program, fwd, options);
    cpu::backward(program, bwd, options);
  });

  for (size_t i = 0; i < grad_params.size(); ++i) {
    double sum = 0.0;
    for (int64_t k = 0; k < grad_params[i].numel(); ++k) sum += grad_params[i].get(k);
    const char* name = neuron.params[i].name.c_str();
    if (neuron.params[i].kind == ir::ParamKind::Scalar) {
      std::printf("param %s: dL/d%s = %.6g\n", name, name, sum);
    } else {
      std::printf("param %s: mean dL/d%s = %.6g\n", name, name,
                  sum / static_cast<double>(grad_params[i].numel()));
    }
  }
  return seconds;
}

// Which CPU steps this call runs, and why (compiling them first when the call would).
std::string cpu_steps_text(const Program& program, cpu::Fused option, DType dtype, int64_t work) {
  const cpu::FusedSupport used = cpu::fused_steps_used(program, option, dtype, work);
  if (used.available) return "compiled by " + used.detail;
  if (option == cpu::Fused::Off) return "interpreted (--fused off)";
  std::string why;  // the reason on one line (a missing compiler's lists what was tried, line by line)
  for (size_t start = 0; start < used.detail.size();) {
    const size_t end = std::min(used.detail.find('\n', start), used.detail.size());
    const std::string line = used.detail.substr(start, end - start);
    const size_t text = line.find_first_not_of(' ');
    if (text != std::string::npos) why += (why.empty() || why.back() == ':' ? " " : "; ") + line.substr(text);
    start = end + 1;
  }
  why.erase(0, why.find_first_not_of(' '));
  return "interpreted (" + why + (why.rfind("fewer than", 0) == 0 ? "; --fused on compiles them)" : ")");
}

}  // namespace

int cmd_run(int argc, char** argv) {
  const Args args(argc, argv,
                  {"set", "steps", "neurons", "seed", "threads", "fused", "dtype", "mean", "std", "repeat"},
                  {"train"});
  if (args.help()) {
    std::cout << kAbout << kNeuronSourceHelp << kOptions;
    return 0;
  }
  const std::string& file = args.single_positional("FILE");
  if (!args.value("steps") || !args.value("neurons")) {
    throw UsageError("--steps and --neurons are required");
  }
  const int64_t big = int64_t{1} << 40;
  const int64_t T = args.integer("steps", 0, 1, big);
  const int64_t N = args.integer("neurons", 0, 1, big);
  if (T > std::numeric_limits<int64_t>::max() / 16 / N) {
    throw UsageError("--steps x --neurons: expected a product whose buffers (16 bytes per neuron-step) can be "
                     "addressed, got " + std::to_string(T) + " x " + std::to_string(N));
  }
  const int64_t max_seed = std::numeric_limits<int64_t>::max();
  const uint64_t seed = static_cast<uint64_t>(args.integer("seed", std::random_device{}() >> 1, 0, max_seed));
  cpu::Options options;
  options.threads = static_cast<int>(args.integer("threads", 0, 0, 4096));
  const std::string fused = args.value("fused").value_or("auto");
  if (fused != "auto" && fused != "on" && fused != "off") {
    throw UsageError("--fused: expected auto, on or off, got '" + fused + "'");
  }
  options.fused = fused == "on" ? cpu::Fused::On : fused == "off" ? cpu::Fused::Off : cpu::Fused::Auto;
  const DType dtype = parse_dtype(args.value("dtype").value_or("float32"));
  const double mean = args.real("mean", 1.0), std = args.real("std", 1.0);
  if (std < 0) throw UsageError("--std: expected a number >= 0, got " + *args.value("std"));
  const int64_t repeat = args.integer("repeat", 3, 1, 1000);
  const bool train = args.flag("train");

  const Program program = load_program(file, args.values("set"));
  const ir::Neuron& neuron = program.neuron();
  const std::vector<int64_t> seq_shape = {T, N}, state_shape = {N};
  std::mt19937_64 rng(seed);
  std::vector<HostTensor> inputs = make_tensors(neuron.inputs.size(), dtype, seq_shape);
  for (HostTensor& x : inputs) fill_normal(x, rng, mean, std);
  std::vector<HostTensor> params;
  for (const ir::ParamDecl& p : neuron.params) {
    params.emplace_back(dtype, p.kind == ir::ParamKind::Scalar ? std::vector<int64_t>{1} : state_shape);
    for (int64_t i = 0; i < params.back().numel(); ++i) params.back().set(i, p.init);
  }
  std::vector<HostTensor> outputs = make_tensors(neuron.outputs.size(), dtype, seq_shape);
  std::vector<HostTensor> final_states = make_tensors(neuron.states.size(), dtype, state_shape);

  ForwardBuffers fwd;
  fwd.steps = T;
  fwd.neuron_shape = state_shape;
  fwd.inputs = views(inputs);
  fwd.params = views(params);
  fwd.outputs = views(outputs);
  fwd.final_states = views(final_states);
  fwd.seed = &seed;

  const unsigned threads = options.threads > 0 ? static_cast<unsigned>(options.threads)
                                               : std::max(1u, std::thread::hardware_concurrency());
  std::printf("neuron %s: T=%" PRId64 " N=%" PRId64 " dtype=%s threads=%u fused=%s seed=%" PRIu64 " mode=%s\n",
              neuron.name.c_str(), T, N, dtype_name(dtype), threads, fused.c_str(), seed,
              train ? "training" : "inference");
  std::printf("CPU steps: %s\n", cpu_steps_text(program, options.fused, dtype, T * N).c_str());
  const double seconds = train ? time_training(program, fwd, dtype, rng, repeat, options)
                               : best_seconds(repeat, [&] { cpu::forward(program, fwd, options); });
  for (size_t i = 0; i < outputs.size(); ++i) report_output(neuron.outputs[i].name, outputs[i]);
  std::printf("time %.3f ms (fastest of %" PRId64 "), throughput %.3g neuron-steps/s\n", seconds * 1e3, repeat,
              static_cast<double>(T) * static_cast<double>(N) / seconds);
  return 0;
}

}  // namespace spikejit::cli
