// ReadLayout: where a strided read-only view keeps its elements (see spikejit/buffers.h).
#include <cstdint>
#include <vector>

#include "spikejit/buffers.h"

namespace spikejit {

int64_t ReadLayout::offset(int64_t t, int64_t n) const {
  int64_t at = t * step_stride;
  for (int64_t d = 0; d < dims; ++d) {
    at += n % sizes[d] * strides[d];
    n /= sizes[d];
  }
  return at;
}

bool read_layout(const TensorView& v, bool sequence, ReadLayout* layout) {
  *layout = ReadLayout();
  const size_t first = sequence ? 1 : 0;
  if (v.shape.size() < first) return false;
  std::vector<int64_t> strides = v.strides;
  if (strides.empty()) {  // contiguous
    strides.resize(v.shape.size());
    int64_t expected = 1;
    for (size_t i = v.shape.size(); i-- > 0;) {
      strides[i] = expected;
      expected *= v.shape[i];
    }
  }
  if (strides.size() != v.shape.size()) return false;
  for (int64_t s : strides) {
    if (s < 0) return false;
  }
  if (sequence) layout->step_stride = strides[0];
  // Innermost first: a dimension joins the one inside it when its stride continues that one's.
  for (size_t i = v.shape.size(); i-- > first;) {
    if (v.shape[i] == 1) continue;
    const int64_t d = layout->dims;
    if (d > 0 && strides[i] == layout->sizes[d - 1] * layout->strides[d - 1]) {
      layout->sizes[d - 1] *= v.shape[i];
      continue;
    }
    if (d == kMaxReadDims) return false;
    layout->sizes[d] = v.shape[i];
    layout->strides[d] = strides[i];
    layout->dims = d + 1;
  }
  return true;
}

}  // namespace spikejit
