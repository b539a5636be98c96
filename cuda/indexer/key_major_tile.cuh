#pragma once
// The epilogue of prefill logits v4 (logits_prefill_v4.cu; layout and order: key_major_tile.h):
// the head sums of one warpgroup's 64 keys x 2 queries, v2's arithmetic in v2's tree, so the
// logits are v2's bit for bit.
#include <cuda_runtime.h>

#include "cuda/indexer/key_major_tile.h"
#include "cuda/indexer/logits_tile.cuh"

namespace dsv4::cuda::key_major {

using logits_tile::HeadSum;
using logits_tile::relu_keep_nan;

// The head sum (before the key's 2^c_j and S) of the key and query this lane keeps (out_key,
// out_query). acc: the m64n128 accumulator; weights: the shared-memory address of the folded
// weights w'_h of the two queries, [2][64] floats (read here, 16 8-byte loads a tile: holding the 32 a lane needs in
// registers for a whole unit leaves the consumer's 112 registers short). Every lane of the warp
// must call it.
template <ScoreStorage S>
__device__ inline HeadSum<S> head_sum(const float (&acc)[64], uint32_t weights, int lane) {
  using Sum = HeadSum<S>;
  float w[kPairQueries][16];  // w[qi][2 o + b]: w'_h of head octet_head(o, b, lane) of query qi
#pragma unroll
  for (int qi = 0; qi < kPairQueries; ++qi)
#pragma unroll
    for (int o = 0; o < 8; ++o) {
      const uint32_t at = weights + 4u * (64 * qi + octet_head(o, 0, lane));
      asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(w[qi][2 * o]), "=f"(w[qi][2 * o + 1]) : "r"(at));
    }
  Sum v[2][kPairQueries][4];  // [rs][qi][W]: p_{2c} + p_{2c+1} of warp W's heads
#pragma unroll
  for (int rs = 0; rs < 2; ++rs)
#pragma unroll
    for (int qi = 0; qi < kPairQueries; ++qi)
#pragma unroll
      for (int W = 0; W < 4; ++W) {
        Sum p[2];
#pragma unroll
        for (int b = 0; b < 2; ++b) {  // heads 16 W + r and 16 W + r + 8, r = 2 (lane % 4) + b
          const float x0 = acc[acc_index(qi, 2 * W, rs, b)], x8 = acc[acc_index(qi, 2 * W + 1, rs, b)];
          const float w0 = w[qi][2 * (2 * W) + b], w8 = w[qi][2 * (2 * W + 1) + b];
          if constexpr (S == ScoreStorage::bf16) {
            float r0, r8, t0, t8;
            logits_tile::bf16_round_hw2(x0, x8, r0, r8);
            logits_tile::bf16_round_hw2(w0 * relu_keep_nan(r0), w8 * relu_keep_nan(r8), t0, t8);
            p[b] = static_cast<double>(t0) + static_cast<double>(t8);
          } else {
            p[b] = fmaf(relu_keep_nan(x8), w8, relu_keep_nan(x0) * w0);
          }
        }
        v[rs][qi][W] = p[0] + p[1];
      }
  // Lane bit 0: keep key row rs = bit, add the partner's copy of it (v2's round over r bit 1).
  const bool row_upper = lane & 1;
  Sum u[kPairQueries][4];
#pragma unroll
  for (int qi = 0; qi < kPairQueries; ++qi)
#pragma unroll
    for (int W = 0; W < 4; ++W) {
      const Sum keep = row_upper ? v[1][qi][W] : v[0][qi][W];
      const Sum send = row_upper ? v[0][qi][W] : v[1][qi][W];
      u[qi][W] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
    }
  // Lane bit 1: keep query qi = bit (v2's round over r bit 2).
  const bool query_upper = lane & 2;
  Sum s[4];
#pragma unroll
  for (int W = 0; W < 4; ++W) {
    const Sum keep = query_upper ? u[1][W] : u[0][W];
    const Sum send = query_upper ? u[0][W] : u[1][W];
    s[W] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
  }
  return ((s[0] + s[1]) + s[2]) + s[3];  // v2's warps in order
}

}  // namespace dsv4::cuda::key_major
