#pragma once
// Split-KV of the decode kernels (v2, v3): when the grid of (query row, 64-head group) blocks would
// not fill the GPU, the slot blocks of a row are split; each split writes its partial (O, m, l) in
// fp32 and split_combine_kernel merges them in split order: M = max m_s, L = sum l_s e^(m_s - M),
// out = sum e^(m_s - M) O_s / (L + e^(sink - M)), lse = M + log L (a row no split saw a valid slot
// in: out 0, lse +inf). Deterministic: no atomics, fixed splits for a shape and device.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/common/numerics.cuh"

namespace dsv4::cuda::attention::detail {

// Partial results (split_workspace_bytes, launchers.h): o [splits][rows][n_heads][512] fp32, m and l
// [splits][rows][n_heads].
struct SplitOut {
  float* o;
  float* m;
  float* l;
};

inline SplitOut split_views(void* workspace, int64_t rows, int n_heads, int splits) {
  SplitOut ws{nullptr, nullptr, nullptr};
  if (splits <= 1) return ws;
  const int64_t parts = static_cast<int64_t>(splits) * rows * n_heads;
  ws.o = static_cast<float*>(workspace);
  ws.m = ws.o + parts * kHeadDim;
  ws.l = ws.m + parts;
  return ws;
}

// Merges the splits of one (query row, head): 128 threads, 4 dims each.
template <class Params>
__global__ void __launch_bounds__(128) split_combine_kernel(Params p, int splits, SplitOut ws) {
  const int64_t row = blockIdx.x / p.n_heads;
  const int head = static_cast<int>(blockIdx.x % p.n_heads);
  const int64_t stride = p.rows() * p.n_heads;  // between splits
  const int64_t first = row * p.n_heads + head;
  float big = -INFINITY;
  for (int s = 0; s < splits; ++s) big = fmaxf(big, ws.m[first + s * stride]);
  uint16_t* out = p.out_row(row, head);
  const int d = 4 * threadIdx.x;
  if (big == -INFINITY) {  // no split saw a valid slot
    *reinterpret_cast<uint2*>(out + d) = make_uint2(0u, 0u);
    if (threadIdx.x == 0) {
      if (float* lse = p.lse_at(row, head)) *lse = INFINITY;
      if (float* ml = p.max_logit_at(row, head)) *ml = -INFINITY;
    }
    return;
  }
  float total = 0.0f;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s = 0; s < splits; ++s) {
    const float w = expf(ws.m[first + s * stride] - big);  // 0 for a split without a valid slot
    total += ws.l[first + s * stride] * w;
    const float4 x = *reinterpret_cast<const float4*>(ws.o + (first + s * stride) * kHeadDim + d);
    acc.x += w * x.x;
    acc.y += w * x.y;
    acc.z += w * x.z;
    acc.w += w * x.w;
  }
  const float sink = p.sink ? p.sink[head] : -INFINITY;
  const float den = total + expf(sink - big);
  const uint32_t lo =
      static_cast<uint32_t>(bf16_bits(acc.x / den)) | (static_cast<uint32_t>(bf16_bits(acc.y / den)) << 16);
  const uint32_t hi =
      static_cast<uint32_t>(bf16_bits(acc.z / den)) | (static_cast<uint32_t>(bf16_bits(acc.w / den)) << 16);
  *reinterpret_cast<uint2*>(out + d) = make_uint2(lo, hi);
  if (threadIdx.x == 0) {
    if (float* lse = p.lse_at(row, head)) *lse = big + logf(total);
    if (float* ml = p.max_logit_at(row, head)) *ml = big;
  }
}

}  // namespace dsv4::cuda::attention::detail
