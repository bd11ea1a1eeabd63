// PackedView queries: bit-packed spike rows, uint8 [T, ceil(N / 8)].
#include <string>

#include "spikejit/buffers.h"
#include "spikejit/error.h"
#include "spikejit/tensor.h"

namespace spikejit {

std::string PackedView::describe() const { return describe_layout("uint8", shape, strides); }

int64_t packed_row_bytes(int64_t neurons) {
  if (neurons < 0) throw ArgumentError("neurons", "a count >= 0", std::to_string(neurons));
  return neurons / 8 + (neurons % 8 != 0);
}

}  // namespace spikejit
