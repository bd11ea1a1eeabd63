// Device buffers holding a state's default initial value, for kernels called without that
// initial state: the generated kernels read an absent (null) buffer as zero.
#pragma once

#include <cstdint>

#include "runtime/driver_api.h"
#include "spikejit/tensor.h"

namespace spikejit::runtime {

// The bit pattern of `value` in `storage` (float32: 32 bits; float16/bfloat16: 16 bits).
uint32_t storage_bits(DType storage, double value);

// At least `count` elements of `storage` all equal to `value`, in `context` (current). One
// buffer per (context, dtype, value), grown geometrically; outgrown buffers are kept (a kernel
// on some stream may still read them), so memory stays below twice the largest request. The
// fill completes before this returns, so any stream may read the buffer. A buffer that must be
// allocated while `stream` (the caller's) captures a CUDA graph is an ArgumentError naming
// initial_states: a captured call must pass its initial states or follow an uncaptured call
// of at least its size.
CUdeviceptr constant_buffer(CUcontext context, DType storage, double value, int64_t count, CUstream stream);

}  // namespace spikejit::runtime
