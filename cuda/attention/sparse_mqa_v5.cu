// v5: v4's consumers fed by a leaner producer, on a persistent grid (sm_90a). docs/cuda-attention.md
// has the design, the measurement of v4 that led to it and the prediction. Against v4:
//   - decode producer (v5_producer.cuh): the FP8 codes and scales of a block are copied by cp.async
//     into a staging area in shared memory (the next block's copies in flight during this block's
//     dequantization), the rope dims loaded a block ahead into 16 registers, and the codes
//     dequantized shared -> shared with packed conversions (cvt e4m3x2 -> f16x2, a shift, one bf16x2
//     multiply per two codes), exactly;
//   - prefill producer: a block is handed over as soon as its copies have landed (v4 waited for the
//     release of the block before it, which made consumer 0 wait for consumer 1 at every block);
//   - persistent grid: min(work units, SMs) CTAs walk the work units (query row, 64-head group,
//     split) with a stride of the grid; the pipeline, its stages and phases run on across units, and
//     the producer loads the next unit's q as soon as both consumers have issued the last QK of the
//     current one (mbarrier q_free), under the last P V and the epilogue.
// The consumers' arithmetic is v4's, operation for operation (same S, softmax, P V, epilogue), so
// v5's outputs are v4's bits.
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

// One work unit u of a consumer warpgroup: v4's consume() with the CTA-wide block count n (stage
// n % 2, phase (n / 2) % 2) and the q_free arrival after the unit's last QK.
template <class Params, int kPlanes>
__device__ void consume_unit(const Params& p, const Smem& m, int u, int splits, SplitOut ws, uint32_t& n) {
  const int c = static_cast<int>(threadIdx.x >> 7) - 1;  // consumer 0 or 1: dims 256c .. 256c+255
  const int t = threadIdx.x & 127;
  const int rows[2] = {acc_row(t, 0), acc_row(t, 2)};  // the two heads this thread's fragments hold

  float o[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

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
    v4::qk_block_all(m.b.base + m.b.plan.q, st.tile, s_acc, kTurn + (c ^ 1));
    if (last) sm90::mbarrier_arrive(m.q_free);  // this unit's q is read: the producer may load the next
    v4::softmax_block(s_acc, valid, p.scale, t, m_run, l_run, o);
    v4::pv_block_regs<kPlanes>(s_acc, st.tile, c, o);
    sm90::mbarrier_arrive(st.empty);
  }

  asm volatile("" : "+r"(u));  // the unit's row and heads recomputed here, not held through the loop
  const UnitRange r = unit_range(p, u, splits);
  write_output(p, o, m_run, l_run, r.row, r.head_base, r.split, splits, ws, c, t, rows);
}

template <class Params, int kPlanes>
__global__ void __launch_bounds__(kThreads, 1) sparse_mqa_v5_kernel(Params p, int splits, int units, SplitOut ws) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  v5_grid::persistent_cta(p, splits, units, ws, smem_raw,
                          [](const Params& pp, const Smem& m, int u, int sp, SplitOut w, uint32_t& n) {
                            consume_unit<Params, kPlanes>(pp, m, u, sp, w, n);
                          });
}

template <class Params, int kPlanes>
void launch_kernel(const Params& p, int splits, SplitOut ws, cudaStream_t stream) {
  v5_grid::launch<Params, sparse_mqa_v5_kernel<Params, kPlanes>>(p, splits, ws, stream, "sparse_mqa v5");
}

}  // namespace

void launch_v5(const DecodeParams& p, Probs probs, int splits, void* workspace, cudaStream_t stream) {
  const SplitOut ws = split_views(workspace, p.rows(), p.n_heads, splits);
  if (probs == Probs::bf16)
    launch_kernel<DecodeParams, 1>(p, splits, ws, stream);
  else
    launch_kernel<DecodeParams, 3>(p, splits, ws, stream);
}

void launch_v5(const PrefillParams& p, Probs probs, cudaStream_t stream) {
  if (probs == Probs::bf16)
    launch_kernel<PrefillParams, 1>(p, 1, SplitOut{nullptr, nullptr, nullptr}, stream);
  else
    launch_kernel<PrefillParams, 3>(p, 1, SplitOut{nullptr, nullptr, nullptr}, stream);
}

}  // namespace dsv4::cuda::attention::detail
