// Loading libnvrtc.
#include "runtime/nvrtc_api.h"

#include <optional>

#include "runtime/library_search.h"
#include "spikejit/error.h"

namespace spikejit::runtime {
namespace {

template <typename F>
void resolve(const DynamicLibrary& library, F& function, const char* name) {
  function = reinterpret_cast<F>(library.symbol(name));
}

template <typename F>
void resolve_optional(const DynamicLibrary& library, F& function, const char* name) {
  function = reinterpret_cast<F>(library.find_symbol(name));
}

}  // namespace

NvrtcApi load_nvrtc() {
  NvrtcApi api(DynamicLibrary::open_first("the NVRTC library (libnvrtc)", nvrtc_candidates()));
  const DynamicLibrary& l = api.library;
  resolve(l, api.nvrtcGetErrorString, "nvrtcGetErrorString");
  resolve(l, api.nvrtcVersion, "nvrtcVersion");
  resolve(l, api.nvrtcCreateProgram, "nvrtcCreateProgram");
  resolve(l, api.nvrtcDestroyProgram, "nvrtcDestroyProgram");
  resolve(l, api.nvrtcCompileProgram, "nvrtcCompileProgram");
  resolve(l, api.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
  resolve(l, api.nvrtcGetProgramLog, "nvrtcGetProgramLog");
  resolve(l, api.nvrtcGetCUBINSize, "nvrtcGetCUBINSize");
  resolve(l, api.nvrtcGetCUBIN, "nvrtcGetCUBIN");
  resolve(l, api.nvrtcGetPTXSize, "nvrtcGetPTXSize");
  resolve(l, api.nvrtcGetPTX, "nvrtcGetPTX");
  resolve_optional(l, api.nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs");
  resolve_optional(l, api.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs");
  return api;
}

const NvrtcApi& nvrtc() {
  static const std::pair<std::optional<NvrtcApi>, std::string> loaded = [] {
    try {
      return std::make_pair(std::optional<NvrtcApi>(load_nvrtc()), std::string());
    } catch (const Error& e) {
      return std::make_pair(std::optional<NvrtcApi>(), std::string(e.what()));
    }
  }();
  if (!loaded.first) throw Error(loaded.second);
  return *loaded.first;
}

std::string NvrtcApi::version() const {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != kNvrtcSuccess) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

std::vector<int> NvrtcApi::supported_archs() const {
  int count = 0;
  if (!nvrtcGetNumSupportedArchs || !nvrtcGetSupportedArchs ||
      nvrtcGetNumSupportedArchs(&count) != kNvrtcSuccess || count <= 0) {
    return {};
  }
  std::vector<int> archs(static_cast<size_t>(count));
  if (nvrtcGetSupportedArchs(archs.data()) != kNvrtcSuccess) return {};
  return archs;
}

}  // namespace spikejit::runtime
