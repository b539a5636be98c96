// v8: v7 with the two 64-head groups of a decode row in a cluster of 2 CTAs that share the
// dequantization (sm_90a). docs/cuda-attention.md "v8" has the design, the protocol and the prediction.
// At 128 heads v7 runs the two head groups of a (row, split) as two work units, each CTA dequantizing
// all 64 tokens of every block: v8's two CTAs take the two groups of the same (row, split) units in the
// same order (v5_grid.cuh, persistent_cta<true>), each producer dequantizes 32 of a block's tokens
// (v5_producer.cuh, kParts = 4) into both CTAs' k tiles (its own by st.shared, the peer's by
// st.shared::cluster) with the validity bits of its half, and a stage's `full` completes when both
// halves have landed, its `empty` when both CTAs' consumers released it. q tiles, consumers (v7's,
// v7_consumer.cuh with kPaired) and outputs are per CTA, so v8's outputs are v7's bits.
// Decode with 64 heads (one group) and prefill run v7 (launch_v8 forwards): nothing to share at 64
// heads, and prefill's producer copies bf16 rows by cp.async, which writes only its own CTA.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/launchers.h"
#include "cuda/attention/split_combine.cuh"
#include "cuda/attention/v5_grid.cuh"
#include "cuda/attention/v5_producer.cuh"
#include "cuda/attention/v7_consumer.cuh"

namespace dsv4::cuda::attention::detail {
namespace {

using v3::kThreads;
using v5::Smem;

// One CTA of a pair: p.n_heads = 128, units = 2 x rows x splits, gridDim.x = 2 x clusters (the cluster
// dimension is given at launch, v5_grid::launch_paired).
template <int kPlanes>
__global__ void __launch_bounds__(kThreads, 1)
    sparse_mqa_v8_kernel(DecodeParams p, int splits, int units, SplitOut ws) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  v5_grid::persistent_cta<true>(p, splits, units, ws, smem_raw,
                                [](const DecodeParams& pp, const Smem& m, int u, int sp, SplitOut w, uint32_t& n) {
                                  v7::consume_unit<DecodeParams, kPlanes, true>(pp, m, u, sp, w, n);
                                });
}

}  // namespace

void launch_v8(const DecodeParams& p, Probs probs, int splits, void* workspace, cudaStream_t stream) {
  if (p.n_heads != 2 * layout::kRows) return launch_v7(p, probs, splits, workspace, stream);
  const SplitOut ws = split_views(workspace, p.rows(), p.n_heads, splits);
  if (probs == Probs::bf16)
    v5_grid::launch_paired<DecodeParams, sparse_mqa_v8_kernel<1>>(p, splits, ws, stream, "sparse_mqa v8");
  else
    v5_grid::launch_paired<DecodeParams, sparse_mqa_v8_kernel<3>>(p, splits, ws, stream, "sparse_mqa v8");
}

void launch_v8(const PrefillParams& p, Probs probs, cudaStream_t stream) { launch_v7(p, probs, stream); }

}  // namespace dsv4::cuda::attention::detail
