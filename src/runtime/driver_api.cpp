// Loading libcuda and the helpers every driver call goes through.
#include "runtime/driver_api.h"

#include <mutex>
#include <optional>
#include <vector>

#include "runtime/library_search.h"
#include "spikejit/error.h"
#include "spikejit/runtime.h"

namespace spikejit::runtime {
namespace {

template <typename F>
void resolve(const DynamicLibrary& library, F& function, const char* name) {
  function = reinterpret_cast<F>(library.symbol(name));
}

// The first of `names` the library has (newer versioned entry points first).
template <typename F>
void resolve_any(const DynamicLibrary& library, F& function, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* address = library.find_symbol(name)) {
      function = reinterpret_cast<F>(address);
      return;
    }
  }
  library.symbol(*names.begin());  // throws, naming the preferred symbol
}

struct LoadedDriver {
  std::optional<DriverApi> api;
  std::string error;
  int error_result = -1;  // CUresult of a failed cuInit, else -1
};

}  // namespace

DriverApi load_driver() {
  DriverApi api(DynamicLibrary::open_first("the CUDA driver library (libcuda)", driver_candidates()));
  const DynamicLibrary& l = api.library;
  resolve(l, api.cuInit, "cuInit");
  resolve(l, api.cuDriverGetVersion, "cuDriverGetVersion");
  resolve(l, api.cuGetErrorName, "cuGetErrorName");
  resolve(l, api.cuGetErrorString, "cuGetErrorString");
  resolve(l, api.cuDeviceGetCount, "cuDeviceGetCount");
  resolve(l, api.cuDeviceGet, "cuDeviceGet");
  resolve(l, api.cuDeviceGetAttribute, "cuDeviceGetAttribute");
  resolve(l, api.cuDeviceGetName, "cuDeviceGetName");
  resolve(l, api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  resolve(l, api.cuCtxGetCurrent, "cuCtxGetCurrent");
  resolve(l, api.cuCtxSetCurrent, "cuCtxSetCurrent");
  resolve(l, api.cuCtxPushCurrent, "cuCtxPushCurrent_v2");
  resolve(l, api.cuCtxPopCurrent, "cuCtxPopCurrent_v2");
  resolve(l, api.cuCtxGetDevice, "cuCtxGetDevice");
  resolve(l, api.cuCtxSynchronize, "cuCtxSynchronize");
  resolve(l, api.cuModuleLoadData, "cuModuleLoadData");
  resolve(l, api.cuModuleGetFunction, "cuModuleGetFunction");
  resolve(l, api.cuModuleUnload, "cuModuleUnload");
  resolve(l, api.cuLaunchKernel, "cuLaunchKernel");
  resolve(l, api.cuMemGetInfo, "cuMemGetInfo_v2");
  resolve(l, api.cuMemAlloc, "cuMemAlloc_v2");
  resolve(l, api.cuMemFree, "cuMemFree_v2");
  resolve(l, api.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
  resolve(l, api.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
  resolve(l, api.cuMemcpyDtoD, "cuMemcpyDtoD_v2");
  resolve(l, api.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
  resolve(l, api.cuMemsetD8, "cuMemsetD8_v2");
  resolve(l, api.cuMemsetD8Async, "cuMemsetD8Async");
  resolve(l, api.cuMemsetD16Async, "cuMemsetD16Async");
  resolve(l, api.cuMemsetD32Async, "cuMemsetD32Async");
  resolve(l, api.cuStreamCreate, "cuStreamCreate");
  resolve(l, api.cuStreamDestroy, "cuStreamDestroy_v2");
  resolve(l, api.cuStreamSynchronize, "cuStreamSynchronize");
  resolve(l, api.cuStreamIsCapturing, "cuStreamIsCapturing");
  resolve(l, api.cuEventCreate, "cuEventCreate");
  resolve(l, api.cuEventDestroy, "cuEventDestroy_v2");
  resolve(l, api.cuEventRecord, "cuEventRecord");
  resolve(l, api.cuEventSynchronize, "cuEventSynchronize");
  resolve_any(l, api.cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"});
  CUresult result = api.cuInit(0);
  if (result != kCudaSuccess) {
    throw CudaError("cuInit failed: " + describe_result(api, result) + " (driver " + l.file() + ")",
                    result);
  }
  return api;
}

const DriverApi& driver() {
  static const LoadedDriver loaded = [] {
    LoadedDriver d;
    try {
      d.api = load_driver();
    } catch (const CudaError& e) {
      d.error = e.what();
      d.error_result = e.result();
    } catch (const Error& e) {
      d.error = e.what();
    }
    return d;
  }();
  if (!loaded.api) {
    if (loaded.error_result >= 0) throw CudaError(loaded.error, loaded.error_result);
    throw Error(loaded.error);
  }
  return *loaded.api;
}

bool stream_is_capturing(CUstream stream) {
  int status = kCaptureStatusNone;
  check_cuda(driver().cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  return status != kCaptureStatusNone;
}

std::string describe_result(const DriverApi& api, CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  api.cuGetErrorName(result, &name);
  api.cuGetErrorString(result, &text);
  if (!name) {
    // Codes a stub or broken driver may not name itself.
    switch (result) {
      case 34: name = "CUDA_ERROR_STUB_LIBRARY"; text = "the toolkit's link stub, not a driver"; break;
      case 35: name = "CUDA_ERROR_INSUFFICIENT_DRIVER"; text = "the driver is too old"; break;
      case 100: name = "CUDA_ERROR_NO_DEVICE"; text = "no CUDA-capable device"; break;
      default: break;
    }
  }
  std::string s = name ? name : "CUresult " + std::to_string(result);
  if (text) s += std::string(" (") + text + ")";
  return s;
}

void check_cuda(CUresult result, const char* call, const std::string& context) {
  if (result == kCudaSuccess) return;
  std::string message = std::string(call) + " failed: " + describe_result(driver(), result);
  if (!context.empty()) message += " (" + context + ")";
  throw CudaError(message, result);
}

int device_count() {
  // Fixed for the life of the process once the driver is initialised.
  static const int count = [] {
    int n = 0;
    check_cuda(driver().cuDeviceGetCount(&n), "cuDeviceGetCount");
    return n;
  }();
  return count;
}

std::string device_arch(int device) {
  const DriverApi& api = driver();
  CUdevice handle = 0;
  check_cuda(api.cuDeviceGet(&handle, device), "cuDeviceGet", "device " + std::to_string(device));
  int major = 0, minor = 0;
  check_cuda(api.cuDeviceGetAttribute(&major, kAttrComputeCapabilityMajor, handle),
             "cuDeviceGetAttribute");
  check_cuda(api.cuDeviceGetAttribute(&minor, kAttrComputeCapabilityMinor, handle),
             "cuDeviceGetAttribute");
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

namespace {

CUcontext primary_context(int device) {
  static std::mutex mutex;
  static std::vector<CUcontext> contexts;
  std::lock_guard<std::mutex> lock(mutex);
  if (contexts.empty()) contexts.resize(static_cast<size_t>(device_count()), nullptr);
  CUcontext& context = contexts[static_cast<size_t>(device)];
  if (!context) {
    const DriverApi& api = driver();
    CUdevice handle = 0;
    check_cuda(api.cuDeviceGet(&handle, device), "cuDeviceGet");
    check_cuda(api.cuDevicePrimaryCtxRetain(&context, handle), "cuDevicePrimaryCtxRetain",
               "device " + std::to_string(device));
  }
  return context;
}

}  // namespace

ContextGuard::ContextGuard(int device) {
  const DriverApi& api = driver();
  int count = device_count();
  if (device < 0 || device >= count) {
    throw ArgumentError("device", "a CUDA device ordinal in [0, " + std::to_string(count) + ")",
                        std::to_string(device));
  }
  CUcontext current = nullptr;
  check_cuda(api.cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current) {
    CUdevice wanted = 0, current_device = -1;
    check_cuda(api.cuDeviceGet(&wanted, device), "cuDeviceGet");
    check_cuda(api.cuCtxGetDevice(&current_device), "cuCtxGetDevice");
    if (current_device == wanted) {
      context_ = current;
      return;
    }
  }
  context_ = primary_context(device);
  check_cuda(api.cuCtxPushCurrent(context_), "cuCtxPushCurrent");
  pushed_ = true;
}

ContextGuard::~ContextGuard() {
  if (pushed_) {
    CUcontext popped = nullptr;
    driver().cuCtxPopCurrent(&popped);
  }
}

}  // namespace spikejit::runtime
