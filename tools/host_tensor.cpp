#include "host_tensor.h"

#include <cstring>

namespace spikejit::cli {

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape)
    : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t d : shape_) numel_ *= d;
  bytes_.resize(static_cast<size_t>(numel_) * dtype_size(dtype_));
}

double HostTensor::get(int64_t i) const {
  const unsigned char* p = bytes_.data() + static_cast<size_t>(i) * dtype_size(dtype_);
  float f;
  double d;
  uint16_t h;
  switch (dtype_) {
    case DType::F32: std::memcpy(&f, p, sizeof f); return f;
    case DType::F64: std::memcpy(&d, p, sizeof d); return d;
    case DType::F16: std::memcpy(&h, p, sizeof h); return half_to_float(h);
    case DType::BF16: std::memcpy(&h, p, sizeof h); return bfloat16_to_float(h);
  }
  return 0.0;
}

void HostTensor::set(int64_t i, double v) {
  unsigned char* p = bytes_.data() + static_cast<size_t>(i) * dtype_size(dtype_);
  const float f = static_cast<float>(v);
  uint16_t h;
  switch (dtype_) {
    case DType::F32: std::memcpy(p, &f, sizeof f); break;
    case DType::F64: std::memcpy(p, &v, sizeof v); break;
    case DType::F16: h = float_to_half(f); std::memcpy(p, &h, sizeof h); break;
    case DType::BF16: h = float_to_bfloat16(f); std::memcpy(p, &h, sizeof h); break;
  }
}

}  // namespace spikejit::cli
