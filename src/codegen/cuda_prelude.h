// The fixed part of every generated translation unit: the argument struct, the storage dtype
// and its conversions, the arithmetic helpers (scalar_ops.h semantics) and row loads / stores.
#pragma once

#include <string>

#include "spikejit/tensor.h"

namespace spikejit::codegen {

// Elements per 16-byte vector for `storage` (the vector variant's elements per thread).
int vector_elements(DType storage);

std::string cuda_prelude(DType storage);

}  // namespace spikejit::codegen
