// spikejit emit FILE: the generated CUDA source of each kernel kind (pure text; needs no GPU).
#include <iostream>

#include "cli.h"
#include "commands.h"
#include "spikejit/codegen.h"

namespace spikejit::cli {

static const char* const kAbout =
    "usage: spikejit emit FILE [--kind K] [--dtype D] [--set NAME=VALUE]...\n"
    "\n"
    "Prints the CUDA C++ source that spikejit generates for the neuron, one translation unit per\n"
    "kernel kind, each preceded by a comment with its entry points and their launch shapes.\n"
    "Needs no GPU and no CUDA toolkit.\n"
    "\n";

static const char* const kOptions =
    "  --kind K         inference, inference_final_state, training_forward, backward or all\n"
    "                   (default all)\n"
    "  --dtype D        storage dtype: float32 (default), float16, bfloat16\n";

namespace {

constexpr codegen::KernelKind kKinds[] = {codegen::KernelKind::Inference,
                                          codegen::KernelKind::InferenceFinalState,
                                          codegen::KernelKind::TrainingForward,
                                          codegen::KernelKind::Backward};

std::vector<codegen::KernelKind> parse_kinds(const std::string& text) {
  if (text == "all") return {std::begin(kKinds), std::end(kKinds)};
  for (codegen::KernelKind k : kKinds) {
    if (text == codegen::kernel_kind_name(k)) return {k};
  }
  throw UsageError("--kind: expected inference, inference_final_state, training_forward, backward or all, got '" +
                   text + "'");
}

}  // namespace

int cmd_emit(int argc, char** argv) {
  const Args args(argc, argv, {"set", "kind", "dtype"});
  if (args.help()) {
    std::cout << kAbout << kNeuronSourceHelp << kOptions;
    return 0;
  }
  const std::string& file = args.single_positional("FILE");
  const std::vector<codegen::KernelKind> kinds = parse_kinds(args.value("kind").value_or("all"));
  const DType dtype = parse_dtype(args.value("dtype").value_or("float32"));
  if (dtype == DType::F64) throw UsageError("--dtype: CUDA kernels store float32, float16 or bfloat16");
  const Program program = load_program(file, args.values("set"));
  for (codegen::KernelKind kind : kinds) {
    codegen::KernelSpec spec;
    spec.kind = kind;
    spec.storage = dtype;
    const codegen::KernelSource k = codegen::generate(program, spec);
    std::cout << "// ===== kernel " << codegen::kernel_kind_name(kind) << ": " << k.buffers.size()
              << " buffers, entries";
    for (const codegen::KernelVariant& v : k.variants) {
      std::cout << " " << v.entry << " (" << v.block_size << " threads x " << v.elements_per_thread
                << " neurons)";
    }
    std::cout << "\n" << k.source << "\n";
  }
  return 0;
}

}  // namespace spikejit::cli
