// Candidate lists for the libraries and headers the CUDA backend opens at run time.
#include "runtime/library_search.h"

#include <glob.h>
#include <sys/stat.h>

#include <cstdlib>

namespace spikejit::runtime {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

bool is_dir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void add_unique(std::vector<std::string>& list, const std::string& item) {
  for (const std::string& existing : list) {
    if (existing == item) return;
  }
  list.push_back(item);
}

std::vector<std::string> glob_dirs(const std::string& pattern) {
  std::vector<std::string> dirs;
  glob_t g;
  if (glob(pattern.c_str(), GLOB_ONLYDIR, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) dirs.push_back(g.gl_pathv[i]);
  }
  globfree(&g);
  return dirs;
}

std::vector<std::string> toolkit_roots() {
  std::vector<std::string> roots;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    std::string root = env(var);
    if (!root.empty()) add_unique(roots, root);
  }
  add_unique(roots, "/usr/local/cuda");
  return roots;
}

// Folders of the NVIDIA Python wheels under one site-packages folder, newest layout first.
std::vector<std::string> wheel_dirs(const std::string& site, const char* leaf) {
  return {site + "/nvidia/cu13/" + leaf, site + "/nvidia/cuda_nvrtc/" + leaf,
          site + "/nvidia/cuda_runtime/" + leaf};
}

}  // namespace

std::vector<std::string> split_paths(const std::string& list) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(':', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) parts.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::vector<std::string> python_site_packages() {
  std::vector<std::string> sites;
  for (const char* var : {"SPIKEJIT_PYTHON_SITE_PACKAGES", "PYTHONPATH"}) {
    for (const std::string& dir : split_paths(env(var))) {
      if (is_dir(dir)) add_unique(sites, dir);
    }
  }
  std::vector<std::string> prefixes;
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (!env(var).empty()) prefixes.push_back(env(var));
  }
  if (!env("HOME").empty()) prefixes.push_back(env("HOME") + "/.local");
  prefixes.push_back("/usr/local");
  prefixes.push_back("/usr");
  for (const std::string& prefix : prefixes) {
    for (const char* kind : {"site-packages", "dist-packages"}) {
      for (const std::string& dir : glob_dirs(prefix + "/lib/python3*/" + kind)) {
        add_unique(sites, dir);
      }
    }
  }
  if (is_dir("/usr/lib/python3/dist-packages")) add_unique(sites, "/usr/lib/python3/dist-packages");
  return sites;
}

std::vector<std::string> driver_candidates() {
  std::string override_path = env("SPIKEJIT_CUDA_DRIVER_PATH");
  if (!override_path.empty()) return {override_path};
  return {"libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1",
          "/usr/lib/aarch64-linux-gnu/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1"};
}

std::vector<std::string> nvrtc_candidates() {
  std::string override_path = env("SPIKEJIT_NVRTC_PATH");
  if (!override_path.empty()) return {override_path};
  const char* sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  std::vector<std::string> candidates(std::begin(sonames), std::end(sonames));
  for (const std::string& root : toolkit_roots()) {
    for (const char* lib : {"/lib64/", "/lib/"}) {
      for (const char* soname : sonames) add_unique(candidates, root + lib + soname);
    }
  }
  for (const std::string& site : python_site_packages()) {
    for (const std::string& dir : wheel_dirs(site, "lib")) {
      for (const char* soname : {"libnvrtc.so.13", "libnvrtc.so.12"}) {
        add_unique(candidates, dir + "/" + soname);
      }
    }
  }
  return candidates;
}

std::vector<std::string> cuda_include_search_dirs(const std::string& nvrtc_path) {
  std::vector<std::string> dirs;
  for (const std::string& dir : split_paths(env("SPIKEJIT_CUDA_INCLUDE_PATH"))) add_unique(dirs, dir);
  size_t slash = nvrtc_path.rfind('/');
  if (slash != std::string::npos) add_unique(dirs, nvrtc_path.substr(0, slash) + "/../include");
  for (const std::string& root : toolkit_roots()) add_unique(dirs, root + "/include");
  for (const std::string& site : python_site_packages()) {
    for (const std::string& dir : wheel_dirs(site, "include")) add_unique(dirs, dir);
  }
  return dirs;
}

std::string find_cuda_include_dir(const std::string& nvrtc_path) {
  for (const std::string& dir : cuda_include_search_dirs(nvrtc_path)) {
    if (is_file(dir + "/cuda_fp16.h")) return dir;
  }
  return "";
}

}  // namespace spikejit::runtime
