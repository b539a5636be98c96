#pragma once
// The consumer warpgroup of v7 (sparse_mqa_v7.cu) and v8 (sparse_mqa_v8.cu): one work unit of the
// persistent grid (v5_grid.cuh), v5's loop with v7's QK, base-2 softmax step and P V (v4_pieces.cuh)
// and the epilogue of v3_pieces.cuh; docs/cuda-attention.md "v7", "v8".
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/cluster_sm90.cuh"
#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/split_combine.cuh"
#include "cuda/attention/v4_pieces.cuh"
#include "cuda/attention/v5_grid.cuh"
#include "cuda/attention/v5_producer.cuh"

namespace dsv4::cuda::attention::detail::v7 {

using namespace v3;
using v5::Smem;
using v5_grid::kTurn;
using v5_grid::unit_range;
using v5_grid::UnitRange;

// One work unit u of a consumer warpgroup: v5's, with v7's QK, softmax step and P V. kPaired (v8):
// the k tiles are filled by both CTAs of a cluster, so `full` is waited on with acquire at cluster scope
// (the peer producer's rows arrive with release.cluster), followed by the proxy fence for them, and each release of a
// stage also reaches the peer's `empty` (one arrival a warp after __syncwarp: the peer producer overwrites this CTA's
// tile too).
template <class Params, int kPlanes, bool kPaired = false>
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

  const uint32_t peer_delta = kPaired ? cluster::peer_address(m.b.base, cluster::cta_rank() ^ 1u) - m.b.base : 0u;
  const auto release = [&](const Stage& st) {
    sm90::mbarrier_arrive(st.empty);
    if constexpr (kPaired) {
      __syncwarp();
      if ((t & 31) == 0) cluster::mbarrier_arrive_peer(st.empty + peer_delta);
    }
  };

  const UnitRange blocks = unit_range(p, u, splits);
  for (int blk = blocks.begin; blk < blocks.end; ++blk, ++n) {
    const Stage st = m.b.stage(static_cast<int>(n & 1));
    const bool last = blk + 1 == blocks.end;
    sm90::mbarrier_wait<kPaired>(st.full, (n >> 1) & 1);
    // v8: the peer producer's rows were stored by the generic proxy into this CTA's tile and reach this
    // thread by its release.cluster arrival and this acquire.cluster wait; wgmma reads them by the async
    // proxy. PTX ISA, Memory Consistency Model, "Proxy-preserved base causality order": a generic-proxy
    // write precedes an async-proxy access of the same location when an async proxy fence lies on the
    // base causality path between them, so this thread's fence.proxy.async.shared::cta (this CTA's
    // shared memory, where the rows are) after the acquire suffices, and the producer's remote stores
    // need no fence.proxy.async.shared::cluster (which compiles to MEMBAR.ALL.GPU in every producer
    // thread). The local producer's rows carry its own fence, as in v5.
    if constexpr (kPaired) sm90::fence_proxy_async();
    const uint64_t valid = *reinterpret_cast<const uint64_t*>(st.mask);  // bit j: slot j of the block
    if (valid == 0) {                                                    // a block without a valid slot changes nothing
      if (last) sm90::mbarrier_arrive(m.q_free);
      release(st);
      continue;
    }
    float s_acc[32];
    sm90::named_barrier(kTurn + c, 256);  // the other consumer has issued its previous QK
    v4::qk_block_all<true>(m.b.base + m.b.plan.q, st.tile, s_acc, kTurn + (c ^ 1));
    if (last) sm90::mbarrier_arrive(m.q_free);  // this unit's q is read: the producer may load the next
    v4::softmax_block_exp2(s_acc, valid, scale_log2, t, m_raw, mc, l_run, o);
    v4::pv_block_regs<kPlanes, true>(s_acc, st.tile, c, o);
    release(st);
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

}  // namespace dsv4::cuda::attention::detail::v7
