// v6: v5's persistent grid with the consumers' work split so that S = q k^T is computed once per
// 64-slot block (sm_90a). docs/cuda-attention.md has the design, the prediction and its falsifier.
// Against v5, whose two consumers each computed the whole S of every block:
//   - consumer 0 (warpgroup 1) computes S for all 64 slots and the online-softmax step (v4's
//     softmax_block, as v5), stores the probabilities (fp32) and the new running maxima into the p
//     buffer of the block's stage, arrives on the named barrier kPReady + stage and issues
//     O[:, 0:256] += P V; before waiting for that P V it waits for the next block and issues its QK
//     (one block ahead: the tensor pipe runs both P V and the next QK back to back);
//   - consumer 1 (warpgroup 2) waits on that barrier, rescales its O by exp(m_old - m_new) from the
//     stored maxima (softmax_block's factor: the same expf of the same values) and issues
//     O[:, 256:512] += P V;
//   - both take P from the p buffer into v4's A fragments (P V with A from registers): the same thread
//     holds the same elements in both warpgroups, the bf16 planes recomputed from the stored fp32
//     value by v4's exact subtractions, so each consumer's P V is v5's on the same values;
//   - the p buffers are double-buffered by stage: consumer 0 writes block n's only after waiting for
//     `full` of block n, which the producer arrives on only after both consumers released block n - 2
//     (consumer 1 arrives on `empty` after its P V of n - 2 completed): no "p free" barrier;
//   - at the end of a work unit consumer 0 stores the final row sums, both consumers sync, and
//     consumer 1 normalizes its half with them (one buffer per unit parity); both write with v3's
//     write_output, as v5.
// Producers: decode is v4's (MODEL1 bytes through registers: v5's staging area has no room beside the
// p buffers), on the persistent grid; prefill is v5's. The outputs are therefore v5's bits.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/launchers.h"
#include "cuda/attention/split_combine.cuh"
#include "cuda/attention/v4_pieces.cuh"
#include "cuda/attention/v5_producer.cuh"
#include "cuda/attention/v6_layout.cuh"
#include "cuda/common/cuda_check.h"

namespace dsv4::cuda::attention::detail {
namespace {

using namespace v3;

// Register budgets (setmaxnreg), producer / consumer 0 / consumer 1: decode's producer holds a
// token's half in 74 registers (v4's budget), prefill's only addresses (v5's). Consumer 0 holds O
// (128), S / P (32) and the softmax state; consumer 1 O and P.
template <class Params>
struct Budget;
template <>
struct Budget<DecodeParams> {
  static constexpr int producer = 112, consumer0 = 216, consumer1 = 176;
};
template <>
struct Budget<PrefillParams> {
  static constexpr int producer = 88, consumer0 = 224, consumer1 = 192;
};
static_assert(Budget<DecodeParams>::producer + Budget<DecodeParams>::consumer0 + Budget<DecodeParams>::consumer1 <=
                      3 * 168 &&
                  Budget<PrefillParams>::producer + Budget<PrefillParams>::consumer0 +
                          Budget<PrefillParams>::consumer1 <=
                      3 * 168,
              "the warpgroups' registers fit what a 384-thread block is launched with (168 each)");

// Named barriers (256 threads: consumer 0 arrives, consumer 1 syncs): the probabilities of stage s
// are stored (kPReady + s); both sync at the end of a unit once the row sums are stored.
constexpr int kPReady = 2, kRowSums = 4;

__device__ __forceinline__ void st_shared_f4(uint32_t addr, float a, float b, float c, float d) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ void ld_shared_f4(uint32_t addr, float& a, float& b, float& c, float& d) {
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "r"(addr));
}
__device__ __forceinline__ void st_shared_f(uint32_t addr, float a) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(a) : "memory");
}
__device__ __forceinline__ float ld_shared_f(uint32_t addr) {
  float a;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(a) : "r"(addr));
  return a;
}

struct Smem {
  v5::Smem pipe;  // q, k tiles, masks, full / empty, q_free (v3's and v5's accessors; no staging area)
  uint32_t base;  // shared address of the 1,024-aligned base
  // Shared addresses, computed from the first buffer's offset (the plan indexed by a run-time stage
  // would be a local array): float4 j of thread t in stage s's p buffer, head h's running maximum
  // after stage s's block, head h's row sum at the end of a unit of the given parity.
  __device__ uint32_t p(int s, int j, int t) const {
    return base + kP0 + v6::kPBuffer * static_cast<uint32_t>(s) + v6::p_offset(j, t);
  }
  __device__ uint32_t row_max(int s, int h) const { return base + kRowMax0 + static_cast<uint32_t>(64 * s + h) * 4; }
  __device__ uint32_t row_sum(int parity, int h) const {
    return base + kRowSum0 + static_cast<uint32_t>(64 * parity + h) * 4;
  }
  static constexpr uint32_t kP0 = v6::plan().p[0], kRowMax0 = v6::plan().row_max[0], kRowSum0 = v6::plan().row_sum[0];
};
static_assert(v6::plan().p[1] == Smem::kP0 + v6::kPBuffer && v6::plan().row_max[1] == Smem::kRowMax0 + 64 * 4 &&
                  v6::plan().row_sum[1] == Smem::kRowSum0 + 64 * 4,
              "Smem's accessors follow v6's plan");

// P V with the probabilities read back from a p buffer (thread t's own elements): v4::pv_block_regs's
// arithmetic and wgmma order, plane after plane, each plane's residual recomputed from the stored fp32
// value (prob - hi - mid ...: the same subtractions on the same values, so the same planes) instead of
// 32 live registers.

// Plane `plane` of the probabilities of stage s -> the A fragments of the 4 k-steps (16 slots each).
__device__ __forceinline__ void load_plane(const Smem& m, int s, int t, int plane, uint32_t (&a)[4][4]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {  // float4 j = elements 4j .. 4j+3 = words 2(j%2), 2(j%2)+1 of k-step j/2
    float x[4];
    ld_shared_f4(m.p(s, j, t), x[0], x[1], x[2], x[3]);
#pragma unroll
    for (int q = 0; q < plane; ++q)  // plane: a constant of the caller's unrolled loop
#pragma unroll
      for (int i = 0; i < 4; ++i) x[i] = x[i] - bf16_value(bf16_bits(x[i]));  // exact: the part still missing
    a[j >> 1][2 * (j & 1)] = v4::pack_bf16(x[0], x[1]);
    a[j >> 1][2 * (j & 1) + 1] = v4::pack_bf16(x[2], x[3]);
  }
}

// O (64 heads x dims 256c .. 256c+255) += plane (a) x V over the block's 64 slots: issued and committed,
// not waited for (a and o must stay untouched until the group completes).
__device__ __forceinline__ void issue_pv(const uint32_t (&a)[4][4], uint32_t k_tile, int c, float (&o)[128]) {
  sm90::fence_registers(o);
  sm90::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    sm90::wgmma_m64n256k16_rs_tb(o, a[ks], mn_major_desc(mn_major_start(k_tile, (kDimsPerConsumer / 64) * c, ks)), 1);
  sm90::wgmma_commit();
}

// Every plane but the last issued and waited for; the last one issued (its group still in flight, `a`
// holding its fragments).
template <int kPlanes>
__device__ __forceinline__ void pv_block_but_wait(const Smem& m, int s, int t, uint32_t k_tile, int c,
                                                  uint32_t (&a)[4][4], float (&o)[128]) {
#pragma unroll
  for (int plane = 0; plane < kPlanes; ++plane) {
    load_plane(m, s, t, plane, a);
    issue_pv(a, k_tile, c, o);
    if (plane + 1 < kPlanes) {
      sm90::wgmma_wait<0>();
      sm90::fence_registers(o);
    }
  }
}

// Keeps the A fragments of an in-flight P V alive (and unmodified) up to this point.
__device__ __forceinline__ void hold(const uint32_t (&a)[4][4]) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int k = 0; k < 4; ++k) asm volatile("" ::"r"(a[ks][k]));
}

// S (64 heads x 64 slots) = q k^T over 512 dims (v4::qk_block_all's zeroing and 32 wgmmas): issued
// and committed, not waited for.
__device__ __forceinline__ void issue_qk(uint32_t q_tile, uint32_t k_tile, float (&s)[32]) {
#pragma unroll
  for (int e = 0; e < 32; ++e) s[e] = 0.0f;
  sm90::fence_registers(s);
  sm90::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks)
    sm90::wgmma_m64n64k16_ss(s, k_major_desc(k_major_start(q_tile, 0, ks)), k_major_desc(k_major_start(k_tile, 0, ks)),
                             1);
  sm90::wgmma_commit();
}

struct UnitRange {
  int64_t row;
  int head_base, split, begin, end;
};

template <class Params>
__device__ UnitRange unit_range(const Params& p, int u, int splits) {
  const v5::Unit w = v5::unit_of(u, p.n_heads / layout::kRows, splits);
  const auto rs = p.row_slots(w.row);
  const int n_blocks = (rs.total() + layout::kRows - 1) / layout::kRows;
  const int per_split = (n_blocks + splits - 1) / splits;
  UnitRange r;
  r.row = w.row;
  r.head_base = w.group * layout::kRows;
  r.split = w.split;
  r.begin = min(n_blocks, w.split * per_split);
  r.end = min(n_blocks, r.begin + per_split);
  return r;
}

// Decode producer on the persistent grid: v4's gather (v3::produce) with v5's block count n and
// q_free wait before a unit's q is overwritten.
__device__ __forceinline__ void produce_decode_unit(const DecodeParams& p, const v5::Smem& m, int64_t row,
                                                    const uint16_t* q_heads, int begin, int end, uint32_t& n,
                                                    uint32_t& units_with_blocks) {
  if (begin >= end) return;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int token = producer_token(t), half = producer_half(t);
  const DecodeRowSlots rs = p.row_slots(row);
  if (units_with_blocks > 0) sm90::mbarrier_wait(m.q_free, (units_with_blocks - 1) & 1);
  ++units_with_blocks;
  issue_q(m.b.base + m.b.plan.q, q_heads, t);
  mma::cp_async_commit();
  DecodeLoad L;
  for (int blk = begin; blk < end; ++blk, ++n) {
    const Stage st = m.b.stage(static_cast<int>(n & 1));
    load_decode(rs, blk * layout::kRows + token, half, q_heads, L);
    const uint32_t bits = token_bits(L.valid);
    if (n >= 2) sm90::mbarrier_wait(st.empty, ((n >> 1) - 1) & 1);
    store_decode(L, st.ptr, token, half);
    if (lane == 0) st.mask[warp] = static_cast<uint16_t>(bits);
    if (blk == begin) mma::cp_async_wait<0>();  // this thread's share of q has landed
    sm90::fence_proxy_async();
    sm90::mbarrier_arrive(st.full);
  }
  mma::cp_async_wait<0>();
}

// Consumer 0: block n of the CTA (stage n % 2) waited for; without a valid slot it is released at
// once (returns 0), else its validity bits are returned. `last`: the unit's last block, after which q
// may be reloaded (q_free: here if released, after its QK's wait otherwise). Every QK below is issued
// and waited for inside one branch: ptxas tracks the wgmma registers per path, and a QK left in flight
// across a merge of paths makes it serialize every wgmma of the kernel.
__device__ __forceinline__ uint64_t wait_block(const Smem& m, uint32_t n, bool last) {
  const Stage st = m.pipe.b.stage(static_cast<int>(n & 1));
  sm90::mbarrier_wait(st.full, (n >> 1) & 1);
  const uint64_t valid = *reinterpret_cast<const uint64_t*>(st.mask);  // bit j: slot j of the block
  if (valid == 0) {                                                    // a block without a valid slot changes nothing
    if (last) sm90::mbarrier_arrive(m.pipe.q_free);
    sm90::mbarrier_arrive(st.empty);
  }
  return valid;
}

// Consumer 0: from block `blk` (count n) on, the first block with a valid slot, its S computed;
// blocks without one released. Returns its validity bits (0: none left, blk = end).
__device__ __forceinline__ uint64_t first_valid(const Smem& m, int& blk, int end, uint32_t& n, float (&s)[32]) {
  for (; blk < end; ++blk, ++n) {
    const bool last = blk + 1 == end;
    const uint64_t valid = wait_block(m, n, last);
    if (valid != 0) {
      issue_qk(m.pipe.b.base + m.pipe.b.plan.q, m.pipe.b.stage(static_cast<int>(n & 1)).tile, s);
      sm90::wgmma_wait<0>();
      sm90::fence_registers(s);
      if (last) sm90::mbarrier_arrive(m.pipe.q_free);  // this unit's q is read: the producer may load the next
      return valid;
    }
  }
  return 0;
}

// Consumer 0, one work unit: v5's consumer with S computed here only and one block ahead (the QK of
// block n + 1 issued before waiting for the P V of block n), the probabilities and the running maxima
// handed to consumer 1 before its own P V.
template <class Params, int kPlanes>
__device__ __forceinline__ void consume_unit_0(const Params& p, const Smem& m, int u, int splits, SplitOut ws,
                                               uint32_t& n, uint32_t units) {
  const int t = threadIdx.x & 127;
  float o[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  const UnitRange blocks = unit_range(p, u, splits);
  const int end = blocks.end;
  int blk = blocks.begin;
  float s_acc[32];
  uint64_t valid = first_valid(m, blk, end, n, s_acc);
  while (blk < end) {  // block blk (count n) has a valid slot and its S in s_acc
    const int s = static_cast<int>(n & 1);
    const Stage st = m.pipe.b.stage(s);
    v4::softmax_block(s_acc, valid, p.scale, t, m_run, l_run, o);  // s_acc: now p; o rescaled
    // Hand the probabilities and the new running maxima to consumer 1 (its buffers of stage s are
    // free: see the top).
#pragma unroll
    for (int j = 0; j < 8; ++j)
      st_shared_f4(m.p(s, j, t), s_acc[4 * j], s_acc[4 * j + 1], s_acc[4 * j + 2], s_acc[4 * j + 3]);
    if ((t & 3) == 0) {
      st_shared_f(m.row_max(s, acc_row(t, 0)), m_run[0]);
      st_shared_f(m.row_max(s, acc_row(t, 2)), m_run[1]);
    }
    sm90::named_barrier_arrive(kPReady + s, 256);
    uint32_t a[4][4];
    pv_block_but_wait<kPlanes>(m, s, t, st.tile, 0, a, o);

    // Look ahead: block n + 1 (the other stage) waited for and its QK issued under this P V.
    ++blk;
    ++n;
    const uint64_t next = blk < end ? wait_block(m, n, blk + 1 == end) : 0;
    if (next != 0) {
      issue_qk(m.pipe.b.base + m.pipe.b.plan.q, m.pipe.b.stage(static_cast<int>(n & 1)).tile, s_acc);
      sm90::wgmma_wait<1>();  // this block's P V (committed before the QK)
      sm90::fence_registers(o);
      hold(a);
      sm90::mbarrier_arrive(st.empty);
      sm90::wgmma_wait<0>();
      sm90::fence_registers(s_acc);
      if (blk + 1 == end) sm90::mbarrier_arrive(m.pipe.q_free);
      valid = next;
      continue;
    }
    sm90::wgmma_wait<0>();
    sm90::fence_registers(o);
    hold(a);
    sm90::mbarrier_arrive(st.empty);
    if (blk < end) {  // block n + 1 had no valid slot and is released: search on after it
      ++blk;
      ++n;
    }
    valid = first_valid(m, blk, end, n, s_acc);
  }

  // The final row sums for consumer 1 (the same in the 4 lanes of a row).
  if ((t & 3) == 0) {
    const int parity = static_cast<int>(units & 1);
    st_shared_f(m.row_sum(parity, acc_row(t, 0)), l_run[0]);
    st_shared_f(m.row_sum(parity, acc_row(t, 2)), l_run[1]);
  }
  sm90::named_barrier(kRowSums, 256);
  asm volatile("" : "+r"(u));  // the unit's row and heads recomputed here, not held through the loop
  const UnitRange r = unit_range(p, u, splits);
  const int rows[2] = {acc_row(t, 0), acc_row(t, 2)};
  write_output(p, o, m_run, l_run, r.row, r.head_base, r.split, splits, ws, 0, t, rows);
}

// Consumer 1, one work unit: O[:, 256:512] from consumer 0's probabilities.
template <class Params, int kPlanes>
__device__ __forceinline__ void consume_unit_1(const Params& p, const Smem& m, int u, int splits, SplitOut ws,
                                               uint32_t& n, uint32_t units) {
  const int t = threadIdx.x & 127;
  const int rows[2] = {acc_row(t, 0), acc_row(t, 2)};
  float o[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] = 0.0f;

  float m_run[2] = {-INFINITY, -INFINITY};  // consumer 0's running maxima, block after block

  const UnitRange blocks = unit_range(p, u, splits);
  for (int blk = blocks.begin; blk < blocks.end; ++blk, ++n) {
    const int s = static_cast<int>(n & 1);
    const Stage st = m.pipe.b.stage(s);
    sm90::mbarrier_wait(st.full, (n >> 1) & 1);
    const uint64_t valid = *reinterpret_cast<const uint64_t*>(st.mask);
    if (valid == 0) {  // consumer 0 skips it too: no probabilities come
      sm90::mbarrier_arrive(st.empty);
      continue;
    }
    sm90::named_barrier(kPReady + s, 256);
    float rescale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // softmax_block's factor: the same expf of the same values
      const float m_new = ld_shared_f(m.row_max(s, rows[h]));
      rescale[h] = expf(m_run[h] - m_new);
      m_run[h] = m_new;
    }
#pragma unroll
    for (int e = 0; e < 128; ++e) o[e] *= rescale[(e >> 1) & 1];
    uint32_t a[4][4];
    pv_block_but_wait<kPlanes>(m, s, t, st.tile, 1, a, o);
    sm90::wgmma_wait<0>();
    sm90::fence_registers(o);
    hold(a);
    sm90::mbarrier_arrive(st.empty);  // after P V completed: the p buffer of stage s is read too
  }

  sm90::named_barrier(kRowSums, 256);
  const int parity = static_cast<int>(units & 1);
  const float l_run[2] = {ld_shared_f(m.row_sum(parity, rows[0])), ld_shared_f(m.row_sum(parity, rows[1]))};
  asm volatile("" : "+r"(u));
  const UnitRange r = unit_range(p, u, splits);
  write_output(p, o, m_run, l_run, r.row, r.head_base, r.split, splits, ws, 1, t, rows);
}

template <class Params, int kPlanes>
__global__ void __launch_bounds__(kThreads, 1) sparse_mqa_v6_kernel(Params p, int splits, int units, SplitOut ws) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = mma::smem_addr(smem_raw);
  constexpr v6::Plan pl = v6::plan();
  Smem m;
  m.base = (raw + 1023u) & ~1023u;
  m.pipe.b.base = m.base;
  m.pipe.b.ptr = smem_raw + (m.base - raw);
  m.pipe.b.plan = v3::plan(0);  // q, k tiles as v3's; mask, full, empty moved to v6's plan below
  m.pipe.b.plan.mask = pl.mask;
  m.pipe.b.plan.full = pl.full;
  m.pipe.b.plan.empty = pl.empty;
  m.pipe.raw = m.pipe.scales = 0;  // v5's staging area: not in v6 (its prefill producer does not use it)
  m.pipe.raw_ptr = m.pipe.scales_ptr = nullptr;
  m.pipe.q_free = m.base + pl.q_free;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrier_init(m.pipe.b.stage(s).full, 128);   // every producer thread
      sm90::mbarrier_init(m.pipe.b.stage(s).empty, 256);  // every consumer thread
    }
    sm90::mbarrier_init(m.pipe.q_free, 128);  // every thread of consumer 0, once per unit with blocks
    sm90::fence_mbarrier_init();
  }
  __syncthreads();

  uint32_t n = 0;  // blocks of this CTA so far (all three warpgroups count the same blocks)
  if (threadIdx.x < 128) {
    sm90::setmaxnreg_dec<Budget<Params>::producer>();
    uint32_t units_with_blocks = 0;
    for (int u = static_cast<int>(blockIdx.x); u < units; u += static_cast<int>(gridDim.x)) {
      const UnitRange r = unit_range(p, u, splits);
      if constexpr (std::is_same_v<Params, DecodeParams>)
        produce_decode_unit(p, m.pipe, r.row, p.q_row(r.row, r.head_base), r.begin, r.end, n, units_with_blocks);
      else
        v5::produce_unit(p, m.pipe, r.row, p.q_row(r.row, r.head_base), r.begin, r.end, n, units_with_blocks);
    }
  } else if (threadIdx.x < 256) {
    sm90::setmaxnreg_inc<Budget<Params>::consumer0>();
    uint32_t k = 0;  // this CTA's units so far
    for (int u = static_cast<int>(blockIdx.x); u < units; u += static_cast<int>(gridDim.x), ++k)
      consume_unit_0<Params, kPlanes>(p, m, u, splits, ws, n, k);
  } else {
    sm90::setmaxnreg_inc<Budget<Params>::consumer1>();
    uint32_t k = 0;
    for (int u = static_cast<int>(blockIdx.x); u < units; u += static_cast<int>(gridDim.x), ++k)
      consume_unit_1<Params, kPlanes>(p, m, u, splits, ws, n, k);
  }
}

int sm_count() {
  static const int sms = [] {
    int device = 0, count = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  return sms;
}

template <class Params, int kPlanes>
void launch_kernel(const Params& p, int splits, SplitOut ws, cudaStream_t stream) {
  auto* kernel = sparse_mqa_v6_kernel<Params, kPlanes>;
  const uint32_t smem = v6::smem_request();
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  CUDA_CHECK(attr);
  const int64_t units = p.rows() * (p.n_heads / layout::kRows) * splits;
  if (units == 0) return;
  if (units > INT32_MAX) throw std::invalid_argument("sparse_mqa v6: more than 2^31 - 1 work units");
  const int64_t grid = units < sm_count() ? units : sm_count();  // one CTA per SM (227 KiB each)
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(p, splits, static_cast<int>(units), ws);
  CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    split_combine_kernel<Params><<<static_cast<unsigned>(p.rows() * p.n_heads), 128, 0, stream>>>(p, splits, ws);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void launch_v6(const DecodeParams& p, Probs probs, int splits, void* workspace, cudaStream_t stream) {
  const SplitOut ws = split_views(workspace, p.rows(), p.n_heads, splits);
  if (probs == Probs::bf16)
    launch_kernel<DecodeParams, 1>(p, splits, ws, stream);
  else
    launch_kernel<DecodeParams, 3>(p, splits, ws, stream);
}

void launch_v6(const PrefillParams& p, Probs probs, cudaStream_t stream) {
  if (probs == Probs::bf16)
    launch_kernel<PrefillParams, 1>(p, 1, SplitOut{nullptr, nullptr, nullptr}, stream);
  else
    launch_kernel<PrefillParams, 3>(p, 1, SplitOut{nullptr, nullptr, nullptr}, stream);
}

}  // namespace dsv4::cuda::attention::detail
