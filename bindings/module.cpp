// The extension module `spikejit._core`: the C++ core as seen from Python. The `spikejit`
// package builds the PyTorch integration on top of it.
#include "bindings.h"

NB_MODULE(_core, m) {
  m.doc() = "spikejit C++ core: neuron programs, built-in neurons, CPU and CUDA kernels";
  spikejit::python::bind_errors(m);
  spikejit::python::bind_program(m);
  spikejit::python::bind_builtins(m);
  spikejit::python::bind_kernels(m);
  spikejit::python::bind_compress(m);
  spikejit::python::bind_cpu_pool(m);
  spikejit::python::bind_cache(m);
#ifdef SPIKEJIT_WITH_TORCH
  spikejit::python::bind_torch_calls(m);
#endif
}
