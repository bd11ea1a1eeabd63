// No #include in the generated source: NVRTC compiles it without any header search, and the
// fp16 / bf16 conversions are single PTX instructions.
#include "codegen/cuda_prelude.h"

#include <cstdio>
#include <string>
#include <utility>

#include "ir/random.h"
#include "spikejit/codegen.h"

namespace spikejit::codegen {
namespace {

const char* kAbi = R"(// ---- kernel ABI (shared with the runtime) ----------------------------------------------------
constexpr int kMaxBuffers = @MAX_BUFFERS@;
constexpr int kMaxReadDims = @MAX_READ_DIMS@;
// A strided view (spikejit::ReadLayout): element n (row-major over S) of step t is at
// t * step_stride + sum_d (n / (sizes[0] ... sizes[d-1]) % sizes[d]) * strides[d], in elements.
// SpikejitArgs (with the kernel's buffers, below) ends with one per strided slot.
struct SjReadLayout {
  long long step_stride;
  long long dims;
  long long sizes[kMaxReadDims];
  long long strides[kMaxReadDims];
};

#define SJ_AT_LEAST_1(n) ((n) > 0 ? (n) : 1)
)";

const char* kStorageF32 = R"(
// ---- storage float32, arithmetic float32 ---------------------------------------------------
typedef float real;
typedef float storage;
__device__ __forceinline__ real to_real(storage s) { return s; }
__device__ __forceinline__ storage to_storage(real r) { return r; }
)";

const char* kStorageF64 = R"(
// ---- storage float64, arithmetic float64 ---------------------------------------------------
typedef double real;
typedef double storage;
__device__ __forceinline__ real to_real(storage s) { return s; }
__device__ __forceinline__ storage to_storage(real r) { return r; }
)";

const char* kStorageF16 = R"(
// ---- storage float16 (bits), arithmetic float32 --------------------------------------------
typedef float real;
typedef unsigned short storage;
__device__ __forceinline__ real to_real(storage s) {
  float r;
  asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(s));
  return r;
}
__device__ __forceinline__ storage to_storage(real r) {  // round to nearest even
  unsigned short s;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(s) : "f"(r));
  return s;
}
)";

const char* kStorageBF16 = R"(
// ---- storage bfloat16 (bits), arithmetic float32 -------------------------------------------
typedef float real;
typedef unsigned short storage;
__device__ __forceinline__ real to_real(storage s) { return __uint_as_float((unsigned int)s << 16); }
__device__ __forceinline__ storage to_storage(real r) {  // round to nearest even
#if __CUDA_ARCH__ >= 800
  unsigned short s;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(s) : "f"(r));
  return s;
#else
  const unsigned int u = __float_as_uint(r);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}
)";

// Explicitly rounded operations: never contracted into FMAs whatever the compiler options, so
// results equal the CPU executor's separately rounded ones and recomputation is bit-exact.
const char* kMathF32 = R"(
// ---- arithmetic (float) --------------------------------------------------------------------
__device__ __forceinline__ real sj_add(real a, real b) { return __fadd_rn(a, b); }
__device__ __forceinline__ real sj_sub(real a, real b) { return __fsub_rn(a, b); }
__device__ __forceinline__ real sj_mul(real a, real b) { return __fmul_rn(a, b); }
__device__ __forceinline__ real sj_div(real a, real b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ real sj_sqrt(real a) { return __fsqrt_rn(a); }
__device__ __forceinline__ real sj_rcp(real a) { return __frcp_rn(a); }  // = 1 / a, correctly rounded
__device__ __forceinline__ real sj_fmod(real a, real b) { return fmodf(a, b); }
__device__ __forceinline__ real sj_pow(real a, real b) { return powf(a, b); }
__device__ __forceinline__ real sj_exp(real a) { return expf(a); }
__device__ __forceinline__ real sj_log(real a) { return logf(a); }
__device__ __forceinline__ real sj_log2(real a) { return log2f(a); }
__device__ __forceinline__ real sj_tanh(real a) { return tanhf(a); }
__device__ __forceinline__ real sj_sin(real a) { return sinf(a); }
__device__ __forceinline__ real sj_cos(real a) { return cosf(a); }
__device__ __forceinline__ real sj_erf(real a) { return erff(a); }
__device__ __forceinline__ real sj_abs(real a) { return fabsf(a); }
__device__ __forceinline__ real sj_round(real a) { return rintf(a); }  // half to even
__device__ __forceinline__ real sj_floor(real a) { return floorf(a); }
__device__ __forceinline__ real sj_ceil(real a) { return ceilf(a); }
__device__ __forceinline__ real sj_log1p(real a) { return log1pf(a); }
__device__ __forceinline__ real sj_expm1(real a) { return expm1f(a); }
__device__ __forceinline__ real sj_exp2(real a) { return exp2f(a); }
__device__ __forceinline__ real sj_log10(real a) { return log10f(a); }
__device__ __forceinline__ real sj_tan(real a) { return tanf(a); }
__device__ __forceinline__ real sj_atan(real a) { return atanf(a); }
__device__ __forceinline__ real sj_asin(real a) { return asinf(a); }
__device__ __forceinline__ real sj_acos(real a) { return acosf(a); }
__device__ __forceinline__ real sj_sinh(real a) { return sinhf(a); }
__device__ __forceinline__ real sj_cosh(real a) { return coshf(a); }
__device__ __forceinline__ real sj_asinh(real a) { return asinhf(a); }
__device__ __forceinline__ real sj_acosh(real a) { return acoshf(a); }
__device__ __forceinline__ real sj_atanh(real a) { return atanhf(a); }
__device__ __forceinline__ real sj_erfc(real a) { return erfcf(a); }
__device__ __forceinline__ real sj_erfinv(real a) { return erfinvf(a); }
__device__ __forceinline__ real sj_ndtri(real a) { return normcdfinvf(a); }
__device__ __forceinline__ real sj_atan2(real a, real b) { return atan2f(a, b); }
__device__ __forceinline__ real sj_hypot(real a, real b) { return hypotf(a, b); }
)";

const char* kMathF64 = R"(
// ---- arithmetic (double) -------------------------------------------------------------------
__device__ __forceinline__ real sj_add(real a, real b) { return __dadd_rn(a, b); }
__device__ __forceinline__ real sj_sub(real a, real b) { return __dsub_rn(a, b); }
__device__ __forceinline__ real sj_mul(real a, real b) { return __dmul_rn(a, b); }
__device__ __forceinline__ real sj_div(real a, real b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ real sj_sqrt(real a) { return __dsqrt_rn(a); }
__device__ __forceinline__ real sj_rcp(real a) { return __drcp_rn(a); }  // = 1 / a, correctly rounded
__device__ __forceinline__ real sj_fmod(real a, real b) { return fmod(a, b); }
__device__ __forceinline__ real sj_pow(real a, real b) { return pow(a, b); }
__device__ __forceinline__ real sj_exp(real a) { return exp(a); }
__device__ __forceinline__ real sj_log(real a) { return log(a); }
__device__ __forceinline__ real sj_log2(real a) { return log2(a); }
__device__ __forceinline__ real sj_tanh(real a) { return tanh(a); }
__device__ __forceinline__ real sj_sin(real a) { return sin(a); }
__device__ __forceinline__ real sj_cos(real a) { return cos(a); }
__device__ __forceinline__ real sj_erf(real a) { return erf(a); }
__device__ __forceinline__ real sj_abs(real a) { return fabs(a); }
__device__ __forceinline__ real sj_round(real a) { return rint(a); }  // half to even
__device__ __forceinline__ real sj_floor(real a) { return floor(a); }
__device__ __forceinline__ real sj_ceil(real a) { return ceil(a); }
__device__ __forceinline__ real sj_log1p(real a) { return log1p(a); }
__device__ __forceinline__ real sj_expm1(real a) { return expm1(a); }
__device__ __forceinline__ real sj_exp2(real a) { return exp2(a); }
__device__ __forceinline__ real sj_log10(real a) { return log10(a); }
__device__ __forceinline__ real sj_tan(real a) { return tan(a); }
__device__ __forceinline__ real sj_atan(real a) { return atan(a); }
__device__ __forceinline__ real sj_asin(real a) { return asin(a); }
__device__ __forceinline__ real sj_acos(real a) { return acos(a); }
__device__ __forceinline__ real sj_sinh(real a) { return sinh(a); }
__device__ __forceinline__ real sj_cosh(real a) { return cosh(a); }
__device__ __forceinline__ real sj_asinh(real a) { return asinh(a); }
__device__ __forceinline__ real sj_acosh(real a) { return acosh(a); }
__device__ __forceinline__ real sj_atanh(real a) { return atanh(a); }
__device__ __forceinline__ real sj_erfc(real a) { return erfc(a); }
__device__ __forceinline__ real sj_erfinv(real a) { return erfinv(a); }
__device__ __forceinline__ real sj_ndtri(real a) { return normcdfinv(a); }
__device__ __forceinline__ real sj_atan2(real a, real b) { return atan2(a, b); }
__device__ __forceinline__ real sj_hypot(real a, real b) { return hypot(a, b); }
)";

const char* kMathCommon = R"(
__device__ __forceinline__ bool sj_isnan(real a) { return a != a; }
__device__ __forceinline__ real sj_reciprocal(real a) { return sj_rcp(a); }
__device__ __forceinline__ real sj_rsqrt(real a) { return sj_rcp(sj_sqrt(a)); }
__device__ __forceinline__ real sj_sigmoid(real a) { return sj_rcp(sj_add((real)1, sj_exp(-a))); }
// NaN propagates like torch.minimum / torch.maximum / torch.clamp / torch.relu / torch.sign.
__device__ __forceinline__ real sj_min(real a, real b) {
  return (sj_isnan(a) || sj_isnan(b)) ? sj_add(a, b) : (a < b ? a : b);
}
__device__ __forceinline__ real sj_max(real a, real b) {
  return (sj_isnan(a) || sj_isnan(b)) ? sj_add(a, b) : (a > b ? a : b);
}
// min(max(a, lo), hi), like torch.clamp (hi wins when lo > hi).
__device__ __forceinline__ real sj_clamp(real a, real lo, real hi) {
  if (sj_isnan(a)) return a;
  const real low = a < lo ? lo : a;
  return low > hi ? hi : low;
}
__device__ __forceinline__ real sj_relu(real a) { return sj_isnan(a) ? a : (a > (real)0 ? a : (real)0); }
__device__ __forceinline__ real sj_sign(real a) {
  return sj_isnan(a) ? a : (real)((a > (real)0) - (a < (real)0));
}
)";

// The generator's constants, written from ir/random.h's (one definition for both sides).
std::string philox_constants() {
  char text[256];
  std::snprintf(text, sizeof text,
                "constexpr unsigned kPhiloxMul0 = 0x%08Xu, kPhiloxMul1 = 0x%08Xu;  // the round multipliers\n"
                "constexpr unsigned kPhiloxWeyl0 = 0x%08Xu, kPhiloxWeyl1 = 0x%08Xu;  // the key schedule's steps\n"
                "constexpr int kPhiloxRounds = %d;\n",
                ir::kPhiloxMul0, ir::kPhiloxMul1, ir::kPhiloxWeyl0, ir::kPhiloxWeyl1, ir::kPhiloxRounds);
  return text;
}

// The draws of uniform() (ir/random.h spells out the same arithmetic for the CPU executor):
// Philox4x32-10 keyed by the seed, counting (group low word, group high word, step, stream) for
// the group of four neurons n / 4; neuron n takes word n % 4, its top 24 bits times 2^-24. The
// kernel source draws a thread's neurons with these (draw_rows).
const char* kRandom = R"(__device__ __forceinline__ uint4 sj_philox_block(unsigned long long seed, unsigned long long group, long long t,
                                                 int stream) {
  unsigned c0 = (unsigned)group, c1 = (unsigned)(group >> 32), c2 = (unsigned)t, c3 = (unsigned)stream;
  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32);
#pragma unroll
  for (int round = 0; round < kPhiloxRounds; ++round) {
    const unsigned hi0 = __umulhi(kPhiloxMul0, c0), lo0 = kPhiloxMul0 * c0;
    const unsigned hi1 = __umulhi(kPhiloxMul1, c2), lo1 = kPhiloxMul1 * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kPhiloxWeyl0;
    k1 += kPhiloxWeyl1;
  }
  return make_uint4(c0, c1, c2, c3);
}
// Neuron n's draw from its group's block.
__device__ __forceinline__ real sj_draw_of(const uint4 block, unsigned long long n) {
  const unsigned lane = (unsigned)n & 3u;
  const unsigned word = lane == 0 ? block.x : lane == 1 ? block.y : lane == 2 ? block.z : block.w;
  return (real)((float)(word >> 8) * 5.9604644775390625e-08f);  // 2^-24
}
)";

const char* kRows = R"(
// ---- rows: the EPT consecutive neurons of one thread at one step ---------------------------
template <int EPT>
struct Row {
  storage v[EPT];
};

// Every load is unconditional, from a valid address: an absent buffer (null base) or an element
// past the end reads the zeros of sj_zero_row. A conditional load would make the compiler merge
// the loaded register with the alternative right away, waiting for the load to arrive, which
// defeats the prefetch. Loads take the read-only path (ld.global.nc): no buffer a kernel reads is
// written during it (the runtime rejects overlapping buffers).
__device__ __align__(16) const storage sj_zero_row[16 / sizeof(storage)] = {};

// VEC: one 16-byte access (the caller checked alignment and that all EPT neurons exist).
// Otherwise element e is read when e < count, zero past it.
template <int EPT, bool VEC>
__device__ __forceinline__ void row_load(const void* base, long long offset, int count, Row<EPT>& r) {
  static_assert(EPT * sizeof(storage) <= sizeof(sj_zero_row), "at most 16 bytes per row");
  const storage* p = base != nullptr ? static_cast<const storage*>(base) + offset : sj_zero_row;
  if constexpr (VEC) {
    static_assert(sizeof(Row<EPT>) == 16, "vector rows are 16 bytes");
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(p));
    memcpy(&r, &q, 16);
  } else {
#pragma unroll
    for (int e = 0; e < EPT; ++e) r.v[e] = __ldg(e < count ? p + e : sj_zero_row);
  }
}

// A null base (an absent buffer) is never written; elements >= count are not written.
template <int EPT, bool VEC>
__device__ __forceinline__ void row_store(void* base, long long offset, int count, const Row<EPT>& r) {
  if (base == nullptr) return;
  storage* p = static_cast<storage*>(base) + offset;
  if constexpr (VEC) {
    static_assert(sizeof(Row<EPT>) == 16, "vector rows are 16 bytes");
    uint4 q;
    memcpy(&q, &r, 16);
    *reinterpret_cast<uint4*>(p) = q;
  } else {
#pragma unroll
    for (int e = 0; e < EPT; ++e) {
      if (e < count) p[e] = r.v[e];
    }
  }
}

// A hint that the row at `offset` (in elements of T) is read soon: its line is fetched into L2.
// It takes no register and waits for nothing; the caller passes only addresses inside the buffer.
template <class T>
__device__ __forceinline__ void row_prefetch_l2(const void* base, long long offset) {
  if (base != nullptr) asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const T*>(base) + offset));
}

// The offset of neuron n within a step of a strided view (elements), and n's index along the
// innermost merged dimension (`inner`). Integer division is tens of instructions, 64-bit division
// many more: 32-bit where the values fit, as they do below 2^32 neurons.
__device__ __forceinline__ long long strided_neuron_offset(const SjReadLayout& l, long long n, long long& inner) {
  long long at = 0;
  inner = 0;
#pragma unroll
  for (int d = 0; d < kMaxReadDims; ++d) {
    if (d < l.dims) {
      const long long size = l.sizes[d];
      long long quotient;
      if ((((unsigned long long)n | (unsigned long long)size) >> 32) == 0) {
        quotient = (long long)((unsigned)n / (unsigned)size);
      } else {
        quotient = n / size;
      }
      const long long index = n - quotient * size;
      if (d == 0) inner = index;
      at += index * l.strides[d];
      n = quotient;
    }
  }
  return at;
}

// The offsets within a step of a strided view of neurons n0 .. n0 + EPT - 1 (elements; the same
// at every step, so the time loops compute them once: the compiler does not move the division
// chains out of a loop itself, they sit behind branches). One division chain for n0; the next
// neurons step along the innermost dimension while they stay on it.
template <int EPT>
__device__ __forceinline__ void strided_offsets(const SjReadLayout& l, long long n0, long long (&at)[EPT]) {
  long long inner;
  at[0] = strided_neuron_offset(l, n0, inner);
#pragma unroll
  for (int e = 1; e < EPT; ++e) {
    long long unused;
    const bool along_inner = l.dims > 0 && inner + e < l.sizes[0];
    at[e] = along_inner ? at[0] + e * l.strides[0] : strided_neuron_offset(l, n0 + e, unused);
  }
}

// This thread's elements (offsets `at` of strided_offsets, count of them) of step t of a strided
// view; zero past count, like row_load; a null base reads zeros.
template <int EPT>
__device__ __forceinline__ void strided_load(const void* base, const SjReadLayout& l, long long t,
                                             const long long (&at)[EPT], int count, Row<EPT>& r) {
  const storage* p = static_cast<const storage*>(base) + t * l.step_stride;
#pragma unroll
  for (int e = 0; e < EPT; ++e) r.v[e] = __ldg(base != nullptr && e < count ? p + at[e] : sj_zero_row);
}

// Rows of the compute type (checkpoints): element by element.
template <int EPT>
__device__ __forceinline__ void real_row_load(const void* base, long long offset, int count, real (&r)[EPT]) {
  const real* p = static_cast<const real*>(base) + offset;
#pragma unroll
  for (int e = 0; e < EPT; ++e) r[e] = (base != nullptr && e < count) ? p[e] : (real)0;
}

template <int EPT>
__device__ __forceinline__ void real_row_store(void* base, long long offset, int count, const real (&r)[EPT]) {
  if (base == nullptr) return;
  real* p = static_cast<real*>(base) + offset;
#pragma unroll
  for (int e = 0; e < EPT; ++e) {
    if (e < count) p[e] = r[e];
  }
}
)";

}  // namespace

int vector_elements(DType storage) { return 16 / static_cast<int>(dtype_size(storage)); }

std::string cuda_prelude(DType storage) {
  std::string abi = kAbi;
  for (const auto& [marker, value] : {std::pair<std::string, int>{"@MAX_BUFFERS@", kMaxBuffers},
                                      {"@MAX_READ_DIMS@", kMaxReadDims}}) {
    abi.replace(abi.find(marker), marker.size(), std::to_string(value));
  }
  std::string s = abi;
  switch (storage) {
    case DType::F32: s += kStorageF32; break;
    case DType::F64: s += kStorageF64; break;
    case DType::F16: s += kStorageF16; break;
    case DType::BF16: s += kStorageBF16; break;
  }
  s += storage == DType::F64 ? kMathF64 : kMathF32;
  s += kMathCommon;
  s += "\n// ---- random draws ----------------------------------------------------------------------------\n";
  s += philox_constants();
  s += kRandom;
  s += kRows;
  return s;
}

}  // namespace spikejit::codegen
