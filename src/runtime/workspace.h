// Scratch device memory for kernels that need it (the partial sums of scalar parameter
// gradients), without allocating on every call.
#pragma once

#include <cstddef>

#include "runtime/driver_api.h"

namespace spikejit::runtime {

// A buffer of at least `bytes` owned by (context, stream): work on one stream runs in order, so
// consecutive launches on that stream can share it; other streams get their own. It grows
// (to the next power of two, at least 64 KiB) when too small: the old buffer is then freed by
// cuMemFree, which waits for the work that may still use it. Buffers are kept for the life of
// the process. `context` must be current.
CUdeviceptr stream_workspace(CUcontext context, CUstream stream, size_t bytes);

}  // namespace spikejit::runtime
