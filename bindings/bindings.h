// Shared declarations of the nanobind module `spikejit._core` (one bind_* function per file).
#pragma once

#include <cstddef>
#include <exception>

#include <nanobind/nanobind.h>

namespace spikejit::python {

// The CPU pool (cpu_pool.cpp): a block of `bytes`, taken and given back. Buffers of at least
// kCpuPoolMinBytes come from it (glibc maps larger blocks afresh on every allocation).
constexpr size_t kCpuPoolMinBytes = size_t{1} << 20;
void* cpu_pool_take(size_t bytes);
void cpu_pool_give_back(void* block, size_t bytes);

// Sets the Python exception of a spikejit exception (errors.cpp: ParseError, ArgumentError and
// Error as spikejit._core's exception types); any other exception is rethrown. Needs the GIL.
void set_python_error(const std::exception_ptr& p, void* = nullptr);

void bind_errors(nanobind::module_& m);
void bind_program(nanobind::module_& m);
void bind_builtins(nanobind::module_& m);
void bind_kernels(nanobind::module_& m);
void bind_compress(nanobind::module_& m);
void bind_cpu_pool(nanobind::module_& m);
void bind_cache(nanobind::module_& m);
void bind_torch_calls(nanobind::module_& m);  // torch/eager_calls.cpp, where built with torch

}  // namespace spikejit::python
