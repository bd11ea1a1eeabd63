// Compiling generated C++ for the host at run time (the fused CPU steps): finding a compiler,
// building a shared library through the disk cache, loading it.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace spikejit::runtime {

// A header a generated host unit may include, compiled into the library as text (CMake writes
// the table from the sources, so the run-time compile sees the same definitions).
struct HostHeader {
  const char* path;  // as included: "ir/scalar_ops.h"
  const char* text;
};
const std::vector<HostHeader>& host_compile_headers();

struct HostCompiler {
  std::string path;      // the executable
  std::string identity;  // the first line of its --version
};

// $SPIKEJIT_CXX when set (a path, or a name looked up on PATH), else the first of c++, g++ and
// clang++ on PATH that answers --version. Throws Error naming what was tried and why each failed.
HostCompiler find_host_compiler();

// The compiler flags: optimised, position-independent, and no floating-point contraction or
// reassociation, so the generated code rounds exactly like the library's own loops.
const std::vector<std::string>& host_compile_flags();

class HostLibrary;

// The shared library built from `source` (a translation unit that may include the headers of
// host_compile_headers()), from the disk cache or compiled with `compiler`, loaded, with each
// of `symbols` present. Only a library that loads with them is stored; a cached one that does
// not is compiled again. `label` names it in errors and in the cache listing. Throws
// CompileError with the compiler's output when it fails, Error when the result does not load.
std::unique_ptr<HostLibrary> host_library_for(const HostCompiler& compiler, const std::string& source,
                                              const std::string& label, const std::vector<std::string>& symbols);

// A shared library loaded from its bytes; unloaded when destroyed.
class HostLibrary {
 public:
  // Throws Error with the loader's reason when the bytes do not load.
  static std::unique_ptr<HostLibrary> load(const std::string& bytes, const std::string& label);
  ~HostLibrary();
  HostLibrary(const HostLibrary&) = delete;
  HostLibrary& operator=(const HostLibrary&) = delete;

  // The address of `name`; throws Error naming the library's label when absent.
  void* symbol(const std::string& name) const;

 private:
  HostLibrary(void* handle, std::string label) : handle_(handle), label_(std::move(label)) {}
  void* handle_;
  std::string label_;
};

}  // namespace spikejit::runtime
