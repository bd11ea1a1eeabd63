// Per-stream scratch buffers.
#include "runtime/workspace.h"

#include <map>
#include <mutex>
#include <utility>

namespace spikejit::runtime {
namespace {

constexpr size_t kMinWorkspaceBytes = size_t(64) << 10;

struct Buffer {
  CUdeviceptr pointer = 0;
  size_t bytes = 0;
};

}  // namespace

CUdeviceptr stream_workspace(CUcontext context, CUstream stream, size_t bytes) {
  static std::mutex mutex;
  static std::map<std::pair<CUcontext, CUstream>, Buffer> buffers;
  std::lock_guard<std::mutex> lock(mutex);
  Buffer& buffer = buffers[{context, stream}];
  if (buffer.bytes >= bytes) return buffer.pointer;
  size_t size = kMinWorkspaceBytes;
  while (size < bytes) size *= 2;
  const DriverApi& api = driver();
  if (buffer.pointer) {
    check_cuda(api.cuMemFree(buffer.pointer), "cuMemFree", "kernel workspace");
    buffer = Buffer();
  }
  check_cuda(api.cuMemAlloc(&buffer.pointer, size), "cuMemAlloc",
             "kernel workspace of " + std::to_string(size) + " bytes");
  buffer.bytes = size;
  return buffer.pointer;
}

}  // namespace spikejit::runtime
