// Why the bodies look like this:
// * One thread owns EPT consecutive neurons and walks the time axis, keeping states (forward) or
//   state gradients (backward) in registers. There is no communication between threads except the
//   deterministic block reduction of scalar parameter gradients.
// * The loads of step t + DEPTH are issued before step t is computed (a ring of DEPTH rows in
//   registers, the time loop unrolled by DEPTH so the ring is indexed by constants): with small N
//   there are few warps, and each step would otherwise wait a full memory latency. Those
//   variants also ask L2 for the rows kRingL2Ahead steps beyond the ring (no registers), so the
//   ring's loads wait for L2, not DRAM.
// * VEC instantiations use 16-byte accesses; the scalar ones handle unaligned buffers, N not a
//   multiple of EPT and the last partial row. The choice is made once per thread, or once per
//   warp in kernels that write bit-packed rows (kWritesPackedRows): there the threads of a warp
//   gather their bits with ballots at every step, so they must all run the same path (threads
//   without neurons included, with count = 0).
#include "codegen/kernel_bodies.h"

namespace spikejit::codegen {

const char* const kCommonBodies = R"(
// ---- common --------------------------------------------------------------------------------
__device__ __forceinline__ bool is_scalar_param(int i) { return ((kScalarParams >> i) & 1ull) != 0; }
__device__ __forceinline__ bool is_packed_output(int i) { return ((kPackedOutputs >> i) & 1ull) != 0; }
__device__ __forceinline__ bool is_packed_saved(int i) { return ((kPackedSaved >> i) & 1ull) != 0; }

// True when every row buffer is 16-byte aligned and rows (t * N) stay aligned.
template <int EPT>
__device__ __forceinline__ bool rows_aligned(const SpikejitArgs& a) {
  unsigned long long bits = (unsigned long long)(a.neurons % EPT);
#pragma unroll
  for (int s = 0; s < kMaxBuffers; ++s) {
    if ((kRowSlots >> s) & 1ull) bits |= reinterpret_cast<unsigned long long>(a.buffers[s]) & 15ull;
  }
  return bits == 0;
}

// The offsets of this thread's elements in each strided slot (strided_offsets), by layout index.
template <int EPT>
struct StridedOffsets {
  long long at[kLayoutsA][EPT];
};

template <int EPT>
__device__ __forceinline__ StridedOffsets<EPT> strided_offsets_of(const SpikejitArgs& a, long long n0) {
  StridedOffsets<EPT> o;
#pragma unroll
  for (int slot = 0; slot < kMaxBuffers; ++slot) {
    if ((kStridedSlots >> slot) & 1ull) strided_offsets<EPT>(slot_layout(a, slot), n0, o.at[kSlotLayout[slot]]);
  }
  return o;
}

// This thread's elements of step t of a slot that is read (t = 0 for [N] buffers): a row, or
// element by element through the slot's strided view (`so`: its offsets).
template <int EPT, bool VEC>
__device__ __forceinline__ void slot_load(const SpikejitArgs& a, const StridedOffsets<EPT>& so, int slot, long long t,
                                          long long n0, int count, Row<EPT>& r) {
  if constexpr (kStridedSlots != 0) {
    if ((kStridedSlots >> slot) & 1ull) {
      strided_load<EPT>(a.buffers[slot], slot_layout(a, slot), t, so.at[kSlotLayout[slot]], count, r);
      return;
    }
  }
  row_load<EPT, VEC>(a.buffers[slot], t * a.neurons + n0, count, r);
}

// Asks L2 for this thread's row of step t of a slot, unless it is read through a strided view.
__device__ __forceinline__ void slot_prefetch_l2(const SpikejitArgs& a, int slot, long long t, long long n0) {
  if (((kStridedSlots >> slot) & 1ull) == 0) row_prefetch_l2<storage>(a.buffers[slot], t * a.neurons + n0);
}

// [N] buffers (t = 0) of consecutive slots.
template <int ROWS, int EPT, bool VEC>
__device__ __forceinline__ void load_rows(const SpikejitArgs& a, const StridedOffsets<EPT>& so, int first_slot,
                                          long long n0, int count, real (&out)[SJ_AT_LEAST_1(ROWS)][EPT]) {
#pragma unroll
  for (int i = 0; i < ROWS; ++i) {
    Row<EPT> r;
    slot_load<EPT, VEC>(a, so, first_slot + i, 0, n0, count, r);
#pragma unroll
    for (int e = 0; e < EPT; ++e) out[i][e] = to_real(r.v[e]);
  }
}

template <int ROWS, int EPT, bool VEC>
__device__ __forceinline__ void store_rows(const SpikejitArgs& a, int first_slot, long long offset, int count,
                                           const real (&in)[SJ_AT_LEAST_1(ROWS)][EPT]) {
#pragma unroll
  for (int i = 0; i < ROWS; ++i) {
    Row<EPT> r;
#pragma unroll
    for (int e = 0; e < EPT; ++e) r.v[e] = to_storage(in[i][e]);
    row_store<EPT, VEC>(a.buffers[first_slot + i], offset, count, r);
  }
}

// Scalar parameters are broadcast to every element. (pr's entries past kParams: hoist_values.)
template <int EPT, bool VEC>
__device__ __forceinline__ void load_params(const SpikejitArgs& a, const StridedOffsets<EPT>& so, long long n0,
                                            int count, real (&pr)[kParamValuesA][EPT]) {
#pragma unroll
  for (int i = 0; i < kParams; ++i) {
    if (is_scalar_param(i)) {
      const void* base = a.buffers[kSlotParam + i];
      const real v = to_real(__ldg(base != nullptr ? static_cast<const storage*>(base) : sj_zero_row));
#pragma unroll
      for (int e = 0; e < EPT; ++e) pr[i][e] = v;
    } else {
      Row<EPT> r;
      slot_load<EPT, VEC>(a, so, kSlotParam + i, 0, n0, count, r);
#pragma unroll
      for (int e = 0; e < EPT; ++e) pr[i][e] = to_real(r.v[e]);
    }
  }
}

// ---- bit-packed rows (PackedView): neuron n of step t is bit n % 8 of byte t * ceil(N / 8) + n / 8
// `bits`: this thread's neurons n0 .. n0 + EPT - 1 at bits 0 .. EPT - 1 (zero past its count).
// Every thread of the warp calls this together (the ballots need all 32): the warp's 32 * EPT
// neurons are 4 * EPT bytes, and lane j stores byte j (none past the row's last byte). n0 is
// (first thread of the warp + lane) * EPT, a multiple of 32 * EPT for lane 0.
template <int EPT>
__device__ __forceinline__ void packed_row_store(void* base, long long t, long long n0, long long N, unsigned bits) {
  const int lane = (int)(threadIdx.x & 31u);
  unsigned byte_bits = bits;  // EPT == 8: a thread's neurons are one byte
  if constexpr (EPT < 8) {
    unsigned words[EPT];
#pragma unroll
    for (int e = 0; e < EPT; ++e) words[e] = __ballot_sync(0xffffffffu, (bits >> e) & 1u);
    byte_bits = 0;
    if (lane < 4 * EPT) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int m = 8 * lane + i;  // neuron m of the warp: element m % EPT of lane m / EPT
        byte_bits |= ((words[m % EPT] >> (m / EPT)) & 1u) << i;
      }
    }
  }
  const long long row_bytes = (N + 7) >> 3;
  const long long byte = ((n0 - (long long)lane * EPT) >> 3) + lane;
  if (base != nullptr && lane < 4 * EPT && byte < row_bytes) {
    static_cast<unsigned char*>(base)[t * row_bytes + byte] = (unsigned char)byte_bits;
  }
}

// This thread's EPT neurons at step t of bit-packed rows, as 1 or 0 in storage (0 past count).
// The byte load is unconditional (zeros when there is nothing to read), like row_load.
template <int EPT>
__device__ __forceinline__ void packed_row_load(const void* base, long long t, long long n0, int count, long long N,
                                                Row<EPT>& r) {
  const unsigned char* p = reinterpret_cast<const unsigned char*>(sj_zero_row);
  if (base != nullptr && count > 0) p = static_cast<const unsigned char*>(base) + t * ((N + 7) >> 3) + (n0 >> 3);
  const unsigned bits = (unsigned)__ldg(p) >> (unsigned)(n0 & 7);
  const storage one = to_storage((real)1), zero = to_storage((real)0);
#pragma unroll
  for (int e = 0; e < EPT; ++e) r.v[e] = (e < count && ((bits >> e) & 1u) != 0) ? one : zero;
}

// Elements of this thread: n0 .. n0 + count - 1 (count = 0: none).
template <int EPT, int BLOCK>
__device__ __forceinline__ int thread_elements(const SpikejitArgs& a, long long& n0) {
  n0 = ((long long)blockIdx.x * BLOCK + threadIdx.x) * EPT;
  if (n0 >= a.neurons) return 0;
  return a.neurons - n0 < EPT ? (int)(a.neurons - n0) : EPT;
}
)";

const char* const kForwardBodies = R"(
// ---- forward -------------------------------------------------------------------------------
template <int EPT, bool VEC>
__device__ __forceinline__ void load_inputs(const SpikejitArgs& a, const StridedOffsets<EPT>& so, long long t,
                                            long long n0, int count, Row<EPT> (&rows)[kInputsA]) {
#pragma unroll
  for (int i = 0; i < kInputs; ++i) slot_load<EPT, VEC>(a, so, kSlotInput + i, t, n0, count, rows[i]);
}

// One step t for the thread's elements n0 .. n0 + count - 1: stores the step's rows and updates
// `st`, when `live` (the step exists: the time loop runs whole groups of DEPTH steps; `live` is
// the same for every thread).
template <int EPT, bool VEC>
__device__ __forceinline__ void forward_apply(const SpikejitArgs& a, bool live, long long t, long long n0, int count,
                                              const Row<EPT> (&xr)[kInputsA], const real (&pr)[kParamValuesA][EPT],
                                              real (&st)[kStatesA][EPT]) {
  const long long offset = t * a.neurons + n0;
  Row<EPT> out[kOutputsA], seq[kStatesA], sav[kSavedA];
  unsigned out_bits[kOutputsA] = {}, sav_bits[kSavedA] = {};  // packed rows: bit e for element e
  real draws[kStreamsA][EPT];
  draw_rows<EPT>(a, n0, t, draws);
#pragma unroll
  for (int e = 0; e < EPT; ++e) {
    ForwardIn in;
#pragma unroll
    for (int k = 0; k < kStreams; ++k) in.u[k] = draws[k][e];
#pragma unroll
    for (int i = 0; i < kInputs; ++i) in.x[i] = to_real(xr[i].v[e]);
#pragma unroll
    for (int i = 0; i < kStates; ++i) in.s[i] = st[i][e];
#pragma unroll
    for (int i = 0; i < kParamValues; ++i) in.p[i] = pr[i][e];
    const ForwardOut o = forward_step(in);
#pragma unroll
    for (int i = 0; i < kOutputs; ++i) {
      out[i].v[e] = to_storage(o.y[i]);
      if (is_packed_output(i) && e < count && o.y[i] != (real)0) out_bits[i] |= 1u << e;
    }
#pragma unroll
    for (int i = 0; i < kStates; ++i) {
      st[i][e] = live ? o.s_next[i] : st[i][e];
      seq[i].v[e] = to_storage(o.s_next[i]);
    }
#pragma unroll
    for (int i = 0; i < kSaved; ++i) {
      sav[i].v[e] = to_storage(o.saved[i]);
      if (is_packed_saved(i) && e < count && o.saved[i] != (real)0) sav_bits[i] |= 1u << e;
    }
  }
  if (!live) return;
#pragma unroll
  for (int i = 0; i < kOutputs; ++i) {
    row_store<EPT, VEC>(a.buffers[kSlotOutput + i], offset, count, out[i]);
    if (is_packed_output(i)) packed_row_store<EPT>(a.buffers[kPackedOutputSlot[i]], t, n0, a.neurons, out_bits[i]);
  }
  if constexpr (kStoreStateSeqs) {
#pragma unroll
    for (int i = 0; i < kStates; ++i) row_store<EPT, VEC>(a.buffers[kSlotStateSeq + i], offset, count, seq[i]);
  }
  if constexpr (kSaveSteps) {
#pragma unroll
    for (int i = 0; i < kSaved; ++i) {
      if (is_packed_saved(i)) {
        packed_row_store<EPT>(a.buffers[kSlotSaved + i], t, n0, a.neurons, sav_bits[i]);
      } else {
        row_store<EPT, VEC>(a.buffers[kSlotSaved + i], offset, count, sav[i]);
      }
    }
  }
}

// The row of the k-th step to run: k, or T - 1 - k when the steps run last to first (kReverse).
__device__ __forceinline__ long long step_row(long long k, long long T) { return kReverse ? T - 1 - k : k; }

template <int EPT, int DEPTH, bool VEC>
__device__ __forceinline__ void forward_rows(const SpikejitArgs& a, long long n0, int count) {
  const long long T = a.steps, N = a.neurons, last = T - 1;
  const StridedOffsets<EPT> so = strided_offsets_of<EPT>(a, n0);
  real st[kStatesA][EPT], pr[kParamValuesA][EPT];
  load_rows<kStates, EPT, VEC>(a, so, kSlotInitialState, n0, count, st);
#pragma unroll
  for (int i = 0; i < kStates; ++i) {
    if (a.buffers[kSlotInitialState + i] != nullptr) continue;  // absent: the declared default
#pragma unroll
    for (int e = 0; e < EPT; ++e) st[i][e] = state_default(i);
  }
  load_params<EPT, VEC>(a, so, n0, count, pr);
  hoist_values<EPT>(pr);
  if (T > 0) {
    // Step k + DEPTH's row is loaded before step k runs (the last step's again near the end).
    // k counts the steps in the order they run; step_row gives the row each one reads and writes.
    long long ahead = 0;
    Row<EPT> ring[DEPTH][kInputsA];
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      load_inputs<EPT, VEC>(a, so, step_row(ahead < last ? ahead : last, T), n0, count, ring[d]);
      ++ahead;
    }
    for (long long k0 = 0; k0 < T; k0 += DEPTH) {
#pragma unroll
      for (int d = 0; d < DEPTH; ++d) {
        const long long k = k0 + d, t = k < T ? step_row(k, T) : k;  // (steps past T do not run)
        Row<EPT> xr[kInputsA];
#pragma unroll
        for (int i = 0; i < kInputs; ++i) xr[i] = ring[d][i];
        load_inputs<EPT, VEC>(a, so, step_row(ahead < last ? ahead : last, T), n0, count, ring[d]);
        if constexpr (DEPTH > 1 && kRingL2Ahead > 0) {
          const long long far = ahead + kRingL2Ahead;
          if (far <= last) {
#pragma unroll
            for (int i = 0; i < kInputs; ++i) slot_prefetch_l2(a, kSlotInput + i, step_row(far, T), n0);
          }
        }
        ++ahead;
        if constexpr (kCheckpointEvery > 0) {
          constexpr int K = kCheckpointEvery > 0 ? kCheckpointEvery : 1;
          if (k < T && k % K == 0) {  // (never reversed: a training forward)
#pragma unroll
            for (int i = 0; i < kStates; ++i) real_row_store<EPT>(a.buffers[kSlotSaved + i], k / K * N + n0, count, st[i]);
          }
        }
        forward_apply<EPT, VEC>(a, k < T, t, n0, count, xr, pr, st);
      }
    }
  }
  if constexpr (kWriteFinalStates) store_rows<kStates, EPT, VEC>(a, kSlotFinalState, n0, count, st);
}

// EPT > 1 (vector variant): 16-byte rows when every row is aligned (the runtime picks this
// variant only then); otherwise a correct but slow element-by-element fallback.
template <int EPT, int BLOCK, int DEPTH>
__device__ __forceinline__ void forward_entry(const SpikejitArgs& a) {
  long long n0;
  const int count = thread_elements<EPT, BLOCK>(a, n0);
  if constexpr (kWritesPackedRows) {
    // One path per warp (see the top): the vector path when every thread has EPT neurons.
    if (__all_sync(0xffffffffu, count == 0)) return;
    if constexpr (EPT > 1) {
      if (__all_sync(0xffffffffu, count == EPT) && rows_aligned<EPT>(a)) {
        forward_rows<EPT, DEPTH, true>(a, n0, count);
      } else {
        forward_rows<EPT, DEPTH, false>(a, n0, count);
      }
    } else {
      forward_rows<1, DEPTH, false>(a, n0, count);
    }
    return;
  }
  if (count == 0) return;
  if constexpr (EPT > 1) {
    if (count == EPT && rows_aligned<EPT>(a)) {
      forward_rows<EPT, DEPTH, true>(a, n0, count);
    } else {
      for (int e = 0; e < count; ++e) forward_rows<1, 1, false>(a, n0 + e, 1);
    }
  } else {
    forward_rows<1, DEPTH, false>(a, n0, count);
  }
}
)";

const char* const kBackwardBodies = R"(
// ---- backward ------------------------------------------------------------------------------
// The rows one backward step reads (saved values only when they are not recomputed).
template <int EPT>
struct StepRows {
  Row<EPT> saved[kSavedA];
  Row<EPT> grad_out[kOutputsA];
  Row<EPT> grad_seq[kStatesA];
};

// Step t of a gradient sequence that may repeat (kGradOutputRepeat): a row of [T, N], the one
// row of [N] (the same each step), or one value for the step's N elements ([T] or [1]).
template <int EPT, bool VEC>
__device__ __forceinline__ void grad_row_load(int repeat, const void* base, long long t, long long n0, int count,
                                              long long N, Row<EPT>& r) {
  if (repeat & 2) {
    const storage* p = base != nullptr ? static_cast<const storage*>(base) + ((repeat & 1) ? 0 : t) : sj_zero_row;
    const storage v = __ldg(p);
#pragma unroll
    for (int e = 0; e < EPT; ++e) r.v[e] = e < count ? v : sj_zero_row[0];
  } else {
    row_load<EPT, VEC>(base, (repeat & 1) ? n0 : t * N + n0, count, r);
  }
}

template <int EPT, bool VEC, bool SAVED>
__device__ __forceinline__ void load_step_rows(const SpikejitArgs& a, const StridedOffsets<EPT>& so, long long t,
                                               long long n0, int count, StepRows<EPT>& r) {
  const long long N = a.neurons;
  if constexpr (SAVED) {
#pragma unroll
    for (int i = 0; i < kSaved; ++i) {
      if (is_packed_saved(i)) {
        packed_row_load<EPT>(a.buffers[kSlotSaved + i], t, n0, count, N, r.saved[i]);
      } else {
        slot_load<EPT, VEC>(a, so, kSlotSaved + i, t, n0, count, r.saved[i]);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kOutputs; ++i)
    grad_row_load<EPT, VEC>(kGradOutputRepeat[i], a.buffers[kSlotGradOutput + i], t, n0, count, N, r.grad_out[i]);
  if constexpr (kReadGradStateSeqs) {
#pragma unroll
    for (int i = 0; i < kStates; ++i)
      grad_row_load<EPT, VEC>(kGradStateSeqRepeat[i], a.buffers[kSlotGradStateSeq + i], t, n0, count, N, r.grad_seq[i]);
  }
}

// Asks L2 for the full rows of step t that load_step_rows reads (not bit rows or repeated ones).
__device__ __forceinline__ void prefetch_step_rows_l2(const SpikejitArgs& a, long long t, long long n0) {
  const long long offset = t * a.neurons + n0;
#pragma unroll
  for (int i = 0; i < kSaved; ++i) {
    if (!is_packed_saved(i)) slot_prefetch_l2(a, kSlotSaved + i, t, n0);
  }
#pragma unroll
  for (int i = 0; i < kOutputs; ++i) {
    if (kGradOutputRepeat[i] == 0) row_prefetch_l2<storage>(a.buffers[kSlotGradOutput + i], offset);
  }
  if constexpr (kReadGradStateSeqs) {
#pragma unroll
    for (int i = 0; i < kStates; ++i) {
      if (kGradStateSeqRepeat[i] == 0) row_prefetch_l2<storage>(a.buffers[kSlotGradStateSeq + i], offset);
    }
  }
}

// One reverse step (when `live`): `carry` holds dL/d states[t] from later steps on entry and
// dL/d states[t-1] on return; parameter gradients accumulate in `gacc`; grad inputs are stored
// at `offset`.
template <int EPT, bool VEC>
__device__ __forceinline__ void backward_apply(const SpikejitArgs& a, bool live, long long offset, int count,
                                               const real (&sv)[kSavedA][EPT], const StepRows<EPT>& g,
                                               const real (&pr)[kParamValuesA][EPT], real (&carry)[kStatesA][EPT],
                                               real (&gacc)[kParamsA][EPT]) {
  Row<EPT> gin[kInputsA];
#pragma unroll
  for (int e = 0; e < EPT; ++e) {
    BackwardIn in;
#pragma unroll
    for (int i = 0; i < kSaved; ++i) in.saved[i] = sv[i][e];
#pragma unroll
    for (int i = 0; i < kOutputs; ++i) in.go[i] = to_real(g.grad_out[i].v[e]);
#pragma unroll
    for (int i = 0; i < kStates; ++i)
      in.gs[i] = kReadGradStateSeqs ? sj_add(to_real(g.grad_seq[i].v[e]), carry[i][e]) : carry[i][e];
#pragma unroll
    for (int i = 0; i < kParamValues; ++i) in.p[i] = pr[i][e];
    const BackwardOut o = backward_step(in);
#pragma unroll
    for (int i = 0; i < kInputs; ++i) gin[i].v[e] = to_storage(o.gi[i]);
#pragma unroll
    for (int i = 0; i < kStates; ++i) carry[i][e] = live ? o.g_prev[i] : carry[i][e];
#pragma unroll
    for (int i = 0; i < kParams; ++i) gacc[i][e] = live ? sj_add(gacc[i][e], o.gp[i]) : gacc[i][e];
  }
  if (!live) return;
#pragma unroll
  for (int i = 0; i < kInputs; ++i) row_store<EPT, VEC>(a.buffers[kSlotGradInput + i], offset, count, gin[i]);
}

template <int EPT>
__device__ __forceinline__ void backward_init(const SpikejitArgs& a, const StridedOffsets<EPT>& so, long long n0,
                                              int count, real (&carry)[kStatesA][EPT], real (&gacc)[kParamsA][EPT]) {
  if constexpr (kReadGradFinalStates) {
    load_rows<kStates, EPT, false>(a, so, kSlotGradFinalState, n0, count, carry);
  } else {
#pragma unroll
    for (int i = 0; i < kStates; ++i)
#pragma unroll
      for (int e = 0; e < EPT; ++e) carry[i][e] = (real)0;
  }
#pragma unroll
  for (int i = 0; i < kParams; ++i)
#pragma unroll
    for (int e = 0; e < EPT; ++e) gacc[i][e] = (real)0;
}

// Stores grad initial states and per-neuron parameter gradients; returns this thread's sums of
// the scalar parameter gradients (in element order, in double).
template <int EPT, bool VEC>
__device__ __forceinline__ void backward_finish(const SpikejitArgs& a, long long n0, int count,
                                                const real (&carry)[kStatesA][EPT], const real (&gacc)[kParamsA][EPT],
                                                double (&partial)[kScalarParamCountA]) {
  store_rows<kStates, EPT, VEC>(a, kSlotGradInitialState, n0, count, carry);
  int scalar = 0;
#pragma unroll
  for (int i = 0; i < kParams; ++i) {
    if (is_scalar_param(i)) {
      double sum = (double)gacc[i][0];
#pragma unroll
      for (int e = 1; e < EPT; ++e) {
        if (e < count) sum = __dadd_rn(sum, (double)gacc[i][e]);
      }
      partial[scalar++] = sum;
    } else {
      Row<EPT> r;
#pragma unroll
      for (int e = 0; e < EPT; ++e) r.v[e] = to_storage(gacc[i][e]);
      row_store<EPT, VEC>(a.buffers[kSlotGradParam + i], n0, count, r);
    }
  }
}

template <int EPT, int DEPTH, bool VEC>
__device__ __forceinline__ void backward_rows(const SpikejitArgs& a, long long n0, int count,
                                              double (&partial)[kScalarParamCountA]) {
  const long long T = a.steps, N = a.neurons;
  const StridedOffsets<EPT> so = strided_offsets_of<EPT>(a, n0);
  real carry[kStatesA][EPT], gacc[kParamsA][EPT], pr[kParamValuesA][EPT];
  backward_init<EPT>(a, so, n0, count, carry, gacc);
  load_params<EPT, VEC>(a, so, n0, count, pr);
  hoist_values<EPT>(pr);
  if (T > 0) {
    // Like the forward, backwards: step t - DEPTH is loaded before step t runs (step 0 again
    // near the end).
    long long ahead = T - 1;
    StepRows<EPT> ring[DEPTH];
#pragma unroll
    for (int d = 0; d < DEPTH; ++d) {
      load_step_rows<EPT, VEC, true>(a, so, ahead > 0 ? ahead : 0, n0, count, ring[d]);
      --ahead;
    }
    for (long long t0 = T - 1; t0 >= 0; t0 -= DEPTH) {
#pragma unroll
      for (int d = 0; d < DEPTH; ++d) {
        const long long t = t0 - d;
        const StepRows<EPT> cur = ring[d];
        load_step_rows<EPT, VEC, true>(a, so, ahead > 0 ? ahead : 0, n0, count, ring[d]);
        if constexpr (DEPTH > 1 && kRingL2Ahead > 0) {
          if (ahead >= kRingL2Ahead) prefetch_step_rows_l2(a, ahead - kRingL2Ahead, n0);
        }
        --ahead;
        real sv[kSavedA][EPT];
#pragma unroll
        for (int i = 0; i < kSaved; ++i)
#pragma unroll
          for (int e = 0; e < EPT; ++e) sv[i][e] = to_real(cur.saved[i].v[e]);
        backward_apply<EPT, VEC>(a, t >= 0, t * N + n0, count, sv, cur, pr, carry, gacc);
      }
    }
  }
  backward_finish<EPT, VEC>(a, n0, count, carry, gacc, partial);
}

// What the recomputation of one checkpoint segment reads: its checkpointed states and the
// inputs of its steps (those before T).
template <int EPT, int K>
struct SegmentRows {
  real st[kStatesA][EPT];
  Row<EPT> x[K][kInputsA];
};

template <int EPT, bool VEC, int K, int UNROLL>
__device__ __forceinline__ void load_segment(const SpikejitArgs& a, const StridedOffsets<EPT>& so, long long seg,
                                             long long n0, int count, SegmentRows<EPT, K>& r) {
  const long long N = a.neurons, s0 = seg * K;
#pragma unroll
  for (int i = 0; i < kStates; ++i) real_row_load<EPT>(a.buffers[kSlotSaved + i], seg * N + n0, count, r.st[i]);
#pragma unroll UNROLL
  for (int u = 0; u < K; ++u) {
    if (s0 + u < a.steps) {
#pragma unroll
      for (int i = 0; i < kInputs; ++i) slot_load<EPT, VEC>(a, so, kSlotInput + i, s0 + u, n0, count, r.x[u][i]);
    }
  }
}

// Checkpoint mode: per segment of kCheckpointEvery steps (last segment first), recompute the
// saved values from the checkpointed states and the inputs with the forward's own step
// function, then run the reverse sweep over the segment. Where registers allow, the rows of the
// next segment are loaded before this one is computed, so their latency hides behind its work
// (without that, every segment waits a full memory latency: LIF's backward at k = 4 ran at 77 %
// of the copy bandwidth, with it at 90 %; H200, T = 32, N = 4M). Elsewhere the inputs of the
// steps ahead are asked of L2 (prefetch.global.L2: no registers), which brings part of that back.
template <int EPT, bool VEC>
__device__ __forceinline__ void backward_checkpoint_rows(const SpikejitArgs& a, long long n0, int count,
                                                         double (&partial)[kScalarParamCountA]) {
  constexpr int K = kCheckpointEvery > 0 ? kCheckpointEvery : 1;
  // Small segments are unrolled so that `ring` lives in registers; long ones use local memory.
  // Prefetching holds a second segment of inputs: only where those registers are there too.
  constexpr int kUnroll = K * kSavedA * EPT <= kCheckpointRegisters ? K : 1;
  constexpr bool kPrefetch = K * (kSavedA + 2 * kInputsA) * EPT <= kCheckpointPrefetchRegisters;
  // Otherwise: steps of input rows asked of L2 ahead of the recomputation.
  constexpr int kL2Ahead = kCheckpointL2AheadBytes / (kInputsA * EPT * (int)sizeof(storage));
  const long long T = a.steps, N = a.neurons;
  const StridedOffsets<EPT> so = strided_offsets_of<EPT>(a, n0);
  real carry[kStatesA][EPT], gacc[kParamsA][EPT], pr[kParamValuesA][EPT];
  backward_init<EPT>(a, so, n0, count, carry, gacc);
  load_params<EPT, VEC>(a, so, n0, count, pr);
  hoist_values<EPT>(pr);
  const long long segments = (T + K - 1) / K;
  // Without prefetching, a segment's inputs are loaded step by step as it is recomputed (held
  // whole, a long segment's rows would double its local memory).
  constexpr int kHeldRows = kPrefetch ? K : 1;
  SegmentRows<EPT, kHeldRows> next;
  if (kPrefetch && segments > 0) load_segment<EPT, VEC, kHeldRows, kUnroll>(a, so, segments - 1, n0, count, next);
  for (long long seg = segments - 1; seg >= 0; --seg) {
    const long long s0 = seg * K;
    const int len = T - s0 < K ? (int)(T - s0) : K;
    SegmentRows<EPT, kHeldRows> cur;
    if constexpr (kPrefetch) {
      cur = next;
      if (seg > 0) load_segment<EPT, VEC, kHeldRows, kUnroll>(a, so, seg - 1, n0, count, next);
    } else {
#pragma unroll
      for (int i = 0; i < kStates; ++i) {
        real_row_load<EPT>(a.buffers[kSlotSaved + i], seg * N + n0, count, cur.st[i]);
        if (seg > 0) row_prefetch_l2<real>(a.buffers[kSlotSaved + i], (seg - 1) * N + n0);
      }
    }
    real ring[K][kSavedA][EPT];
#pragma unroll kUnroll
    for (int u = 0; u < K; ++u) {
      if (u < len) {
        Row<EPT> xr[kInputsA];
#pragma unroll
        for (int i = 0; i < kInputs; ++i) {
          if constexpr (kPrefetch) {
            xr[i] = cur.x[u][i];
          } else {
            slot_load<EPT, VEC>(a, so, kSlotInput + i, s0 + u, n0, count, xr[i]);
          }
        }
        if constexpr (!kPrefetch && kL2Ahead > 0) {
          // Recomputation order: this segment's steps, then those of the segment before it.
          const long long ahead = (seg - (u + kL2Ahead) / K) * K + (u + kL2Ahead) % K;
          if (ahead >= 0 && ahead < T) {
#pragma unroll
            for (int i = 0; i < kInputs; ++i) slot_prefetch_l2(a, kSlotInput + i, ahead, n0);
          }
        }
        real draws[kStreamsA][EPT];
        draw_rows<EPT>(a, n0, s0 + u, draws);
#pragma unroll
        for (int e = 0; e < EPT; ++e) {
          ForwardIn in;
#pragma unroll
          for (int k = 0; k < kStreams; ++k) in.u[k] = draws[k][e];
#pragma unroll
          for (int i = 0; i < kInputs; ++i) in.x[i] = to_real(xr[i].v[e]);
#pragma unroll
          for (int i = 0; i < kStates; ++i) in.s[i] = cur.st[i][e];
#pragma unroll
          for (int i = 0; i < kParamValues; ++i) in.p[i] = pr[i][e];
          const ForwardOut o = forward_step(in);
#pragma unroll
          for (int i = 0; i < kStates; ++i) cur.st[i][e] = o.s_next[i];
#pragma unroll
          for (int i = 0; i < kSaved; ++i) ring[u][i][e] = o.saved[i];
        }
      }
    }
#pragma unroll kUnroll
    for (int u = K - 1; u >= 0; --u) {
      if (u < len) {
        StepRows<EPT> g;
        load_step_rows<EPT, VEC, false>(a, so, s0 + u, n0, count, g);
        backward_apply<EPT, VEC>(a, true, (s0 + u) * N + n0, count, ring[u], g, pr, carry, gacc);
      }
    }
  }
  backward_finish<EPT, VEC>(a, n0, count, carry, gacc, partial);
}

// Block b writes its sum of scalar parameter gradient j to workspace[j * gridDim.x + b]; the
// tree order is fixed, so the result does not depend on scheduling.
template <int BLOCK>
__device__ __forceinline__ void write_block_partials(const SpikejitArgs& a, const double (&partial)[kScalarParamCountA]) {
  __shared__ double red[BLOCK];
  double* ws = static_cast<double*>(a.buffers[kSlotWorkspace]);
#pragma unroll
  for (int j = 0; j < kScalarParamCount; ++j) {
    red[threadIdx.x] = partial[j];
    __syncthreads();
#pragma unroll
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
      if ((int)threadIdx.x < s) red[threadIdx.x] = __dadd_rn(red[threadIdx.x], red[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0 && ws != nullptr) ws[(long long)j * gridDim.x + blockIdx.x] = red[0];
    __syncthreads();
  }
}

template <int EPT, int DEPTH, bool VEC>
__device__ __forceinline__ void backward_run(const SpikejitArgs& a, long long n0, int count,
                                             double (&partial)[kScalarParamCountA]) {
  if constexpr (kCheckpointEvery > 0) {
    backward_checkpoint_rows<EPT, VEC>(a, n0, count, partial);
  } else {
    backward_rows<EPT, DEPTH, VEC>(a, n0, count, partial);
  }
}

// Like forward_entry; then the block's scalar parameter gradient sums go to the workspace.
template <int EPT, int BLOCK, int DEPTH>
__device__ __forceinline__ void backward_entry(const SpikejitArgs& a) {
  double partial[kScalarParamCountA];
#pragma unroll
  for (int j = 0; j < kScalarParamCountA; ++j) partial[j] = 0.0;
  long long n0;
  const int count = thread_elements<EPT, BLOCK>(a, n0);
  if (count > 0) {
    if constexpr (EPT > 1) {
      if (count == EPT && rows_aligned<EPT>(a)) {
        backward_run<EPT, DEPTH, true>(a, n0, count, partial);
      } else {
        // Element by element; the partial sums are added in the same order as above.
        for (int e = 0; e < count; ++e) {
          double pe[kScalarParamCountA];
          backward_run<1, 1, false>(a, n0 + e, 1, pe);
#pragma unroll
          for (int j = 0; j < kScalarParamCount; ++j) partial[j] = e == 0 ? pe[j] : __dadd_rn(partial[j], pe[j]);
        }
      }
    } else {
      backward_run<1, DEPTH, false>(a, n0, count, partial);
    }
  }
  if constexpr (kScalarParamCount > 0) write_block_partials<BLOCK>(a, partial);
}

// One block per scalar parameter: adds the per-block partials of the main kernel (launched with
// the same EPT and BLOCK) in a fixed order and writes the gradient.
template <int EPT, int BLOCK>
__device__ __forceinline__ void reduce_entry(const SpikejitArgs& a) {
  __shared__ double red[kReduceThreads];
  const double* ws = static_cast<const double*>(a.buffers[kSlotWorkspace]);
  if (ws == nullptr) return;
  const long long per_block = (long long)EPT * BLOCK;
  const long long parts = (a.neurons + per_block - 1) / per_block;
  const int j = blockIdx.x;
  double sum = 0.0;
  for (long long b = threadIdx.x; b < parts; b += kReduceThreads) sum = __dadd_rn(sum, ws[j * parts + b]);
  red[threadIdx.x] = sum;
  __syncthreads();
#pragma unroll
  for (int s = kReduceThreads / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) red[threadIdx.x] = __dadd_rn(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  int scalar = 0;
#pragma unroll
  for (int i = 0; i < kParams; ++i) {
    if (is_scalar_param(i)) {
      storage* g = static_cast<storage*>(a.buffers[kSlotGradParam + i]);
      if (scalar == j && g != nullptr) *g = to_storage((real)red[0]);
      ++scalar;
    }
  }
}
)";

}  // namespace spikejit::codegen
