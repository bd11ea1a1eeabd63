#include "tensors.h"

#include <string>

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/autograd/python_variable.h>

#include "../bindings.h"
#include "spikejit/error.h"

namespace nb = nanobind;

namespace spikejit::python {

DType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::F32;
    case at::kDouble: return DType::F64;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    default: throw ArgumentError("tensor", "float32, float64, float16 or bfloat16", std::string(t.dtype().name()));
  }
}

at::ScalarType scalar_type_of(DType dtype) {
  switch (dtype) {
    case DType::F32: return at::kFloat;
    case DType::F64: return at::kDouble;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
  }
  return at::kFloat;
}

TensorView view_of(const at::Tensor& t) {
  if (!t.defined()) return TensorView();
  std::vector<int64_t> strides;
  if (!t.is_contiguous()) strides.assign(t.strides().begin(), t.strides().end());
  return TensorView(t.data_ptr(), dtype_of(t), t.sizes().vec(), strides);
}

PackedView packed_view_of(const at::Tensor& t) {
  return PackedView(t.data_ptr(), t.sizes().vec(), t.is_contiguous() ? std::vector<int64_t>()
                                                                      : t.strides().vec());
}

TensorView read_view(const at::Tensor& t, bool sequence, int& strided_left, std::vector<at::Tensor>& kept) {
  if (!t.defined() || t.is_contiguous()) {
    kept.push_back(t);
    return view_of(t);
  }
  TensorView view = view_of(t);
  ReadLayout layout;
  if (strided_left > 0 && read_layout(view, sequence, &layout)) {
    --strided_left;
    kept.push_back(t);
    return view;
  }
  at::AutoGradMode no_grad(false);  // (a contiguous copy of an argument is not part of any graph)
  kept.push_back(t.contiguous());
  return view_of(kept.back());
}

at::Tensor empty_buffer(at::IntArrayRef shape, const at::TensorOptions& options) {
  const size_t bytes = static_cast<size_t>(c10::multiply_integers(shape)) * options.dtype().itemsize();
  if (!options.device().is_cpu() || bytes < kCpuPoolMinBytes) return at::empty(shape, options);
  void* block = cpu_pool_take(bytes);
  return at::from_blob(block, shape, [bytes](void* data) { cpu_pool_give_back(data, bytes); }, options);
}

at::Tensor unpack(nb::handle h) { return THPVariable_Unpack(h.ptr()); }

std::vector<at::Tensor> unpack_all(const std::vector<nb::handle>& handles) {
  std::vector<at::Tensor> out;
  out.reserve(handles.size());
  for (nb::handle h : handles) out.push_back(h.is_none() ? at::Tensor() : unpack(h));
  return out;
}

std::vector<nb::object> wrap_all(const std::vector<at::Tensor>& tensors) {
  std::vector<nb::object> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) out.push_back(nb::steal(THPVariable_Wrap(t)));
  return out;
}

}  // namespace spikejit::python
