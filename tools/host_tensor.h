// A CPU buffer of any storage dtype for the CLI: filled from doubles, read back as doubles.
#pragma once

#include <cstdint>
#include <vector>

#include "spikejit/tensor.h"

namespace spikejit::cli {

class HostTensor {
 public:
  HostTensor(DType dtype, std::vector<int64_t> shape);

  int64_t numel() const { return numel_; }
  double get(int64_t i) const;
  void set(int64_t i, double v);
  TensorView view() { return TensorView(bytes_.data(), dtype_, shape_); }

 private:
  DType dtype_;
  std::vector<int64_t> shape_;
  int64_t numel_ = 1;
  std::vector<unsigned char> bytes_;
};

}  // namespace spikejit::cli
