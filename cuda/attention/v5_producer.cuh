#pragma once
// The producer warpgroup of v5 (sparse_mqa_v5.cu): the work units of the persistent grid one after
// the other, each a row's slot blocks into v3's 2-stage ring of k tiles (layout: v5_layout.cuh).
//
// Decode, per block: the raw MODEL1 bytes are copied by cp.async into the staging area (no register
// holds them: v4's loads into 74 registers per thread and their long-scoreboard waits are gone), each
// thread's slot refilled with the next block's chunk as soon as it has dequantized it, so the next
// block's copies fly during this block's dequantization and the wait for a free stage; the rope dims
// (64 bytes a thread) go through registers, loaded a block ahead; the
// FP8 codes are dequantized shared -> shared with packed conversions, exactly (v5_dequant.cuh: per
// two codes one cvt e4m3x2 -> f16x2, a shift under the sign, one mul.rn.bf16x2 by the scale). The NaN
// codes S.1111.111 give a finite value here, as in v4: the kernels never read a code no valid index
// points at.
// Then, as v4, the validity bits, the async-proxy fence and the stage's `full` arrival.
//
// Prefill, per block: cp.async of the bf16 rows into the stage (v3's issue_prefill_row); a block is
// handed over as soon as its own copies have landed, before the producer waits for the next free
// stage (v3 and v4 handed block i - 1 over only after block i was issued, i.e. after both consumers
// had released block i - 2: consumer 0 then waited for consumer 1 at every block, undoing the
// ping-pong).
//
// Work units: before the q tile of a unit is overwritten the producer waits on `q_free`, on which
// every consumer thread arrives once per unit with blocks, after that unit's last QK. A unit without
// blocks loads no q and is not waited for. Blocks are numbered n = 0, 1, ... over all the units of
// the CTA: stage n % 2, used for the (n / 2)-th time.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/v3_pieces.cuh"
#include "cuda/attention/v3_producer.cuh"
#include "cuda/attention/v5_dequant.cuh"
#include "cuda/attention/v5_layout.cuh"

namespace dsv4::cuda::attention::v5 {

using v3::Block;
using v3::Stage;

struct Smem {
  Block b;       // q, k tiles, masks, full / empty (v3's accessors)
  uint32_t raw;  // staging area (shared address)
  uint32_t scales;
  unsigned char* raw_ptr;
  unsigned char* scales_ptr;
  uint32_t q_free;
};

// Two e4m3 codes (low byte first) -> two bf16 codes of value * 2^-112 (low half first), exact.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2_scaled(uint32_t codes16) {
  uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(static_cast<uint16_t>(codes16)));
  return f16x2_to_bf16x2_scaled(h);
}

__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// 16 codes (4 words, code 4k + b in byte b of word k) times the UE8M0 scale of byte e -> 16 bf16 codes
// (8 words, dims 2k, 2k + 1 in word k); v5_dequant.cuh has the arithmetic.
__device__ __forceinline__ void dequant16(const uint4& codes, uint32_t e, uint32_t (&out)[8]) {
  const uint32_t f2 = first_factor(e);
  const uint32_t w[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    out[2 * k] = mul_bf16x2(e4m3x2_to_bf16x2_scaled(w[k] & 0xFFFFu), f2);
    out[2 * k + 1] = mul_bf16x2(e4m3x2_to_bf16x2_scaled(w[k] >> 16), f2);
  }
  if (!fast_scale(e)) {
    const uint32_t g2 = slow_factor(e);
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = mul_bf16x2(out[k], g2);
  }
}

// Where this thread's token of a block lives: its data and scale bytes (an invalid slot: `dummy`, any
// readable 16-byte-aligned device address, and nothing is read from it).
struct TokenSource {
  const uint8_t* data;
  const uint8_t* scales;
  bool valid;
};

__device__ __forceinline__ TokenSource token_source(const DecodeRowSlots& rs, int blk, int token, const void* dummy) {
  TokenSource src;
  src.valid = rs.resolve(blk * layout::kRows + token, src.data, src.scales);
  if (!src.valid) src.data = src.scales = static_cast<const uint8_t*>(dummy);
  return src;
}

// FP8 chunk j of this thread's token -> its staging slot (zeros for an invalid slot).
__device__ __forceinline__ void issue_raw_chunk(const TokenSource& src, const Smem& m, int token, int half, int j) {
  const int g = fp8_chunk(j, half);
  mma::cp_async_16(m.raw + raw_offset(token, g), src.data + 16 * g, src.valid);
}
__device__ __forceinline__ void issue_raw_scales(const TokenSource& src, const Smem& m, int token, int half) {
  mma::cp_async_8(m.scales + scale_offset(token, half), src.scales, src.valid);
}

// The rope dims of this thread's token (4 chunks of 8 bf16, already the tile's format) travel through
// registers: loaded a block ahead, stored once the stage is free (64 bytes a thread; the staging area
// has no room for them beside the FP8 codes).
struct RopeLoad {
  uint4 chunk[kRopeJobsPerThread];
};
__device__ __forceinline__ void load_rope(const TokenSource& src, int half, RopeLoad& r) {
  const uint4* rope = reinterpret_cast<const uint4*>(src.data + kModel1NopeDims);
#pragma unroll
  for (int i = 0; i < kRopeJobsPerThread; ++i) r.chunk[i] = __ldg(rope + rope_chunk(i, half));
}
// -> the k tile's chunks 56 + 2i + h (zeros for an invalid slot: its loads read `dummy`).
__device__ __forceinline__ void store_rope(const RopeLoad& r, bool valid, unsigned char* tile, int token, int half) {
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int i = 0; i < kRopeJobsPerThread; ++i)
    *reinterpret_cast<uint4*>(tile + layout::matrix_offset(token, kModel1NopeDims / 8 + rope_chunk(i, half))) =
        valid ? r.chunk[i] : zero;
}

// The staged FP8 chunks this thread copied -> bf16 chunks 2g, 2g + 1 of its token's row of the tile
// (an invalid slot's staged bytes are zeros, codes and scale: its row becomes +0). With `refill`, each
// slot, once read and its values stored, is refilled at once with the same chunk of the next block's
// token `next` (so that the next block's copies are in flight during this dequantization).
__device__ __forceinline__ void dequant_staged(const Smem& m, unsigned char* tile, int token, int half, bool refill,
                                               const TokenSource& next) {
  asm volatile("" : "+r"(token));  // addresses recomputed per block, not hoisted into live registers
  const uint2 sc = *reinterpret_cast<const uint2*>(m.scales_ptr + scale_offset(token, half));
#pragma unroll
  for (int j = 0; j < kFp8JobsPerThread; ++j) {
    const int g = fp8_chunk(j, half), sb = scale_block(j);
    const uint32_t e = ((sb < 4 ? sc.x : sc.y) >> (8 * (sb & 3))) & 0xFFu;
    const uint4 codes = *reinterpret_cast<const uint4*>(m.raw_ptr + raw_offset(token, g));
    uint32_t o[8];
    dequant16(codes, e, o);
    *reinterpret_cast<uint4*>(tile + layout::matrix_offset(token, 2 * g)) = make_uint4(o[0], o[1], o[2], o[3]);
    *reinterpret_cast<uint4*>(tile + layout::matrix_offset(token, 2 * g + 1)) = make_uint4(o[4], o[5], o[6], o[7]);
    // the stores consumed the slot's codes (they depend on the load): the slot may be overwritten
    if (refill) issue_raw_chunk(next, m, token, half, j);
  }
  if (refill) issue_raw_scales(next, m, token, half);  // after every use of this block's scale bytes
}

// Blocks [begin, end) of one decode work unit (query row `row`, heads from q_heads); n counts the
// CTA's blocks so far, units_with_blocks its units that had blocks.
__device__ inline void produce_unit(const DecodeParams& p, const Smem& m, int64_t row, const uint16_t* q_heads,
                                    int begin, int end, uint32_t& n, uint32_t& units_with_blocks) {
  if (begin >= end) return;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int token = producer_token(t), half = producer_half(t);
  const DecodeRowSlots rs = p.row_slots(row);
  if (units_with_blocks > 0) sm90::mbarrier_wait(m.q_free, (units_with_blocks - 1) & 1);
  ++units_with_blocks;
  v3::issue_q(m.b.base + m.b.plan.q, q_heads, t);
  TokenSource cur = token_source(rs, begin, token, q_heads);
#pragma unroll
  for (int j = 0; j < kFp8JobsPerThread; ++j) issue_raw_chunk(cur, m, token, half, j);
  issue_raw_scales(cur, m, token, half);
  mma::cp_async_commit();  // group: q and the first block's raw bytes
  RopeLoad rope;
  load_rope(cur, half, rope);
  for (int blk = begin; blk < end; ++blk, ++n) {
    const Stage st = m.b.stage(static_cast<int>(n & 1));
    const bool refill = blk + 1 < end;
    const TokenSource next = refill ? token_source(rs, blk + 1, token, q_heads) : cur;  // index read early
    mma::cp_async_wait<0>();  // this block's raw bytes (and q) copied by this thread have landed
    if (n >= 2) sm90::mbarrier_wait(st.empty, ((n >> 1) - 1) & 1);
    store_rope(rope, cur.valid, st.ptr, token, half);
    if (refill) load_rope(next, half, rope);  // in flight during the dequantization
    dequant_staged(m, st.ptr, token, half, refill, next);
    mma::cp_async_commit();  // group: the next block's raw bytes (empty after the last block)
    const uint32_t bits = __ballot_sync(0xFFFFFFFFu, cur.valid) & 0xFFFFu;  // lanes 0..15: tokens 16w .. 16w+15
    if (lane == 0) st.mask[warp] = static_cast<uint16_t>(bits);
    sm90::fence_proxy_async();
    sm90::mbarrier_arrive(st.full);
    cur = next;
  }
  mma::cp_async_wait<0>();
}

// Prefill: blocks [begin, end) of one work unit; each block handed over once its copies landed.
__device__ inline void produce_unit(const PrefillParams& p, const Smem& m, int64_t row, const uint16_t* q_heads,
                                    int begin, int end, uint32_t& n, uint32_t& units_with_blocks) {
  if (begin >= end) return;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int token = v3::producer_token(t), half = v3::producer_half(t);
  const PrefillRowSlots rs = p.row_slots(row);
  if (units_with_blocks > 0) sm90::mbarrier_wait(m.q_free, (units_with_blocks - 1) & 1);
  ++units_with_blocks;
  v3::issue_q(m.b.base + m.b.plan.q, q_heads, t);
  mma::cp_async_commit();
  for (int blk = begin; blk < end; ++blk, ++n) {
    if (blk > begin) {  // the previous block (and q) have landed: hand it over now
      mma::cp_async_wait<0>();
      sm90::fence_proxy_async();
      sm90::mbarrier_arrive(m.b.stage(static_cast<int>((n - 1) & 1)).full);
    }
    const Stage st = m.b.stage(static_cast<int>(n & 1));
    if (n >= 2) sm90::mbarrier_wait(st.empty, ((n >> 1) - 1) & 1);
    const int64_t kv_row = rs.resolve(blk * layout::kRows + token);
    v3::issue_prefill_row(st.tile, p.kv, kv_row, token, half, p.q);
    mma::cp_async_commit();
    const uint32_t bits = v3::token_bits(kv_row >= 0);
    if (lane == 0) st.mask[warp] = static_cast<uint16_t>(bits);
  }
  mma::cp_async_wait<0>();
  sm90::fence_proxy_async();
  sm90::mbarrier_arrive(m.b.stage(static_cast<int>((n - 1) & 1)).full);
}

}  // namespace dsv4::cuda::attention::v5
