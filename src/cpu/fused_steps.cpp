// Compiles a program's lane programs into one host library on first use and picks its functions.
#include "cpu/fused_steps.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "ir/scalar_ops.h"
#include "runtime/host_compiler.h"
#include "spikejit/error.h"

namespace spikejit::cpu {
namespace {

const char kFusedStepsOwner = 0;  // its address tags them (Program::derived)

// A program's fused steps, or why there are none.
struct FusedSteps {
  std::shared_ptr<runtime::HostLibrary> library;
  FusedStepFn functions[kLaneVariants] = {};  // null where the variant has no lane program
  std::string compiler;                       // the compiler and its --version line
  std::string failure;                        // "" when compiled
};

std::string symbol_of(int variant) { return "spikejit_fused_step_" + std::to_string(variant); }

// The lane programs of every variant compiled into one library. A variant whose step cannot be
// derived gets no function (the interpreter reports that error when such a call comes).
FusedSteps compile_fused_steps(const Program& program) {
  const std::string label = "neuron " + program.neuron().name + ", fused CPU steps";
  FusedSteps out;
  try {
    std::vector<std::pair<std::string, const LaneProgram*>> functions;
    std::vector<int> variants;
    for (int v = 0; v < kLaneVariants; ++v) {
      try {
        functions.emplace_back(symbol_of(v), &lane_program(program, static_cast<LaneVariant>(v)));
        variants.push_back(v);
      } catch (const Error&) {
      }
    }
    const auto began = std::chrono::steady_clock::now();
    const runtime::HostCompiler compiler = runtime::find_host_compiler();
    std::vector<std::string> symbols;
    for (int v : variants) symbols.push_back(symbol_of(v));
    out.library = runtime::host_library_for(compiler, fused_unit_source(functions), label, symbols);
    out.compiler = compiler.path + " (" + compiler.identity + ")";
    for (int v : variants) out.functions[v] = reinterpret_cast<FusedStepFn>(out.library->symbol(symbol_of(v)));
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
    SPIKEJIT_LOG_AT(Level::Info, label << " ready in " << ms.count() << " ms");
  } catch (const std::exception& e) {  // spikejit::Error, and std::filesystem's errors
    out.failure = std::string("cannot compile the fused CPU steps of neuron ") + program.neuron().name + ": " + e.what();
    SPIKEJIT_LOG_AT(Level::Warning, out.failure << "\n(the neuron runs on the interpreted CPU steps: the same "
                                                   "results, slower)");
  }
  return out;
}

}  // namespace

Fused resolve_fused(Fused fused) {
  if (fused != Fused::Auto) return fused;
  const char* env = std::getenv("SPIKEJIT_CPU_FUSED");
  if (!env || !*env || std::strcmp(env, "auto") == 0) return Fused::Auto;
  if (std::strcmp(env, "1") == 0) return Fused::On;
  if (std::strcmp(env, "0") == 0) return Fused::Off;
  throw Error(std::string("SPIKEJIT_CPU_FUSED: expected 0, 1 or auto, got '") + env + "'");
}

namespace {

// What Auto decides by, over the lane instructions of all the program's variants (a variant that
// cannot be derived is not compiled either): their number, which the compile's time grows with,
// and the first op that apply_op<float> computes by a C library call per lane (-1: none). A fused
// step with such an op runs scalar as a whole (2-4x slower than the lane loops, which keep every
// other op vectorized), so Auto leaves it to the lane loops.
struct StepSummary {
  int64_t instructions = 0;
  int libm_op = -1;
};

const StepSummary& step_summary(const Program& program) {
  return program.derived<StepSummary>(&kFusedStepsOwner, 1, [&] {
    StepSummary out;
    for (int v = 0; v < kLaneVariants; ++v) {
      try {
        const LaneProgram& lanes = lane_program(program, static_cast<LaneVariant>(v));
        out.instructions += static_cast<int64_t>(lanes.instrs.size());
        for (const LaneInstr& in : lanes.instrs) {
          if (out.libm_op < 0 && ir::calls_libm_per_lane(in.op)) out.libm_op = static_cast<int>(in.op);
        }
      } catch (const Error&) {
      }
    }
    return out;
  });
}

// The program's fused steps when a call of `work` neuron-steps takes them under `mode`
// (resolved), compiled on first use; else nullptr, with *why_not set. Throws the compile's
// failure under On.
const FusedSteps* steps_for_call(const Program& program, Fused mode, bool f64, int64_t work, std::string* why_not) {
  if (mode == Fused::Off || f64) return nullptr;
  if (mode == Fused::Auto && work < kFusedMinWork) {
    *why_not = "fewer than 2^20 neuron-steps";
    return nullptr;
  }
  const StepSummary* summary = mode == Fused::Auto ? &step_summary(program) : nullptr;
  if (const int op = summary ? summary->libm_op : -1; op >= 0) {
    *why_not = std::string("its step calls the C library per lane (") + ir::op_info(static_cast<ir::Op>(op)).name +
               "), which leaves a fused loop scalar; the lane loops keep the other ops vectorized. Fused::On or "
               "SPIKEJIT_CPU_FUSED=1 compiles it";
    return nullptr;
  }
  if (const int64_t n = summary ? summary->instructions : 0; n > kFusedMaxInstructions) {
    *why_not = "a large step: " + std::to_string(n) + " instructions in its variants, above " +
               std::to_string(kFusedMaxInstructions) + " (its compile would take about " + std::to_string(n / 250) +
               " s or more); Fused::On or SPIKEJIT_CPU_FUSED=1 compiles it";
    return nullptr;
  }
  const FusedSteps& steps =
      program.derived<FusedSteps>(&kFusedStepsOwner, 0, [&] { return compile_fused_steps(program); });
  if (!steps.failure.empty() && mode == Fused::On) throw Error(steps.failure);
  *why_not = steps.failure;
  return steps.failure.empty() ? &steps : nullptr;
}

}  // namespace

FusedStepFn fused_step(const Program& program, LaneVariant variant, Fused fused, bool f64, int64_t work) {
  std::string why_not;
  const FusedSteps* steps = steps_for_call(program, resolve_fused(fused), f64, work, &why_not);
  return steps ? steps->functions[static_cast<int>(variant)] : nullptr;
}

FusedSupport fused_steps_used(const Program& program, Fused fused, DType dtype, int64_t work) {
  const Fused mode = resolve_fused(fused);
  if (mode == Fused::Off) return {false, fused == Fused::Off ? "turned off" : "turned off by SPIKEJIT_CPU_FUSED=0"};
  if (dtype == DType::F64) return {false, "float64 computes in fp64, which the compiled steps do not"};
  std::string why_not;
  const FusedSteps* steps = steps_for_call(program, mode, false, work, &why_not);
  return steps ? FusedSupport{true, steps->compiler} : FusedSupport{false, why_not};
}

FusedSupport fused_support() {
  if (resolve_fused(Fused::Auto) == Fused::Off) return {false, "turned off by SPIKEJIT_CPU_FUSED=0"};
  try {
    const runtime::HostCompiler compiler = runtime::find_host_compiler();
    return {true, compiler.path + " (" + compiler.identity + ")"};
  } catch (const Error& e) {
    return {false, e.what()};
  }
}

}  // namespace spikejit::cpu
