// The NVRTC entry points spikejit uses, resolved from libnvrtc at run time.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dynamic_library.h"

namespace spikejit::runtime {

using nvrtcResult = int;
struct _nvrtcProgram;
using nvrtcProgram = _nvrtcProgram*;
constexpr nvrtcResult kNvrtcSuccess = 0;

// Every pointer is set by load_nvrtc() (the optional ones may be nullptr).
struct NvrtcApi {
  explicit NvrtcApi(DynamicLibrary l) : library(std::move(l)) {}
  DynamicLibrary library;
  const char* (*nvrtcGetErrorString)(nvrtcResult result);
  nvrtcResult (*nvrtcVersion)(int* major, int* minor);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram* program, const char* source, const char* name,
                                    int num_headers, const char* const* headers,
                                    const char* const* include_names);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram* program);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram program, int num_options,
                                     const char* const* options);
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram program, size_t* size);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram program, char* log);
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram program, size_t* size);
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram program, char* cubin);
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram program, size_t* size);
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram program, char* ptx);
  // Optional (nullptr when absent).
  nvrtcResult (*nvrtcGetNumSupportedArchs)(int* count);
  nvrtcResult (*nvrtcGetSupportedArchs)(int* archs);

  std::string version() const;              // "13.0"
  std::vector<int> supported_archs() const;  // {75, 80, ...}; empty when unknown
};

// Opens NVRTC (nvrtc_candidates()) and resolves its entry points. Uncached. Throws Error.
NvrtcApi load_nvrtc();

// The process-wide NVRTC, loaded on first use; a failed load throws the same error every call.
const NvrtcApi& nvrtc();

}  // namespace spikejit::runtime
