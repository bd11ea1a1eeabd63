// Where the CUDA driver, NVRTC and the CUDA headers are looked for, in order (docs/runtime.md).
#pragma once

#include <string>
#include <vector>

namespace spikejit::runtime {

// The non-empty entries of a ':'-separated list such as PATH.
std::vector<std::string> split_paths(const std::string& list);

// SPIKEJIT_CUDA_DRIVER_PATH alone when set; else libcuda.so.1 through the loader, then the
// usual driver install locations.
std::vector<std::string> driver_candidates();

// SPIKEJIT_NVRTC_PATH alone when set; else the sonames libnvrtc.so.13, .12 and libnvrtc.so
// through the loader; then the lib64/lib folders of $CUDA_HOME, $CUDA_PATH and /usr/local/cuda;
// then the nvidia-cuda-nvrtc wheels (nvidia/cu13/lib, nvidia/cuda_nvrtc/lib) in the Python
// package folders of python_site_packages().
std::vector<std::string> nvrtc_candidates();

// Where NVRTC's CUDA headers (cuda_fp16.h, cuda_bf16.h) are looked for: $SPIKEJIT_CUDA_INCLUDE_PATH
// (':'-separated), then ../include next to the loaded NVRTC library, then the include folders
// of the toolkits and wheels above. find_cuda_include_dir: the first holding cuda_fp16.h, or "".
std::vector<std::string> cuda_include_search_dirs(const std::string& nvrtc_path);
std::string find_cuda_include_dir(const std::string& nvrtc_path);

// Python package folders: $SPIKEJIT_PYTHON_SITE_PACKAGES (':'-separated), $PYTHONPATH, then
// lib/python3.*/site-packages under $VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr/local and /usr
// (dist-packages too), existing folders only.
std::vector<std::string> python_site_packages();

}  // namespace spikejit::runtime
