#pragma once
// The producer warpgroup of v3 and v4 (sparse_mqa_v3.cu, sparse_mqa_v4.cu): the 2-stage ring of k
// tiles with its mbarriers, and the gather of a row's slot blocks into it (decode: MODEL1 bytes into
// registers, dequantized exactly into the swizzled bf16 tile; prefill: cp.async of bf16 rows). Both
// versions run this very code; only their consumers differ.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/v3_pieces.cuh"

namespace dsv4::cuda::attention::v3 {

struct Stage {
  uint32_t tile;         // shared address of its k tile
  unsigned char* ptr;    // the same, generic
  uint16_t* mask;        // 4 x 16 validity bits
  uint32_t full, empty;  // mbarriers
};

struct Block {
  uint32_t base;  // shared address of the 1,024-aligned base
  unsigned char* ptr;
  Plan plan;
  __device__ Stage stage(int s) const {  // plan.k[s] = kTile (1 + s), computed (no local array)
    Stage st;
    st.tile = base + kTile * (1 + s);
    st.ptr = ptr + kTile * (1 + s);
    st.mask = reinterpret_cast<uint16_t*>(ptr + plan.mask) + 4 * s;
    st.full = base + plan.full + 8 * s;
    st.empty = base + plan.empty + 8 * s;
    return st;
  }
};

// Blocks [begin, end) of the row's slot blocks; block i of them uses stage i % 2 for the
// (i / 2)-th time: full phase parity (i / 2) & 1, and the producer first waits for the consumers to
// have released block i - 2.
__device__ inline void produce(const DecodeParams&, const DecodeRowSlots& rs, const Block& b, int begin, int end,
                               const uint16_t* q_heads) {
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int token = producer_token(t), half = producer_half(t);
  issue_q(b.base + b.plan.q, q_heads, t);
  mma::cp_async_commit();
  DecodeLoad L;
  for (int blk = begin; blk < end; ++blk) {
    const int i = blk - begin, s = i & 1;
    const Stage st = b.stage(s);
    load_decode(rs, blk * layout::kRows + token, half, q_heads, L);
    const uint32_t bits = token_bits(L.valid);
    if (i >= 2) sm90::mbarrier_wait(st.empty, ((i >> 1) - 1) & 1);
    store_decode(L, st.ptr, token, half);
    if (lane == 0) st.mask[warp] = static_cast<uint16_t>(bits);
    if (i == 0) mma::cp_async_wait<0>();  // this thread's share of q has landed
    sm90::fence_proxy_async();
    sm90::mbarrier_arrive(st.full);
  }
  mma::cp_async_wait<0>();  // q's copies end before the thread does (a row without blocks)
}

__device__ inline void produce(const PrefillParams& p, const PrefillRowSlots& rs, const Block& b, int begin, int end,
                               const uint16_t* q_heads) {
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int token = producer_token(t), half = producer_half(t);
  issue_q(b.base + b.plan.q, q_heads, t);
  mma::cp_async_commit();
  for (int blk = begin; blk < end; ++blk) {
    const int i = blk - begin, s = i & 1;
    const Stage st = b.stage(s);
    if (i >= 2) sm90::mbarrier_wait(st.empty, ((i >> 1) - 1) & 1);
    const int64_t kv_row = rs.resolve(blk * layout::kRows + token);
    issue_prefill_row(st.tile, p.kv, kv_row, token, half, p.q);
    mma::cp_async_commit();
    const uint32_t bits = token_bits(kv_row >= 0);
    if (lane == 0) st.mask[warp] = static_cast<uint16_t>(bits);
    if (i >= 1) {  // the previous block (and q) have landed: hand it over
      mma::cp_async_wait<1>();
      sm90::fence_proxy_async();
      sm90::mbarrier_arrive(b.stage(s ^ 1).full);
    }
  }
  if (end > begin) {
    mma::cp_async_wait<0>();
    sm90::fence_proxy_async();
    sm90::mbarrier_arrive(b.stage((end - begin - 1) & 1).full);
  }
  mma::cp_async_wait<0>();  // q's copies end before the thread does (a row without blocks)
}

}  // namespace dsv4::cuda::attention::v3
