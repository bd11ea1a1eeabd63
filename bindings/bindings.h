// Shared declarations of the nanobind module `spikejit._core` (one bind_* function per file).
#pragma once

#include <nanobind/nanobind.h>

namespace spikejit::python {

void bind_errors(nanobind::module_& m);
void bind_program(nanobind::module_& m);
void bind_builtins(nanobind::module_& m);
void bind_kernels(nanobind::module_& m);
void bind_compress(nanobind::module_& m);
void bind_cpu_pool(nanobind::module_& m);
void bind_torch_autograd(nanobind::module_& m);

}  // namespace spikejit::python
