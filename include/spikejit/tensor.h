// Caller-owned buffers handed to spikejit kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace spikejit {

enum class DType : uint8_t { F32, F64, F16, BF16 };

size_t dtype_size(DType d);
const char* dtype_name(DType d);  // "float32", "float64", "float16", "bfloat16"

// A view of caller memory. `strides` are in elements; empty means row-major contiguous.
// A default-constructed view is "absent" (an optional buffer that was not given).
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  bool present = false;

  TensorView() = default;
  TensorView(void* d, DType t, std::vector<int64_t> s, std::vector<int64_t> st = {})
      : data(d), dtype(t), shape(std::move(s)), strides(std::move(st)), present(true) {}

  int64_t numel() const;
  bool is_contiguous() const;
  std::string describe() const;  // "float32[4, 16]"
};

// Layout helpers shared by TensorView and SpikeView. Like PyTorch: dimensions of size 1 may have
// any stride, and an empty tensor is contiguous (empty strides: row-major contiguous).
int64_t shape_numel(const std::vector<int64_t>& shape);
bool is_contiguous_layout(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides);
// "<dtype>[4, 16]", plus " with strides [...]" when strides are given.
std::string describe_layout(const char* dtype, const std::vector<int64_t>& shape,
                            const std::vector<int64_t>& strides);

// fp16 / bf16 conversions (round to nearest even), shared by the CPU executor and tests.
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bfloat16(float f);
float bfloat16_to_float(uint16_t h);

}  // namespace spikejit
