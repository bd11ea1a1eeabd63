// spikejit cache [list|size|clear]: the on-disk kernel cache.
#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <iostream>

#include "cli.h"
#include "commands.h"
#include "spikejit/error.h"
#include "spikejit/runtime.h"

namespace spikejit::cli {

static const char* const kCacheAbout =
    "usage: spikejit cache [list|size|clear]\n"
    "\n"
    "The on-disk cache of compiled kernels (CUDA, and the fused CPU steps). Its folder is $SPIKEJIT_CACHE_DIR, else\n"
    "$XDG_CACHE_HOME/spikejit, else ~/.cache/spikejit; SPIKEJIT_CACHE=0 turns it off.\n"
    "\n"
    "  list   one line per entry: key, size in bytes, modification time, what it holds\n"
    "         (entries that fail their checksum are marked INVALID; they are rebuilt on use)\n"
    "  size   the folder, the number of entries and their total size (the default)\n"
    "  clear  remove every entry\n";

// Why `folder` holds no cache ("" when it is a folder): nothing compiled yet, or not a folder.
static std::string folder_problem(const std::string& folder) {
  struct stat st;
  if (folder.empty()) return "no cache directory: set SPIKEJIT_CACHE_DIR, XDG_CACHE_HOME or HOME";
  if (stat(folder.c_str(), &st) != 0) return folder + " does not exist yet (nothing has been cached)";
  if (!S_ISDIR(st.st_mode)) return folder + " is not a directory: nothing can be cached there";
  return "";
}

static std::string format_time(int64_t seconds) {
  std::time_t t = static_cast<std::time_t>(seconds);
  std::tm parts{};
  localtime_r(&t, &parts);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &parts);
  return text;
}

int cmd_cache(int argc, char** argv) {
  const Args args(argc, argv, {});
  if (args.help()) {
    std::cout << kCacheAbout;
    return 0;
  }
  if (args.positional().size() > 1) throw UsageError("expected at most one action");
  const std::string action = args.positional().empty() ? "size" : args.positional()[0];
  if (action == "list") {
    for (const runtime::CacheEntry& e : runtime::cache_entries()) {
      std::cout << e.key << "  " << e.size << "  " << format_time(e.mtime) << "  "
                << (e.valid ? e.label : "INVALID") << "\n";
    }
  } else if (action == "size") {
    const std::vector<runtime::CacheEntry> entries = runtime::cache_entries();
    uint64_t bytes = 0;
    for (const runtime::CacheEntry& e : entries) bytes += e.size;
    const runtime::CacheInfo info = runtime::cache_info();
    std::cout << "directory: " << info.directory << (info.enabled ? "" : " (disabled)") << "\n"
              << "entries: " << entries.size() << "\n"
              << "bytes: " << bytes << "\n";
    const std::string problem = info.problem.empty() ? folder_problem(info.directory) : info.problem;
    if (!problem.empty()) std::cout << "problem: " << problem << "\n";
  } else if (action == "clear") {
    if (runtime::cache_directory().empty()) {
      throw Error("no cache directory: set SPIKEJIT_CACHE_DIR, XDG_CACHE_HOME or HOME");
    }
    const size_t removed = runtime::cache_clear();
    std::cout << "removed " << removed << (removed == 1 ? " entry" : " entries") << " from "
              << runtime::cache_directory() << "\n";
  } else {
    throw UsageError("unknown action '" + action + "' (expected list, size or clear)");
  }
  return 0;
}

}  // namespace spikejit::cli
