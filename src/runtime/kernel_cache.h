// The kernel cache: memory (loaded functions per context) in front of disk (binaries) in front
// of NVRTC.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/disk_cache.h"
#include "runtime/driver_api.h"
#include "spikejit/codegen.h"
#include "spikejit/program.h"

namespace spikejit::runtime {

// A generated kernel source loaded into one context: one function per variant (and its
// reduction, when it has one). Modules stay loaded for the life of the process.
struct LoadedKernel {
  CUmodule module = nullptr;
  codegen::KernelSource source;             // buffer slots and variants (variants never empty)
  std::vector<CUfunction> functions;        // per variant
  std::vector<CUfunction> reduce_functions; // per variant; nullptr when it has no reduction
};

// The kernel of `spec` for `program` in `context`, which must be current on this thread and
// belong to `device`. Memory key: (program hash, spec key, device, context); a miss generates
// the source, then takes the binary from the disk cache or compiles it (and stores it), then
// loads it. Threads asking for the same key wait for one compile; other keys proceed.
std::shared_ptr<const LoadedKernel> kernel_for(const Program& program,
                                               const codegen::KernelSpec& spec, int device,
                                               CUcontext context);

// The binary that `parts` describe from the disk cache, else made by `compile` and stored.
// `label` describes it in the log and in the cache listing. Counted in cache_info().
// `use` (optional) puts the binary to use (loads it) and throws when it cannot: a cached entry
// it refuses counts as corrupt and is compiled again; a compiled binary it refuses is not
// stored, and its error propagates.
std::string cached_binary(const CacheKeyParts& parts, const std::string& label,
                          const std::function<std::string()>& compile,
                          const std::function<void(const std::string&)>& use = {});

// The binary (cubin or PTX) of `source` for `target` from the disk cache, else compiled with
// NVRTC and stored. `label` describes it in errors and in the cache listing.
std::string binary_for(const codegen::KernelSource& source, const std::string& target,
                       const std::string& label);

}  // namespace spikejit::runtime
