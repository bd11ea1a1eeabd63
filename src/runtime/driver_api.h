// The CUDA driver API entry points spikejit uses, resolved from libcuda at run time.
// Types and constants are declared here (values as in the driver's cuda.h); no CUDA header is
// needed to build.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "runtime/dynamic_library.h"

namespace spikejit::runtime {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;

constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaErrorNoDevice = 100;
constexpr int kAttrMaxGridDimX = 5;
constexpr int kAttrMultiprocessorCount = 16;
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;
constexpr int kCaptureStatusNone = 0;  // cuStreamIsCapturing: else active or invalidated

// Every pointer is set by load_driver().
struct DriverApi {
  explicit DriverApi(DynamicLibrary l) : library(std::move(l)) {}
  DynamicLibrary library;
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDriverGetVersion)(int* version);
  CUresult (*cuGetErrorName)(CUresult error, const char** name);
  CUresult (*cuGetErrorString)(CUresult error, const char** text);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
  CUresult (*cuDeviceGetAttribute)(int* value, int attribute, CUdevice device);
  CUresult (*cuDeviceGetName)(char* name, int length, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* context, CUdevice device);
  CUresult (*cuCtxGetCurrent)(CUcontext* context);
  CUresult (*cuCtxSetCurrent)(CUcontext context);
  CUresult (*cuCtxPushCurrent)(CUcontext context);
  CUresult (*cuCtxPopCurrent)(CUcontext* context);
  CUresult (*cuCtxGetDevice)(CUdevice* device);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);
  CUresult (*cuModuleGetFunction)(CUfunction* function, CUmodule module, const char* name);
  CUresult (*cuModuleUnload)(CUmodule module);
  CUresult (*cuLaunchKernel)(CUfunction function, unsigned grid_x, unsigned grid_y,
                             unsigned grid_z, unsigned block_x, unsigned block_y,
                             unsigned block_z, unsigned shared_bytes, CUstream stream,
                             void** params, void** extra);
  CUresult (*cuMemGetInfo)(size_t* free_bytes, size_t* total_bytes);
  CUresult (*cuMemAlloc)(CUdeviceptr* pointer, size_t bytes);
  CUresult (*cuMemFree)(CUdeviceptr pointer);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void* src, size_t bytes);
  CUresult (*cuMemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes);
  CUresult (*cuMemcpyDtoD)(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
  CUresult (*cuMemsetD8)(CUdeviceptr dst, unsigned char value, size_t count);
  CUresult (*cuMemsetD8Async)(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream);
  CUresult (*cuMemsetD16Async)(CUdeviceptr dst, unsigned short value, size_t count, CUstream stream);
  CUresult (*cuMemsetD32Async)(CUdeviceptr dst, unsigned value, size_t count, CUstream stream);
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned flags);
  CUresult (*cuStreamDestroy)(CUstream stream);
  CUresult (*cuStreamSynchronize)(CUstream stream);
  CUresult (*cuStreamIsCapturing)(CUstream stream, int* status);  // kCaptureStatus*
  CUresult (*cuEventCreate)(CUevent* event, unsigned flags);
  CUresult (*cuEventDestroy)(CUevent event);
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventSynchronize)(CUevent event);
  CUresult (*cuEventElapsedTime)(float* milliseconds, CUevent start, CUevent end);
};

// Opens the driver (driver_candidates()), resolves every entry point and calls cuInit(0).
// Uncached: each call opens again (the loader returns the same handle). Throws Error / CudaError.
DriverApi load_driver();

// The process-wide driver, loaded on first use. When loading failed, every call throws the same
// error again.
const DriverApi& driver();

// "CUDA_ERROR_INVALID_VALUE (invalid argument)".
std::string describe_result(const DriverApi& api, CUresult result);

// Throws CudaError "<call> failed: <describe_result>[ (<context>)]" unless `result` is success.
void check_cuda(CUresult result, const char* call, const std::string& context = "");

// Whether `stream` is capturing a CUDA graph (then nothing may allocate or synchronise). Throws
// CudaError when the driver cannot tell.
bool stream_is_capturing(CUstream stream);

// Makes a context for `device` current on this thread for the guard's lifetime: the current
// context when it belongs to `device`, else the device's primary context (retained once, kept
// for the life of the process), pushed and popped again at scope exit.
class ContextGuard {
 public:
  explicit ContextGuard(int device);
  ~ContextGuard();
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;
  CUcontext context() const { return context_; }

 private:
  CUcontext context_ = nullptr;
  bool pushed_ = false;
};

// Number of devices; throws when the driver is missing.
int device_count();
// "sm_90" for a device with compute capability 9.0.
std::string device_arch(int device);

}  // namespace spikejit::runtime
