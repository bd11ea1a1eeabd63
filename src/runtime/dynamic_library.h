// Opening shared libraries at run time (dlopen) and resolving their symbols.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace spikejit::runtime {

// An opened shared library. Never closed: the CUDA libraries stay loaded for the life of the
// process (closing libcuda while modules or contexts exist is unsafe at exit).
class DynamicLibrary {
 public:
  // Opens the first candidate that loads (a bare soname goes through the loader's search path,
  // a path is opened as is). Throws spikejit::Error naming `what`, every candidate tried and
  // the loader's reason for each when none opens.
  static DynamicLibrary open_first(const std::string& what, const std::vector<std::string>& candidates);

  // The address of `name`; throws spikejit::Error naming the library and the symbol if absent.
  void* symbol(const char* name) const;
  // The address of `name`, or nullptr if the library lacks it.
  void* find_symbol(const char* name) const;

  const std::string& path() const { return path_; }  // the candidate that opened
  std::string file() const;  // the file the loader actually opened (absolute when known)

 private:
  DynamicLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void* handle_;
  std::string path_;
};

}  // namespace spikejit::runtime
