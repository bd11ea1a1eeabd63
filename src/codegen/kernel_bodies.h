// The neuron-independent kernel bodies. They see the neuron only through the constants
// (kInputs, kSlotInput, ...) and the step functions (forward_step, backward_step) that the
// generator emits before them.
#pragma once

namespace spikejit::codegen {

extern const char* const kCommonBodies;    // parameter loading, alignment test
extern const char* const kForwardBodies;   // forward_entry<EPT, BLOCK, DEPTH>
extern const char* const kBackwardBodies;  // backward_entry<EPT, BLOCK, DEPTH>, reduce_entry<EPT, BLOCK>

}  // namespace spikejit::codegen
