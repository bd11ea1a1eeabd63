// Memory cache of loaded kernels and the disk-or-compile path behind it.
#include "runtime/kernel_cache.h"

#include <atomic>
#include <functional>
#include <map>
#include <mutex>

#include "common/log.h"
#include "runtime/disk_cache.h"
#include "runtime/nvrtc_api.h"
#include "runtime/nvrtc_compiler.h"
#include "spikejit/runtime.h"

namespace spikejit::runtime {
namespace {

struct Stats {
  std::atomic<uint64_t> memory_hits{0}, disk_hits{0}, compiles{0}, corrupt_entries{0},
      disk_writes{0};
  std::mutex problem_mutex;
  std::string problem_root;  // the cache directory `problem` is about
  std::string problem;
};

Stats& stats() {
  static Stats s;
  return s;
}

// Records the outcome of the last write to the disk cache in `root` ("" problem: it worked),
// reported by cache_info() while `root` is the cache directory.
void note_disk_problem(const std::string& root, const std::string& problem) {
  std::lock_guard<std::mutex> lock(stats().problem_mutex);
  stats().problem_root = root;
  stats().problem = problem;
}

// One memory-cache key: filled once under its own mutex, so that a compile blocks only the
// threads that want the same kernel.
struct Slot {
  std::mutex mutex;
  std::shared_ptr<const LoadedKernel> kernel;
  std::string label;        // what the kernel is, for the log
  bool hit_logged = false;  // the first memory hit is logged at debug, every one at trace
};

std::string memory_key(const Program& program, const codegen::KernelSpec& spec, int device,
                       CUcontext context) {
  return program.hash() + "|" + spec.key() + "|" + std::to_string(device) + "|" +
         std::to_string(reinterpret_cast<uintptr_t>(context));
}

std::shared_ptr<Slot> slot_for(const std::string& key) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<Slot>> slots;
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<Slot>& slot = slots[key];
  if (!slot) slot = std::make_shared<Slot>();
  return slot;
}

std::string target_for(int device) {
  const DriverApi& api = driver();
  CUdevice handle = 0;
  check_cuda(api.cuDeviceGet(&handle, device), "cuDeviceGet");
  int major = 0, minor = 0;
  check_cuda(api.cuDeviceGetAttribute(&major, kAttrComputeCapabilityMajor, handle),
             "cuDeviceGetAttribute");
  check_cuda(api.cuDeviceGetAttribute(&minor, kAttrComputeCapabilityMinor, handle),
             "cuDeviceGetAttribute");
  return target_for_device(major, minor);
}

CUfunction get_function(CUmodule module, const std::string& name, const std::string& label) {
  const DriverApi& api = driver();
  CUfunction function = nullptr;
  CUresult found = api.cuModuleGetFunction(&function, module, name.c_str());
  if (found != kCudaSuccess) {
    throw CudaError("cuModuleGetFunction(" + name + ") failed for " + label + ": " +
                        describe_result(api, found),
                    found);
  }
  return function;
}

std::shared_ptr<const LoadedKernel> load(codegen::KernelSource source, const std::string& binary,
                                         const std::string& label) {
  const DriverApi& api = driver();
  if (source.variants.empty()) {
    codegen::KernelVariant only;
    only.entry = source.entry;
    only.block_size = source.block_size;
    only.elements_per_thread = source.elements_per_thread;
    source.variants.push_back(only);
  }
  CUmodule module = nullptr;
  CUresult loaded = api.cuModuleLoadData(&module, binary.data());
  if (loaded != kCudaSuccess) {
    throw CudaError("cuModuleLoadData failed for " + label + ": " + describe_result(api, loaded),
                    loaded);
  }
  auto kernel = std::make_shared<LoadedKernel>();
  kernel->module = module;
  try {
    for (const codegen::KernelVariant& v : source.variants) {
      kernel->functions.push_back(get_function(module, v.entry, label));
      kernel->reduce_functions.push_back(
          v.reduce_entry.empty() ? nullptr : get_function(module, v.reduce_entry, label));
    }
  } catch (...) {
    api.cuModuleUnload(module);
    throw;
  }
  kernel->source = std::move(source);
  return kernel;
}

}  // namespace

std::string cached_binary(const CacheKeyParts& parts, const std::string& label,
                          const std::function<std::string()>& compile,
                          const std::function<void(const std::string&)>& use) {
  std::string root = disk_cache_enabled_by_env() ? default_cache_root() : "";
  if (!disk_cache_enabled_by_env()) {
    SPIKEJIT_LOG_AT(Level::Debug, "disk cache off (SPIKEJIT_CACHE=0): " << label);
  } else if (root.empty()) {
    const std::string problem = "no cache directory: set SPIKEJIT_CACHE_DIR, XDG_CACHE_HOME or HOME";
    SPIKEJIT_LOG_AT(Level::Warning, "disk cache not used: " << problem);
    note_disk_problem(root, problem);
  }
  std::string key = cache_key(parts);
  if (!root.empty()) {
    const DiskCache cache(root);
    DecodedEntry entry;
    bool corrupt = false;
    if (cache.load(key, &entry, &corrupt)) {
      try {
        if (use) use(entry.payload);
        stats().disk_hits++;
        SPIKEJIT_LOG_AT(Level::Debug, "disk cache hit: " << label << " (" << cache.entry_path(key) << ")");
        return entry.payload;
      } catch (const std::exception& e) {  // the entry is whole but cannot be used: made again
        stats().corrupt_entries++;
        SPIKEJIT_LOG_AT(Level::Warning, "disk cache entry " << cache.entry_path(key) << " cannot be used ("
                                            << e.what() << "); compiling " << label << " again");
      }
    } else if (corrupt) {
      stats().corrupt_entries++;
      SPIKEJIT_LOG_AT(Level::Warning, "disk cache entry " << cache.entry_path(key) << " is corrupt "
                                          << "(bad header, length or checksum); compiling " << label
                                          << " again");
    } else {
      SPIKEJIT_LOG_AT(Level::Debug, "disk cache miss: " << label << " (" << cache.entry_path(key) << ")");
    }
  }
  std::string binary = compile();
  stats().compiles++;
  if (use) use(binary);
  if (!root.empty()) {
    const DiskCache cache(root);
    std::string problem = cache.store(key, label, binary);
    if (problem.empty()) {
      stats().disk_writes++;
      SPIKEJIT_LOG_AT(Level::Debug, "disk cache write: " << cache.entry_path(key) << " ("
                                        << binary.size() << " bytes)");
    } else {
      SPIKEJIT_LOG_AT(Level::Warning, "disk cache not written: " << problem);
    }
    note_disk_problem(root, problem);
  }
  return binary;
}

std::string binary_for(const codegen::KernelSource& source, const std::string& target,
                       const std::string& label) {
  const NvrtcApi& api = nvrtc();
  const CacheKeyParts parts{source.source, source.entry, target, "nvrtc " + api.version(),
                            compile_options(target, source.source)};
  return cached_binary(parts, label, [&] { return compile_cuda(source.source, target, label); });
}

std::shared_ptr<const LoadedKernel> kernel_for(const Program& program,
                                               const codegen::KernelSpec& spec, int device,
                                               CUcontext context) {
  std::shared_ptr<Slot> slot = slot_for(memory_key(program, spec, device, context));
  std::lock_guard<std::mutex> lock(slot->mutex);
  if (slot->kernel) {
    stats().memory_hits++;
    if (log::enabled(log::Level::Trace) || (!slot->hit_logged && log::enabled(log::Level::Debug))) {
      log::write(slot->hit_logged ? log::Level::Trace : log::Level::Debug,
                 "memory cache hit: " + slot->label + ", device " + std::to_string(device) +
                     (slot->hit_logged ? "" : " (later hits are logged at SPIKEJIT_LOG=trace)"));
      slot->hit_logged = true;
    }
    return slot->kernel;
  }
  codegen::KernelSource source = codegen::generate(program, spec);
  std::string target = target_for(device);
  std::string label = "neuron " + program.neuron().name + ", kernel " + source.entry + " (" +
                      spec.key() + ", " + target + ")";
  SPIKEJIT_LOG_AT(Level::Debug, "memory cache miss: " << label << ", device " << device);
  slot->kernel = load(source, binary_for(source, target, label), label);
  slot->label = label;
  SPIKEJIT_LOG_AT(Level::Debug, "loaded " << label << " on device " << device);
  return slot->kernel;
}

CacheInfo cache_info() {
  CacheInfo info;
  info.directory = default_cache_root();
  info.enabled = disk_cache_enabled_by_env() && !info.directory.empty();
  {
    std::lock_guard<std::mutex> lock(stats().problem_mutex);
    if (stats().problem_root == info.directory) info.problem = stats().problem;
  }
  if (!disk_cache_enabled_by_env()) info.problem = "turned off by SPIKEJIT_CACHE=0";
  if (!info.problem.empty()) info.enabled = false;
  info.memory_hits = stats().memory_hits;
  info.disk_hits = stats().disk_hits;
  info.compiles = stats().compiles;
  info.corrupt_entries = stats().corrupt_entries;
  info.disk_writes = stats().disk_writes;
  return info;
}

}  // namespace spikejit::runtime
