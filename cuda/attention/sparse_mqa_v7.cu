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
#include "cuda/attention/v7_consumer.cuh"

namespace dsv4::cuda::attention::detail {
namespace {

using v3::kThreads;
using v5::Smem;

template <class Params, int kPlanes>
__global__ void __launch_bounds__(kThreads, 1) sparse_mqa_v7_kernel(Params p, int splits, int units, SplitOut ws) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  v5_grid::persistent_cta(p, splits, units, ws, smem_raw,
                          [](const Params& pp, const Smem& m, int u, int sp, SplitOut w, uint32_t& n) {
                            v7::consume_unit<Params, kPlanes>(pp, m, u, sp, w, n);
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
