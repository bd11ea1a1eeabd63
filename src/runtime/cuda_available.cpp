// spikejit::cuda::available: can the CUDA backend run here?
#include "runtime/driver_api.h"
#include "runtime/nvrtc_api.h"
#include "spikejit/cuda.h"
#include "spikejit/error.h"

namespace spikejit::cuda {

bool available(std::string* why) {
  std::string reason;
  try {
    if (runtime::device_count() <= 0) {
      reason = "the CUDA driver (" + runtime::driver().library.file() + ") reports no device";
    } else {
      runtime::nvrtc();
    }
  } catch (const Error& e) {
    reason = e.what();
  }
  if (why) *why = reason;
  return reason.empty();
}

}  // namespace spikejit::cuda
