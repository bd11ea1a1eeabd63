// NVRTC compilation with complete error reports.
#include "runtime/nvrtc_compiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/log.h"
#include "runtime/library_search.h"
#include "runtime/nvrtc_api.h"
#include "spikejit/error.h"
#include "spikejit/runtime.h"

namespace spikejit::runtime {
namespace {

// Destroys the program on every exit path.
class ProgramHandle {
 public:
  ProgramHandle(const NvrtcApi& api, nvrtcProgram program) : api_(api), program_(program) {}
  ~ProgramHandle() { api_.nvrtcDestroyProgram(&program_); }
  ProgramHandle(const ProgramHandle&) = delete;
  ProgramHandle& operator=(const ProgramHandle&) = delete;
  nvrtcProgram get() const { return program_; }

 private:
  const NvrtcApi& api_;
  nvrtcProgram program_;
};

std::string program_log(const NvrtcApi& api, nvrtcProgram program) {
  size_t size = 0;
  if (api.nvrtcGetProgramLogSize(program, &size) != kNvrtcSuccess || size == 0) return "";
  std::string log(size, '\0');
  if (api.nvrtcGetProgramLog(program, &log[0]) != kNvrtcSuccess) return "";
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& item : items) s += (s.empty() ? "" : " ") + item;
  return s;
}

bool is_valid_target(const std::string& target) {
  for (const char* prefix : {"sm_", "compute_"}) {
    std::string p(prefix);
    if (target.size() > p.size() && target.compare(0, p.size(), p) == 0) {
      std::string digits = target.substr(p.size());
      // Allow arch suffixes such as sm_90a.
      if (!digits.empty() && digits.back() >= 'a' && digits.back() <= 'z') digits.pop_back();
      return !digits.empty() &&
             std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    }
  }
  return false;
}

}  // namespace

std::string target_for_device(int major, int minor) {
  int arch = major * 10 + minor;
  std::vector<int> supported = nvrtc().supported_archs();
  if (supported.empty() || std::find(supported.begin(), supported.end(), arch) != supported.end()) {
    return "sm_" + std::to_string(arch);
  }
  int best = -1;
  for (int a : supported) {
    if (a <= arch) best = std::max(best, a);
  }
  if (best < 0) {
    throw Error("the GPU's architecture sm_" + std::to_string(arch) + " is older than every " +
                "architecture NVRTC " + nvrtc().version() + " (" + nvrtc().library.file() +
                ") supports; use an older NVRTC");
  }
  return "compute_" + std::to_string(best);
}

std::vector<std::string> compile_options(const std::string& target, const std::string& source) {
  std::vector<std::string> options = {"--gpu-architecture=" + target, "-std=c++17",
                                      "--fmad=false"};
  if (source.find("#include") != std::string::npos) {
    std::string dir = find_cuda_include_dir(nvrtc().library.file());
    if (!dir.empty()) options.push_back("--include-path=" + dir);
  }
  return options;
}

std::string numbered_source(const std::string& source) {
  std::string out;
  int line = 1;
  size_t start = 0;
  while (start < source.size()) {
    size_t end = source.find('\n', start);
    if (end == std::string::npos) end = source.size();
    char number[16];
    std::snprintf(number, sizeof number, "%5d | ", line++);
    out += number;
    out.append(source, start, end - start);
    out += '\n';
    start = end + 1;
  }
  return out;
}

std::string compile_cuda(const std::string& source, const std::string& target,
                         const std::string& what, std::string* ptxas_report) {
  if (!is_valid_target(target)) {
    throw ArgumentError("arch", "sm_<digits> or compute_<digits> (e.g. sm_90)", "'" + target + "'");
  }
  const NvrtcApi& api = nvrtc();
  std::vector<std::string> options = compile_options(target, source);
  if (ptxas_report != nullptr) options.push_back("--ptxas-options=-v");
  std::vector<const char*> option_ptrs;
  for (const std::string& o : options) option_ptrs.push_back(o.c_str());

  nvrtcProgram raw = nullptr;
  nvrtcResult created = api.nvrtcCreateProgram(&raw, source.c_str(), "spikejit_kernel.cu", 0,
                                               nullptr, nullptr);
  if (created != kNvrtcSuccess) {
    throw Error("nvrtcCreateProgram failed for " + what + ": " + api.nvrtcGetErrorString(created));
  }
  ProgramHandle program(api, raw);
  // Cold compiles take a fraction of a second each; report them so that a long first call is
  // explained (SPIKEJIT_LOG=info).
  SPIKEJIT_LOG_AT(Level::Info, "NVRTC compile started: " << what << " (NVRTC " << api.version()
                                   << ", " << joined(options) << ")");
  const auto started = std::chrono::steady_clock::now();
  nvrtcResult compiled =
      api.nvrtcCompileProgram(program.get(), static_cast<int>(option_ptrs.size()), option_ptrs.data());
  char milliseconds[32];
  std::snprintf(milliseconds, sizeof milliseconds, "%.1f",
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count());
  std::string log = program_log(api, program.get());
  if (compiled != kNvrtcSuccess) {
    SPIKEJIT_LOG_AT(Level::Info, "NVRTC compile failed: " << what << " after " << milliseconds
                                     << " ms: " << api.nvrtcGetErrorString(compiled));
    std::string message = "CUDA compilation failed for " + what + ": " +
                          api.nvrtcGetErrorString(compiled) + "\nNVRTC " + api.version() + " (" +
                          api.library.file() + "), options: " + joined(options) + "\n";
    if (source.find("#include") != std::string::npos &&
        find_cuda_include_dir(api.library.file()).empty()) {
      message += "CUDA headers (cuda_fp16.h) were not found; searched:";
      for (const std::string& dir : cuda_include_search_dirs(api.library.file())) {
        message += " " + dir;
      }
      message += " (set SPIKEJIT_CUDA_INCLUDE_PATH)\n";
    }
    message += "log:\n" + log + "\nsource:\n" + numbered_source(source);
    throw CompileError(message, log);
  }

  if (ptxas_report != nullptr) *ptxas_report = log;
  bool ptx = target.compare(0, 8, "compute_") == 0;
  size_t size = 0;
  nvrtcResult sized = ptx ? api.nvrtcGetPTXSize(program.get(), &size)
                          : api.nvrtcGetCUBINSize(program.get(), &size);
  std::string binary(size, '\0');
  nvrtcResult got = sized != kNvrtcSuccess ? sized
                    : ptx                   ? api.nvrtcGetPTX(program.get(), &binary[0])
                                            : api.nvrtcGetCUBIN(program.get(), &binary[0]);
  if (got != kNvrtcSuccess || size == 0) {
    throw Error("NVRTC produced no " + std::string(ptx ? "PTX" : "cubin") + " for " + what +
                ": " + api.nvrtcGetErrorString(got));
  }
  SPIKEJIT_LOG_AT(Level::Info, "NVRTC compile finished: " << what << " in " << milliseconds
                                   << " ms (" << (ptx ? "PTX" : "cubin") << ", " << size
                                   << " bytes)");
  return binary;
}

std::string compile_for_arch(const std::string& source, const std::string& entry,
                             const std::string& arch) {
  return compile_cuda(source, arch, "kernel " + entry + " (" + arch + ")");
}

std::string nvrtc_version() { return nvrtc().version(); }

}  // namespace spikejit::runtime
