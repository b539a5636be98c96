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

// 16-byte pieces of a lane's chunk of 4 head sums: fp32 1, double (bf16 scores) 2.
template <ScoreStorage S>
inline constexpr int kPieces = static_cast<int>(4 * sizeof(HeadSum<S>) / 16);
// Shared memory of one warp's exchange (exchange_unit: 4 chunks x kPieces x 32 lanes of 16 bytes).
template <ScoreStorage S>
inline constexpr int kExchangeBytes = 4 * kPieces<S> * 32 * 16;

// 16 bytes (4 floats or 2 doubles) to / from shared memory address `at`.
__device__ inline void store16(uint32_t at, const float* v) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3])
               : "memory");
}
__device__ inline void store16(uint32_t at, const double* v) {
  asm volatile("st.shared.v2.f64 [%0], {%1, %2};\n" ::"r"(at), "d"(v[0]), "d"(v[1]) : "memory");
}
__device__ inline void load16(uint32_t at, float* v) {
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
               : "r"(at)
               : "memory");
}
__device__ inline void load16(uint32_t at, double* v) {
  asm volatile("ld.shared.v2.f64 {%0, %1}, [%2];\n" : "=d"(v[0]), "=d"(v[1]) : "r"(at) : "memory");
}

// The head sum (before the key's 2^c_j and S) of the key and query this lane keeps (out_key,
// out_query). acc: the m64n128 accumulator; weights: the shared-memory address of the pair's folded
// weights w'_h (kWeightFloats at weight_slot, 16-byte aligned) plus weight_base(lane) (read here, 8
// 16-byte loads a tile: holding the 32 a lane needs in registers for a whole unit leaves the
// consumer's 112 registers short); exchange_store / _load:
// the shared-memory address of this warp's kExchangeBytes<S> (64-byte aligned) plus store_base(lane)
// / load_base(lane, kPieces<S>) (key_major_tile.h). Every lane of the warp must call it.
template <ScoreStorage S>
__device__ inline HeadSum<S> head_sum(const float (&acc)[64], uint32_t weights, uint32_t exchange_store,
                                      uint32_t exchange_load, int lane) {
  using Sum = HeadSum<S>;
  Sum v[2][kPairQueries][4];  // [rs][qi][W]: p_{2c} + p_{2c+1} of warp W's heads
#pragma unroll
  for (int qi = 0; qi < kPairQueries; ++qi) {  // a query at a time: 16 weight registers live, not 32
    float w[16];                               // w[2 o + b]: w'_h of head octet_head(o, b, lane)
#pragma unroll
    for (int k = 0; k < 16; k += 4) load16(weights + 4u * static_cast<uint32_t>(weight_slot(qi, 0) + k), &w[k]);
#pragma unroll
    for (int rs = 0; rs < 2; ++rs)
#pragma unroll
      for (int W = 0; W < 4; ++W) {
        Sum p[2];
#pragma unroll
        for (int b = 0; b < 2; ++b) {  // heads 16 W + r and 16 W + r + 8, r = 2 (lane % 4) + b
          const float x0 = acc[acc_index(qi, 2 * W, rs, b)], x8 = acc[acc_index(qi, 2 * W + 1, rs, b)];
          const float w0 = w[2 * (2 * W) + b], w8 = w[2 * (2 * W + 1) + b];
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
  }
  // The quad's exchange through shared memory: each lane stores its 4 chunks (j = 2 rs + qi, the
  // 4 W values each), then reads chunk kept_chunk(lane) of the 4 lanes of its quad, in quad order.
  __syncwarp();  // this warp's reads of the previous tile's exchange are done
#pragma unroll
  for (int rs = 0; rs < 2; ++rs)
#pragma unroll
    for (int qi = 0; qi < kPairQueries; ++qi)
#pragma unroll
      for (int piece = 0; piece < kPieces<S>; ++piece)
        store16(store_offset(exchange_store, 2 * rs + qi, piece, kPieces<S>), &v[rs][qi][piece * 4 / kPieces<S>]);
  __syncwarp();
  Sum q[4][4];  // [quad lane c][W]: c's p_{2c} + p_{2c+1} of this lane's key and query
#pragma unroll
  for (int c = 0; c < 4; ++c)
#pragma unroll
    for (int piece = 0; piece < kPieces<S>; ++piece)
      load16(load_offset(exchange_load, c, piece), &q[c][piece * 4 / kPieces<S>]);
  Sum sum[4];
#pragma unroll
  for (int W = 0; W < 4; ++W) sum[W] = (q[0][W] + q[1][W]) + (q[2][W] + q[3][W]);  // v2's rounds over r bits 1, 2
  return ((sum[0] + sum[1]) + sum[2]) + sum[3];                                    // v2's warps in order
}

}  // namespace dsv4::cuda::key_major
