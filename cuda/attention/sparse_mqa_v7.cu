// v7: v5 with fewer consumer instructions per block (sm_90a). docs/cuda-attention.md has the measurement
// that led to it (v5's ncu source page against FlashMLA's) and the prediction. v5's producer, grid,
// ring, work units and epilogue; the consumers change in two places:
//   - the online softmax runs in the base-2 domain (softmax_block_exp2 of v4_pieces.cuh): the row max
//     over the raw scores, p = ex2.approx(fma(s, scale log2 e, -max scale log2 e)) (one FFMA and one
//     MUFU.EX2 an element, against v5's FMUL, FADD and the accurate expf's range reduction), the
//     rescale ex2.approx of the difference; the max logit written is scale times the raw max (v5's
//     value, bit for bit), the lse that max plus log of the base-2 sum;
//   - the wgmma descriptors of QK and P V are computed once per block from the tiles' addresses and
//     stepped by constants in their low word (qk_block_all_stepped, pv_block_regs_stepped): the same
//     wgmmas on the same operands as v5's; the probabilities packed to bf16 by one cvt per pair (the
//     same bits as v5's integer rounding).
// v7's outputs are not v5's bits (another exp); the oracle's bounds decide (docs/cuda-attention.md, v7).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/launchers.h"
#include "cuda/attention/split_combine.cuh"
#include "cuda/attention/v4_pieces.cuh"
#include "cuda/attention/v5_producer.cuh"
#include "cuda/common/cuda_check.h"

namespace dsv4::cuda::attention::detail {
namespace {

using namespace v3;
using v5::Smem;

// Register budgets (setmaxnreg): the producers hold addresses only (no loaded bytes), so both give
// the consumers v4's prefill budget.
constexpr int kProducerRegs = 88, kConsumerRegs = 208;
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 384 * 168,
              "the warpgroups' registers fit what a 384-thread block is launched with (168 each)");
// Ping-pong as v4 (named barriers kTurn + c), once for the whole CTA: consumer 1 arrives on kTurn
// before its first block, consumer 0 syncs on it after its last one.
constexpr int kTurn = 2;

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

// One work unit u of a consumer warpgroup: v5's, with v7's QK, softmax step and P V.
template <class Params, int kPlanes>
__device__ void consume_unit(const Params& p, const Smem& m, int u, int splits, SplitOut ws, uint32_t& n) {
  const int c = static_cast<int>(threadIdx.x >> 7) - 1;  // consumer 0 or 1: dims 256c .. 256c+255
  const int t = threadIdx.x & 127;
  const int rows[2] = {acc_row(t, 0), acc_row(t, 2)};  // the two heads this thread's fragments hold

  float o[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] = 0.0f;
  float m_raw[2] = {-INFINITY, -INFINITY}, mc[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  // c = scale log2(e), rounded once (docs/cuda-attention.md, v7: its error enters as 2^-24 |s - m|)
  const float scale_log2 = static_cast<float>(static_cast<double>(p.scale) * 1.4426950408889634);

  const UnitRange blocks = unit_range(p, u, splits);
  for (int blk = blocks.begin; blk < blocks.end; ++blk, ++n) {
    const Stage st = m.b.stage(static_cast<int>(n & 1));
    const bool last = blk + 1 == blocks.end;
    sm90::mbarrier_wait(st.full, (n >> 1) & 1);
    const uint64_t valid = *reinterpret_cast<const uint64_t*>(st.mask);  // bit j: slot j of the block
    if (valid == 0) {                                                    // a block without a valid slot changes nothing
      if (last) sm90::mbarrier_arrive(m.q_free);
      sm90::mbarrier_arrive(st.empty);
      continue;
    }
    float s_acc[32];
    sm90::named_barrier(kTurn + c, 256);  // the other consumer has issued its previous QK
    v4::qk_block_all_stepped(m.b.base + m.b.plan.q, st.tile, s_acc, kTurn + (c ^ 1));
    if (last) sm90::mbarrier_arrive(m.q_free);  // this unit's q is read: the producer may load the next
    v4::softmax_block_exp2(s_acc, valid, scale_log2, t, m_raw, mc, l_run, o);
    v4::pv_block_regs_stepped<kPlanes>(s_acc, st.tile, c, o);
    sm90::mbarrier_arrive(st.empty);
  }

  asm volatile("" : "+r"(u));  // the unit's row and heads recomputed here, not held through the loop
  const UnitRange r = unit_range(p, u, splits);
  // The epilogue's natural-log domain: m = fp32(scale m_raw), v5's running max of scale s bit for bit.
  // l and o are sums of 2^(c s - mc); one factor 2^(mc - m log2 e) per head, computed in double (the
  // difference is a few ulps of mc), makes them sums of e^(scale s - m) up to one fp32 rounding, so
  // that the sink term, the lse and the split partials all refer to the written m (docs/cuda-attention.md, v7).
  const float m_run[2] = {m_raw[0] * p.scale, m_raw[1] * p.scale};
  float to_m[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const double d = static_cast<double>(mc[h]) - static_cast<double>(m_run[h]) * 1.4426950408889634;
    to_m[h] = l_run[h] > 0.0f ? static_cast<float>(exp2(d)) : 1.0f;  // l = 0: no valid slot, m = -inf
    l_run[h] *= to_m[h];
  }
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] *= to_m[(e >> 1) & 1];
  write_output(p, o, m_run, l_run, r.row, r.head_base, r.split, splits, ws, c, t, rows);
}

template <class Params, int kPlanes>
__global__ void __launch_bounds__(kThreads, 1) sparse_mqa_v7_kernel(Params p, int splits, int units, SplitOut ws) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = mma::smem_addr(smem_raw);
  constexpr v5::Plan pl = v5::plan();
  Smem m;
  m.b.base = (raw + 1023u) & ~1023u;
  m.b.ptr = smem_raw + (m.b.base - raw);
  m.b.plan = v3::plan(0);  // q, k tiles as v3's; mask, full, empty moved to v5's plan below
  m.b.plan.mask = pl.mask;
  m.b.plan.full = pl.full;
  m.b.plan.empty = pl.empty;
  m.raw = m.b.base + pl.raw;
  m.scales = m.b.base + pl.scales;
  m.raw_ptr = m.b.ptr + pl.raw;
  m.scales_ptr = m.b.ptr + pl.scales;
  m.q_free = m.b.base + pl.q_free;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrier_init(m.b.stage(s).full, 128);   // every producer thread
      sm90::mbarrier_init(m.b.stage(s).empty, 256);  // every consumer thread
    }
    sm90::mbarrier_init(m.q_free, 256);  // every consumer thread, once per unit with blocks
    sm90::fence_mbarrier_init();
  }
  __syncthreads();

  uint32_t n = 0;  // blocks of this CTA so far (both sides count the same blocks)
  if (threadIdx.x < 128) {
    sm90::setmaxnreg_dec<kProducerRegs>();
    uint32_t units_with_blocks = 0;
    for (int u = static_cast<int>(blockIdx.x); u < units; u += static_cast<int>(gridDim.x)) {
      const UnitRange r = unit_range(p, u, splits);
      v5::produce_unit(p, m, r.row, p.q_row(r.row, r.head_base), r.begin, r.end, n, units_with_blocks);
    }
  } else {
    sm90::setmaxnreg_inc<kConsumerRegs>();
    const int c = static_cast<int>(threadIdx.x >> 7) - 1;
    if (c == 1) sm90::named_barrier_arrive(kTurn, 256);
    for (int u = static_cast<int>(blockIdx.x); u < units; u += static_cast<int>(gridDim.x))
      consume_unit<Params, kPlanes>(p, m, u, splits, ws, n);
    if (c == 0) sm90::named_barrier(kTurn, 256);  // consumer 1's last arrival
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
  auto* kernel = sparse_mqa_v7_kernel<Params, kPlanes>;
  const uint32_t smem = v5::smem_request();
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  CUDA_CHECK(attr);
  const int64_t units = p.rows() * (p.n_heads / layout::kRows) * splits;
  if (units == 0) return;
  if (units > INT32_MAX) throw std::invalid_argument("sparse_mqa v7: more than 2^31 - 1 work units");
  const int64_t grid = units < sm_count() ? units : sm_count();  // one CTA per SM (227 KiB each)
  kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(p, splits, static_cast<int>(units), ws);
  CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    split_combine_kernel<Params><<<static_cast<unsigned>(p.rows() * p.n_heads), 128, 0, stream>>>(p, splits, ws);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void launch_v7(const DecodeParams& p, Probs probs, int splits, void* workspace, cudaStream_t stream) {
  const SplitOut ws = split_views(workspace, p.rows(), p.n_heads, splits);
  if (probs == Probs::bf16)
    launch_kernel<DecodeParams, 1>(p, splits, ws, stream);
  else
    launch_kernel<DecodeParams, 3>(p, splits, ws, stream);
}

void launch_v7(const PrefillParams& p, Probs probs, cudaStream_t stream) {
  if (probs == Probs::bf16)
    launch_kernel<PrefillParams, 1>(p, 1, SplitOut{nullptr, nullptr, nullptr}, stream);
  else
    launch_kernel<PrefillParams, 3>(p, 1, SplitOut{nullptr, nullptr, nullptr}, stream);
}

}  // namespace dsv4::cuda::attention::detail
