// Generated CUDA kernels against the CPU executor, on a GPU. Skips without one, fails instead
// when SPIKEJIT_REQUIRE_CUDA=1. Every written buffer is poisoned (all bits set: NaN) before the
// launch, so an element a kernel forgot to write shows up as NaN. fp16 / bf16 kernels are
// compared with the CPU executor given the same fp16 / bf16 storage. Bit-packed rows (packed
// outputs, spikes saved as bits) are compared byte for byte with the CPU's.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/parallel.h"
#include "runtime/driver_api.h"
#include "runtime/kernel_cache.h"
#include "spikejit/builtins.h"
#include "spikejit/codegen.h"
#include "spikejit/cpu.h"
#include "spikejit/cuda.h"
#include "spikejit/runtime.h"
#include "support/random_seed.h"
#include "support/test_neurons.h"

namespace spikejit {
namespace {

using runtime::check_cuda;
using runtime::CUdeviceptr;
using runtime::CUstream;
using runtime::driver;

// ---------------------------------------------------------------------------------------------
// Host and device tensors.

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// A float with the digits that tell it from its neighbours (to_string keeps six decimals).
std::string exact_text(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(v));
  return text;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

float load_element(const void* data, DType d, int64_t i) {
  switch (d) {
    case DType::F32: return static_cast<const float*>(data)[i];
    case DType::F64: return static_cast<float>(static_cast<const double*>(data)[i]);
    case DType::F16: return half_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::BF16: return bfloat16_to_float(static_cast<const uint16_t*>(data)[i]);
  }
  return NAN;
}

void store_element(void* data, DType d, int64_t i, float v) {
  switch (d) {
    case DType::F32: static_cast<float*>(data)[i] = v; break;
    case DType::F64: static_cast<double*>(data)[i] = v; break;
    case DType::F16: static_cast<uint16_t*>(data)[i] = float_to_half(v); break;
    case DType::BF16: static_cast<uint16_t*>(data)[i] = float_to_bfloat16(v); break;
  }
}

struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;

  HostTensor() = default;
  HostTensor(DType d, std::vector<int64_t> s) : dtype(d), shape(std::move(s)) {
    bytes.assign(static_cast<size_t>(numel_of(shape)) * dtype_size(d), 0);
  }
  int64_t numel() const { return numel_of(shape); }
  float get(int64_t i) const { return load_element(bytes.data(), dtype, i); }
  void set(int64_t i, float v) { store_element(bytes.data(), dtype, i, v); }
  TensorView view() { return TensorView(bytes.data(), dtype, shape); }
};

HostTensor random_tensor(std::mt19937_64& rng, DType d, const std::vector<int64_t>& shape, float lo,
                         float hi) {
  HostTensor t(d, shape);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, dist(rng));
  return t;
}

// Device memory; `offset` elements past an allocation's start (a misaligned base when odd).
class DeviceTensor {
 public:
  DeviceTensor(DType d, std::vector<int64_t> shape, int offset = 0)
      : dtype_(d), shape_(std::move(shape)), offset_bytes_(static_cast<size_t>(offset) * dtype_size(d)) {
    bytes_ = static_cast<size_t>(numel_of(shape_)) * dtype_size(d);
    check_cuda(driver().cuMemAlloc(&base_, bytes_ + offset_bytes_ + 16), "cuMemAlloc",
               std::to_string(bytes_) + " bytes");
  }
  DeviceTensor(const HostTensor& h, int offset = 0) : DeviceTensor(h.dtype, h.shape, offset) {
    if (bytes_ > 0) check_cuda(driver().cuMemcpyHtoD(pointer(), h.bytes.data(), bytes_), "cuMemcpyHtoD");
  }
  ~DeviceTensor() { driver().cuMemFree(base_); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;

  CUdeviceptr pointer() const { return base_ + offset_bytes_; }
  void poison() {
    if (bytes_ > 0) check_cuda(driver().cuMemsetD8(pointer(), 0xFF, bytes_), "cuMemsetD8");
  }
  HostTensor to_host() const {
    HostTensor h(dtype_, shape_);
    if (bytes_ > 0) check_cuda(driver().cuMemcpyDtoH(h.bytes.data(), pointer(), bytes_), "cuMemcpyDtoH");
    return h;
  }
  TensorView view() const { return TensorView(reinterpret_cast<void*>(pointer()), dtype_, shape_); }

 private:
  DType dtype_;
  std::vector<int64_t> shape_;
  size_t offset_bytes_;
  size_t bytes_ = 0;
  CUdeviceptr base_ = 0;
};

// Device bytes of bit-packed rows; `offset` bytes past an allocation's start.
class DeviceBytes {
 public:
  DeviceBytes(std::vector<int64_t> shape, int offset)
      : shape_(std::move(shape)), offset_(static_cast<size_t>(offset)), bytes_(static_cast<size_t>(numel_of(shape_))) {
    check_cuda(driver().cuMemAlloc(&base_, bytes_ + offset_ + 16), "cuMemAlloc", std::to_string(bytes_) + " bytes");
  }
  ~DeviceBytes() { driver().cuMemFree(base_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  CUdeviceptr pointer() const { return base_ + offset_; }
  void upload(const std::vector<uint8_t>& host) {
    if (bytes_ > 0) check_cuda(driver().cuMemcpyHtoD(pointer(), host.data(), bytes_), "cuMemcpyHtoD");
  }
  void poison() {
    if (bytes_ > 0) check_cuda(driver().cuMemsetD8(pointer(), 0xFF, bytes_), "cuMemsetD8");
  }
  std::vector<uint8_t> to_host() const {
    std::vector<uint8_t> h(bytes_);
    if (bytes_ > 0) check_cuda(driver().cuMemcpyDtoH(h.data(), pointer(), bytes_), "cuMemcpyDtoH");
    return h;
  }
  PackedView view() const { return PackedView(reinterpret_cast<void*>(pointer()), shape_); }

 private:
  std::vector<int64_t> shape_;
  size_t offset_, bytes_;
  CUdeviceptr base_ = 0;
};

// The seed of a neuron's random draws, in host memory for the CPU and in device memory for the
// GPU (ForwardBuffers::seed); both are given to every call, the draws need them where they do.
class CallSeed {
 public:
  explicit CallSeed(uint64_t value) : host_(value) {
    check_cuda(driver().cuMemAlloc(&device_, sizeof(uint64_t)), "cuMemAlloc", "8 bytes");
    check_cuda(driver().cuMemcpyHtoD(device_, &host_, sizeof(uint64_t)), "cuMemcpyHtoD");
  }
  ~CallSeed() { driver().cuMemFree(device_); }
  CallSeed(const CallSeed&) = delete;
  CallSeed& operator=(const CallSeed&) = delete;
  const void* pointer(bool gpu) const { return gpu ? reinterpret_cast<const void*>(device_) : &host_; }

 private:
  uint64_t host_;
  CUdeviceptr device_ = 0;
};

// Bit-packed sequences, uint8 [T, ceil(N / 8)] each: the CPU's and the GPU's (nullptr: absent).
// Written ones: zeros for the CPU, poison (all bits set) on the GPU.
struct BitFamily {
  std::string name;
  int64_t steps = 0, neurons = 0;
  std::vector<std::vector<uint8_t>> host;
  std::vector<std::unique_ptr<DeviceBytes>> device;

  BitFamily(std::string n, int64_t t, int64_t count, const std::vector<bool>& present, int offset)
      : name(std::move(n)), steps(t), neurons(count) {
    for (bool p : present) {
      host.emplace_back(static_cast<size_t>(steps * packed_row_bytes(neurons)), 0);
      device.push_back(p ? std::make_unique<DeviceBytes>(shape(), offset) : nullptr);
      if (device.back()) device.back()->poison();
    }
  }
  std::vector<int64_t> shape() const { return {steps, packed_row_bytes(neurons)}; }
  std::vector<PackedView> host_views() {
    std::vector<PackedView> v;
    for (size_t i = 0; i < host.size(); ++i) v.push_back(device[i] ? PackedView(host[i].data(), shape()) : PackedView());
    return v;
  }
  std::vector<PackedView> device_views() const {
    std::vector<PackedView> v;
    for (const auto& d : device) v.push_back(d ? d->view() : PackedView());
    return v;
  }
};

// One argument family (inputs, outputs, ...): the CPU's tensors and the GPU's copies. An absent
// entry is an absent TensorView on both sides; an empty family passes an empty vector.
struct Family {
  std::string name;
  std::vector<HostTensor> host;
  std::vector<std::unique_ptr<DeviceTensor>> device;  // nullptr: absent
  // Entries the GPU reads through a broadcast (stride-0) view of its compact copy: the view's
  // shape and strides (empty: the device tensor as it is).
  std::vector<std::vector<int64_t>> view_shapes, view_strides;

  std::vector<TensorView> host_views() {
    std::vector<TensorView> v;
    for (size_t i = 0; i < host.size(); ++i) v.push_back(device[i] ? host[i].view() : TensorView());
    return v;
  }
  std::vector<TensorView> device_views() const {
    std::vector<TensorView> v;
    for (size_t i = 0; i < device.size(); ++i) {
      if (!device[i]) {
        v.emplace_back();
      } else if (i < view_strides.size() && !view_strides[i].empty()) {
        v.emplace_back(device[i]->view().data, device[i]->view().dtype, view_shapes[i], view_strides[i]);
      } else {
        v.push_back(device[i]->view());
      }
    }
    return v;
  }
};

// Read by the kernel: random values, uploaded.
Family read_family(const std::string& name, std::mt19937_64& rng, DType d,
                   const std::vector<std::vector<int64_t>>& shapes, const std::vector<bool>& present,
                   float lo, float hi, int offset) {
  Family f{name, {}, {}, {}, {}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    f.host.push_back(random_tensor(rng, d, shapes[i], lo, hi));
    f.device.push_back(present[i] ? std::make_unique<DeviceTensor>(f.host.back(), offset) : nullptr);
  }
  return f;
}

// Read by the backward: [T, *S] gradient sequences, entry i repeating as layouts[i] says (missing:
// a plain sequence). The GPU reads a compact tensor of the distinct values through a stride-0
// view ([1], [*S] or [T]); the CPU reads a dense copy of the same values.
Family read_grad_family(const std::string& name, std::mt19937_64& rng, DType d, size_t count,
                        const std::vector<int64_t>& seq, const std::vector<bool>& present,
                        const std::vector<SequenceLayout>& layouts, int offset) {
  Family f{name, {}, {}, {}, {}};
  const int64_t steps = seq[0], row = numel_of(std::vector<int64_t>(seq.begin() + 1, seq.end()));
  for (size_t i = 0; i < count; ++i) {
    const SequenceLayout l = i < layouts.size() ? layouts[i] : SequenceLayout();
    const bool repeats = l.same_each_step || l.same_each_neuron;
    std::vector<int64_t> compact_shape = seq, strides;
    if (repeats) {
      compact_shape = l.same_each_neuron ? std::vector<int64_t>{l.same_each_step ? 1 : steps}
                                         : std::vector<int64_t>(seq.begin() + 1, seq.end());
      strides.assign(seq.size(), 0);
      if (!l.same_each_step) strides[0] = l.same_each_neuron ? 1 : row;
      if (!l.same_each_neuron) {
        int64_t stride = 1;
        for (size_t k = seq.size() - 1; k >= 1; --k) {
          strides[k] = stride;
          stride *= seq[k];
        }
      }
    }
    const HostTensor compact = random_tensor(rng, d, compact_shape, -1.0f, 1.0f);
    HostTensor dense(d, seq);
    for (int64_t t = 0; t < steps; ++t) {
      for (int64_t n = 0; n < row; ++n) {
        const int64_t from = repeats ? (l.same_each_step ? 0 : t) * (l.same_each_neuron ? 1 : row) +
                                           (l.same_each_neuron ? 0 : n)
                                     : t * row + n;
        dense.set(t * row + n, compact.get(from));
      }
    }
    f.host.push_back(std::move(dense));
    f.device.push_back(present[i] ? std::make_unique<DeviceTensor>(compact, offset) : nullptr);
    f.view_shapes.push_back(repeats ? seq : std::vector<int64_t>());
    f.view_strides.push_back(strides);
  }
  return f;
}

// How strided_read_family lays out a read-only buffer on both sides (ReadLayout): the same values
// each step (a [*S] tensor; [*S] buffers: every other element), one value per index of the last
// dimension of S (per step), every other element, one value per step (per buffer).
constexpr int kStridedLayouts = 4;

// Read by the kernels through strided views of compact tensors, on the GPU and the CPU alike
// (both read strided views; the CPU executor's own tests check its reads against dense
// copies). `sequence`: the shapes are [T, *S]. One-element buffers (scalar parameters) stay plain.
Family strided_read_family(const std::string& name, std::mt19937_64& rng, DType d,
                           const std::vector<std::vector<int64_t>>& shapes, const std::vector<bool>& present,
                           float lo, float hi, int offset, int layout, bool sequence) {
  Family f = read_family(name, rng, d, shapes, present, lo, hi, offset);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::vector<int64_t>& shape = shapes[i];
    f.view_shapes.push_back({});
    f.view_strides.push_back({});
    if (!present[i] || numel_of(shape) <= 1 || shape.size() < (sequence ? 2u : 1u)) continue;
    const size_t first = sequence ? 1 : 0;
    const int64_t last = shape.back(), neurons = numel_of(std::vector<int64_t>(shape.begin() + first, shape.end()));
    std::vector<int64_t> strides(shape.size(), 0);
    int64_t compact = 0;
    const int pick = !sequence && layout == 0 ? 2 : layout;
    if (pick == 0 || pick == 2) {  // contiguous strides of S (doubled for every other element)
      int64_t stride = pick == 2 ? 2 : 1;
      for (size_t k = shape.size(); k-- > first;) {
        strides[k] = stride;
        stride *= shape[k];
      }
      if (sequence) strides[0] = pick == 0 ? 0 : 2 * neurons;
      compact = (pick == 2 ? 2 : 1) * (pick == 2 && sequence ? shape[0] : 1) * neurons;
    } else if (pick == 1) {
      strides.back() = 1;
      if (sequence) strides[0] = last;
      compact = (sequence ? shape[0] : 1) * last;
    } else {
      if (sequence) strides[0] = 1;
      compact = sequence ? shape[0] : 1;
    }
    HostTensor storage = random_tensor(rng, d, {compact}, lo, hi);
    HostTensor dense(d, shape);
    std::vector<int64_t> index(shape.size(), 0);
    for (int64_t e = 0; e < dense.numel(); ++e) {
      int64_t at = 0;
      for (size_t k = 0; k < shape.size(); ++k) at += index[k] * strides[k];
      dense.set(e, storage.get(at));
      for (size_t k = shape.size(); k-- > 0;) {
        if (++index[k] < shape[k]) break;
        index[k] = 0;
      }
    }
    f.host[i] = std::move(dense);
    f.device[i] = std::make_unique<DeviceTensor>(storage, offset);
    f.view_shapes.back() = shape;
    f.view_strides.back() = strides;
  }
  return f;
}

// Written by the kernel: zeros for the CPU, poison on the GPU.
Family written_family(const std::string& name, DType d, const std::vector<std::vector<int64_t>>& shapes,
                      const std::vector<bool>& present, int offset) {
  Family f{name, {}, {}, {}, {}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    f.host.emplace_back(d, shapes[i]);
    f.device.push_back(present[i] ? std::make_unique<DeviceTensor>(d, shapes[i], offset) : nullptr);
    if (f.device.back()) f.device.back()->poison();
  }
  return f;
}

std::vector<bool> all(size_t n, bool value) { return std::vector<bool>(n, value); }

// Each entry present with probability 3/4, and at least one when `n` > 0.
std::vector<bool> some(std::mt19937_64& rng, size_t n) {
  std::vector<bool> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = rng() % 4 != 0;
  if (n > 0) p[rng() % n] = true;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Comparison.

struct Tolerance {
  double atol, rtol;
};

Tolerance forward_tolerance(DType d) {
  switch (d) {
    case DType::F16: return {1e-3, 2e-3};
    case DType::BF16: return {1e-2, 1.6e-2};
    default: return {1e-5, 1e-5};
  }
}

Tolerance gradient_tolerance(DType d) {
  switch (d) {
    case DType::F16: return {2e-3, 4e-3};
    case DType::BF16: return {2e-2, 2e-2};
    default: return {1e-4, 1e-4};
  }
}

// What went wrong in one kernel call, collected over every written buffer.
struct Report {
  int64_t neurons = 0;
  std::set<int64_t> bad_neurons;  // differing beyond tolerance
  int64_t unwritten = 0;          // NaN (poison) where the CPU has a number
  std::vector<std::string> examples;

  // `tolerances`: one per entry of `f`, or a single one for all.
  void compare(const Family& f, const std::vector<Tolerance>& tolerances, bool per_neuron) {
    for (size_t i = 0; i < f.device.size(); ++i) {
      if (!f.device[i]) continue;
      const Tolerance tol = tolerances[tolerances.size() == 1 ? 0 : i];
      const HostTensor got = f.device[i]->to_host();
      const HostTensor& want = f.host[i];
      for (int64_t e = 0; e < want.numel(); ++e) {
        const float w = want.get(e), g = got.get(e);
        // Equal values pass (infinities too: an fp16 parameter gradient may overflow on both).
        const bool ok = g == w || (std::isnan(w) ? std::isnan(g)
                                                 : !std::isnan(g) && std::fabs(g - w) <= tol.atol + tol.rtol * std::fabs(w));
        if (ok) continue;
        if (std::isnan(g) && !std::isnan(w)) ++unwritten;
        bad_neurons.insert(per_neuron && neurons > 0 ? e % neurons : -1);
        if (examples.size() < 8) {
          examples.push_back(f.name + "[" + std::to_string(i) + "] element " + std::to_string(e) +
                             ": gpu " + exact_text(g) + ", cpu " + exact_text(w));
        }
      }
    }
  }

  // Bit rows, byte for byte: a differing bit is its neuron's (a set padding bit past N: -2); a
  // byte left all ones (the poison) where the CPU has another is unwritten.
  void compare_bits(const BitFamily& f) {
    const int64_t row_bytes = packed_row_bytes(f.neurons);
    for (size_t i = 0; i < f.device.size(); ++i) {
      if (!f.device[i]) continue;
      const std::vector<uint8_t> got = f.device[i]->to_host();
      const std::vector<uint8_t>& want = f.host[i];
      for (size_t k = 0; k < want.size(); ++k) {
        if (got[k] == want[k]) continue;
        if (got[k] == 0xFF) ++unwritten;
        for (int bit = 0; bit < 8; ++bit) {
          if (((got[k] ^ want[k]) >> bit & 1) == 0) continue;
          const int64_t n = static_cast<int64_t>(k) % row_bytes * 8 + bit;
          bad_neurons.insert(n < f.neurons ? n : -2);
        }
        if (examples.size() < 8) {
          examples.push_back(f.name + "[" + std::to_string(i) + "] byte " + std::to_string(k) + " (step " +
                             std::to_string(static_cast<int64_t>(k) / row_bytes) + "): gpu " +
                             std::to_string(got[k]) + ", cpu " + std::to_string(want[k]));
        }
      }
    }
  }

  std::string text() const {
    std::string s = std::to_string(bad_neurons.size()) + " neurons differ, " +
                    std::to_string(unwritten) + " elements unwritten";
    for (const std::string& e : examples) s += "\n  " + e;
    return s;
  }
};

// Forward results may differ where a transcendental op rounds differently on the GPU than in
// the C library and moves a value across the threshold; then that neuron's trajectory differs.
// Such flips are rare (a 1-ulp window); pure arithmetic neurons must match exactly.
bool is_transcendental(ir::Op op) {
  switch (op) {
    case ir::Op::Exp: case ir::Op::Log: case ir::Op::Log2: case ir::Op::Sigmoid: case ir::Op::Tanh:
    case ir::Op::Sin: case ir::Op::Cos: case ir::Op::Erf: case ir::Op::Pow: case ir::Op::Fmod:
    case ir::Op::Log1p: case ir::Op::Expm1: case ir::Op::Exp2: case ir::Op::Log10: case ir::Op::Tan:
    case ir::Op::Atan: case ir::Op::Asin: case ir::Op::Acos: case ir::Op::Sinh: case ir::Op::Cosh:
    case ir::Op::Asinh: case ir::Op::Acosh: case ir::Op::Atanh: case ir::Op::Erfc: case ir::Op::Atan2:
    case ir::Op::Hypot: case ir::Op::Erfinv: case ir::Op::Ndtri:
      return true;
    default:
      return false;
  }
}

bool has_transcendental_forward(const Program& p) {
  for (const ir::Node& n : p.forward().nodes) {
    if (is_transcendental(n.op)) return true;
  }
  return false;
}

// The backward recomputes spikes from saved values (e.g. PLIF's h from v, x and sigmoid(w)): a
// transcendental among the inputs of such a spike can flip it the same way.
bool spikes_recomputed_through_transcendentals(const Program& p, bool pack_spikes) {
  const std::vector<ir::Node>& nodes = p.backward(pack_spikes).nodes;
  std::vector<bool> through(nodes.size(), false);  // a transcendental is among the node's ancestors
  for (size_t i = 0; i < nodes.size(); ++i) {
    through[i] = is_transcendental(nodes[i].op);
    for (int32_t a : nodes[i].args) {
      if (a >= 0 && through[static_cast<size_t>(a)]) through[i] = true;
    }
    if (nodes[i].op == ir::Op::Spike && through[i]) return true;
  }
  return false;
}

int64_t flip_allowance(int64_t steps, int64_t neurons) { return 1 + steps * neurons / 100000; }

int64_t allowed_flips(const Program& p, int64_t steps, int64_t neurons) {
  return has_transcendental_forward(p) ? flip_allowance(steps, neurons) : 0;
}

// ---------------------------------------------------------------------------------------------
// One kernel call checked against the CPU.

struct Job {
  std::string label;
  const Program* program = nullptr;
  DType dtype = DType::F32;
  bool backward = false;
  int64_t steps = 0;
  std::vector<int64_t> shape;
  // Forward: training writes `saved`. Backward: which optional gradient families are given.
  bool training = false, state_seqs = false, final_states = false;
  bool grad_state_seqs = false, grad_final_states = false;
  int offset = 0;  // elements past the allocation start (odd: misaligned rows)
  // Training forward / backward: > 0 saves (and reads) checkpoints every k steps.
  int64_t checkpoint_every = 0;
  // Backward: gradient sequences that repeat (broadcast views, read in place by the GPU).
  std::vector<SequenceLayout> grad_output_layouts, grad_state_seq_layouts;
  // Forward: outputs also written as bit rows (per output); `packed_only`: those not full width.
  std::vector<bool> packed_outputs;
  bool packed_only = false;
  // Training forward / backward, per step: the pack_spikes save policy.
  bool pack_spikes = false;
  // >= 0: inputs, initial states and per-neuron parameters are strided views (layout of
  // strided_read_family), and so are the saved inputs of a per-step backward on the GPU.
  int strided_layout = -1;
  // Inference: the steps last to first (ForwardBuffers::reverse).
  bool reverse = false;

  // Whether the pack_spikes policy changes the kernels (as spikejit::cuda decides).
  bool packs_saved_spikes() const {
    if (!pack_spikes) return false;
    const ir::Step& plan = program->backward(true);
    for (size_t i = 0; i < plan.saved.size(); ++i) {
      if (plan.is_saved_packed(i)) return true;
    }
    return false;
  }
  bool output_packed(size_t i) const { return i < packed_outputs.size() && packed_outputs[i]; }

  // The spec spikejit::cuda picks for this call (used to compile everything up front).
  codegen::KernelSpec spec() const {
    codegen::KernelSpec s;
    s.storage = dtype;
    if (backward) {
      s.kind = codegen::KernelKind::Backward;
      s.grad_state_seqs = grad_state_seqs;
      s.grad_final_states = grad_final_states;
      s.checkpoint_every = static_cast<int>(checkpoint_every);
      s.grad_output_layouts = grad_output_layouts;
      s.grad_state_seq_layouts = grad_state_seq_layouts;
      s.pack_spikes = packs_saved_spikes();
      if (strided_layout >= 0) {
        if (checkpoint_every > 0) s.strided_inputs = strided_mask(program->forward().num_inputs);
        if (checkpoint_every == 0) s.strided_saved = strided_saved_mask();
      }
    } else {
      s.kind = training ? codegen::KernelKind::TrainingForward
               : final_states ? codegen::KernelKind::InferenceFinalState
                              : codegen::KernelKind::Inference;
      s.store_state_seqs = state_seqs;
      s.reverse = reverse;
      if (training) s.checkpoint_every = static_cast<int>(checkpoint_every);
      s.packed_outputs = packed_outputs;
      s.pack_spikes = training && packs_saved_spikes();
      if (strided_layout >= 0) {
        s.strided_inputs = strided_mask(program->forward().num_inputs);
        s.strided_states = strided_mask(program->forward().num_states);  // (those given)
      }
    }
    if (strided_layout >= 0) {
      for (size_t i = 0; i < program->forward().params.size(); ++i) {
        if (program->forward().params[i] == ir::ParamKind::PerNeuron) s.strided_params |= uint64_t{1} << i;
      }
    }
    return s;
  }
  static uint64_t strided_mask(int count) { return (uint64_t{1} << count) - 1; }
  // The per-step backward's saved values that are inputs (strided on the GPU), unless packed.
  uint64_t strided_saved_mask() const {
    uint64_t mask = 0;
    const ir::Step& plan = program->backward(packs_saved_spikes());
    for (size_t i = 0; i < plan.saved.size(); ++i) {
      if (program->saved_inputs(packs_saved_spikes())[i] >= 0 && !plan.is_saved_packed(i)) mask |= uint64_t{1} << i;
    }
    return mask;
  }
  std::string describe() const {
    return label + " " + dtype_name(dtype) + " " + (backward ? "backward" : training ? "training" : "inference") +
           " T=" + std::to_string(steps) + " S=" + shape_text(shape) +
           (state_seqs ? " +state_seqs" : "") + (final_states ? " +final_states" : "") +
           (grad_state_seqs ? " +grad_state_seqs" : "") + (grad_final_states ? " +grad_final_states" : "") +
           (offset ? " offset=" + std::to_string(offset) : "") +
           (checkpoint_every ? " checkpoint_every=" + std::to_string(checkpoint_every) : "") +
           (packed_only ? " packed-only" : "") + (pack_spikes ? " pack_spikes" : "") +
           (strided_layout >= 0 ? " strided layout " + std::to_string(strided_layout) : "") +
           (reverse ? " reversed" : "") + " " + spec().key();
  }
};

std::vector<std::vector<int64_t>> repeat(size_t n, const std::vector<int64_t>& shape) {
  return std::vector<std::vector<int64_t>>(n, shape);
}

// The `saved` buffers of a training call: per step, or float32 checkpoints [ceil(T/k), *S].
std::vector<std::vector<int64_t>> saved_shapes(const Job& job) {
  const Program& p = *job.program;
  if (job.checkpoint_every == 0) {
    std::vector<int64_t> seq = {job.steps};
    seq.insert(seq.end(), job.shape.begin(), job.shape.end());
    return repeat(p.backward(job.pack_spikes).saved.size(), seq);
  }
  std::vector<int64_t> rows = {(job.steps + job.checkpoint_every - 1) / job.checkpoint_every};
  rows.insert(rows.end(), job.shape.begin(), job.shape.end());
  return repeat(static_cast<size_t>(p.forward().num_states), rows);
}

DType saved_dtype(const Job& job) { return job.checkpoint_every > 0 ? DType::F32 : job.dtype; }

std::vector<std::vector<int64_t>> param_shapes(const Program& p, const std::vector<int64_t>& neuron_shape) {
  std::vector<std::vector<int64_t>> shapes;
  for (ir::ParamKind k : p.forward().params) {
    shapes.push_back(k == ir::ParamKind::Scalar ? std::vector<int64_t>{1} : neuron_shape);
  }
  return shapes;
}

struct Inputs {
  Family inputs, initial_states, params;
};

// What neuron `n` read in its first steps (its inputs, initial states and parameters): printed
// with a differing neuron, so that a flip can be recomputed elsewhere.
std::string neuron_inputs_text(const Inputs& in, int64_t n, int64_t steps, int64_t neurons) {
  std::string s = "  neuron " + std::to_string(n) + " read:";
  for (size_t i = 0; i < in.inputs.host.size(); ++i) {
    for (int64_t t = 0; t < std::min<int64_t>(steps, 3); ++t) {
      s += " inputs[" + std::to_string(i) + "][t=" + std::to_string(t) + "] " +
           exact_text(in.inputs.host[i].get(t * neurons + n));
    }
  }
  for (size_t i = 0; i < in.initial_states.host.size(); ++i) {
    s += " initial_states[" + std::to_string(i) + "] " +
         (in.initial_states.device[i] ? exact_text(in.initial_states.host[i].get(n)) : "default");
  }
  for (size_t i = 0; i < in.params.host.size(); ++i) {
    const HostTensor& param = in.params.host[i];
    s += " params[" + std::to_string(i) + "] " + exact_text(param.get(param.numel() == 1 ? 0 : n));
  }
  return s;
}

Inputs make_inputs(const Job& job, std::mt19937_64& rng, bool initial_present) {
  const Program& p = *job.program;
  const ir::Step& f = p.forward();
  std::vector<int64_t> seq = {job.steps};
  seq.insert(seq.end(), job.shape.begin(), job.shape.end());
  const std::vector<bool> init = initial_present ? some(rng, f.num_states) : all(f.num_states, false);
  if (job.strided_layout >= 0) {
    const int l = job.strided_layout;
    return {strided_read_family("inputs", rng, job.dtype, repeat(f.num_inputs, seq), all(f.num_inputs, true), -1.0f,
                                3.5f, job.offset, l, true),
            strided_read_family("initial_states", rng, job.dtype, repeat(f.num_states, job.shape), init, -0.5f, 1.0f,
                                job.offset, l, false),
            strided_read_family("params", rng, job.dtype, param_shapes(p, job.shape), all(f.params.size(), true),
                                -0.8f, 1.2f, job.offset, l, false)};
  }
  return {read_family("inputs", rng, job.dtype, repeat(f.num_inputs, seq), all(f.num_inputs, true),
                      -1.0f, 3.5f, job.offset),
          read_family("initial_states", rng, job.dtype, repeat(f.num_states, job.shape), init, -0.5f, 1.0f,
                      job.offset),
          read_family("params", rng, job.dtype, param_shapes(p, job.shape), all(f.params.size(), true),
                      -0.8f, 1.2f, job.offset)};
}

void synchronize(CUstream stream) { check_cuda(driver().cuStreamSynchronize(stream), "cuStreamSynchronize"); }

void check_forward(const Job& job, std::mt19937_64& rng, CUstream stream) {
  const Program& p = *job.program;
  const ir::Step& f = p.forward();
  std::vector<int64_t> seq = {job.steps};
  seq.insert(seq.end(), job.shape.begin(), job.shape.end());
  Inputs in = make_inputs(job, rng, rng() % 3 != 0);
  const std::vector<std::vector<int64_t>> saved_shape =
      job.training ? saved_shapes(job) : std::vector<std::vector<int64_t>>{};
  const int64_t neurons = numel_of(job.shape);
  std::vector<bool> full(static_cast<size_t>(f.num_outputs)), packed(full.size());
  for (size_t i = 0; i < full.size(); ++i) {
    packed[i] = job.output_packed(i);
    full[i] = !(packed[i] && job.packed_only);
  }
  Family outputs = written_family("outputs", job.dtype, repeat(f.num_outputs, seq), full, job.offset);
  BitFamily packed_outputs("packed_outputs", job.steps, neurons, packed, job.offset);
  Family state_seqs = written_family("state_seqs", job.dtype, repeat(job.state_seqs ? f.num_states : 0, seq),
                                     job.state_seqs ? some(rng, f.num_states) : std::vector<bool>(), job.offset);
  Family final_states = written_family("final_states", job.dtype, repeat(job.final_states ? f.num_states : 0, job.shape),
                                       job.final_states ? some(rng, f.num_states) : std::vector<bool>(), job.offset);
  // Per step, a saved input may be absent (not written; the backward reads the input itself).
  // Spikes saved as bits go to packed_saved instead.
  const bool pack_spikes = job.training && job.pack_spikes;
  std::vector<bool> saved_present = all(saved_shape.size(), true), saved_packed(saved_shape.size(), false);
  if (job.training && job.checkpoint_every == 0) {
    for (size_t i = 0; i < saved_present.size(); ++i) {
      saved_packed[i] = pack_spikes && p.backward(true).is_saved_packed(i);
      saved_present[i] = !saved_packed[i] && (p.saved_inputs(pack_spikes)[i] < 0 || rng() % 2);
    }
  }
  Family saved = written_family("saved", saved_dtype(job), saved_shape, saved_present, job.offset);
  BitFamily packed_saved("packed_saved", job.steps, neurons, pack_spikes ? saved_packed : std::vector<bool>(),
                         job.offset);
  const CallSeed seed(rng());

  auto buffers = [&](bool gpu) {
    ForwardBuffers b;
    b.seed = seed.pointer(gpu);
    b.steps = job.steps;
    b.neuron_shape = job.shape;
    b.checkpoint_every = job.training ? job.checkpoint_every : 0;
    b.reverse = job.reverse;
    for (Family* fam : {&in.inputs, &in.initial_states, &in.params, &outputs, &state_seqs, &final_states, &saved}) {
      std::vector<TensorView> views = gpu ? fam->device_views() : fam->host_views();
      if (fam == &in.inputs) b.inputs = views;
      if (fam == &in.initial_states) b.initial_states = views;
      if (fam == &in.params) b.params = views;
      if (fam == &outputs) b.outputs = views;
      if (fam == &state_seqs) b.state_seqs = views;
      if (fam == &final_states) b.final_states = views;
      if (fam == &saved) b.saved = views;
    }
    b.packed_outputs = gpu ? packed_outputs.device_views() : packed_outputs.host_views();
    b.packed_saved = gpu ? packed_saved.device_views() : packed_saved.host_views();
    b.pack_spikes = pack_spikes;
    return b;
  };
  cpu::forward(p, buffers(false));
  cuda::forward(p, buffers(true), stream, 0);
  synchronize(stream);

  Report report;
  report.neurons = neurons;
  const Tolerance tol = forward_tolerance(job.dtype);
  for (const Family* fam : {&outputs, &state_seqs, &final_states, &saved}) report.compare(*fam, {tol}, true);
  report.compare_bits(packed_outputs);
  report.compare_bits(packed_saved);
  EXPECT_EQ(report.unwritten, 0) << report.text();
  const int64_t allowed = allowed_flips(p, job.steps, report.neurons);
  if (static_cast<int64_t>(report.bad_neurons.size()) > allowed) {
    std::string read;
    for (int64_t n : report.bad_neurons) {
      if (n >= 0 && read.size() < 2000) read += "\n" + neuron_inputs_text(in, n, job.steps, neurons);
    }
    ADD_FAILURE() << report.bad_neurons.size() << " neurons differ, at most " << allowed << " may (" << report.text()
                  << ")" << read;
  }
}

void check_backward(const Job& job, std::mt19937_64& rng, CUstream stream) {
  const Program& p = *job.program;
  const ir::Step& f = p.forward();
  std::vector<int64_t> seq = {job.steps};
  seq.insert(seq.end(), job.shape.begin(), job.shape.end());
  // The CPU's training forward provides `saved` (or the checkpoints) to both backward passes,
  // so only the backward kernels are compared here (with checkpoints: the recomputation too).
  Inputs in = make_inputs(job, rng, true);
  const CallSeed seed(rng());
  Family saved{"saved", {}, {}, {}, {}};
  for (const std::vector<int64_t>& shape : saved_shapes(job)) saved.host.emplace_back(saved_dtype(job), shape);
  // The pack_spikes policy: its packed values in packed_saved (uploaded below), not in saved.
  std::vector<bool> saved_packed(saved.host.size(), false);
  for (size_t i = 0; i < saved_packed.size(); ++i) {
    saved_packed[i] = job.pack_spikes && job.checkpoint_every == 0 && p.backward(true).is_saved_packed(i);
  }
  BitFamily packed_saved("packed_saved", job.steps, numel_of(job.shape), job.pack_spikes ? saved_packed : std::vector<bool>(),
                         job.offset);
  {
    Family outputs = written_family("outputs", job.dtype, repeat(f.num_outputs, seq), all(f.num_outputs, false), 0);
    ForwardBuffers fb;
    fb.steps = job.steps;
    fb.neuron_shape = job.shape;
    fb.inputs = in.inputs.host_views();
    fb.initial_states = in.initial_states.host_views();
    fb.params = in.params.host_views();
    for (HostTensor& o : outputs.host) fb.outputs.push_back(o.view());
    for (size_t i = 0; i < saved.host.size(); ++i) fb.saved.push_back(saved_packed[i] ? TensorView() : saved.host[i].view());
    fb.packed_saved = packed_saved.host_views();
    fb.pack_spikes = job.pack_spikes;
    fb.checkpoint_every = job.checkpoint_every;
    fb.seed = seed.pointer(false);
    cpu::forward(p, fb);
  }
  for (size_t i = 0; i < saved.host.size(); ++i) {
    saved.device.push_back(saved_packed[i] ? nullptr : std::make_unique<DeviceTensor>(saved.host[i], job.offset));
  }
  for (size_t i = 0; i < packed_saved.device.size(); ++i) {
    if (packed_saved.device[i]) packed_saved.device[i]->upload(packed_saved.host[i]);
  }

  Family grad_outputs = read_grad_family("grad_outputs", rng, job.dtype, f.num_outputs, seq, some(rng, f.num_outputs),
                                         job.grad_output_layouts, job.offset);
  Family grad_state_seqs = read_grad_family("grad_state_seqs", rng, job.dtype, job.grad_state_seqs ? f.num_states : 0,
                                            seq, job.grad_state_seqs ? some(rng, f.num_states) : std::vector<bool>(),
                                            job.grad_state_seq_layouts, job.offset);
  Family grad_final_states = read_family("grad_final_states", rng, job.dtype,
                                         repeat(job.grad_final_states ? f.num_states : 0, job.shape),
                                         job.grad_final_states ? some(rng, f.num_states) : std::vector<bool>(),
                                         -1.0f, 1.0f, job.offset);
  Family grad_inputs = written_family("grad_inputs", job.dtype, repeat(f.num_inputs, seq), some(rng, f.num_inputs), job.offset);
  Family grad_initial_states = written_family("grad_initial_states", job.dtype, repeat(f.num_states, job.shape),
                                              some(rng, f.num_states), job.offset);
  Family grad_params = written_family("grad_params", job.dtype, param_shapes(p, job.shape),
                                      all(f.params.size(), true), job.offset);

  // Half the calls with scalar parameters bring their own (poisoned) scratch, the others use
  // the stream's.
  std::unique_ptr<DeviceTensor> workspace;
  const int64_t workspace_elements = backward_workspace_elements(p, numel_of(job.shape));
  if (workspace_elements > 0 && rng() % 2 == 0) {
    workspace = std::make_unique<DeviceTensor>(DType::F64, std::vector<int64_t>{workspace_elements});
    workspace->poison();
  }
  auto buffers = [&](bool gpu) {
    auto views = [&](Family& fam) { return gpu ? fam.device_views() : fam.host_views(); };
    BackwardBuffers b;
    if (gpu && workspace) b.workspace = workspace->view();
    b.seed = seed.pointer(gpu);
    b.steps = job.steps;
    b.neuron_shape = job.shape;
    b.saved = views(saved);
    b.packed_saved = gpu ? packed_saved.device_views() : packed_saved.host_views();
    b.pack_spikes = job.pack_spikes;
    if (job.checkpoint_every > 0) b.inputs = views(in.inputs);
    b.checkpoint_every = job.checkpoint_every;
    b.params = views(in.params);
    b.grad_outputs = views(grad_outputs);
    b.grad_state_seqs = views(grad_state_seqs);
    b.grad_final_states = views(grad_final_states);
    b.grad_inputs = views(grad_inputs);
    b.grad_initial_states = views(grad_initial_states);
    b.grad_params = views(grad_params);
    if (gpu && job.strided_layout >= 0 && job.checkpoint_every == 0) {  // a saved input is the input's view
      const std::vector<TensorView> inputs = views(in.inputs);
      for (size_t i = 0; i < b.saved.size(); ++i) {
        if (((job.strided_saved_mask() >> i) & 1u) == 0) continue;
        b.saved[i] = inputs[static_cast<size_t>(p.saved_inputs(job.pack_spikes)[i])];
      }
    }
    return b;
  };
  cpu::backward(p, buffers(false));
  cuda::backward(p, buffers(true), stream, 0);
  synchronize(stream);

  Report report;
  report.neurons = numel_of(job.shape);
  const Tolerance tol = gradient_tolerance(job.dtype);
  report.compare(grad_inputs, {tol}, true);
  report.compare(grad_initial_states, {tol}, true);
  // Parameter gradients are sums over T (per-neuron) or T x N (scalar) terms that the CPU and
  // the GPU add in different orders, so the tolerance grows with the number of terms.
  std::vector<Tolerance> param_tolerances;
  for (ir::ParamKind k : f.params) {
    const int64_t terms = job.steps * (k == ir::ParamKind::Scalar ? report.neurons : 1);
    param_tolerances.push_back({tol.atol * std::sqrt(std::max<double>(1.0, static_cast<double>(terms))),
                                std::max(tol.rtol, 1e-3)});
  }
  report.compare(grad_params, param_tolerances, true);
  EXPECT_EQ(report.unwritten, 0) << report.text();
  // Recomputing on the GPU may flip a spike where a transcendental rounds differently (as in
  // the forward): the checkpoint segments, or a spike the backward step derives from saved values
  // through a transcendental. Otherwise the saved values come from the CPU and nothing can flip.
  const bool recomputes = job.checkpoint_every > 0 ? has_transcendental_forward(p)
                                                   : spikes_recomputed_through_transcendentals(p, job.pack_spikes);
  const int64_t allowed = recomputes ? flip_allowance(job.steps, report.neurons) : 0;
  EXPECT_LE(static_cast<int64_t>(report.bad_neurons.size()), allowed) << report.text();
}

void run_job(const Job& job, std::mt19937_64& rng, CUstream stream = nullptr) {
  SCOPED_TRACE(job.describe());
  if (job.backward) {
    check_backward(job, rng, stream);
  } else {
    check_forward(job, rng, stream);
  }
}

// Compiles (or loads from the disk cache) every kernel the jobs need, on all cores at once.
void compile_all(const std::vector<Job>& jobs) {
  std::vector<std::pair<const Program*, codegen::KernelSpec>> work;
  std::set<std::string> seen;
  for (const Job& j : jobs) {
    if (j.steps == 0 || numel_of(j.shape) == 0) continue;  // launches nothing
    const codegen::KernelSpec s = j.spec();
    if (seen.insert(j.program->hash() + s.key()).second) work.push_back({j.program, s});
  }
  std::atomic<size_t> next{0};
  std::vector<std::string> errors(work.size());
  std::vector<std::thread> threads;
  const unsigned count = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  for (unsigned t = 0; t < count; ++t) {
    threads.emplace_back([&] {
      runtime::ContextGuard guard(0);
      for (size_t i = next++; i < work.size(); i = next++) {
        try {
          runtime::kernel_for(*work[i].first, work[i].second, 0, guard.context());
        } catch (const std::exception& e) {
          errors[i] = e.what();
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < work.size(); ++i) {
    EXPECT_EQ(errors[i], "") << work[i].first->neuron().name << " " << work[i].second.key();
  }
}

// ---------------------------------------------------------------------------------------------
// Neurons.

struct NamedProgram {
  std::string label;
  Program program;
};

// Every SpikingJelly option combination of IF, LIF and PLIF; surrogates cycle through all kinds
// (with their default parameters) so every surrogate's backward runs on the GPU.
std::vector<NamedProgram> builtin_programs() {
  std::vector<NamedProgram> out;
  size_t surrogate = 0;
  for (const std::string name : {"if", "lif", "plif"}) {
    for (bool soft : {false, true}) {
      for (bool detach : {false, true}) {
        for (bool decay : {true, false}) {
          if (name == "if" && !decay) continue;
          const ir::SurrogateKind kind = ir::all_surrogates()[surrogate++ % ir::all_surrogates().size()];
          builtins::Options o;
          o.v_reset = soft ? std::nullopt : std::optional<double>(out.size() % 2 ? -0.1 : 0.0);
          o.detach_reset = detach;
          o.decay_input = decay;
          o.v_threshold = out.size() % 3 ? 1.0 : 0.8;
          o.tau = out.size() % 2 ? 2.0 : 3.0;
          o.init_tau = 2.5;
          o.surrogate = {kind, ir::surrogate_info(kind).defaults};
          const ir::Neuron n = name == "if" ? builtins::if_neuron(o)
                               : name == "lif" ? builtins::lif_neuron(o)
                                               : builtins::plif_neuron(o);
          const std::string label = name + (soft ? " soft" : " hard") + (detach ? " detach" : "") +
                                    (decay ? "" : " no-decay") + " " + ir::surrogate_info(kind).name;
          out.push_back({label, Program(n)});
        }
      }
    }
  }
  return out;
}

// Two inputs, two states (one with a nonzero default), two outputs, a per-neuron and a scalar
// parameter, comparisons, where and a transcendental.
const char* const kMultiState = R"(
neuron adaptive
input x
input y
state v = 0.25
state a = 0
const tau = 2.0, tau_a = 5.0, beta = 0.3
param theta[neuron] = 1.0
param w = 0.5
output s
output m
h = v + (x + w * y - v) / tau
s = spike(h - theta - beta * a, atan(alpha = 2))
a = a + (s - a) / tau_a
v = where(h > 2.5, 2.5, h) * (1 - s) + s * 0.1
m = tanh(h) * 0.5 + a
)";

// Every math op beyond the arithmetic of kMultiState, in the forward and (through their
// derivatives) in the backward.
const char* const kMathOps = R"(
neuron math_ops
input x
input y
state v = 0.1
output s
output m
ax = abs(x) + 1
t = tanh(y) * 0.5
h = v * 0.5 + 0.1 * (log1p(ax) + expm1(t) + exp2(t) + log10(ax) + tan(t) + atan(x) + asin(t) + acos(t))
g = 0.05 * (sinh(t) + cosh(t) + asinh(x) + acosh(ax) + atanh(t) + erfc(x) + atan2(x, y) + hypot(x, t) + erfinv(t))
g = g + 0.05 * ndtri(0.5 + 0.8 * t)
s = spike(h + g - 1, sigmoid(alpha = 4))
v = (h + g) * (1 - s)
m = h - g
)";

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda::available(&why)) {
      const char* must = std::getenv("SPIKEJIT_REQUIRE_CUDA");
      if (must && std::string(must) == "1") {
        FAIL() << "SPIKEJIT_REQUIRE_CUDA=1 but CUDA is not available: " << why;
      }
      GTEST_SKIP() << "no CUDA: " << why;
    }
    guard_ = std::make_unique<runtime::ContextGuard>(0);
    seed_ = testing::test_seed();
    rng_.seed(seed_);
  }
  void TearDown() override { guard_.reset(); }

  std::string trace() const { return "seed " + std::to_string(seed_) + " (SPIKEJIT_TEST_SEED replays it)"; }

  // A random neuron shape with N in [lo, hi], one to three dimensions.
  std::vector<int64_t> random_shape(int64_t lo, int64_t hi) {
    const int64_t n = lo + static_cast<int64_t>(rng_() % static_cast<uint64_t>(hi - lo + 1));
    if (n % 6 == 0 && rng_() % 2) return {2, 3, n / 6};
    if (n % 2 == 0 && rng_() % 2) return {n / 2, 2};
    return {n};
  }

  // The forward kinds and the backward of one neuron for one dtype. `variant` picks which
  // optional families appear, so that over several calls every spec is covered.
  std::vector<Job> jobs_for(const NamedProgram& np, DType dtype, size_t variant, int64_t lo, int64_t hi) {
    std::vector<Job> jobs;
    auto job = [&](bool backward) {
      Job j;
      j.label = np.label;
      j.program = &np.program;
      j.dtype = dtype;
      j.backward = backward;
      j.steps = 1 + static_cast<int64_t>(rng_() % 12);
      j.shape = random_shape(lo, hi);
      return j;
    };
    Job a = job(false);  // inference, state sequences on odd variants
    a.state_seqs = variant % 2 == 1;
    Job b = job(false);  // final states, state sequences on even variants
    b.final_states = true;
    b.state_seqs = variant % 2 == 0;
    Job c = job(false);  // training forward
    c.training = true;
    c.final_states = true;
    c.state_seqs = variant % 2 == 1;
    Job d = job(true);
    d.grad_state_seqs = variant % 4 == 1 || variant % 4 == 3;
    d.grad_final_states = variant % 4 >= 2;
    jobs.insert(jobs.end(), {a, b, c, d});
    return jobs;
  }

  // Every kind of one neuron, its four variants in each dtype, N in [1, max_neurons], against the
  // CPU executor.
  void run_every_kind(const NamedProgram& np, std::initializer_list<DType> dtypes, int64_t max_neurons);

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<runtime::ContextGuard> guard_;
};

TEST_F(CudaKernels, BuiltinsEveryOptionComboEveryKindEveryDtype) {
  SCOPED_TRACE(trace());
  const std::vector<NamedProgram> programs = builtin_programs();
  std::vector<Job> jobs;
  for (size_t i = 0; i < programs.size(); ++i) {
    for (DType d : {DType::F32, DType::F16, DType::BF16}) {
      for (const Job& j : jobs_for(programs[i], d, i + static_cast<size_t>(d), 1, 3000)) jobs.push_back(j);
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

void CudaKernels::run_every_kind(const NamedProgram& np, std::initializer_list<DType> dtypes, int64_t max_neurons) {
  std::vector<Job> jobs;
  for (DType d : dtypes) {
    for (size_t variant = 0; variant < 4; ++variant) {
      for (const Job& j : jobs_for(np, d, variant, 1, max_neurons)) jobs.push_back(j);
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

TEST_F(CudaKernels, MultiStateNeuronEveryKindEveryDtype) {
  SCOPED_TRACE(trace());
  run_every_kind({"adaptive", Program::from_text(kMultiState)}, {DType::F32, DType::F16, DType::BF16}, 5000);
}

// Values of parameters alone, computed once per thread before the time loop (hoist_values):
// tests/neurons/invariants.sj, every kind and dtype, against the CPU executor.
TEST_F(CudaKernels, HoistedValuesNeuronEveryKindEveryDtype) {
  SCOPED_TRACE(trace());
  run_every_kind({"invariants", testing::test_neuron("invariants")}, {DType::F32, DType::F16, DType::BF16}, 3000);
}

TEST_F(CudaKernels, MathOpsNeuronEveryKind) {
  SCOPED_TRACE(trace());
  run_every_kind({"math_ops", Program::from_text(kMathOps)}, {DType::F32, DType::BF16}, 3000);
}

// A neuron that draws (tests/neurons/noisy_threshold.sj): every kind, per step and with
// checkpoints (whose backward draws again), both variants, against the CPU with the same seed;
// float32 for every spec, bfloat16 for some (each spec is a kernel to compile).
TEST_F(CudaKernels, RandomNeuronEveryKindWithCheckpoints) {
  SCOPED_TRACE(trace());
  const NamedProgram np{"noisy_threshold", testing::test_neuron("noisy_threshold")};
  std::vector<Job> jobs;
  for (DType d : {DType::F32, DType::BF16}) {
    for (size_t variant = d == DType::F32 ? 0 : 2; variant < 4; ++variant) {
      for (Job j : jobs_for(np, d, variant, variant < 2 ? 1 : 2000, variant < 2 ? 300 : 5000)) {
        if (j.training || j.backward) j.checkpoint_every = variant % 2 == 0 ? 0 : 1 + static_cast<int64_t>(rng_() % 5);
        jobs.push_back(j);
      }
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

// The draws themselves are bit for bit those of the CPU (ir/random.h), whatever the variant.
TEST_F(CudaKernels, DrawsEqualTheCpuBitForBit) {
  SCOPED_TRACE(trace());
  const Program p = Program::from_text(
      "neuron draws\ninput x\nstate v = 0\noutput a\noutput b\na = uniform()\nb = uniform() + 0 * x\nv = v\n");
  for (int64_t N : {int64_t{1}, int64_t{333}, int64_t{100003}}) {
    const int64_t T = 5;
    const CallSeed seed(rng_());
    HostTensor x = random_tensor(rng_, DType::F32, {T, N}, -1, 1);
    HostTensor a(DType::F32, {T, N}), b(DType::F32, {T, N});
    DeviceTensor dx(x), da(DType::F32, {T, N}), db(DType::F32, {T, N});
    da.poison();
    db.poison();
    ForwardBuffers host, device;
    host.steps = device.steps = T;
    host.neuron_shape = device.neuron_shape = {N};
    host.inputs = {x.view()};
    host.outputs = {a.view(), b.view()};
    host.seed = seed.pointer(false);
    device.inputs = {dx.view()};
    device.outputs = {da.view(), db.view()};
    device.seed = seed.pointer(true);
    cpu::forward(p, host);
    cuda::forward(p, device, nullptr, 0);
    synchronize(nullptr);
    EXPECT_EQ(da.to_host().bytes, a.bytes) << "N " << N;
    EXPECT_EQ(db.to_host().bytes, b.bytes) << "N " << N;
  }
}

// Enough neurons for the 16-byte vector variant; N with and without a partial last vector, and
// misaligned base pointers (which must take the element-wise path).
TEST_F(CudaKernels, LargeNeuronCountsVectorPathTailsAndMisalignedPointers) {
  SCOPED_TRACE(trace());
  const NamedProgram lif{"lif", Program(builtins::lif_neuron())};
  const NamedProgram adaptive{"adaptive", Program::from_text(kMultiState)};
  std::vector<Job> jobs;
  for (const NamedProgram* np : {&lif, &adaptive}) {
    for (DType d : {DType::F32, DType::F16, DType::BF16}) {
      for (int shape_kind = 0; shape_kind < 3; ++shape_kind) {
        std::vector<Job> some_jobs = jobs_for(*np, d, static_cast<size_t>(shape_kind), 1, 1);
        const int64_t base = 1200000 + 16 * static_cast<int64_t>(rng_() % 4096);
        for (Job& j : some_jobs) {
          j.steps = 1 + static_cast<int64_t>(rng_() % 4);
          j.shape = {shape_kind == 1 ? base + 1 + static_cast<int64_t>(rng_() % 7) : base};
          j.offset = shape_kind == 2 ? 1 : 0;
          jobs.push_back(j);
        }
      }
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

// Gradient sequences broadcast over T and/or S (the expanded gradient of `y.sum()`) are read in
// place, with a kernel specialised for the layout, and give the gradients of their dense copy:
// every layout for each output and state sequence, both variants (small and large N, N not a
// multiple of the vector width), misaligned bases, checkpoints.
TEST_F(CudaKernels, BroadcastGradientsEqualTheirDenseCopies) {
  SCOPED_TRACE(trace());
  const NamedProgram lif{"lif", Program(builtins::lif_neuron())};
  const NamedProgram plif{"plif", Program(builtins::plif_neuron())};
  const NamedProgram adaptive{"adaptive", Program::from_text(kMultiState)};
  auto random_layout = [&] {
    SequenceLayout l;
    const uint64_t code = rng_() % 4;
    l.same_each_step = (code & 1) != 0;
    l.same_each_neuron = (code & 2) != 0;
    return l;
  };
  std::vector<Job> jobs;
  for (const NamedProgram* np : {&lif, &plif, &adaptive}) {
    for (DType d : {DType::F32, DType::F16, DType::BF16}) {
      for (int code = 0; code < 4; ++code) {
        Job j = jobs_for(*np, d, static_cast<size_t>(code), 1, 1)[3];  // the backward
        j.steps = 1 + static_cast<int64_t>(rng_() % 40);
        const bool large = rng_() % 2 == 0;
        j.shape = random_shape(large ? 600000 : 1, large ? 600003 : 5000);
        j.offset = rng_() % 4 == 0 ? 1 : 0;
        j.checkpoint_every = rng_() % 4 == 0 ? 1 + static_cast<int64_t>(rng_() % 8) : 0;
        j.grad_output_layouts.assign(static_cast<size_t>(np->program.forward().num_outputs), SequenceLayout());
        j.grad_output_layouts[0].same_each_step = (code & 1) != 0;  // every layout on output 0
        j.grad_output_layouts[0].same_each_neuron = (code & 2) != 0;
        for (size_t i = 1; i < j.grad_output_layouts.size(); ++i) j.grad_output_layouts[i] = random_layout();
        if (j.grad_state_seqs) {
          for (int i = 0; i < np->program.forward().num_states; ++i) j.grad_state_seq_layouts.push_back(random_layout());
        }
        jobs.push_back(j);
      }
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

// Inputs, initial states and per-neuron parameters read through strided views (and, in a
// per-step backward, saved inputs through their input's view) give the CPU's results: every
// layout, every kind, both variants (small and large N), checkpoints, zero steps.
TEST_F(CudaKernels, StridedReadsEqualTheCpu) {
  SCOPED_TRACE(trace());
  const NamedProgram lif{"lif", Program(builtins::lif_neuron())};
  const NamedProgram adaptive{"adaptive", Program::from_text(kMultiState)};
  std::vector<Job> jobs;
  for (const NamedProgram* np : {&lif, &adaptive}) {
    for (DType d : {DType::F32, DType::F16, DType::BF16}) {
      for (int layout = 0; layout < kStridedLayouts; ++layout) {
        const bool large = (layout + static_cast<int>(d)) % 2 == 0;
        for (Job j : jobs_for(*np, d, static_cast<size_t>(layout), large ? 100000 : 1, large ? 100011 : 3000)) {
          j.strided_layout = layout;
          if (j.training || j.backward) j.checkpoint_every = rng_() % 3 == 0 ? 1 + static_cast<int64_t>(rng_() % 6) : 0;
          if (!j.backward && rng_() % 8 == 0) j.steps = 0;
          jobs.push_back(j);
        }
      }
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

TEST_F(CudaKernels, ReversedInferenceEqualsTheCpu) {
  // The CPU's reversed steps equal a forward over reversed sequences (test_cpu_executor).
  SCOPED_TRACE(trace());
  const NamedProgram lif{"lif", Program(builtins::lif_neuron())};
  const NamedProgram adaptive{"adaptive", Program::from_text(kMultiState)};
  std::vector<Job> jobs;
  for (const NamedProgram* np : {&lif, &adaptive}) {
    for (DType d : {DType::F32, DType::F16, DType::BF16}) {
      for (size_t variant = 0; variant < 4; ++variant) {
        const bool large = variant % 2 == 0;
        for (Job j : jobs_for(*np, d, variant, large ? 50000 : 1, large ? 50011 : 3000)) {
          if (j.training || j.backward) continue;
          j.reverse = true;
          if (variant == 3) j.steps = 40;  // past the deeper prefetch of small layers
          if (variant == 1 && np == &lif) j.strided_layout = 0;
          jobs.push_back(j);
        }
      }
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

TEST_F(CudaKernels, EdgeShapesZeroAndOneStepsZeroAndOneNeurons) {
  SCOPED_TRACE(trace());
  const NamedProgram plif{"plif", Program(builtins::plif_neuron())};
  const NamedProgram adaptive{"adaptive", Program::from_text(kMultiState)};
  std::vector<Job> jobs;
  for (const NamedProgram* np : {&plif, &adaptive}) {
    for (DType d : {DType::F32, DType::F16, DType::BF16}) {
      for (const auto& [steps, shape] : std::vector<std::pair<int64_t, std::vector<int64_t>>>{
               {0, {37}}, {1, {37}}, {5, {0}}, {0, {0}}, {3, {1}}, {1, {1}}, {4, {3, 0, 5}}}) {
        for (Job j : jobs_for(*np, d, rng_() % 4, 1, 1)) {
          j.steps = steps;
          j.shape = shape;
          jobs.push_back(j);
        }
      }
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

// ---------------------------------------------------------------------------------------------
// Bit-packed spikes: packed outputs and the pack_spikes save policy. scripts/gpu_check.sh runs
// these (CudaKernels.Packed*) under compute-sanitizer too: a byte written past a row's end, or by
// a warp whose threads did not all reach a ballot, shows up there.

std::vector<NamedProgram> packed_programs() {
  builtins::Options soft;
  soft.v_reset.reset();
  return {{"if", Program(builtins::if_neuron())},
          {"lif soft", Program(builtins::lif_neuron(soft))},
          {"plif", Program(builtins::plif_neuron())},
          {"adaptive", Program::from_text(kMultiState)},
          {"ste_lif", testing::test_neuron("ste_lif")},
          {"two_thresholds", testing::test_neuron("two_thresholds")},
          {"mixed_outputs", testing::test_neuron("mixed_outputs")}};
}

// Every spike-valued output packed, full width too or not; the training kinds under pack_spikes
// or not.
void make_packed(Job& j, std::mt19937_64& rng) {
  if (!j.backward) {
    j.packed_outputs = j.program->packable_outputs();
    j.packed_only = rng() % 2 == 0;
  }
  j.pack_spikes = (j.training || j.backward) && rng() % 4 != 0;
}

// Against the CPU's bytes and values: N not a multiple of 8 or 32 (row tails, partial warps),
// N large enough for the vector variant (its last warp partial: that warp takes the scalar path
// together), N with a partial last vector, misaligned bases; every forward kind and the backward
// reading spikes saved as bits.
TEST_F(CudaKernels, PackedOutputsAndSavedBitsEqualTheCpu) {
  SCOPED_TRACE(trace());
  const std::vector<NamedProgram> programs = packed_programs();
  std::vector<Job> jobs;
  size_t variant = 0;
  for (const NamedProgram& np : programs) {
    for (DType d : {DType::F32, DType::F16, DType::BF16}) {
      for (int regime = 0; regime < 4; ++regime) {
        for (Job j : jobs_for(np, d, variant++, 1, 3000)) {
          make_packed(j, rng_);
          if (regime >= 2) {
            j.steps = 1 + static_cast<int64_t>(rng_() % 5);
            j.shape = {600000 + (regime == 3 ? 1 + static_cast<int64_t>(rng_() % 7) : 0)};
          }
          j.offset = regime == 1 || rng_() % 5 == 0 ? 1 : 0;
          jobs.push_back(j);
        }
      }
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

// Sequences longer than the one-neuron-per-thread variant's register ring plus the steps it asks
// of L2 beyond it (kRingL2Ahead), so that rows asked of L2 are read: every kind, small N, dense
// and repeated gradient rows, saved spikes as bits.
TEST_F(CudaKernels, LongSequencesPastTheL2LookAhead) {
  SCOPED_TRACE(trace());
  const NamedProgram lif{"lif", Program(builtins::lif_neuron())};
  const NamedProgram adaptive{"adaptive", Program::from_text(kMultiState)};
  const std::vector<NamedProgram> packed = packed_programs();
  std::vector<const NamedProgram*> programs = {&lif, &adaptive};
  for (const NamedProgram& np : packed) programs.push_back(&np);
  std::vector<Job> jobs;
  size_t variant = 0;
  for (size_t p = 0; p < programs.size(); ++p) {
    for (DType d : {DType::F32, DType::F16}) {
      for (Job j : jobs_for(*programs[p], d, variant++, 1, 3000)) {
        if (p >= 2) make_packed(j, rng_);
        j.steps = 49 + static_cast<int64_t>(rng_() % 160);
        j.offset = rng_() % 4 == 0 ? 1 : 0;
        if (j.backward && rng_() % 2 == 0) {
          j.grad_output_layouts.assign(static_cast<size_t>(programs[p]->program.forward().num_outputs),
                                       SequenceLayout());
          j.grad_output_layouts[0].same_each_step = true;
        }
        jobs.push_back(j);
      }
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

// T = 0, N = 0 (nothing launched, nothing written), and N around the byte and warp sizes.
TEST_F(CudaKernels, PackedEdgeShapes) {
  SCOPED_TRACE(trace());
  const std::vector<NamedProgram> programs = packed_programs();
  std::vector<Job> jobs;
  for (const NamedProgram& np : programs) {
    for (const auto& [steps, shape] : std::vector<std::pair<int64_t, std::vector<int64_t>>>{
             {0, {37}}, {5, {0}}, {0, {0}}, {3, {1}}, {2, {7}}, {2, {8}}, {2, {9}}, {3, {31}}, {3, {32}},
             {3, {33}}, {2, {255}}, {2, {257}}, {4, {3, 0, 5}}, {2, {3, 11}}}) {
      for (Job j : jobs_for(np, DType::F32, rng_() % 4, 1, 1)) {
        make_packed(j, rng_);
        j.dtype = rng_() % 2 ? DType::F16 : DType::F32;
        j.steps = steps;
        j.shape = shape;
        jobs.push_back(j);
      }
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

// The vector variant where its last warp is partial (threads without neurons): N just large
// enough for it on an H200 (132 SMs), not a multiple of the warp's 32 * EPT neurons. Small enough
// for compute-sanitizer.
TEST_F(CudaKernels, PackedVectorVariantPartialLastWarp) {
  SCOPED_TRACE(trace());
  const std::vector<NamedProgram> programs = packed_programs();
  std::vector<Job> jobs;
  for (const NamedProgram& np : programs) {
    if (np.label != "lif soft" && np.label != "ste_lif" && np.label != "mixed_outputs") continue;
    for (DType d : {DType::F32, DType::F16}) {
      for (Job j : jobs_for(np, d, jobs.size(), 1, 1)) {
        make_packed(j, rng_);
        j.steps = 3;
        j.shape = {140000 + 8 * static_cast<int64_t>(rng_() % 4)};
        jobs.push_back(j);
      }
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

// Bad packed buffers are rejected before anything is launched.
TEST_F(CudaKernels, PackedRejectsBadBuffers) {
  const Program mixed = testing::test_neuron("mixed_outputs");
  const int64_t steps = 3, n = 45;
  DeviceTensor x(DType::F32, {steps, n}), theta(DType::F32, {n}), s(DType::F32, {steps, n});
  DeviceBytes bits({steps, packed_row_bytes(n)}, 0), short_bits({steps, n / 8}, 0);
  ForwardBuffers f;
  f.steps = steps;
  f.neuron_shape = {n};
  f.inputs = {x.view()};
  f.params = {theta.view()};
  f.outputs = {s.view(), TensorView(), TensorView()};
  f.packed_outputs = {PackedView(), bits.view(), short_bits.view()};
  for (const auto& [packed, argument] : std::vector<std::pair<std::vector<PackedView>, std::string>>{
           {{PackedView(), bits.view(), short_bits.view()}, "packed_outputs[2]"},  // m: not spike-valued
           {{PackedView(), short_bits.view(), PackedView()}, "packed_outputs[1]"},  // ceil(45 / 8) = 6 bytes a row
           {{PackedView(), PackedView(), PackedView()}, "outputs[1]"}}) {           // neither form of output 1
    f.packed_outputs = packed;
    try {
      cuda::forward(mixed, f, nullptr, 0);
      ADD_FAILURE() << "accepted; expected an error naming " << argument;
    } catch (const ArgumentError& e) {
      EXPECT_EQ(e.argument(), argument) << e.what();
    }
  }
}

// Checkpoints (checkpoint_every = k): the training forward's checkpoints and the backward's
// recomputation equal the CPU executor's checkpoint mode (fp32 checkpoints and unrounded
// recomputed values on both). T not a multiple of k, odd N, the vector path (large N) and the
// segment lengths that keep a segment in registers (small k) or in local memory (large k).
TEST_F(CudaKernels, CheckpointsEqualTheCpuCheckpoints) {
  SCOPED_TRACE(trace());
  std::vector<NamedProgram> programs;
  for (ir::SurrogateKind kind : {ir::SurrogateKind::Sigmoid, ir::SurrogateKind::Rect, ir::SurrogateKind::ATan}) {
    builtins::Options o;
    o.surrogate = {kind, ir::surrogate_info(kind).defaults};
    o.v_reset = kind == ir::SurrogateKind::ATan ? std::nullopt : std::optional<double>(0.0);
    o.detach_reset = kind == ir::SurrogateKind::Rect;
    const std::string sg = ir::surrogate_info(kind).name;
    programs.push_back({"if " + sg, Program(builtins::if_neuron(o))});
    programs.push_back({"lif " + sg, Program(builtins::lif_neuron(o))});
    programs.push_back({"plif " + sg, Program(builtins::plif_neuron(o))});
  }
  programs.push_back({"adaptive", Program::from_text(kMultiState)});
  const std::vector<int64_t> intervals = {1, 3, 7, 16, 100, kMaxCheckpointEvery};
  std::vector<Job> jobs;
  size_t variant = 0;
  for (const NamedProgram& np : programs) {
    for (DType d : {DType::F32, DType::F16, DType::BF16}) {
      for (int64_t k : intervals) {
        ++variant;
        for (Job j : jobs_for(np, d, variant, 1, 3001)) {
          if (!j.training && !j.backward) continue;
          j.checkpoint_every = k;
          // A partial last segment, or whole segments; k = 256 stays one (partial) segment.
          const int64_t tail = variant % 2 ? 1 + static_cast<int64_t>(rng_() % 5) : 0;
          j.steps = k * (1 + static_cast<int64_t>(rng_() % 3)) + tail;
          if (k >= 100) j.steps = 1 + static_cast<int64_t>(rng_() % (k + 20));
          const int64_t odd = static_cast<int64_t>(rng_() % 1500) * 2 + 1;
          const int64_t wide = 200000 + 3 * static_cast<int64_t>(variant % 2);  // vector path (+ tail)
          j.shape = {variant % 5 == 0 ? wide : odd};
          jobs.push_back(j);
        }
      }
    }
  }
  // T = 0 and T = 1, and N = 0.
  const std::vector<std::pair<int64_t, std::vector<int64_t>>> edges = {{0, {37}}, {1, {37}}, {5, {0}}};
  for (const auto& [steps, shape] : edges) {
    for (Job j : jobs_for(programs.back(), DType::F16, 1, 1, 1)) {
      if (!j.training && !j.backward) continue;
      j.checkpoint_every = 2;
      j.steps = steps;
      j.shape = shape;
      jobs.push_back(j);
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

// A few checkpoint kernels, small enough for compute-sanitizer (the test above takes minutes
// under it): PLIF (a scalar parameter, one state) and the two-state neuron, both storage widths,
// intervals that keep a segment in registers with and without prefetching the next one (4, 8)
// and that spill (17), whole and partial last segments, narrow and vector (with a tail) paths.
TEST_F(CudaKernels, CheckpointEdgesForSanitizers) {
  SCOPED_TRACE(trace());
  builtins::Options o;
  o.surrogate = {ir::SurrogateKind::Sigmoid, ir::surrogate_info(ir::SurrogateKind::Sigmoid).defaults};
  const std::vector<NamedProgram> programs = {{"plif sigmoid", Program(builtins::plif_neuron(o))},
                                              {"adaptive", Program::from_text(kMultiState)}};
  std::vector<Job> jobs;
  size_t variant = 0;
  for (const NamedProgram& np : programs) {
    for (DType d : {DType::F32, DType::F16}) {
      for (int64_t k : {1, 4, 8, 17}) {
        ++variant;
        for (Job j : jobs_for(np, d, variant, 1, 3001)) {
          if (!j.training && !j.backward) continue;
          j.checkpoint_every = k;
          j.steps = variant % 2 ? 2 * k + 3 : 2 * k;
          j.shape = {variant % 4 == 1 ? int64_t{200003} : int64_t{37} + static_cast<int64_t>(variant)};
          jobs.push_back(j);
        }
      }
    }
  }
  compile_all(jobs);
  for (const Job& j : jobs) run_job(j, rng_);
}

// Bad checkpoint buffers are rejected before anything is launched.
TEST_F(CudaKernels, RejectsBadCheckpoints) {
  const Program lif(builtins::lif_neuron());
  const int64_t n = 64;
  DeviceTensor x(DType::F16, {5, n}), s(DType::F16, {5, n}), ck16(DType::F16, {3, n}), ck(DType::F32, {3, n});
  ForwardBuffers f;
  f.steps = 5;
  f.neuron_shape = {n};
  f.inputs = {x.view()};
  f.outputs = {s.view()};
  f.saved = {ck16.view()};
  f.checkpoint_every = 2;
  try {
    cuda::forward(lif, f, nullptr, 0);
    FAIL() << "float16 checkpoints were accepted";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "saved[0]") << e.what();
  }
  f.saved = {ck.view()};
  f.checkpoint_every = kMaxCheckpointEvery + 1;
  try {
    cuda::forward(lif, f, nullptr, 0);
    FAIL() << "a checkpoint interval past the limit was accepted";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "checkpoint_every") << e.what();
  }
  BackwardBuffers b;
  b.steps = 5;
  b.neuron_shape = {n};
  b.saved = {ck.view()};
  b.checkpoint_every = 2;
  b.grad_inputs = {s.view()};
  try {
    cuda::backward(lif, b, nullptr, 0);
    FAIL() << "a checkpointed backward without inputs was accepted";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "inputs") << e.what();
  }
}

TEST_F(CudaKernels, RunsOnCallerStreamsFromManyThreads) {
  SCOPED_TRACE(trace());
  const NamedProgram adaptive{"adaptive", Program::from_text(kMultiState)};
  std::vector<Job> jobs = jobs_for(adaptive, DType::F32, 1, 100, 20000);
  compile_all(jobs);
  std::vector<std::thread> threads;
  std::vector<std::string> failures(4);
  for (size_t t = 0; t < failures.size(); ++t) {
    threads.emplace_back([&, t] {
      runtime::ContextGuard guard(0);
      CUstream stream = nullptr;
      check_cuda(driver().cuStreamCreate(&stream, 1 /* non-blocking */), "cuStreamCreate");
      std::mt19937_64 rng(seed_ + t);
      for (int round = 0; round < 3; ++round) {
        for (const Job& j : jobs) {
          try {
            if (j.backward) {
              check_backward(j, rng, stream);
            } else {
              check_forward(j, rng, stream);
            }
          } catch (const std::exception& e) {
            failures[t] = e.what();
          }
        }
      }
      driver().cuStreamDestroy(stream);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& f : failures) EXPECT_EQ(f, "");
}

TEST_F(CudaKernels, WarmCallsDoNotCompile) {
  SCOPED_TRACE(trace());
  const NamedProgram lif{"lif", Program(builtins::lif_neuron())};
  std::vector<Job> jobs = jobs_for(lif, DType::F32, 0, 10, 1000);
  for (const Job& j : jobs) run_job(j, rng_);
  const runtime::CacheInfo before = runtime::cache_info();
  for (const Job& j : jobs) run_job(j, rng_);
  const runtime::CacheInfo after = runtime::cache_info();
  EXPECT_EQ(after.compiles, before.compiles);
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  EXPECT_GE(after.memory_hits, before.memory_hits + jobs.size());
}

TEST_F(CudaKernels, RejectsMixedDtypesFloat64AndBadDevices) {
  const Program lif(builtins::lif_neuron());
  const int64_t n = 64;
  DeviceTensor x(DType::F32, {2, n}), s(DType::F16, {2, n}), x64(DType::F64, {2, n}), s64(DType::F64, {2, n});
  ForwardBuffers mixed;
  mixed.steps = 2;
  mixed.neuron_shape = {n};
  mixed.inputs = {x.view()};
  mixed.outputs = {s.view()};
  try {
    cuda::forward(lif, mixed, nullptr, 0);
    FAIL() << "mixed dtypes were accepted";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "outputs[0]") << e.what();
  }
  ForwardBuffers f64 = mixed;
  f64.inputs = {x64.view()};
  f64.outputs = {s64.view()};
  EXPECT_THROW(cuda::forward(lif, f64, nullptr, 0), ArgumentError);
  ForwardBuffers good = mixed;
  DeviceTensor s32(DType::F32, {2, n});
  good.outputs = {s32.view()};
  try {
    cuda::forward(lif, good, nullptr, runtime::device_count());
    FAIL() << "a device ordinal past the last device was accepted";
  } catch (const ArgumentError& e) {
    EXPECT_EQ(e.argument(), "device") << e.what();
  }
  EXPECT_THROW(cuda::forward(lif, good, nullptr, -1), ArgumentError);
}

// T x N > 2^31 elements: 64-bit indexing. fp16 LIF, T = 2, N = 1.1e9 (4.4 GB per sequence);
// a strided sample of neurons (and the last ones) is checked against the CPU on those neurons.
TEST_F(CudaKernels, MoreThan2To31ElementsUse64BitIndexing) {
  SCOPED_TRACE(trace());
  const Program lif(builtins::lif_neuron());
  // N a multiple of 8: the 16-byte vector path, with element offsets past 2^31.
  const int64_t steps = 2, n = 1100000000 + 8 * static_cast<int64_t>(rng_() % 1000);
  const size_t seq_bytes = static_cast<size_t>(steps * n) * 2, state_bytes = static_cast<size_t>(n) * 2;
  size_t free_bytes = 0, total_bytes = 0;
  check_cuda(driver().cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo");
  if (free_bytes < 2 * seq_bytes + 2 * state_bytes + (size_t(1) << 30)) {
    GTEST_SKIP() << "needs " << (2 * seq_bytes + 2 * state_bytes) / 1e9 << " GB of free device memory, "
                 << free_bytes / 1e9 << " GB free";
  }
  // Input value of (t, j): a hash of the index, in [-1, 3.5).
  const uint64_t salt = seed_;
  auto value = [salt](int64_t index) {
    uint64_t z = static_cast<uint64_t>(index) + salt + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>((z >> 40) * (1.0 / 16777216.0) * 4.5 - 1.0);
  };
  std::vector<uint16_t> host(static_cast<size_t>(steps * n));
  const int64_t chunk = 1 << 22;
  parallel_for((steps * n + chunk - 1) / chunk, 0, [&](int64_t c) {
    const int64_t end = std::min(steps * n, (c + 1) * chunk);
    for (int64_t i = c * chunk; i < end; ++i) host[static_cast<size_t>(i)] = float_to_half(value(i));
  });
  DeviceTensor x(DType::F16, {steps, n}), s(DType::F16, {steps, n}), v(DType::F16, {n}), v0(DType::F16, {n});
  check_cuda(driver().cuMemcpyHtoD(x.pointer(), host.data(), seq_bytes), "cuMemcpyHtoD");
  host.clear();
  host.shrink_to_fit();
  // Initial state: a constant, so the sampled CPU problem can rebuild it.
  check_cuda(driver().cuMemsetD16Async(v0.pointer(), float_to_half(0.375f), static_cast<size_t>(n), nullptr),
             "cuMemsetD16Async");
  s.poison();
  v.poison();
  ForwardBuffers gpu;
  gpu.steps = steps;
  gpu.neuron_shape = {n};
  gpu.inputs = {x.view()};
  gpu.initial_states = {v0.view()};
  gpu.outputs = {s.view()};
  gpu.final_states = {v.view()};
  cuda::forward(lif, gpu, nullptr, 0);
  synchronize(nullptr);

  // Sampled neurons: a stride across N, plus the first and the last few.
  std::vector<int64_t> sample;
  const int64_t stride = 524287;
  for (int64_t j = static_cast<int64_t>(rng_() % stride); j < n; j += stride) sample.push_back(j);
  for (int64_t j : {int64_t(0), int64_t(1), n - 3, n - 2, n - 1}) sample.push_back(j);
  const int64_t m = static_cast<int64_t>(sample.size());
  HostTensor cx(DType::F16, {steps, m}), cs(DType::F16, {steps, m}), cv(DType::F16, {m}), cv0(DType::F16, {m});
  for (int64_t k = 0; k < m; ++k) {
    cv0.set(k, 0.375f);
    for (int64_t t = 0; t < steps; ++t) cx.set(t * m + k, half_to_float(float_to_half(value(t * n + sample[k]))));
  }
  ForwardBuffers cpu_buffers;
  cpu_buffers.steps = steps;
  cpu_buffers.neuron_shape = {m};
  cpu_buffers.inputs = {cx.view()};
  cpu_buffers.initial_states = {cv0.view()};
  cpu_buffers.outputs = {cs.view()};
  cpu_buffers.final_states = {cv.view()};
  cpu::forward(lif, cpu_buffers);

  int64_t bad = 0;
  std::string first_bad;
  auto device_half = [](CUdeviceptr base, int64_t index) {
    uint16_t h = 0;
    check_cuda(driver().cuMemcpyDtoH(&h, base + static_cast<CUdeviceptr>(index) * 2, 2), "cuMemcpyDtoH");
    return h;
  };
  for (int64_t k = 0; k < m; ++k) {
    for (int64_t t = 0; t < steps; ++t) {
      const uint16_t got = device_half(s.pointer(), t * n + sample[k]);
      if (got != float_to_half(cs.get(t * m + k))) {
        ++bad;
        if (first_bad.empty()) first_bad = "spike t=" + std::to_string(t) + " j=" + std::to_string(sample[k]);
      }
    }
    if (device_half(v.pointer(), sample[k]) != float_to_half(cv.get(k))) {
      ++bad;
      if (first_bad.empty()) first_bad = "final state j=" + std::to_string(sample[k]);
    }
  }
  EXPECT_EQ(bad, 0) << "of " << m << " sampled neurons; first: " << first_bad;
}

}  // namespace
}  // namespace spikejit
