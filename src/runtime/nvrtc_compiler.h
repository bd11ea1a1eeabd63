// CUDA C++ -> cubin (or PTX) with NVRTC.
#pragma once

#include <string>
#include <vector>

namespace spikejit::runtime {

// What NVRTC is asked to produce: "sm_XY" (a cubin) or "compute_XY" (PTX the driver finishes).
// A device whose architecture NVRTC does not know gets PTX for the newest one NVRTC knows below
// it; one NVRTC knows gets a cubin (cubins are preferred: NVRTC's PTX may need a newer driver).
std::string target_for_device(int major, int minor);

// The exact NVRTC options for `target` and `source` (part of the disk cache key):
// --gpu-architecture, -std=c++17, --fmad=false (no contraction, so results match the CPU
// executor's separately rounded operations), and --include-path when the source includes
// headers. No fast-math options.
std::vector<std::string> compile_options(const std::string& target, const std::string& source);

// Compiles with compile_options(); returns the cubin (sm_) or NUL-terminated PTX (compute_).
// `what` names the kernel for messages ("neuron lif, kernel inference (<entry>)").
// Throws CompileError with the log, the options and the numbered source. `ptxas_report`
// (cubins; a tool's option, not the runtime's): ptxas also reports each entry's registers,
// spills and stack ("ptxas info : Used 40 registers ..." lines), which this receives.
std::string compile_cuda(const std::string& source, const std::string& target, const std::string& what,
                         std::string* ptxas_report = nullptr);

// The source with 1-based line numbers ("  12 | text").
std::string numbered_source(const std::string& source);

}  // namespace spikejit::runtime
