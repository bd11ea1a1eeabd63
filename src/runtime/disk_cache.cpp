// Entry encoding, atomic writes and listing of the on-disk kernel cache.
#include "runtime/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>

#include "common/file_io.h"
#include "common/sha256.h"

namespace spikejit::runtime {
namespace {

constexpr char kMagic[12] = {'S', 'P', 'I', 'K', 'E', 'J', 'I', 'T', 'B', 'I', 'N', '\0'};
constexpr size_t kHeaderSize = 12 + 4 + 4 + 8 + 32;
constexpr const char* kEntrySuffix = ".bin";
constexpr const char* kTempPrefix = ".tmp.";
constexpr int64_t kStaleTempSeconds = 3600;

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t get_le(const std::string& in, size_t offset, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[offset + i])) << (8 * i);
  }
  return value;
}

std::string sha256_bytes(const std::string& data) {
  std::string hex = sha256_hex(data);
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::strtol(hex.substr(i, 2).c_str(), nullptr, 16)));
  }
  return bytes;
}

std::string system_error(const std::string& action, const std::string& path) {
  return action + " " + path + ": " + std::strerror(errno);
}

// mkdir -p; "" on success, else the reason.
std::string make_dirs(const std::string& path) {
  if (path.empty()) return "empty cache directory path";
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string prefix = path.substr(0, pos);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return system_error("cannot create directory", prefix);
    }
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return "cannot use " + path + " as the cache directory: not a directory";
  }
  return "";
}

bool is_key(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> folder_names(const std::string& folder) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(folder.c_str())) {
    while (const dirent* e = readdir(dir)) names.push_back(e->d_name);
    closedir(dir);
  }
  return names;
}

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

std::string encode_entry(const std::string& key, const std::string& label, const std::string& payload) {
  std::string out(kMagic, sizeof kMagic);
  put_le(out, kCacheFormat, 4);
  put_le(out, label.size(), 4);
  put_le(out, payload.size(), 8);
  out += sha256_bytes(key + label + payload);
  out += label;
  out += payload;
  return out;
}

bool decode_entry(const std::string& bytes, const std::string& key, DecodedEntry* out) {
  if (bytes.size() < kHeaderSize || bytes.compare(0, sizeof kMagic, kMagic, sizeof kMagic) != 0) {
    return false;
  }
  if (get_le(bytes, 12, 4) != kCacheFormat) return false;
  const uint64_t body_size = bytes.size() - kHeaderSize;
  const uint64_t label_size = get_le(bytes, 16, 4);
  const uint64_t payload_size = get_le(bytes, 20, 8);
  if (label_size > body_size || payload_size != body_size - label_size) return false;  // (no wrapping sum)
  std::string body = bytes.substr(kHeaderSize);
  if (sha256_bytes(key + body) != bytes.substr(28, 32)) return false;
  out->label = body.substr(0, label_size);
  out->payload = body.substr(label_size);
  return true;
}

std::string cache_key(const CacheKeyParts& parts) {
  std::string options;
  for (const std::string& o : parts.options) options += (options.empty() ? "" : " ") + o;
  std::string manifest = "format=" + std::to_string(kCacheFormat) + "\n" +
                         "entry=" + parts.entry + "\n" + "target=" + parts.target + "\n" +
                         "compiler=" + parts.compiler + "\n" + "options=" + options + "\n" +
                         "source=" + sha256_hex(parts.source) + "\n";
  return sha256_hex(manifest);
}

DiskCache::DiskCache(std::string root) : root_(std::move(root)) {}

std::string DiskCache::folder() const { return root_ + "/v" + std::to_string(kCacheFormat); }

std::string DiskCache::entry_path(const std::string& key) const {
  return folder() + "/" + key + kEntrySuffix;
}

bool DiskCache::load(const std::string& key, DecodedEntry* out, bool* corrupt) const {
  *corrupt = false;
  std::string bytes;
  struct stat st;
  if (stat(entry_path(key).c_str(), &st) != 0) return false;
  // Not a regular file (a folder, a FIFO that would block the read): no entry, rewritten over.
  if (S_ISREG(st.st_mode) && read_file(entry_path(key), &bytes) && decode_entry(bytes, key, out)) return true;
  *corrupt = true;
  return false;
}

std::string DiskCache::store(const std::string& key, const std::string& label,
                             const std::string& payload) const {
  std::string problem = make_dirs(folder());
  if (!problem.empty()) return problem;
  std::random_device random;
  std::string temp = folder() + "/" + kTempPrefix + key + "." + std::to_string(getpid()) + "." +
                     std::to_string(random()) + std::to_string(random());
  int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return system_error("cannot create", temp);
  bool written = write_all(fd, encode_entry(key, label, payload)) && fsync(fd) == 0;
  std::string reason = written ? "" : system_error("cannot write", temp);
  if (close(fd) != 0 && reason.empty()) reason = system_error("cannot close", temp);
  if (reason.empty() && rename(temp.c_str(), entry_path(key).c_str()) != 0) {
    reason = system_error("cannot rename " + temp + " to", entry_path(key));
  }
  if (!reason.empty()) unlink(temp.c_str());
  return reason;
}

std::vector<CacheEntry> DiskCache::entries() const {
  std::vector<CacheEntry> list;
  for (const std::string& name : folder_names(folder())) {
    if (!ends_with(name, kEntrySuffix)) continue;
    std::string key = name.substr(0, name.size() - std::strlen(kEntrySuffix));
    if (!is_key(key)) continue;
    CacheEntry entry;
    entry.key = key;
    entry.path = entry_path(key);
    struct stat st;
    if (stat(entry.path.c_str(), &st) != 0) continue;  // removed meanwhile
    entry.size = static_cast<uint64_t>(st.st_size);
    entry.mtime = static_cast<int64_t>(st.st_mtime);
    std::string bytes;
    DecodedEntry decoded;
    entry.valid = S_ISREG(st.st_mode) && read_file(entry.path, &bytes) && decode_entry(bytes, key, &decoded);
    entry.label = entry.valid ? decoded.label : "";
    list.push_back(entry);
  }
  std::sort(list.begin(), list.end(),
            [](const CacheEntry& a, const CacheEntry& b) { return a.key < b.key; });
  return list;
}

size_t DiskCache::clear() const {
  size_t removed = 0;
  int64_t now = static_cast<int64_t>(std::time(nullptr));
  for (const std::string& name : folder_names(folder())) {
    std::string path = folder() + "/" + name;
    if (name.compare(0, std::strlen(kTempPrefix), kTempPrefix) == 0) {
      // Another process may be about to rename this one: only remove old leftovers.
      struct stat st;
      if (stat(path.c_str(), &st) == 0 && now - st.st_mtime > kStaleTempSeconds) unlink(path.c_str());
      continue;
    }
    if (!ends_with(name, kEntrySuffix) || !is_key(name.substr(0, name.size() - std::strlen(kEntrySuffix)))) continue;
    // An empty folder at an entry's path (never ours) would block that entry's store: it goes
    // too. A folder with contents is left, listed as invalid.
    if (unlink(path.c_str()) == 0 || (errno == EISDIR && rmdir(path.c_str()) == 0)) ++removed;
  }
  return removed;
}

std::string default_cache_root() {
  if (!env("SPIKEJIT_CACHE_DIR").empty()) return env("SPIKEJIT_CACHE_DIR");
  if (!env("XDG_CACHE_HOME").empty()) return env("XDG_CACHE_HOME") + "/spikejit";
  if (!env("HOME").empty()) return env("HOME") + "/.cache/spikejit";
  return "";
}

bool disk_cache_enabled_by_env() { return env("SPIKEJIT_CACHE") != "0"; }

std::string cache_directory() { return default_cache_root(); }

std::vector<CacheEntry> cache_entries() {
  std::string root = default_cache_root();
  return root.empty() ? std::vector<CacheEntry>() : DiskCache(root).entries();
}

uint64_t cache_size() {
  uint64_t bytes = 0;
  for (const CacheEntry& e : cache_entries()) bytes += e.size;
  return bytes;
}

size_t cache_clear() {
  std::string root = default_cache_root();
  return root.empty() ? 0 : DiskCache(root).clear();
}

}  // namespace spikejit::runtime
