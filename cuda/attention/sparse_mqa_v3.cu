// v3: sparse MQA on Hopper's warpgroup tensor cores (sm_90a). One block of 384 threads per (query row,
// group of 64 heads[, split of the slots]), one block per SM; the slots in blocks of 64 with a
// running max, as kernel.py walks them (docs/cuda-attention.md has the design and the numbers).
//
//   warpgroup 0 (producer, 128 registers): q into its tile once; per block of 64 slots, the rows
//     into a k tile of a 2-stage ring. Decode: each thread loads its half of a token's MODEL1 bytes
//     into registers (ld.global.nc, 16 bytes at a time) before waiting for a free stage, then
//     dequantizes them exactly into the 128-byte-swizzled bf16 tile; prefill: cp.async of the bf16
//     rows. The validity bits go beside the tile; an mbarrier (full) hands the stage over.
//   warpgroups 1, 2 (consumers c = 0, 1; 184 registers): per block, S = q k^T for slots 32c..32c+31
//     (wgmma m64n32k16, A = q, B = the k tile, both from shared memory); s = f32(acc * scale),
//     invalid slots -inf; the block max of each head over both consumers' slots (exchanged through
//     shared memory, named barrier); p = expf(s - m'), r = expf(m - m'), l' = l r + sum p (each
//     consumer sums its own slots; the two sums are added at the end); P = bf16(p) (or three exact
//     bf16 planes for the fp32-probability variant) into the p tiles; after a second named barrier,
//     O = O r + P V for dims 256c..256c+255 (wgmma m64n256k16, A = the p tiles, B = the k tile read
//     transposed); then the stage is released (mbarrier empty).
// Epilogue: out = bf16(O / (l + expf(sink - m))), lse = m + log(l); a row without a valid slot
// gives out 0, lse +inf. With splits, (O, m, l) per split and split_combine_kernel, as v2.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/launchers.h"
#include "cuda/attention/split_combine.cuh"
#include "cuda/attention/v3_pieces.cuh"
#include "cuda/attention/v3_producer.cuh"
#include "cuda/common/cuda_check.h"

namespace dsv4::cuda::attention::detail {
namespace {

using namespace v3;

constexpr int kProducerRegs = 128;
constexpr int kConsumerRegs = 184;
static_assert(plan(1).k[1] == kTile * 2 && plan(3).k[0] == kTile, "Block::stage computes the plan's k tiles");
static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= 384 * 168,
              "the warpgroups' registers fit what a 384-thread block is launched with (168 each)");
constexpr int kConsumerBarrier = 1;  // named barrier of the two consumer warpgroups (256 threads)

template <class Params, int kPlanes>
__device__ void consume(const Params& p, const Block& b, int begin, int end, int64_t row, int head_base, int splits,
                        int split, SplitOut ws) {
  const int c = static_cast<int>(threadIdx.x >> 7) - 1;  // consumer 0 or 1
  const int t = threadIdx.x & 127;
  float* xmax = reinterpret_cast<float*>(b.ptr + b.plan.xmax);
  float* xsum = reinterpret_cast<float*>(b.ptr + b.plan.xsum);
  const int rows[2] = {acc_row(t, 0), acc_row(t, 2)};  // the two heads this thread's fragments hold

  float o[128];
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  for (int blk = begin; blk < end; ++blk) {
    const int i = blk - begin, s = i & 1;
    const Stage st = b.stage(s);
    sm90::mbarrier_wait(st.full, (i >> 1) & 1);
    const uint32_t mine = reinterpret_cast<const uint32_t*>(st.mask)[c];  // slots 32c .. 32c+31
    const uint32_t other = reinterpret_cast<const uint32_t*>(st.mask)[c ^ 1];
    if ((mine | other) == 0) {  // a block without a valid slot changes nothing
      sm90::mbarrier_arrive(st.empty);
      continue;
    }
    float s_acc[16];
    qk_block(b.base + b.plan.q, st.tile, c, s_acc);

    // logits and this consumer's block max per head
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const bool valid = (mine >> acc_col(t, e)) & 1u;
      s_acc[e] = valid ? s_acc[e] * p.scale : -INFINITY;
      mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], s_acc[e]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 2));
    }
    if ((t & 3) == 0) {
      xmax[64 * c + rows[0]] = mx[0];
      xmax[64 * c + rows[1]] = mx[1];
    }
    sm90::named_barrier(kConsumerBarrier, 256);  // both maxima written; both consumers' last PV done
    float rescale[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_new = fmaxf(m_run[h], fmaxf(xmax[rows[h]], xmax[64 + rows[h]]));
      rescale[h] = expf(m_run[h] - m_new);  // 0 before the first valid slot (m_run = -inf)
      m_run[h] = m_new;
    }
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const bool valid = (mine >> acc_col(t, e)) & 1u;
      s_acc[e] = valid ? expf(s_acc[e] - m_run[(e >> 1) & 1]) : 0.0f;  // now p
      sum[(e >> 1) & 1] += s_acc[e];
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      sum[h] += __shfl_xor_sync(0xFFFFFFFFu, sum[h], 1);
      sum[h] += __shfl_xor_sync(0xFFFFFFFFu, sum[h], 2);
      l_run[h] = l_run[h] * rescale[h] + sum[h];
    }
    store_p<kPlanes>(b.ptr + b.plan.p, s_acc, c, t);
    sm90::fence_proxy_async();
    sm90::named_barrier(kConsumerBarrier, 256);  // both halves of P written
#pragma unroll
    for (int e = 0; e < 128; ++e) o[e] *= rescale[(e >> 1) & 1];
    pv_block<kPlanes>(b.base + b.plan.p, st.tile, c, o);
    sm90::mbarrier_arrive(st.empty);
  }

  // l = the two consumers' sums (in consumer order, the same in both)
  if ((t & 3) == 0) {
    xsum[64 * c + rows[0]] = l_run[0];
    xsum[64 * c + rows[1]] = l_run[1];
  }
  sm90::named_barrier(kConsumerBarrier, 256);
  float l[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) l[h] = xsum[rows[h]] + xsum[64 + rows[h]];

  write_output(p, o, m_run, l, row, head_base, split, splits, ws, c, t, rows);
}

template <class Params, int kPlanes>
__global__ void __launch_bounds__(kThreads, 1) sparse_mqa_v3_kernel(Params p, int splits, SplitOut ws) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = mma::smem_addr(smem_raw);
  Block b;
  b.base = (raw + 1023u) & ~1023u;
  b.ptr = smem_raw + (b.base - raw);
  b.plan = plan(kPlanes);

  const int groups = p.n_heads / layout::kRows;
  const int split = static_cast<int>(blockIdx.x % splits);
  const int64_t rest = blockIdx.x / splits;
  const int group = static_cast<int>(rest % groups);
  const int64_t row = rest / groups;
  const int head_base = group * layout::kRows;

  const auto rs = p.row_slots(row);
  const int n_blocks = (rs.total() + layout::kRows - 1) / layout::kRows;
  const int per_split = (n_blocks + splits - 1) / splits;
  const int begin = min(n_blocks, split * per_split);
  const int end = min(n_blocks, begin + per_split);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      sm90::mbarrier_init(b.stage(s).full, 128);   // every producer thread
      sm90::mbarrier_init(b.stage(s).empty, 256);  // every consumer thread
    }
    sm90::fence_mbarrier_init();
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    sm90::setmaxnreg_dec<kProducerRegs>();
    produce(p, rs, b, begin, end, p.q_row(row, head_base));
  } else {
    sm90::setmaxnreg_inc<kConsumerRegs>();
    consume<Params, kPlanes>(p, b, begin, end, row, head_base, splits, split, ws);
  }
}

template <class Params, int kPlanes>
void launch_kernel(const Params& p, int splits, SplitOut ws, cudaStream_t stream) {
  auto* kernel = sparse_mqa_v3_kernel<Params, kPlanes>;
  const uint32_t smem = smem_request(kPlanes);
  static const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  CUDA_CHECK(attr);
  const int64_t blocks = p.rows() * (p.n_heads / layout::kRows) * splits;
  if (blocks == 0) return;
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(p, splits, ws);
  CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    split_combine_kernel<Params><<<static_cast<unsigned>(p.rows() * p.n_heads), 128, 0, stream>>>(p, splits, ws);
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void launch_v3(const DecodeParams& p, Probs probs, int splits, void* workspace, cudaStream_t stream) {
  const SplitOut ws = split_views(workspace, p.rows(), p.n_heads, splits);
  if (probs == Probs::bf16)
    launch_kernel<DecodeParams, 1>(p, splits, ws, stream);
  else
    launch_kernel<DecodeParams, 3>(p, splits, ws, stream);
}

void launch_v3(const PrefillParams& p, Probs probs, cudaStream_t stream) {
  if (probs == Probs::bf16)
    launch_kernel<PrefillParams, 1>(p, 1, SplitOut{nullptr, nullptr, nullptr}, stream);
  else
    launch_kernel<PrefillParams, 3>(p, 1, SplitOut{nullptr, nullptr, nullptr}, stream);
}

}  // namespace dsv4::cuda::attention::detail
