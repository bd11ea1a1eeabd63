// The on-disk kernel cache: one checksummed file per key, written atomically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spikejit/runtime.h"

namespace spikejit::runtime {

// Bump when the entry layout or the meaning of the key changes, so that an older or newer
// spikejit never reads a payload it does not understand (the number is also the folder name).
constexpr uint32_t kCacheFormat = 2;

// Entry file layout, integers little-endian:
//   "SPIKEJITBIN\0" (12 bytes) | u32 format | u32 label length | u64 payload length |
//   32-byte SHA-256 of (key + label bytes + payload bytes) | label bytes | payload bytes
// The checksum covers the entry's key, so an entry under another key's name (a file copied or
// renamed in the folder) is no entry of that key.
std::string encode_entry(const std::string& key, const std::string& label, const std::string& payload);
struct DecodedEntry {
  std::string label;
  std::string payload;
};
// False (a miss) for a short, truncated, oversized, other-format, other-key or checksum-failing
// file.
bool decode_entry(const std::string& bytes, const std::string& key, DecodedEntry* out);

// Everything that affects the binary.
struct CacheKeyParts {
  std::string source;    // the generated C++ (covers neuron, kernel spec and generator)
  std::string entry;
  std::string target;    // "sm_90" / "compute_90" / "host-x86_64"
  std::string compiler;  // "nvrtc 13.0" / the host compiler's --version line
  std::vector<std::string> options;
};
// Hex SHA-256 of a manifest with one `name=value` line per part plus the cache format.
std::string cache_key(const CacheKeyParts& parts);

class DiskCache {
 public:
  explicit DiskCache(std::string root);  // entries live in <root>/v<kCacheFormat>/<key>.bin
  const std::string& root() const { return root_; }
  std::string folder() const;
  std::string entry_path(const std::string& key) const;

  // True on a valid entry. A present but invalid file sets *corrupt (it is a miss).
  bool load(const std::string& key, DecodedEntry* out, bool* corrupt) const;
  // Writes a temp file in the entry's folder, flushes it and renames it over the entry, so
  // readers see the old entry, no entry or the whole new one. "" on success, else the reason.
  std::string store(const std::string& key, const std::string& label,
                    const std::string& payload) const;
  std::vector<CacheEntry> entries() const;  // sorted by key; each one read and verified
  size_t clear() const;                     // removes entries (and stale temp files)

 private:
  std::string root_;
};

// $SPIKEJIT_CACHE_DIR, else $XDG_CACHE_HOME/spikejit, else $HOME/.cache/spikejit; "" when none
// of these is set.
std::string default_cache_root();
// False when SPIKEJIT_CACHE=0.
bool disk_cache_enabled_by_env();

}  // namespace spikejit::runtime
