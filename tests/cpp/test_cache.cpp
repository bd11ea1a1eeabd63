// The kernel cache on disk: entry format, atomic writes under concurrency, listing, clearing,
// problems with the folder, and the disk-or-compile path.
#include <gtest/gtest.h>

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/disk_cache.h"
#include "runtime/kernel_cache.h"
#include "runtime/nvrtc_api.h"
#include "spikejit/runtime.h"
#include "spikejit/codegen.h"
#include "spikejit/error.h"
#include "support/scoped_env.h"
#include "support/test_neurons.h"

namespace spikejit::runtime {
namespace {

using testing::ScopedEnv;

const std::string kKey(64, 'c');  // an entry's key (it is part of the checksum)

std::string random_bytes(std::mt19937_64& rng, size_t size) {
  std::string s(size, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

std::string random_key(std::mt19937_64& rng) {
  const char* hex = "0123456789abcdef";
  std::string key;
  for (int i = 0; i < 64; ++i) key += hex[rng() % 16];
  return key;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> names_in(const std::string& folder) {
  std::vector<std::string> names;
  if (DIR* dir = opendir(folder.c_str())) {
    while (const dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(dir);
  }
  return names;
}

class CacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device device;
    seed_ = (static_cast<uint64_t>(device()) << 32) | device();
    rng_.seed(seed_);
    char dir[] = "/tmp/spikejit-cache-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    root_ = dir;
  }
  void TearDown() override {
    nftw(root_.c_str(), [](const char* path, const struct stat*, int, FTW*) { return remove(path); },
         16, FTW_DEPTH | FTW_PHYS);
  }
  std::string trace() const { return "seed " + std::to_string(seed_) + ", dir " + root_; }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::string root_;
};

TEST_F(CacheTest, EncodeDecodeRoundTrip) {
  SCOPED_TRACE(trace());
  for (size_t size : {size_t(0), size_t(1), size_t(1 + rng_() % 100), size_t(4096 + rng_() % 100000)}) {
    const std::string label = random_bytes(rng_, rng_() % 64);
    const std::string payload = random_bytes(rng_, size);
    DecodedEntry decoded;
    ASSERT_TRUE(decode_entry(encode_entry(kKey, label, payload), kKey, &decoded)) << size;
    EXPECT_EQ(decoded.label, label);
    EXPECT_EQ(decoded.payload, payload);
  }
}

TEST_F(CacheTest, EveryTruncationIsRejected) {
  SCOPED_TRACE(trace());
  const std::string bytes = encode_entry(kKey, "label", random_bytes(rng_, 1 + rng_() % 200));
  DecodedEntry decoded;
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(decode_entry(bytes.substr(0, n), kKey, &decoded)) << "prefix of " << n << " bytes";
  }
  EXPECT_FALSE(decode_entry(bytes + "x", kKey, &decoded)) << "a trailing byte";
}

TEST_F(CacheTest, EveryFlippedByteIsRejected) {
  SCOPED_TRACE(trace());
  const std::string bytes = encode_entry(kKey, "lif inference", random_bytes(rng_, 1 + rng_() % 200));
  DecodedEntry decoded;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ (1 + rng_() % 255));
    EXPECT_FALSE(decode_entry(bad, kKey, &decoded)) << "byte " << i << " changed";
  }
}

TEST_F(CacheTest, AnEntryOfAnotherKeyIsRejected) {
  // A file copied or renamed onto another key's name must not be taken for that key's binary.
  SCOPED_TRACE(trace());
  const std::string bytes = encode_entry(kKey, "lif inference", random_bytes(rng_, 1 + rng_() % 200));
  std::string other = kKey;
  other[rng_() % other.size()] = other[0] == 'a' ? 'b' : 'a';
  DecodedEntry decoded;
  EXPECT_TRUE(decode_entry(bytes, kKey, &decoded));
  EXPECT_FALSE(decode_entry(bytes, other, &decoded));
}

TEST_F(CacheTest, LengthsThatWrapAroundAreRejected) {
  // label length + payload length overflowing 64 bits to the body's size: invalid, no throw.
  SCOPED_TRACE(trace());
  std::string bytes = encode_entry(kKey, "label", random_bytes(rng_, 40));
  const uint64_t body = bytes.size() - 60, label = body + 1, payload = ~uint64_t{0};
  for (int i = 0; i < 4; ++i) bytes[16 + i] = static_cast<char>((label >> (8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) bytes[20 + i] = static_cast<char>((payload >> (8 * i)) & 0xff);
  DecodedEntry decoded;
  EXPECT_FALSE(decode_entry(bytes, kKey, &decoded));
}

TEST_F(CacheTest, OtherFormatVersionIsRejected) {
  SCOPED_TRACE(trace());
  std::string bytes = encode_entry(kKey, "x", random_bytes(rng_, 32));
  bytes[12] = static_cast<char>(kCacheFormat + 1);  // low byte of the u32 format
  DecodedEntry decoded;
  EXPECT_FALSE(decode_entry(bytes, kKey, &decoded));
}

TEST_F(CacheTest, KeyChangesWithEveryComponent) {
  SCOPED_TRACE(trace());
  const CacheKeyParts base{random_bytes(rng_, 300), "spikejit_lif_inference", "sm_90", "13.0",
                           {"--gpu-architecture=sm_90", "-std=c++17", "--fmad=false"}};
  const std::string key = cache_key(base);
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(cache_key(base), key) << "the key must be deterministic";
  std::vector<CacheKeyParts> variants(6, base);
  variants[0].source[rng_() % base.source.size()] ^= 1;
  variants[1].entry += "_";
  variants[2].target = "sm_80";
  variants[3].compiler = "nvrtc 12.8";
  variants[4].options[2] = "--fmad=true";
  variants[5].options.push_back("--include-path=/x");
  std::set<std::string> keys = {key};
  for (const CacheKeyParts& v : variants) keys.insert(cache_key(v));
  EXPECT_EQ(keys.size(), variants.size() + 1);
}

// Kernels with bit rows (packed outputs, spikes saved as bits) are other binaries: their specs,
// entries and sources differ, so both the memory key (spec.key()) and the disk key do.
TEST_F(CacheTest, PackedSpikeKernelsHaveTheirOwnKeys) {
  const Program two = testing::test_neuron("two_thresholds");
  const Program mixed = testing::test_neuron("mixed_outputs");
  std::vector<std::pair<const Program*, codegen::KernelSpec>> specs;
  for (codegen::KernelKind kind : {codegen::KernelKind::Inference, codegen::KernelKind::TrainingForward}) {
    codegen::KernelSpec plain;
    plain.kind = kind;
    codegen::KernelSpec packed = plain;
    packed.packed_outputs = {true, true};
    specs.push_back({&mixed, plain});
    specs.push_back({&mixed, packed});
  }
  for (codegen::KernelKind kind : {codegen::KernelKind::TrainingForward, codegen::KernelKind::Backward}) {
    codegen::KernelSpec plain;
    plain.kind = kind;
    codegen::KernelSpec bits = plain;
    bits.pack_spikes = true;
    specs.push_back({&two, plain});
    specs.push_back({&two, bits});
  }
  std::set<std::string> memory_keys, disk_keys;
  for (const auto& [program, spec] : specs) {
    const codegen::KernelSource k = codegen::generate(*program, spec);
    memory_keys.insert(program->hash() + spec.key());
    disk_keys.insert(cache_key({k.source, k.entry, "sm_90", "13.0", {"--gpu-architecture=sm_90"}}));
  }
  EXPECT_EQ(memory_keys.size(), specs.size());
  EXPECT_EQ(disk_keys.size(), specs.size());
}

TEST_F(CacheTest, StoreThenLoadLeavesNoTempFiles) {
  SCOPED_TRACE(trace());
  const DiskCache cache(root_ + "/nested/dir");
  const std::string key = random_key(rng_), payload = random_bytes(rng_, 1000 + rng_() % 5000);
  DecodedEntry entry;
  bool corrupt = true;
  EXPECT_FALSE(cache.load(key, &entry, &corrupt));
  EXPECT_FALSE(corrupt) << "a missing entry is a plain miss";
  ASSERT_EQ(cache.store(key, "neuron lif", payload), "");
  ASSERT_TRUE(cache.load(key, &entry, &corrupt));
  EXPECT_EQ(entry.payload, payload);
  EXPECT_EQ(entry.label, "neuron lif");
  EXPECT_EQ(names_in(cache.folder()), std::vector<std::string>{key + ".bin"});
}

TEST_F(CacheTest, CorruptOrTruncatedEntryIsAMissAndIsOverwritten) {
  SCOPED_TRACE(trace());
  const DiskCache cache(root_);
  const std::string key = random_key(rng_), payload = random_bytes(rng_, 500 + rng_() % 500);
  ASSERT_EQ(cache.store(key, "l", payload), "");
  const std::string good = read_all(cache.entry_path(key));
  std::string flipped = good;
  flipped[good.size() - 1 - rng_() % payload.size()] ^= 0x10;
  for (const std::string& bad : {flipped, good.substr(0, good.size() - 1 - rng_() % 400),
                                 std::string("garbage")}) {
    write_all(cache.entry_path(key), bad);
    DecodedEntry entry;
    bool corrupt = false;
    EXPECT_FALSE(cache.load(key, &entry, &corrupt));
    EXPECT_TRUE(corrupt);
    ASSERT_EQ(cache.store(key, "l", payload), "");
    ASSERT_TRUE(cache.load(key, &entry, &corrupt));
    EXPECT_EQ(entry.payload, payload);
  }
}

TEST_F(CacheTest, AFifoOrFolderAtAnEntrysPathIsAMissNotARead) {
  // Reading a FIFO would block forever: only regular files are read.
  SCOPED_TRACE(trace());
  const DiskCache cache(root_);
  const std::string key = random_key(rng_), payload = random_bytes(rng_, 100);
  ASSERT_EQ(cache.store(key, "l", random_bytes(rng_, 10)), "");  // makes the folder
  for (bool fifo : {false, true}) {
    unlink(cache.entry_path(key).c_str());
    ASSERT_EQ(fifo ? mkfifo(cache.entry_path(key).c_str(), 0644) : mkdir(cache.entry_path(key).c_str(), 0755), 0);
    DecodedEntry entry;
    bool corrupt = false;
    EXPECT_FALSE(cache.load(key, &entry, &corrupt));
    EXPECT_TRUE(corrupt);
    const std::vector<CacheEntry> listed = cache.entries();
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_FALSE(listed[0].valid);
    if (!fifo) {  // it would block the store: clear removes an empty folder
      EXPECT_EQ(cache.clear(), 1u);
      EXPECT_TRUE(cache.entries().empty());
    }
  }
  ASSERT_EQ(cache.store(key, "l", payload), "");  // over the FIFO
  DecodedEntry entry;
  bool corrupt = false;
  ASSERT_TRUE(cache.load(key, &entry, &corrupt));
  EXPECT_EQ(entry.payload, payload);
}

// Writers and readers of the same keys at once: a reader sees a miss or a whole entry that one
// writer wrote, never a partial or mixed one.
TEST_F(CacheTest, ConcurrentThreadsNeverExposePartialEntries) {
  SCOPED_TRACE(trace());
  const DiskCache cache(root_);
  std::vector<std::string> keys = {random_key(rng_), random_key(rng_), random_key(rng_)};
  std::vector<std::string> payloads;
  for (int i = 0; i < 6; ++i) payloads.push_back(random_bytes(rng_, 20000 + rng_() % 200000));
  const std::set<std::string> allowed(payloads.begin(), payloads.end());
  std::atomic<int> bad{0}, loads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 local(seed_ + t);
      for (int i = 0; i < 40; ++i) {
        const std::string& key = keys[local() % keys.size()];
        if (t % 2 == 0) {
          if (!cache.store(key, "k", payloads[local() % payloads.size()]).empty()) bad++;
        } else {
          DecodedEntry entry;
          bool corrupt = false;
          if (cache.load(key, &entry, &corrupt)) {
            loads++;
            if (!allowed.count(entry.payload)) bad++;
          }
          if (corrupt) bad++;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
  for (const std::string& key : keys) {
    DecodedEntry entry;
    bool corrupt = false;
    ASSERT_TRUE(cache.load(key, &entry, &corrupt));
    EXPECT_TRUE(allowed.count(entry.payload));
  }
  EXPECT_EQ(names_in(cache.folder()).size(), keys.size()) << "temp files were left behind";
}

TEST_F(CacheTest, ConcurrentProcessesNeverExposePartialEntries) {
  SCOPED_TRACE(trace());
  const DiskCache cache(root_);
  const std::vector<std::string> keys = {random_key(rng_), random_key(rng_)};
  std::vector<std::string> payloads;
  for (int i = 0; i < 4; ++i) payloads.push_back(random_bytes(rng_, 50000 + rng_() % 300000));
  std::vector<pid_t> children;
  for (int p = 0; p < 6; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::mt19937_64 local(seed_ + 100 + p);
      int status = 0;
      for (int i = 0; i < 30; ++i) {
        const std::string& key = keys[local() % keys.size()];
        if (!cache.store(key, "p", payloads[local() % payloads.size()]).empty()) status = 1;
        DecodedEntry entry;
        bool corrupt = false;
        if (!cache.load(keys[local() % keys.size()], &entry, &corrupt) && corrupt) status = 2;
      }
      _exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = -1;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  const std::set<std::string> allowed(payloads.begin(), payloads.end());
  for (const std::string& key : keys) {
    DecodedEntry entry;
    bool corrupt = false;
    ASSERT_TRUE(cache.load(key, &entry, &corrupt));
    EXPECT_TRUE(allowed.count(entry.payload));
  }
  EXPECT_EQ(names_in(cache.folder()).size(), keys.size()) << "temp files were left behind";
}

TEST_F(CacheTest, ListSizeAndClearThroughThePublicFunctions) {
  SCOPED_TRACE(trace());
  ScopedEnv dir("SPIKEJIT_CACHE_DIR", root_.c_str());
  const DiskCache cache(root_);
  std::set<std::string> keys;
  uint64_t total = 0;
  const int count = 2 + static_cast<int>(rng_() % 5);
  for (int i = 0; i < count; ++i) {
    const std::string key = random_key(rng_);
    ASSERT_EQ(cache.store(key, "entry " + std::to_string(i), random_bytes(rng_, rng_() % 3000)), "");
    keys.insert(key);
    total += read_all(cache.entry_path(key)).size();
  }
  write_all(cache.folder() + "/not-an-entry.txt", "ignored");
  EXPECT_EQ(cache_directory(), root_);
  std::vector<CacheEntry> entries = cache_entries();
  ASSERT_EQ(entries.size(), keys.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_TRUE(keys.count(entries[i].key));
    EXPECT_TRUE(entries[i].valid);
    EXPECT_EQ(entries[i].label.rfind("entry ", 0), 0u) << entries[i].label;
    EXPECT_EQ(entries[i].path, cache.entry_path(entries[i].key));
    EXPECT_GT(entries[i].mtime, 0);
    if (i > 0) {
      EXPECT_LT(entries[i - 1].key, entries[i].key);
    }
  }
  EXPECT_EQ(cache_size(), total);

  // A damaged entry is still listed, as invalid.
  const std::string damaged = *keys.begin();
  write_all(cache.entry_path(damaged), "broken");
  entries = cache_entries();
  ASSERT_EQ(entries.size(), keys.size());
  EXPECT_EQ(entries[0].key, damaged);
  EXPECT_FALSE(entries[0].valid);

  EXPECT_EQ(cache_clear(), keys.size());
  EXPECT_TRUE(cache_entries().empty());
  EXPECT_EQ(cache_size(), 0u);
  EXPECT_EQ(names_in(cache.folder()), std::vector<std::string>{"not-an-entry.txt"});
}

TEST_F(CacheTest, ProgramsAreRememberedByNameAndRecalled) {
  SCOPED_TRACE(trace());
  ScopedEnv dir("SPIKEJIT_CACHE_DIR", root_.c_str());
  ScopedEnv on("SPIKEJIT_CACHE", nullptr);
  const std::string name = std::to_string(rng_());
  const std::string text = "neuron n\ninput x\noutput y\ny = x * " + std::to_string(rng_() % 1000) + "\n";
  EXPECT_EQ(recall_program(name), "");
  EXPECT_EQ(remember_program(name, "program " + name, text), "");
  EXPECT_EQ(remember_program(name, "program " + name, text), "");  // already there
  EXPECT_EQ(recall_program(name), text);
  EXPECT_EQ(recall_program(name + "0"), "");  // another name
  std::vector<CacheEntry> entries = cache_entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].label, "program " + name);

  write_all(entries[0].path, "broken");  // a damaged entry is none, and is written again
  EXPECT_EQ(recall_program(name), "");
  EXPECT_EQ(remember_program(name, "program " + name, text), "");
  EXPECT_EQ(recall_program(name), text);

  ScopedEnv off("SPIKEJIT_CACHE", "0");
  EXPECT_EQ(recall_program(name), "");
  EXPECT_EQ(remember_program(name, "program " + name, text), "the disk cache is turned off (SPIKEJIT_CACHE=0)");
}

TEST_F(CacheTest, UnwritableFolderIsReportedNotThrown) {
  SCOPED_TRACE(trace());
  write_all(root_ + "/a-file", "x");
  const DiskCache cache(root_ + "/a-file/cache");
  const std::string problem = cache.store(random_key(rng_), "l", "payload");
  EXPECT_NE(problem, "");
  EXPECT_NE(problem.find(root_ + "/a-file"), std::string::npos) << problem;
  DecodedEntry entry;
  bool corrupt = false;
  EXPECT_FALSE(cache.load(random_key(rng_), &entry, &corrupt));
  EXPECT_FALSE(corrupt);
}

TEST_F(CacheTest, FolderComesFromTheEnvironment) {
  ScopedEnv cache("SPIKEJIT_CACHE_DIR", "/a/spikejit-dir");
  ScopedEnv xdg("XDG_CACHE_HOME", "/b/xdg");
  ScopedEnv home("HOME", "/c/home");
  EXPECT_EQ(default_cache_root(), "/a/spikejit-dir");
  unsetenv("SPIKEJIT_CACHE_DIR");
  EXPECT_EQ(default_cache_root(), "/b/xdg/spikejit");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(default_cache_root(), "/c/home/.cache/spikejit");
  unsetenv("HOME");
  EXPECT_EQ(default_cache_root(), "");
}

// ---------------------------------------------------------------------------------------------
// The disk-or-compile path (needs NVRTC, not a GPU).

bool have_nvrtc(std::string* why) {
  try {
    nvrtc();
    return true;
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
}

#define REQUIRE_NVRTC()                                                     \
  do {                                                                      \
    std::string why;                                                        \
    if (!have_nvrtc(&why)) {                                                \
      const char* must = std::getenv("SPIKEJIT_REQUIRE_CUDA");              \
      if (must && std::string(must) == "1") {                               \
        FAIL() << why;                                                      \
      }                                                                     \
      GTEST_SKIP() << why;                                                  \
    }                                                                       \
  } while (0)

codegen::KernelSource test_kernel(uint64_t seed) {
  codegen::KernelSource k;
  k.entry = "cache_test_" + std::to_string(seed % 1000000);
  k.source = "extern \"C\" __global__ void " + k.entry + "(float* x) { x[threadIdx.x] *= " +
             std::to_string(seed % 977) + ".0f; }\n";
  return k;
}

// A whole entry that its user cannot use (a library that does not load) is made again and
// replaced; a fresh binary its user refuses is not stored.
TEST_F(CacheTest, AnEntryItsUserRefusesIsMadeAgainAndARefusedBinaryIsNotStored) {
  SCOPED_TRACE(trace());
  ScopedEnv dir("SPIKEJIT_CACHE_DIR", root_.c_str());
  ScopedEnv on("SPIKEJIT_CACHE", nullptr);
  const CacheKeyParts parts{random_bytes(rng_, 100), "entry", "host-test", "test 1.0", {}};
  int compiles = 0;
  const auto make = [&] { ++compiles; return std::string("good"); };
  const auto use = [](const std::string& bytes) {
    if (bytes != "good") throw Error("cannot load '" + bytes + "'");
  };
  EXPECT_EQ(cached_binary(parts, "test", make, use), "good");
  ASSERT_EQ(DiskCache(root_).store(cache_key(parts), "test", "junk"), "");  // whole, checksummed, unusable
  const CacheInfo before = cache_info();
  EXPECT_EQ(cached_binary(parts, "test", make, use), "good");
  EXPECT_EQ(compiles, 2);
  EXPECT_EQ(cache_info().corrupt_entries, before.corrupt_entries + 1);
  DecodedEntry entry;
  bool corrupt = false;
  ASSERT_TRUE(DiskCache(root_).load(cache_key(parts), &entry, &corrupt));
  EXPECT_EQ(entry.payload, "good");

  const CacheKeyParts other{random_bytes(rng_, 100), "entry", "host-test", "test 1.0", {}};
  EXPECT_THROW(cached_binary(other, "test", [] { return std::string("junk"); }, use), Error);
  EXPECT_FALSE(DiskCache(root_).load(cache_key(other), &entry, &corrupt));
  EXPECT_FALSE(corrupt) << "a refused binary was stored";
}

TEST_F(CacheTest, BinaryIsCompiledOnceThenReadFromDiskAndRebuiltWhenCorrupt) {
  REQUIRE_NVRTC();
  SCOPED_TRACE(trace());
  ScopedEnv dir("SPIKEJIT_CACHE_DIR", root_.c_str());
  ScopedEnv on("SPIKEJIT_CACHE", nullptr);
  const codegen::KernelSource k = test_kernel(seed_);
  const CacheInfo before = cache_info();
  const std::string first = binary_for(k, "sm_90", "test kernel");
  const CacheInfo after_first = cache_info();
  EXPECT_EQ(after_first.compiles, before.compiles + 1);
  EXPECT_EQ(after_first.disk_writes, before.disk_writes + 1);
  EXPECT_TRUE(after_first.enabled) << after_first.problem;

  EXPECT_EQ(binary_for(k, "sm_90", "test kernel"), first);
  const CacheInfo after_second = cache_info();
  EXPECT_EQ(after_second.compiles, after_first.compiles) << "a warm disk cache recompiled";
  EXPECT_EQ(after_second.disk_hits, after_first.disk_hits + 1);

  std::vector<CacheEntry> entries = cache_entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].label, "test kernel");
  std::string bytes = read_all(entries[0].path);
  bytes[bytes.size() / 2] ^= 0x40;
  write_all(entries[0].path, bytes);
  EXPECT_EQ(binary_for(k, "sm_90", "test kernel"), first);
  const CacheInfo after_corrupt = cache_info();
  EXPECT_EQ(after_corrupt.corrupt_entries, after_second.corrupt_entries + 1);
  EXPECT_EQ(after_corrupt.compiles, after_second.compiles + 1);
  entries = cache_entries();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_TRUE(entries[0].valid) << "the corrupt entry was not rewritten";

  // Another target is another entry.
  binary_for(k, "sm_80", "test kernel 80");
  EXPECT_EQ(cache_entries().size(), 2u);
}

TEST_F(CacheTest, UnwritableCacheFolderStillCompilesAndSaysWhy) {
  REQUIRE_NVRTC();
  SCOPED_TRACE(trace());
  write_all(root_ + "/a-file", "x");
  const std::string dir = root_ + "/a-file/cache";
  ScopedEnv env("SPIKEJIT_CACHE_DIR", dir.c_str());
  ScopedEnv on("SPIKEJIT_CACHE", nullptr);
  const std::string binary = binary_for(test_kernel(seed_), "sm_90", "test kernel");
  EXPECT_EQ(binary.substr(0, 4), std::string("\x7f" "ELF"));
  const CacheInfo info = cache_info();
  EXPECT_EQ(info.directory, dir);
  EXPECT_FALSE(info.enabled);
  EXPECT_NE(info.problem.find(root_ + "/a-file"), std::string::npos) << info.problem;
}

TEST_F(CacheTest, FailedCompilesNameTheKernelAndAreNotCached) {
  REQUIRE_NVRTC();
  SCOPED_TRACE(trace());
  ScopedEnv dir("SPIKEJIT_CACHE_DIR", root_.c_str());
  ScopedEnv on("SPIKEJIT_CACHE", nullptr);
  codegen::KernelSource k = test_kernel(seed_);
  k.source += "this is not C++;\n";
  const std::string label = "neuron lif" + std::to_string(seed_ % 1000) + ", kernel inference";
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      binary_for(k, "sm_90", label);
      FAIL() << "a broken kernel compiled";
    } catch (const CompileError& e) {
      EXPECT_NE(std::string(e.what()).find(label), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("    2 | this is not C++;"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(cache_entries().empty());
}

TEST_F(CacheTest, CacheOffWritesNothing) {
  REQUIRE_NVRTC();
  SCOPED_TRACE(trace());
  ScopedEnv dir("SPIKEJIT_CACHE_DIR", root_.c_str());
  ScopedEnv off("SPIKEJIT_CACHE", "0");
  const uint64_t compiles = cache_info().compiles;
  binary_for(test_kernel(seed_), "sm_90", "test kernel");
  binary_for(test_kernel(seed_), "sm_90", "test kernel");
  EXPECT_EQ(cache_info().compiles, compiles + 2);
  EXPECT_FALSE(cache_info().enabled);
  EXPECT_TRUE(names_in(root_).empty());
}

}  // namespace
}  // namespace spikejit::runtime
