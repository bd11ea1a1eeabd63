// Large CPU buffers of the neuron calls, kept for reuse when PyTorch frees them.
//
// glibc serves blocks of a few MiB with fresh pages from the kernel and returns them on free, so
// every training step that allocates its outputs, saved values and input gradient anew faults
// their pages in again (docs/benchmarks.md: three quarters of a large CPU step). A block taken
// from here is handed to PyTorch as a DLPack capsule whose deleter gives it back when the last
// tensor or view of it dies (on any thread, without the GIL); the next call of the same size
// takes it again with its pages mapped. At most `limit` bytes are kept (SPIKEJIT_CPU_POOL_MIB,
// default 1024; 0 keeps none); `clear` frees what is kept.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <Python.h>
#include <nanobind/stl/vector.h>
#include <pthread.h>

#include "bindings.h"
#include "spikejit/error.h"
#include "spikejit/tensor.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace spikejit::python {
namespace {

constexpr size_t kAlign = 64;

size_t limit_from_env() {
  const char* text = std::getenv("SPIKEJIT_CPU_POOL_MIB");
  if (text == nullptr || *text == '\0') return size_t{1024} << 20;
  char* end = nullptr;
  const long long mib = std::strtoll(text, &end, 10);
  if (*end != '\0' || mib < 0 || mib > (1LL << 40)) {
    throw ArgumentError("SPIKEJIT_CPU_POOL_MIB", "a count of MiB from 0 to 2^40", "'" + std::string(text) + "'");
  }
  return static_cast<size_t>(mib) << 20;
}

class CpuPool {
 public:
  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(bytes);
      if (it != free_.end()) {
        void* block = it->second;
        free_.erase(it);
        cached_ -= bytes;
        ++reuses_;
        return block;
      }
      ++allocations_;
    }
    void* block = std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
    if (block == nullptr) throw std::bad_alloc();
    return block;
  }

  void give_back(void* block, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cached_ + bytes <= limit_) {
      free_.emplace(bytes, block);
      cached_ += bytes;
    } else {
      std::free(block);
    }
  }

  size_t clear() {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t freed = cached_;
    for (const auto& entry : free_) std::free(entry.second);
    free_.clear();
    cached_ = 0;
    return freed;
  }

  nb::dict info() {
    size_t cached = 0, blocks = 0, limit = 0;
    uint64_t allocations = 0, reuses = 0;
    {  // (Python objects are made after the lock: a deleter may wait for it on another thread.)
      std::lock_guard<std::mutex> lock(mutex_);
      cached = cached_, blocks = free_.size(), limit = limit_, allocations = allocations_, reuses = reuses_;
    }
    nb::dict d;
    d["cached_bytes"] = cached;
    d["cached_blocks"] = blocks;
    d["limit_bytes"] = limit;
    d["allocations"] = allocations;
    d["reuses"] = reuses;
    return d;
  }

  void set_limit(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = bytes;
    for (auto it = free_.begin(); cached_ > limit_ && it != free_.end();) {
      cached_ -= it->first;
      std::free(it->second);
      it = free_.erase(it);
    }
  }

  // A fork while another thread holds the mutex would leave it locked in the child.
  void lock_for_fork() { mutex_.lock(); }
  void unlock_after_fork() { mutex_.unlock(); }

 private:
  std::mutex mutex_;
  std::unordered_multimap<size_t, void*> free_;
  size_t cached_ = 0;
  size_t limit_ = limit_from_env();
  uint64_t allocations_ = 0, reuses_ = 0;
};

// Never destroyed: PyTorch may free a tensor of ours after static destructors have run.
CpuPool& pool() {
  static CpuPool* const instance = [] {
    auto* p = new CpuPool;
    pthread_atfork([] { pool().lock_for_fork(); }, [] { pool().unlock_after_fork(); },
                   [] { pool().unlock_after_fork(); });
    return p;
  }();
  return *instance;
}

// DLPack (dlpack.h, ABI of the "dltensor" capsule).
struct DLDevice {
  int32_t device_type;  // 1: CPU
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 2: float, 4: bfloat
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor*);
};

// One pooled block as a DLPack tensor: the managed tensor, its shape, and the block's size.
struct PooledTensor {
  DLManagedTensor managed{};
  std::vector<int64_t> shape;
  size_t bytes = 0;
};

void give_back(DLManagedTensor* managed) {
  auto* t = static_cast<PooledTensor*>(managed->manager_ctx);
  pool().give_back(managed->dl_tensor.data, t->bytes);
  delete t;
}

// A capsule PyTorch did not take (renamed "used_dltensor" when it does) still owns its block.
void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  managed->deleter(managed);
}

DLDataType dl_dtype(int code) {
  switch (code) {
    case static_cast<int>(DType::F32): return {2, 32, 1};
    case static_cast<int>(DType::F64): return {2, 64, 1};
    case static_cast<int>(DType::F16): return {2, 16, 1};
    case static_cast<int>(DType::BF16): return {4, 16, 1};
    default:
      throw ArgumentError("dtype", "a dtype code 0..3 (float32, float64, float16, bfloat16)", std::to_string(code));
  }
}

// An empty contiguous CPU tensor of `shape` (a "dltensor" capsule for torch.from_dlpack) whose
// memory comes from the pool and goes back to it.
nb::object empty(const std::vector<int64_t>& shape, int dtype_code) {
  const DLDataType dtype = dl_dtype(dtype_code);
  const int64_t elements = shape_numel(shape);
  if (static_cast<uint64_t>(elements) > (uint64_t{1} << 60) / (dtype.bits / 8)) {
    throw ArgumentError("shape", "a buffer of at most 2^60 bytes", std::to_string(elements) + " elements");
  }
  auto* t = new PooledTensor;
  t->shape = shape;
  // An empty tensor still takes a block (of one byte's size class): its data pointer is not null.
  t->bytes = std::max<size_t>(static_cast<size_t>(elements) * dtype.bits / 8, 1);
  try {
    t->managed.dl_tensor.data = pool().take(t->bytes);
  } catch (...) {
    delete t;
    throw;
  }
  t->managed.dl_tensor.device = {1, 0};
  t->managed.dl_tensor.ndim = static_cast<int32_t>(t->shape.size());
  t->managed.dl_tensor.dtype = dtype;
  t->managed.dl_tensor.shape = t->shape.data();
  t->managed.dl_tensor.strides = nullptr;  // contiguous
  t->managed.manager_ctx = t;
  t->managed.deleter = give_back;
  PyObject* capsule = PyCapsule_New(&t->managed, "dltensor", capsule_destructor);
  if (capsule == nullptr) {
    give_back(&t->managed);
    throw nb::python_error();
  }
  return nb::steal(capsule);
}

}  // namespace

void* cpu_pool_take(size_t bytes) { return pool().take(bytes); }
void cpu_pool_give_back(void* block, size_t bytes) { pool().give_back(block, bytes); }

void bind_cpu_pool(nb::module_& m) {
  m.attr("CPU_POOL_MIN_BYTES") = kCpuPoolMinBytes;
  m.def("cpu_pool_empty", &empty, "shape"_a, "dtype"_a,
        "A 'dltensor' capsule of an empty contiguous CPU tensor whose memory comes from spikejit's CPU "
        "pool and returns to it when PyTorch frees it.");
  m.def("cpu_pool_clear", [] { return pool().clear(); }, "Frees the blocks the pool keeps; returns their bytes.");
  m.def("cpu_pool_info", [] { return pool().info(); },
        "{'cached_bytes', 'cached_blocks', 'limit_bytes', 'allocations', 'reuses'}");
  m.def("cpu_pool_set_limit", [](int64_t bytes) {
    if (bytes < 0) throw ArgumentError("limit_bytes", "a count >= 0", std::to_string(bytes));
    pool().set_limit(static_cast<size_t>(bytes));
  }, "limit_bytes"_a, "The most bytes of freed blocks the pool keeps (blocks freed later beyond it go back to the "
                      "system).");
}

}  // namespace spikejit::python
