// The disk cache's store of neuron programs by name (spikejit/runtime.h), for the Python
// registry: the programs that exported graphs name by their handles.
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "spikejit/runtime.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace spikejit::python {

void bind_cache(nb::module_& m) {
  m.def("remember_program", &runtime::remember_program, "name"_a, "label"_a, "text"_a,
        "Stores a canonical neuron text under `name` in the disk cache; '' when stored (or already "
        "there), else why not.");
  m.def("recall_program", &runtime::recall_program, "name"_a,
        "The text the disk cache holds under `name`, or '' when none.");
}

}  // namespace spikejit::python
