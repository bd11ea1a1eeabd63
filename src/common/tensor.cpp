// DType helpers, TensorView queries and the public fp16 / bf16 conversions.
#include "spikejit/tensor.h"

#include <limits>
#include <string>

#include "common/float16.h"
#include "spikejit/error.h"

namespace spikejit {

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F32:
      return 4;
    case DType::F64:
      return 8;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32:
      return "float32";
    case DType::F64:
      return "float64";
    case DType::F16:
      return "float16";
    case DType::BF16:
      return "bfloat16";
  }
  return "unknown dtype";
}

static std::string list_text(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

int64_t shape_numel(const std::vector<int64_t>& shape) {
  bool empty = false, overflows = false;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw ArgumentError("shape", "dimensions >= 0", list_text(shape));
    if (d == 0) empty = true;
    if (d > 1 && n > std::numeric_limits<int64_t>::max() / d) overflows = true;
    if (!overflows) n *= d;
  }
  if (empty) return 0;
  if (overflows) throw ArgumentError("shape", "at most 2^63 - 1 elements", list_text(shape));
  return n;
}

bool is_contiguous_layout(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  if (strides.empty()) return true;
  if (strides.size() != shape.size()) return false;
  if (shape_numel(shape) == 0) return true;
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

std::string describe_layout(const char* dtype, const std::vector<int64_t>& shape,
                            const std::vector<int64_t>& strides) {
  std::string out = std::string(dtype) + list_text(shape);
  if (!strides.empty()) out += " with strides " + list_text(strides);
  return out;
}

int64_t TensorView::numel() const { return shape_numel(shape); }
bool TensorView::is_contiguous() const { return is_contiguous_layout(shape, strides); }

std::string TensorView::describe() const {
  if (!present) return "no tensor";
  return describe_layout(dtype_name(dtype), shape, strides);
}

uint16_t float_to_half(float f) { return detail::float_to_half_bits(f); }
float half_to_float(uint16_t h) { return detail::half_bits_to_float(h); }
uint16_t float_to_bfloat16(float f) { return detail::float_to_bfloat16_bits(f); }
float bfloat16_to_float(uint16_t h) { return detail::bfloat16_bits_to_float(h); }

}  // namespace spikejit
