// The CUDA runtime layer behind spikejit::cuda: NVRTC compilation and the JIT cache.
// Nothing here needs a GPU; compiling needs an NVRTC library (found at run time, see
// docs/runtime.md for the search order and the environment variables).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spikejit/error.h"

namespace spikejit::runtime {

// A CUDA driver call failed. `result()` is the CUresult code.
class CudaError : public Error {
 public:
  CudaError(const std::string& message, int result) : Error(message), result_(result) {}
  int result() const { return result_; }

 private:
  int result_;
};

// NVRTC rejected a kernel. The message names the kernel and carries the NVRTC log, the
// options and the line-numbered source.
class CompileError : public Error {
 public:
  CompileError(const std::string& message, std::string log) : Error(message), log_(std::move(log)) {}
  const std::string& log() const { return log_; }

 private:
  std::string log_;
};

// Compiles one CUDA C++ translation unit with NVRTC into a cubin for `arch` ("sm_80", "sm_90",
// ...). `entry` is the kernel's symbol, used in error messages. Throws Error when NVRTC cannot
// be opened and CompileError when compilation fails. No cache.
std::string compile_for_arch(const std::string& source, const std::string& entry,
                             const std::string& arch);

// "13.0": the version of the NVRTC library in use. Throws Error when none can be opened.
std::string nvrtc_version();

// The on-disk kernel cache. Its folder is $SPIKEJIT_CACHE_DIR, else $XDG_CACHE_HOME/spikejit,
// else ~/.cache/spikejit; SPIKEJIT_CACHE=0 turns it off. The environment is read on each call.
struct CacheEntry {
  std::string key;     // 64 hex digits: SHA-256 of everything that affects the binary
  std::string label;   // what the entry holds: "<neuron> <kernel kind> <dtype> <arch>"
  std::string path;
  uint64_t size = 0;   // bytes on disk
  int64_t mtime = 0;   // seconds since the epoch
  bool valid = false;  // header, length and checksum verified
};

struct CacheInfo {
  std::string directory;  // the folder in use (or that would be used)
  bool enabled = true;    // false when SPIKEJIT_CACHE=0 or the folder is not usable
  std::string problem;    // why the disk cache was last skipped (unwritable folder, ...), or ""
  // Counts for this process.
  uint64_t memory_hits = 0, disk_hits = 0, compiles = 0, corrupt_entries = 0, disk_writes = 0;
};

std::string cache_directory();
std::vector<CacheEntry> cache_entries();  // sorted by key
uint64_t cache_size();                    // total bytes of the entries
size_t cache_clear();                     // removes every entry; returns how many
CacheInfo cache_info();

// Neuron programs by name in the same folder: for a graph that names a program by a handle (a
// PyTorch program exported with spikejit's ops) and runs in another process. remember_program
// stores `text` (a canonical neuron text) under `name`: "" when stored or already there, else
// why not (the cache turned off, no folder, a write that failed). recall_program returns the
// text stored under `name`, or "" when there is none (a damaged entry is none).
std::string remember_program(const std::string& name, const std::string& label, const std::string& text);
std::string recall_program(const std::string& name);

}  // namespace spikejit::runtime
