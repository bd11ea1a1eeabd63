// Between PyTorch's tensors and the core's views, for the extension's calls on torch tensors
// (compiled where PyTorch's headers are found at build time).
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>
#include <nanobind/nanobind.h>

#include "spikejit/buffers.h"

namespace spikejit::python {

DType dtype_of(const at::Tensor& t);  // ArgumentError for other dtypes
at::ScalarType scalar_type_of(DType dtype);

TensorView view_of(const at::Tensor& t);  // undefined: absent; strides only where not contiguous
PackedView packed_view_of(const at::Tensor& t);

// A read-only argument as the kernels read it: `t` itself where it is contiguous, or a strided
// view they read in place (ReadLayout of spikejit/buffers.h; `sequence`: [T, *S], else [*S])
// while `strided_left` allows one more; otherwise a contiguous copy. The tensor read is appended
// to `kept`, which must outlive the kernels.
TensorView read_view(const at::Tensor& t, bool sequence, int& strided_left, std::vector<at::Tensor>& kept);

// An empty contiguous buffer; on the CPU a large one comes from spikejit's CPU pool (its pages
// stay mapped from one call to the next; bindings.h).
at::Tensor empty_buffer(at::IntArrayRef shape, const at::TensorOptions& options);

at::Tensor unpack(nanobind::handle h);
std::vector<at::Tensor> unpack_all(const std::vector<nanobind::handle>& handles);  // None: undefined
std::vector<nanobind::object> wrap_all(const std::vector<at::Tensor>& tensors);

}  // namespace spikejit::python
