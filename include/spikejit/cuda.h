// The CUDA backend: generated kernels compiled with NVRTC (opened at run time), cached in memory
// and on disk, launched on the caller's stream. Buffers hold device pointers; every sequence,
// state and parameter buffer of one call has the same dtype. Buffers are contiguous, except that
// the backward also reads grad_outputs / grad_state_seqs broadcast over T and/or S (stride 0; see
// SequenceLayout) in place, with a kernel specialised for that layout.
#pragma once

#include <string>

#include "spikejit/buffers.h"
#include "spikejit/program.h"

namespace spikejit::cuda {

// True when a CUDA driver with at least one device and an NVRTC library can be opened.
// Otherwise false, and `why` (if given) says what was not found and where it looked.
bool available(std::string* why = nullptr);

// `stream` is a CUstream (nullptr: the legacy default stream); `device` the device ordinal whose
// primary context (or the current context, when one is set) owns the pointers.
void forward(const Program& program, const ForwardBuffers& buffers, void* stream, int device);
void backward(const Program& program, const BackwardBuffers& buffers, void* stream, int device);

}  // namespace spikejit::cuda
