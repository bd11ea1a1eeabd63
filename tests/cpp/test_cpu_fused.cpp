// The fused CPU steps (a neuron's lane program compiled by the host compiler) against the
// interpreted lane loops: the same bits, for every lane-program variant of every test neuron and
// for whole executor calls in every storage dtype; the policy that picks them (Options::fused,
// SPIKEJIT_CPU_FUSED, the work threshold, fp64) and the errors of the host compiler.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "cpu/fused_source.h"
#include "cpu/fused_steps.h"
#include "cpu/lane_kernels.h"
#include "cpu/lane_program.h"
#include "runtime/host_compiler.h"
#include "spikejit/builtins.h"
#include "spikejit/error.h"
#include "spikejit/runtime.h"
#include "support/cpu_runs.h"
#include "support/scoped_env.h"
#include "support/test_neurons.h"

namespace spikejit {
namespace {

using namespace testing::cpu_runs;
using testing::NamedProgram;
using testing::ScopedEnv;

// Lanes of every slot filled with values an op of the step may see: mostly in [-3, 3], some
// 0, ±1, NaN, ±Inf and ±1e30 (far beyond the reduced range of sin and cos: the fused step's second
// pass).
void fill_random_lanes(std::vector<std::vector<float>>& slots, Random& rng) {
  const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                           1e30f, -1e30f};
  for (std::vector<float>& lanes : slots) {
    for (float& x : lanes) {
      const uint32_t pick = rng.bits() % 18;
      x = pick < 9 ? special[pick] : static_cast<float>(rng.uniform(-3.0, 3.0));
    }
  }
}

// The same bits, or both NaN: which NaN an op returns when an operand is NaN (or which of two
// NaN operands it keeps) depends on the order the compiler gave the operands.
bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
  }
  return true;
}

// Runs lane program `p` over `lanes` (its slots, leaves filled; the literals are filled here)
// twice, by the lane loops and by the fused function `fused_step`, and expects the fused function
// to write every result slot with the lane loops' bits and to leave the other slots alone.
void expect_fused_step_writes_the_lane_loops_results(const cpu::LaneProgram& p, std::vector<std::vector<float>> lanes,
                                                     cpu::FusedStepFn fused_step, int64_t n) {
  for (const cpu::LaneLiteral& lit : p.literals) {
    std::fill(lanes[lit.slot].begin(), lanes[lit.slot].end(), static_cast<float>(lit.value));
  }
  const std::vector<std::vector<float>> before = lanes;
  std::vector<std::vector<float>> fused = lanes;
  for (const cpu::LaneInstr& in : p.instrs) {
    cpu::run_op_lanes<float>(in.op, lanes[in.dst].data(), lanes[in.args[0]].data(), lanes[in.args[1]].data(),
                             lanes[in.args[2]].data(), n);
  }
  std::vector<float*> pointers;
  for (std::vector<float>& slot_lanes : fused) pointers.push_back(slot_lanes.data());
  fused_step(pointers.data(), n);
  for (int32_t slot = 0; slot < p.num_slots; ++slot) {
    const bool result = std::count(p.result_slots.begin(), p.result_slots.end(), slot) > 0;
    EXPECT_TRUE(same_values(fused[slot], result ? lanes[slot] : before[slot]))
        << "slot " << slot << (result ? " (a result)" : " (not a result: must be left alone)");
  }
}

// Values of literals and parameters alone are computed once per block (`invariants`, reading
// only such values), and every instruction left in the step reads a value that changes over time,
// unless it computes a result (a result is written each step).
TEST(LaneProgram, ValuesOfParametersAloneAreComputedOncePerBlock) {
  for (const NamedProgram& np : testing::executor_test_programs()) {
    for (int v = 0; v < cpu::kLaneVariants; ++v) {
      SCOPED_TRACE(np.name + " variant " + std::to_string(v));
      const cpu::LaneProgram& p = cpu::lane_program(np.program, static_cast<cpu::LaneVariant>(v));
      std::vector<bool> constant(static_cast<size_t>(p.num_slots), false);
      for (const cpu::LaneLiteral& lit : p.literals) constant[lit.slot] = true;
      for (const cpu::LaneLeaf& leaf : p.params) constant[leaf.slot] = true;
      for (const cpu::LaneInstr& in : p.invariants) {
        for (int32_t arg : in.args) EXPECT_TRUE(constant[arg]) << ir::op_info(in.op).name << " reads slot " << arg;
        EXPECT_FALSE(constant[in.dst]) << "invariant slot " << in.dst << " written twice";
        constant[in.dst] = true;
      }
      for (const cpu::LaneInstr& in : p.instrs) {
        const bool result = std::count(p.result_slots.begin(), p.result_slots.end(), in.dst) > 0;
        const bool reads_a_changing_value = std::any_of(std::begin(in.args), std::end(in.args),
                                                        [&](int32_t arg) { return !constant[arg]; });
        EXPECT_TRUE(result || reads_a_changing_value) << ir::op_info(in.op).name << " of constants each step";
        EXPECT_FALSE(constant[in.dst]) << ir::op_info(in.op).name << " overwrites a constant slot";
      }
    }
  }
  const Program plif_program(builtins::plif_neuron({}));
  const cpu::LaneProgram& plif = cpu::lane_program(plif_program, cpu::LaneVariant::Forward);
  ASSERT_EQ(plif.invariants.size(), 1u);
  EXPECT_EQ(plif.invariants[0].op, ir::Op::Sigmoid);
}

// Every lane loop of the unit is declared free of dependences between iterations: without it GCC
// left loops with two or more stores scalar (PLIF's training step took 34 ms instead of 4 ms; the
// speed is measured in docs/benchmarks.md, this only keeps the declaration in place).
TEST(FusedSource, EveryLaneLoopIsDeclaredIndependent) {
  const Program plif(builtins::plif_neuron({}));
  std::vector<std::pair<std::string, const cpu::LaneProgram*>> functions;
  for (int v = 0; v < cpu::kLaneVariants; ++v) {
    functions.emplace_back("variant_" + std::to_string(v), &cpu::lane_program(plif, static_cast<cpu::LaneVariant>(v)));
  }
  const std::string source = cpu::fused_unit_source(functions);
  const std::string declaration = "SPIKEJIT_INDEPENDENT_LANES\n  ";
  size_t loops = 0, declared = 0;
  for (size_t at = source.find("for (int64_t l = 0;"); at != std::string::npos;
       at = source.find("for (int64_t l = 0;", at + 1)) {
    ++loops;
    declared += at >= declaration.size() && source.compare(at - declaration.size(), declaration.size(), declaration) == 0;
  }
  EXPECT_EQ(loops, functions.size());
  EXPECT_EQ(declared, loops) << source;
}

// Each variant's fused function writes every result slot with the bits the lane loops write,
// and nothing else: leaf slots keep their values, slots of values in between are not touched.
TEST(FusedSteps, EveryVariantWritesWhatTheLaneLoopsWrite) {
  const runtime::HostCompiler compiler = runtime::find_host_compiler();
  for (const NamedProgram& np : testing::executor_test_programs()) {
    std::vector<cpu::LaneVariant> variants;
    std::vector<std::pair<std::string, const cpu::LaneProgram*>> functions;
    for (int v = 0; v < cpu::kLaneVariants; ++v) {
      variants.push_back(static_cast<cpu::LaneVariant>(v));
      functions.emplace_back("variant_" + std::to_string(v), &cpu::lane_program(np.program, variants.back()));
    }
    const std::string label = "test unit of " + np.name;
    const auto library = runtime::host_library_for(compiler, cpu::fused_unit_source(functions), label, {});
    for (const auto& [symbol, lane_program] : functions) {
      Random rng;
      SCOPED_TRACE(np.name + " " + symbol + " " + rng.trace());
      const int64_t n = 203;  // not a multiple of any vector width
      std::vector<std::vector<float>> lanes(lane_program->num_slots, std::vector<float>(n));
      fill_random_lanes(lanes, rng);
      expect_fused_step_writes_the_lane_loops_results(
          *lane_program, lanes, reinterpret_cast<cpu::FusedStepFn>(library->symbol(symbol)), n);
    }
  }
}

// The ops with a fast form (ir::has_fast_form: sin, cos, tan, ndtri) where it does not hold:
// ndtri's far tails (p below about 4.5e-8), 0, 1 and outside [0, 1]; sin, cos and tan beyond
// kTrigFastLimit; mixed with lanes where it holds. The lane loops give apply_op's values lane by lane, and the
// fused step (its second pass) the lane loops' bits.
TEST(FusedSteps, FastFormsOutsideTheirRangeGiveApplyOpsValues) {
  const Program program = Program::from_text(R"(
neuron fast_forms
input p
input x
output y
y = ndtri(p) + sin(x) * cos(x) + tan(x)
)");
  const std::vector<float> tails = {1e-30f, 2.9e-8f, 3e-8f, 4.4e-8f, 4.5e-8f, 4.6e-8f, 1e-7f, 0.0f, -0.0f, 1.0f, 0.99999994f, -0.5f, 1.5f,
                                    std::numeric_limits<float>::quiet_NaN(), 1e-45f};
  const std::vector<float> huge = {3e5f, -262144.0f, 262143.98f, 1e30f, -1e30f, std::numeric_limits<float>::infinity()};
  Random rng;
  SCOPED_TRACE(rng.trace());
  const int64_t n = 203;  // not a multiple of any vector width
  std::vector<float> p(n), x(n);
  for (int64_t l = 0; l < n; ++l) {
    p[l] = rng.bits() % 3 == 0 ? tails[rng.bits() % tails.size()] : static_cast<float>(rng.uniform(0.0, 1.0));
    x[l] = rng.bits() % 3 == 0 ? huge[rng.bits() % huge.size()] : static_cast<float>(rng.uniform(-10.0, 10.0));
  }
  for (ir::Op op : {ir::Op::Ndtri, ir::Op::Sin, ir::Op::Cos, ir::Op::Tan}) {
    const std::vector<float>& a = op == ir::Op::Ndtri ? p : x;
    std::vector<float> lanes(n), zeros(n, 0.0f);
    cpu::run_op_lanes<float>(op, lanes.data(), a.data(), zeros.data(), zeros.data(), n);
    for (int64_t l = 0; l < n; ++l) {
      const float want = ir::apply_op<float>(op, a[l], 0.0f, 0.0f);
      EXPECT_TRUE(same_values({lanes[l]}, {want})) << ir::op_info(op).name << "(" << a[l] << "): " << lanes[l] << " against " << want;
    }
  }
  const cpu::LaneProgram& lane_program = cpu::lane_program(program, cpu::LaneVariant::Forward);
  const auto library = runtime::host_library_for(runtime::find_host_compiler(),
                                                 cpu::fused_unit_source({{"step", &lane_program}}), "fast forms", {});
  std::vector<std::vector<float>> lanes(lane_program.num_slots, std::vector<float>(n));
  for (const cpu::LaneLeaf& leaf : lane_program.step_leaves) {
    if (leaf.op == ir::Op::Input) lanes[leaf.slot] = leaf.index == 0 ? p : x;
  }
  expect_fused_step_writes_the_lane_loops_results(lane_program, lanes,
                                                  reinterpret_cast<cpu::FusedStepFn>(library->symbol("step")), n);
}

cpu::Options with_fused(cpu::Fused fused) {
  cpu::Options o;
  o.fused = fused;
  return o;
}

// Whole calls: the training forward (per-step saving and checkpoints) and the backward, fused
// and interpreted, in every storage dtype, with two blocks of lanes (the second partial).
TEST(FusedSteps, WholeCallsHaveTheBitsOfInterpretedCalls) {
  for (const NamedProgram& np : testing::executor_test_programs()) {
    for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
      for (int64_t checkpoint_every : {int64_t{0}, int64_t{3}}) {
        Random rng;
        SCOPED_TRACE(np.name + " " + dtype_name(dtype) + " checkpoint_every " + std::to_string(checkpoint_every) +
                     " " + rng.trace());
        Problem s = make_problem(np.program, 7, {3, 301}, dtype, rng);
        expect_same_training_calls(s, dtype, with_fused(cpu::Fused::Off), with_fused(cpu::Fused::On),
                                   checkpoint_every, rng);
      }
    }
  }
}

// A problem big enough for Fused::Auto to fuse: 2^20 neuron-steps.
Problem large_problem(const Program& program, Random& rng) {
  return make_problem(program, 16, {int64_t{1} << 16}, DType::F32, rng);
}

TEST(FusedSteps, WithoutACompilerOnIsAnErrorAndAutoWarnsAndInterprets) {
  const ScopedEnv compiler("SPIKEJIT_CXX", "/nonexistent/c++");
  Random rng;
  SCOPED_TRACE(rng.trace());
  const Program lif(builtins::lif_neuron({}));
  Problem s = large_problem(lif, rng);
  try {
    run_forward(s, {DType::F32, true, true, true, with_fused(cpu::Fused::On)});
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no C++ compiler"), std::string::npos) << what;
    EXPECT_NE(what.find("SPIKEJIT_CXX"), std::string::npos) << what;
    EXPECT_NE(what.find("/nonexistent/c++"), std::string::npos) << what;
  }
  // Another program of the same neuron: the failure above is remembered per program.
  Problem fresh = large_problem(Program(builtins::lif_neuron({})), rng);
  fresh.inputs = s.inputs;
  fresh.initial_states = s.initial_states;
  const log::Level level = log::level();
  log::set_level(log::Level::Warning);
  ::testing::internal::CaptureStderr();
  const ForwardRun automatic = run_forward(fresh, {DType::F32, true, true, true, with_fused(cpu::Fused::Auto)});
  const std::string warning = ::testing::internal::GetCapturedStderr();
  log::set_level(level);
  EXPECT_NE(warning.find("runs on the interpreted CPU steps"), std::string::npos) << warning;
  const ForwardRun interpreted = run_forward(fresh, {DType::F32, true, true, true, with_fused(cpu::Fused::Off)});
  expect_same_bits(automatic.outputs, interpreted.outputs, "outputs");
}

// Auto interprets calls below the threshold (no compiler is even looked for) and fp64 compute
// (even under On); SPIKEJIT_CPU_FUSED turns Auto into On or Off and names itself when wrong.
TEST(FusedSteps, ThePolicy) {
  const Program lif(builtins::lif_neuron({}));
  const cpu::LaneVariant v = cpu::LaneVariant::Forward;
  {
    const ScopedEnv compiler("SPIKEJIT_CXX", "/nonexistent/c++");
    EXPECT_EQ(cpu::fused_step(lif, v, cpu::Fused::Auto, false, cpu::kFusedMinWork - 1), nullptr);
    EXPECT_EQ(cpu::fused_step(lif, v, cpu::Fused::On, true, cpu::kFusedMinWork), nullptr);
    EXPECT_EQ(cpu::fused_step(lif, v, cpu::Fused::Off, false, cpu::kFusedMinWork), nullptr);
    const ScopedEnv off("SPIKEJIT_CPU_FUSED", "0");
    EXPECT_EQ(cpu::fused_step(lif, v, cpu::Fused::Auto, false, cpu::kFusedMinWork), nullptr);
  }
  {
    const ScopedEnv on("SPIKEJIT_CPU_FUSED", "1");
    EXPECT_NE(cpu::fused_step(lif, v, cpu::Fused::Auto, false, 1), nullptr);
    EXPECT_EQ(cpu::fused_step(lif, v, cpu::Fused::Off, false, 1), nullptr);
    EXPECT_EQ(cpu::resolve_fused(cpu::Fused::Auto), cpu::Fused::On);
    EXPECT_EQ(cpu::resolve_fused(cpu::Fused::Off), cpu::Fused::Off);
  }
  EXPECT_EQ(cpu::resolve_fused(cpu::Fused::Auto), cpu::Fused::Auto);
  EXPECT_NE(cpu::fused_step(lif, v, cpu::Fused::Auto, false, cpu::kFusedMinWork), nullptr);
  const ScopedEnv wrong("SPIKEJIT_CPU_FUSED", "maybe");
  try {
    cpu::fused_step(lif, v, cpu::Fused::Auto, false, 1);
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SPIKEJIT_CPU_FUSED: expected 0, 1 or auto, got 'maybe'"),
              std::string::npos)
        << e.what();
  }
}

TEST(FusedSteps, SupportNamesTheCompilerOrWhyNot) {
  const cpu::FusedSupport here = cpu::fused_support();
  EXPECT_TRUE(here.available) << here.detail;
  EXPECT_NE(here.detail.find(runtime::find_host_compiler().identity), std::string::npos) << here.detail;
  {
    const ScopedEnv off("SPIKEJIT_CPU_FUSED", "0");
    const cpu::FusedSupport support = cpu::fused_support();
    EXPECT_FALSE(support.available);
    EXPECT_EQ(support.detail, "turned off by SPIKEJIT_CPU_FUSED=0");
  }
  const ScopedEnv compiler("SPIKEJIT_CXX", "/nonexistent/c++");
  const cpu::FusedSupport support = cpu::fused_support();
  EXPECT_FALSE(support.available);
  EXPECT_NE(support.detail.find("/nonexistent/c++: not found"), std::string::npos) << support.detail;
}

TEST(HostCompiler, ACompileErrorCarriesTheCompilersOutput) {
  const runtime::HostCompiler compiler = runtime::find_host_compiler();
  const ScopedEnv no_cache("SPIKEJIT_CACHE", "0");
  try {
    runtime::host_library_for(compiler, "int broken( {\n", "a broken unit", {});
    ADD_FAILURE() << "expected a CompileError";
  } catch (const runtime::CompileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the host compiler failed on a broken unit"), std::string::npos) << what;
    EXPECT_NE(what.find(compiler.path), std::string::npos) << what;
    EXPECT_FALSE(e.log().empty());
    EXPECT_NE(what.find(e.log()), std::string::npos);
  }
}

TEST(HostCompiler, LibrariesComeFromTheDiskCacheTheSecondTime) {
  const std::string folder = ::testing::TempDir() + "spikejit-host-cache-" + std::to_string(Random{}.bits());
  const ScopedEnv cache("SPIKEJIT_CACHE_DIR", folder.c_str());
  const runtime::HostCompiler compiler = runtime::find_host_compiler();
  const std::string source = "extern \"C\" int spikejit_answer() { return 42; }\n";
  const runtime::CacheInfo before = runtime::cache_info();
  runtime::host_library_for(compiler, source, "the answer", {"spikejit_answer"});
  const runtime::CacheInfo middle = runtime::cache_info();
  const auto library = runtime::host_library_for(compiler, source, "the answer", {"spikejit_answer"});
  const runtime::CacheInfo after = runtime::cache_info();
  EXPECT_EQ(middle.compiles, before.compiles + 1);
  EXPECT_EQ(after.disk_hits, middle.disk_hits + 1);
  EXPECT_EQ(after.compiles, middle.compiles);
  EXPECT_EQ(reinterpret_cast<int (*)()>(library->symbol("spikejit_answer"))(), 42);
  try {
    library->symbol("spikejit_question");
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("spikejit_question not found in the answer"), std::string::npos);
  }
  runtime::cache_clear();
}

// An executable shell script `name` with `body` in a fresh folder under the test's temp dir.
std::string write_script(const std::string& name, const std::string& body) {
  const std::string folder = ::testing::TempDir() + "spikejit-scripts-" + std::to_string(Random{}.bits());
  EXPECT_EQ(mkdir(folder.c_str(), 0755), 0);
  const std::string path = folder + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr);
  std::fputs(("#!/bin/sh\n" + body).c_str(), f);
  std::fclose(f);
  EXPECT_EQ(chmod(path.c_str(), 0755), 0);
  return path;
}

// What a call runs, said before it runs (spikejit run prints it): the compile's own failure
// included, and SPIKEJIT_CPU_FUSED applying to Auto only.
TEST(FusedSteps, StepsUsedSayWhatACallRuns) {
  const Program lif(builtins::lif_neuron({}));
  const int64_t big = cpu::kFusedMinWork;
  EXPECT_EQ(cpu::fused_steps_used(lif, cpu::Fused::Off, DType::F32, big).detail, "turned off");
  EXPECT_EQ(cpu::fused_steps_used(lif, cpu::Fused::On, DType::F64, big).detail,
            "float64 computes in fp64, which the compiled steps do not");
  EXPECT_EQ(cpu::fused_steps_used(lif, cpu::Fused::Auto, DType::F16, big - 1).detail, "fewer than 2^20 neuron-steps");
  const cpu::FusedSupport used = cpu::fused_steps_used(lif, cpu::Fused::Auto, DType::F32, big);
  EXPECT_TRUE(used.available);
  EXPECT_NE(used.detail.find(runtime::find_host_compiler().identity), std::string::npos) << used.detail;
  {
    const ScopedEnv off("SPIKEJIT_CPU_FUSED", "0");
    EXPECT_EQ(cpu::fused_steps_used(lif, cpu::Fused::Auto, DType::F32, big).detail,
              "turned off by SPIKEJIT_CPU_FUSED=0");
    EXPECT_TRUE(cpu::fused_steps_used(lif, cpu::Fused::On, DType::F32, 1).available);
  }
  const ScopedEnv failing("SPIKEJIT_CXX",
                          write_script("failing-c++", "[ \"$1\" = --version ] && echo fakecc 1.0 && exit 0\nexit 3\n")
                              .c_str());
  const Program fresh(builtins::lif_neuron({}));
  const cpu::FusedSupport failed = cpu::fused_steps_used(fresh, cpu::Fused::Auto, DType::F32, big);
  EXPECT_FALSE(failed.available);
  EXPECT_NE(failed.detail.find("exit status 3"), std::string::npos) << failed.detail;
  EXPECT_THROW(cpu::fused_steps_used(fresh, cpu::Fused::On, DType::F32, 1), Error);
}

// A step with an op that apply_op<float> computes by a C library call per lane (pow here) is left
// to the lane loops under Auto: in a fused loop the call would keep every other op scalar too.
// On still compiles it, and both give the same bits.
TEST(FusedSteps, AutoLeavesAStepThatCallsTheCLibraryPerLaneToTheLaneLoops) {
  const Program with_pow = Program::from_text(R"(
neuron with_pow
input x
state v = 0
output s
h = v * 0.5 + x + 0.1 * pow(abs(x) + 1, 0.7)
s = spike(h - 1, atan(alpha = 2))
v = h * (1 - s)
)", "with_pow.sj");
  const int64_t big = cpu::kFusedMinWork;
  const cpu::FusedSupport used = cpu::fused_steps_used(with_pow, cpu::Fused::Auto, DType::F32, big);
  EXPECT_FALSE(used.available);
  EXPECT_NE(used.detail.find("calls the C library per lane (pow)"), std::string::npos) << used.detail;
  EXPECT_TRUE(cpu::fused_steps_used(with_pow, cpu::Fused::On, DType::F32, big).available);
  EXPECT_TRUE(cpu::fused_steps_used(Program(builtins::lif_neuron({})), cpu::Fused::Auto, DType::F32, big).available);
  Random rng;
  SCOPED_TRACE(rng.trace());
  Problem s = large_problem(with_pow, rng);
  const ForwardRun fused = run_forward(s, {DType::F32, true, true, true, with_fused(cpu::Fused::On)});
  const ForwardRun automatic = run_forward(s, {DType::F32, true, true, true, with_fused(cpu::Fused::Auto)});
  expect_same_bits(automatic.outputs, fused.outputs, "outputs");
}

// Under Auto a large step runs interpreted (its compile would stall the first call for long);
// the reason says so and how to compile it anyway. Nothing is compiled here.
TEST(FusedSteps, AutoInterpretsALargeStep) {
  std::string text = "neuron large\ninput x\nstate v = 0\noutput s\na = x\n";
  for (int i = 0; i < 120; ++i) text += "a = sin(a) * v + x\n";
  text += "s = spike(a - 1, sigmoid(alpha = 4))\nv = a - s\n";
  const Program large = Program::from_text(text, "large.sj");
  const ScopedEnv compiler("SPIKEJIT_CXX", "/nonexistent/c++");  // (a compile attempt would fail)
  const cpu::FusedSupport used = cpu::fused_steps_used(large, cpu::Fused::Auto, DType::F32, cpu::kFusedMinWork);
  EXPECT_FALSE(used.available);
  EXPECT_EQ(used.detail.find("a large step: "), 0u) << used.detail;
  EXPECT_NE(used.detail.find("SPIKEJIT_CPU_FUSED=1 compiles it"), std::string::npos) << used.detail;
  EXPECT_EQ(cpu::fused_step(large, cpu::LaneVariant::Forward, cpu::Fused::Auto, false, cpu::kFusedMinWork), nullptr);
}

// A compiler that answers --version and exits 0 but writes no library (or one without the
// symbols asked for): an error, and nothing is cached that a later call would trip over.
TEST(HostCompiler, AnUnloadableResultIsNeverCached) {
  // --version answers; a compile writes bytes that are no library to the path after -o.
  const std::string script = write_script(
      "fake-c++", "if [ \"$1\" = --version ]; then echo fake 1.0; exit 0; fi\n"
                  "while [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then echo 'not an ELF' > \"$2\"; fi; shift; done\n");
  const ScopedEnv cache("SPIKEJIT_CACHE_DIR", (script + "-cache").c_str());
  const runtime::HostCompiler fake{script, "fake 1.0"};
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      runtime::host_library_for(fake, "int x;\n", "a fake library", {});
      ADD_FAILURE() << "expected an Error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot load a fake library"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(runtime::cache_entries().empty()) << "attempt " << attempt;
  }
  // A real library without the symbol asked for: refused the same way.
  const runtime::HostCompiler compiler = runtime::find_host_compiler();
  try {
    runtime::host_library_for(compiler, "extern \"C\" int spikejit_other() { return 1; }\n", "a library",
                              {"spikejit_wanted"});
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("spikejit_wanted not found in a library"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(runtime::cache_entries().empty());
  runtime::cache_clear();
}

TEST(HostCompiler, BytesThatAreNotALibraryDoNotLoad) {
  try {
    runtime::HostLibrary::load("not an ELF file", "a bad library");
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot load a bad library"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spikejit
