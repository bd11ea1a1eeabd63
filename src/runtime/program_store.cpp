// Neuron programs by name in the disk cache (remember_program / recall_program in runtime.h).
#include <string>

#include "common/sha256.h"
#include "runtime/disk_cache.h"
#include "spikejit/runtime.h"

namespace spikejit::runtime {
namespace {

// A key of its own kind: no kernel's manifest starts with "program=".
std::string program_key(const std::string& name) {
  return sha256_hex("format=" + std::to_string(kCacheFormat) + "\nprogram=" + name + "\n");
}

// The cache's root, or "" with *problem set when there is none to use.
std::string usable_root(std::string* problem) {
  if (!disk_cache_enabled_by_env()) {
    *problem = "the disk cache is turned off (SPIKEJIT_CACHE=0)";
    return "";
  }
  std::string root = default_cache_root();
  if (root.empty()) *problem = "no cache folder: SPIKEJIT_CACHE_DIR, XDG_CACHE_HOME and HOME are unset";
  return root;
}

}  // namespace

std::string remember_program(const std::string& name, const std::string& label, const std::string& text) {
  std::string problem;
  std::string root = usable_root(&problem);
  if (root.empty()) return problem;
  DiskCache cache(root);
  const std::string key = program_key(name);
  DecodedEntry entry;
  bool corrupt = false;
  if (cache.load(key, &entry, &corrupt) && entry.payload == text) return "";
  return cache.store(key, label, text);
}

std::string recall_program(const std::string& name) {
  std::string problem;
  std::string root = usable_root(&problem);
  if (root.empty()) return "";
  DecodedEntry entry;
  bool corrupt = false;
  return DiskCache(root).load(program_key(name), &entry, &corrupt) ? entry.payload : "";
}

}  // namespace spikejit::runtime
