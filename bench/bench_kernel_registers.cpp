// The registers, spills and stack frame of the generated kernels, from ptxas' resource report
// (NVRTC; no GPU needed): which neurons and kernel kinds sit near a register limit, and what a
// change to the generator costs in registers before it runs anywhere.
//
//   build/bench_kernel_registers [--arch sm_90] [--neuron NAME]...
//
// Per shipped neuron (neurons/*.sj; all of them unless --neuron names some), float32 storage,
// and kernel kind (inference with final states, training forward, backward per step, backward
// from checkpoints every 4 steps), once with contiguous arguments and once with every read-only
// argument a strided view (the inputs, initial states, per-neuron parameters and saved values the
// kind reads): each entry's registers, spill stores and loads, and stack frame (bytes). Prints a
// Markdown table; exits 1 when NVRTC cannot be opened or a kernel does not compile.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <regex>
#include <string>
#include <vector>

#include "runtime/nvrtc_compiler.h"
#include "spikejit/builtins.h"
#include "spikejit/codegen.h"
#include "spikejit/program.h"

using namespace spikejit;

namespace {

// What ptxas reported for one entry.
struct EntryResources {
  std::string entry;
  int registers = -1, stack = -1, spill_stores = -1, spill_loads = -1;
};

// The report's lines come per entry: "Compiling entry function 'E'", then the stack frame and
// spills, then "Used R registers".
std::vector<EntryResources> parse_report(const std::string& report) {
  static const std::regex entry_re(R"(Compiling entry function '([^']+)')");
  static const std::regex frame_re(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used_re(R"(Used (\d+) registers)");
  std::vector<EntryResources> entries;
  size_t start = 0;
  while (start < report.size()) {
    size_t end = report.find('\n', start);
    if (end == std::string::npos) end = report.size();
    const std::string line = report.substr(start, end - start);
    start = end + 1;
    std::smatch m;
    if (std::regex_search(line, m, entry_re)) {
      entries.push_back({m[1].str()});
    } else if (!entries.empty() && std::regex_search(line, m, frame_re)) {
      entries.back().stack = std::stoi(m[1].str());
      entries.back().spill_stores = std::stoi(m[2].str());
      entries.back().spill_loads = std::stoi(m[3].str());
    } else if (!entries.empty() && std::regex_search(line, m, used_re)) {
      entries.back().registers = std::stoi(m[1].str());
    }
  }
  return entries;
}

// Bits 0 .. count - 1 (count <= 64).
uint64_t first_bits(size_t count) { return count >= 64 ? ~uint64_t{0} : (uint64_t{1} << count) - 1; }

// `spec` with every read-only argument its kind reads given as a strided view, within
// kMaxStridedReads (inputs first, then states, parameters, saved values).
codegen::KernelSpec all_strided(const Program& program, codegen::KernelSpec spec) {
  const ir::Step& f = program.forward();
  uint64_t per_neuron = 0;
  for (size_t i = 0; i < f.params.size(); ++i) {
    if (f.params[i] == ir::ParamKind::PerNeuron) per_neuron |= uint64_t{1} << i;
  }
  const bool forward = spec.kind != codegen::KernelKind::Backward;
  const bool reads_inputs = forward || spec.checkpoint_every > 0;
  int left = kMaxStridedReads;
  auto take = [&](uint64_t mask) {
    uint64_t kept = 0;
    for (int i = 0; i < 64 && left > 0; ++i) {
      if ((mask >> i) & 1) kept |= uint64_t{1} << i, --left;
    }
    return kept;
  };
  if (reads_inputs) spec.strided_inputs = take(first_bits(static_cast<size_t>(f.num_inputs)));
  if (forward) spec.strided_states = take(first_bits(static_cast<size_t>(f.num_states)));
  spec.strided_params = take(per_neuron);
  if (!forward && spec.checkpoint_every == 0) spec.strided_saved = take(first_bits(program.backward().saved.size()));
  return spec;
}

void usage_error(const std::string& message) {
  std::fprintf(stderr, "bench_kernel_registers: %s\nusage: bench_kernel_registers [--arch sm_90] [--neuron NAME]...\n",
               message.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string arch = "sm_90";
  std::vector<std::string> neurons;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--arch") == 0 && i + 1 < argc) {
      arch = argv[++i];
    } else if (std::strcmp(argv[i], "--neuron") == 0 && i + 1 < argc) {
      neurons.push_back(argv[++i]);
    } else {
      usage_error(std::string("unknown argument '") + argv[i] + "'");
    }
  }
  if (neurons.empty()) neurons = builtins::shipped_names();

  struct Kind {
    const char* name;
    codegen::KernelKind kind;
    int checkpoint_every;
  };
  const Kind kinds[] = {{"inference_final_state", codegen::KernelKind::InferenceFinalState, 0},
                        {"training_forward", codegen::KernelKind::TrainingForward, 0},
                        {"backward", codegen::KernelKind::Backward, 0},
                        {"backward, checkpoints every 4", codegen::KernelKind::Backward, 4}};
  std::printf("# Generated kernels, float32 storage, %s: registers, spill stores / loads and stack frame (bytes) "
              "per entry (ptxas -v through NVRTC)\n\n",
              arch.c_str());
  std::printf("| neuron | kernel | arguments | entry | registers | spill stores | spill loads | stack |\n");
  std::printf("|---|---|---|---|---:|---:|---:|---:|\n");
  try {
    for (const std::string& name : neurons) {
      const Program program(builtins::shipped_neuron(name));
      for (const Kind& k : kinds) {
        codegen::KernelSpec spec;
        spec.kind = k.kind;
        spec.checkpoint_every = k.checkpoint_every;
        for (const bool strided : {false, true}) {
          const codegen::KernelSource source = codegen::generate(program, strided ? all_strided(program, spec) : spec);
          std::string report;
          runtime::compile_cuda(source.source, arch, "neuron " + name + ", kernel " + k.name, &report);
          for (const EntryResources& e : parse_report(report)) {
            std::printf("| %s | %s | %s | %s | %d | %d | %d | %d |\n", name.c_str(), k.name,
                        strided ? "strided reads" : "contiguous", e.entry.c_str(), e.registers, e.spill_stores,
                        e.spill_loads, e.stack);
          }
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernel_registers: %s\n", e.what());
    return 1;
  }
  return 0;
}
