// dlopen / dlsym with error messages that list everything that was tried.
#include "runtime/dynamic_library.h"

#include <dlfcn.h>
#include <link.h>

#include "common/log.h"
#include "spikejit/error.h"

namespace spikejit::runtime {

DynamicLibrary DynamicLibrary::open_first(const std::string& what,
                                          const std::vector<std::string>& candidates) {
  std::string tried;
  for (const std::string& candidate : candidates) {
    dlerror();
    if (void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      DynamicLibrary library(handle, candidate);
      SPIKEJIT_LOG_AT(Level::Info, "opened " << what << ": " << library.file());
      return library;
    }
    const char* error = dlerror();
    std::string reason = error ? error : "not found";
    // glibc repeats the name it was given; keep it once.
    if (reason.compare(0, candidate.size() + 2, candidate + ": ") == 0) {
      reason.erase(0, candidate.size() + 2);
    }
    tried += "\n  " + candidate + ": " + reason;
    SPIKEJIT_LOG_AT(Level::Debug, "looking for " << what << ": " << candidate << ": " << reason);
  }
  if (candidates.empty()) tried = "\n  (no candidates)";
  SPIKEJIT_LOG_AT(Level::Info, "cannot open " << what << ": tried " << candidates.size()
                                   << (candidates.size() == 1 ? " candidate" : " candidates")
                                   << " (SPIKEJIT_LOG=debug lists them)");
  throw Error("cannot open " + what + "; tried, in order:" + tried);
}

std::string DynamicLibrary::file() const {
  struct link_map* map = nullptr;
  if (dlinfo(handle_, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0]) {
    return map->l_name;
  }
  return path_;
}

void* DynamicLibrary::find_symbol(const char* name) const { return dlsym(handle_, name); }

void* DynamicLibrary::symbol(const char* name) const {
  if (void* address = find_symbol(name)) return address;
  throw Error(std::string("symbol ") + name + " not found in " + path_ +
              " (the library is too old or not the expected one)");
}

}  // namespace spikejit::runtime
