// v7: v5 with fewer consumer instructions per block (sm_90a). docs/cuda-attention.md has the measurement
// that led to it (v5's ncu source page against FlashMLA's) and the prediction. v5's producer, grid,
// ring, work units and epilogue; the consumers change in two places:
//   - the online softmax runs in the base-2 domain (softmax_block_exp2 of v4_pieces.cuh): the row max
//     over the raw scores, p = ex2.approx(fma(s, scale log2 e, -max scale log2 e)) (one FFMA and one
//     MUFU.EX2 an element, against v5's FMUL, FADD and the accurate expf's range reduction), the
//     rescale ex2.approx of the difference; the max logit written is scale times the raw max (v5's
//     value, bit for bit), the lse that max plus log of the base-2 sum;
//   - the wgmma descriptors of QK and P V are computed once per block from the tiles' addresses and
//     stepped by constants in their low word (qk_block_all and pv_block_regs with kStepped): the same
//     wgmmas on the same operands as v5's; the probabilities packed to bf16 by one cvt per pair (the
//     same bits as v5's integer rounding).
// v7's outputs are not v5's bits (another exp); the oracle's bounds decide (docs/cuda-attention.md, v7).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/launchers.h"
#include "cuda/attention/split_combine.cuh"
#include "cuda/attention/v4_pieces.cuh"
#include "cuda/attention/v5_grid.cuh"
#include "cuda/attention/v5_producer.cuh"

namespace dsv4::cuda::attention::detail {
namespace {

using namespace v3;
using v5::Smem;
using v5_grid::kTurn;
using v5_grid::unit_range;
using v5_grid::UnitRange;

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
    v4::qk_block_all<true>(m.b.base + m.b.plan.q, st.tile, s_acc, kTurn + (c ^ 1));
    if (last) sm90::mbarrier_arrive(m.q_free);  // this unit's q is read: the producer may load the next
    v4::softmax_block_exp2(s_acc, valid, scale_log2, t, m_raw, mc, l_run, o);
    v4::pv_block_regs<kPlanes, true>(s_acc, st.tile, c, o);
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
  v5_grid::persistent_cta(p, splits, units, ws, smem_raw,
                          [](const Params& pp, const Smem& m, int u, int sp, SplitOut w, uint32_t& n) {
                            consume_unit<Params, kPlanes>(pp, m, u, sp, w, n);
                          });
}

template <class Params, int kPlanes>
void launch_kernel(const Params& p, int splits, SplitOut ws, cudaStream_t stream) {
  v5_grid::launch<Params, sparse_mqa_v7_kernel<Params, kPlanes>>(p, splits, ws, stream, "sparse_mqa v7");
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
