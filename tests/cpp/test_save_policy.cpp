// The "auto" save policy (spikejit/buffers.h): checkpoints only for float32 CUDA calls large
// enough, of one-input, one-state neurons that save more than their input per step.
#include <gtest/gtest.h>

#include "spikejit/buffers.h"
#include "spikejit/builtins.h"
#include "spikejit/error.h"
#include "spikejit/program.h"

namespace spikejit {
namespace {

constexpr int64_t kT = kAutoCheckpointMinSteps, kN = kAutoCheckpointMinNeurons;

// Everything but the size: what a call of at least the minimum size takes.
int64_t interval(const Program& p) { return auto_checkpoint_interval(p, true, DType::F32, false, false); }

int64_t choose(const Program& p, bool on_cuda = true, DType storage = DType::F32, int64_t steps = kT,
               int64_t neurons = kN, bool seqs = false, bool packs = false) {
  return auto_checkpoint_every(p, on_cuda, storage, steps, neurons, seqs, packs);
}

TEST(AutoSavePolicy, CheckpointsOnlyNeuronsThatSaveMoreThanTheirInput) {
  const Program plif(builtins::plif_neuron());  // saves x and v per step
  const Program lif(builtins::lif_neuron());    // saves h
  const Program if_(builtins::if_neuron());     // saves h
  EXPECT_EQ(plif.backward().saved.size(), 2u);
  EXPECT_EQ(lif.backward().saved.size(), 1u);
  EXPECT_EQ(interval(plif), kAutoCheckpointEvery);
  EXPECT_EQ(interval(lif), 0);
  EXPECT_EQ(interval(if_), 0);
  EXPECT_EQ(choose(plif), kAutoCheckpointEvery);
  EXPECT_EQ(choose(lif), 0);
  EXPECT_EQ(choose(if_), 0);
}

TEST(AutoSavePolicy, SavesPerStepOutsideTheMeasuredCases) {
  const Program plif(builtins::plif_neuron());
  EXPECT_EQ(choose(plif, /*on_cuda=*/false), 0);
  for (DType storage : {DType::F16, DType::BF16, DType::F64}) EXPECT_EQ(choose(plif, true, storage), 0);
  EXPECT_EQ(choose(plif, true, DType::F32, kT - 1), 0);
  EXPECT_EQ(choose(plif, true, DType::F32, kT, kN - 1), 0);
  EXPECT_EQ(choose(plif, true, DType::F32, kT, kN, /*seqs=*/true), 0);
  EXPECT_EQ(choose(plif, true, DType::F32, kT, kN, false, /*packs=*/true), 0);
  EXPECT_EQ(choose(plif, true, DType::F32, 1024, 1 << 24), kAutoCheckpointEvery);
  // The size-free part answers the same for everything but the size.
  EXPECT_EQ(auto_checkpoint_interval(plif, false, DType::F32, false, false), 0);
  EXPECT_EQ(auto_checkpoint_interval(plif, true, DType::F16, false, false), 0);
  EXPECT_EQ(auto_checkpoint_interval(plif, true, DType::F32, true, false), 0);
  EXPECT_EQ(auto_checkpoint_interval(plif, true, DType::F32, false, true), 0);
}

TEST(AutoSavePolicy, NegativeSizesAreArgumentErrors) {
  const Program plif(builtins::plif_neuron());
  try {
    choose(plif, true, DType::F32, -1, kN);
    ADD_FAILURE() << "steps = -1 was accepted";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "steps");
  }
  try {
    choose(plif, true, DType::F32, kT, -kN);
    ADD_FAILURE() << "neurons = -65536 was accepted";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "neurons");
  }
}

TEST(AutoSavePolicy, SavesPerStepForNeuronsOfSeveralInputsOrStates) {
  // Both save more per step than checkpoints would keep, but a checkpoint backward with several
  // inputs or states was measured slower than saving per step.
  const Program two_inputs = Program::from_text(R"(neuron gated
input x
input m
state v = 0
output s
h = v + x * sigmoid(m)
s = spike(h - 1, sigmoid(alpha=4))
v = h * (1 - s)
)");
  const Program two_states = Program::from_text(R"(neuron adaptive
input x
state v = 0
state a = 0
output s
h = v + (x - v) * 0.5
s = spike(h - 1 - a, sigmoid(alpha=4))
v = h * (1 - s)
a = 0.8 * a + 0.2 * s
)");
  EXPECT_GE(two_inputs.backward().saved.size(), 3u);
  EXPECT_GE(two_states.backward().saved.size(), 2u);
  EXPECT_EQ(interval(two_inputs), 0);
  EXPECT_EQ(interval(two_states), 0);
  EXPECT_EQ(choose(two_inputs), 0);
  EXPECT_EQ(choose(two_states), 0);
}

}  // namespace
}  // namespace spikejit
