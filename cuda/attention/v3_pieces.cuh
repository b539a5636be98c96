#pragma once
// The pieces of v3 (sparse_mqa_v3.cu), one function per step, shared with the probe kernels the GPU
// test runs on each piece alone (v3_probes.cu): the producer's gather of a block into a k tile (decode:
// MODEL1 bytes into registers, dequantized exactly into the swizzled bf16 tile; prefill: cp.async of
// bf16 rows), the validity bits, and the consumers' QK (wgmma m64n32k16, 32 slots per consumer) and
// PV (wgmma m64n256k16 with the k tile read transposed as V, 256 dims per consumer), and the
// consumers' output or split partials (also v4's and v5's). Shared-memory
// addresses and descriptors: v3_layout.cuh.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/mma_layout.cuh"
#include "cuda/attention/mma_sm80.cuh"
#include "cuda/attention/model1_codec.cuh"
#include "cuda/attention/split_combine.cuh"
#include "cuda/attention/v3_layout.cuh"
#include "cuda/attention/wgmma_sm90.cuh"

namespace dsv4::cuda::attention::v3 {

using layout::matrix_offset;

// ---- producer (warpgroup 0, thread t in [0, 128)) -----------------------------------------------

// q of 64 heads -> the q tile: 4096 chunks of 16 bytes, 32 per thread.
__device__ __forceinline__ void issue_q(uint32_t q_tile, const uint16_t* q_heads, int t) {
#pragma unroll 8
  for (int k = 0; k < 32; ++k) {
    const int c = t + 128 * k;
    const int head = c >> 6, chunk = c & 63;
    mma::cp_async_16(q_tile + matrix_offset(head, chunk), q_heads + head * kHeadDim + chunk * 8, true);
  }
}

// One producer thread's bytes of one decode token: its half of the FP8 codes and rope dims, and the
// token's 8 scale bytes. An invalid slot reads the same amount from `dummy` (any 16-byte-aligned
// device address with 592 readable bytes: the row's q) and stores zeros: the loads stay uniform,
// so the 74 words live in registers.
struct DecodeLoad {
  uint4 fp8[kFp8ChunksPerThread];
  uint4 rope[kRopeChunksPerThread];
  uint2 scales;
  bool valid;
};

__device__ __forceinline__ void load_decode(const DecodeRowSlots& rs, int slot, int half, const void* dummy,
                                            DecodeLoad& L) {
  const uint8_t* data;
  const uint8_t* scales;
  L.valid = rs.resolve(slot, data, scales);
  if (!L.valid) data = scales = static_cast<const uint8_t*>(dummy);
  const uint4* fp8 = reinterpret_cast<const uint4*>(data) + half;
  const uint4* rope = reinterpret_cast<const uint4*>(data + kModel1NopeDims) + half;
#pragma unroll
  for (int i = 0; i < kFp8ChunksPerThread; ++i) L.fp8[i] = __ldg(fp8 + 2 * i);  // chunk fp8_chunk(i, half)
#pragma unroll
  for (int i = 0; i < kRopeChunksPerThread; ++i) L.rope[i] = __ldg(rope + 2 * i);
  L.scales = __ldg(reinterpret_cast<const uint2*>(scales));
}

// The loaded bytes -> row `token` of a k tile: FP8 chunk g = 2i + half (codes 16g..16g+15, scale byte
// g / 4 = i / 2, known at compile time) gives the tile's chunks 2g and 2g+1 (dequant8, exact:
// model1_codec.cuh), rope chunk r = 2i + half the tile's chunk 56 + r.
// An invalid slot's half row is zeros, so P V never meets stale or unwritten bytes.
__device__ __forceinline__ void store_decode(const DecodeLoad& L, unsigned char* tile, int token, int half) {
  // The 36 store addresses are the same every block; computed here, not hoisted out of the block
  // loop into 36 live registers (the producer has 128).
  asm volatile("" : "+r"(token));
  if (!L.valid) {
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int i = 0; i < kFp8ChunksPerThread; ++i) {
      const int g = fp8_chunk(i, half);
      *reinterpret_cast<uint4*>(tile + matrix_offset(token, 2 * g)) = zero;
      *reinterpret_cast<uint4*>(tile + matrix_offset(token, 2 * g + 1)) = zero;
    }
#pragma unroll
    for (int i = 0; i < kRopeChunksPerThread; ++i)
      *reinterpret_cast<uint4*>(tile + matrix_offset(token, kModel1NopeDims / 8 + rope_chunk(i, half))) = zero;
    return;
  }
#pragma unroll
  for (int i = 0; i < kFp8ChunksPerThread; ++i) {
    const int g = fp8_chunk(i, half);
    const int block = i >> 1;  // = g / 4: the scale block of 64 codes, a constant of the unrolled loop
    const uint32_t e = ((block < 4 ? L.scales.x : L.scales.y) >> (8 * (block & 3))) & 0xFFu;
    uint32_t w[4];
    dequant8(L.fp8[i].x, L.fp8[i].y, e, w);
    *reinterpret_cast<uint4*>(tile + matrix_offset(token, 2 * g)) = make_uint4(w[0], w[1], w[2], w[3]);
    dequant8(L.fp8[i].z, L.fp8[i].w, e, w);
    *reinterpret_cast<uint4*>(tile + matrix_offset(token, 2 * g + 1)) = make_uint4(w[0], w[1], w[2], w[3]);
  }
#pragma unroll
  for (int i = 0; i < kRopeChunksPerThread; ++i) {
    *reinterpret_cast<uint4*>(tile + matrix_offset(token, kModel1NopeDims / 8 + rope_chunk(i, half))) = L.rope[i];
  }
}

// Prefill: row `token` of a k tile from the bf16 row `kv_row` (-1: zeros, nothing read), this thread's
// half: chunks 32h .. 32h+31.
__device__ __forceinline__ void issue_prefill_row(uint32_t tile, const uint16_t* kv, int64_t kv_row, int token,
                                                  int half, const uint16_t* any_valid_address) {
  const uint16_t* src = kv_row >= 0 ? kv + kv_row * kHeadDim : any_valid_address;
#pragma unroll 8
  for (int j = 0; j < 32; ++j) {
    const int chunk = 32 * half + j;
    mma::cp_async_16(tile + matrix_offset(token, chunk), src + chunk * 8, kv_row >= 0);
  }
}

// The validity bits of the warp's 16 tokens (lanes 2i and 2i+1 serve token i) -> 16 bits, bit i =
// token 16w + i. Every lane of the warp calls it.
__device__ __forceinline__ uint32_t token_bits(bool valid) { return even_lane_bits(__ballot_sync(0xFFFFFFFFu, valid)); }

// ---- consumers (warpgroups 1 and 2: consumer c, thread t in [0, 128)) --------------------------

// S (64 heads x slots 32c .. 32c+31) = q k^T over 512 dims: 32 wgmma k-steps, then waited for.
__device__ __forceinline__ void qk_block(uint32_t q_tile, uint32_t k_tile, int c, float (&s)[16]) {
#pragma unroll
  for (int e = 0; e < 16; ++e) s[e] = 0.0f;
  sm90::fence_registers(s);  // the zeros are written before the fence the wgmma needs after them
  sm90::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks)
    sm90::wgmma_m64n32k16_ss(s, k_major_desc(k_major_start(q_tile, 0, ks)),
                             k_major_desc(k_major_start(k_tile, kSlotsPerConsumer * c, ks)), 1);
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::fence_registers(s);
}

// The consumer's probabilities (its 32 slots, accumulator layout) -> the p tiles: P = bf16(p), or p
// split exactly into kPlanes bf16 planes (hi + mid + lo = p for the fp32-probability variant).
template <int kPlanes>
__device__ __forceinline__ void store_p(unsigned char* p_tiles, const float (&prob)[16], int c, int t) {
#pragma unroll
  for (int e = 0; e < 16; e += 2) {
    const int head = acc_row(t, e), slot = kSlotsPerConsumer * c + acc_col(t, e);
    float rest0 = prob[e], rest1 = prob[e + 1];
#pragma unroll
    for (int plane = 0; plane < kPlanes; ++plane) {
      const uint16_t c0 = bf16_bits(rest0), c1 = bf16_bits(rest1);
      *reinterpret_cast<uint32_t*>(p_tiles + p_element_offset(plane, head, slot)) =
          static_cast<uint32_t>(c0) | (static_cast<uint32_t>(c1) << 16);
      rest0 = rest0 - bf16_value(c0);  // exact: the part of p the planes so far miss
      rest1 = rest1 - bf16_value(c1);
    }
  }
}

// O (64 heads x dims 256c .. 256c+255) += P V over the block's 64 slots (every plane), then waited for.
template <int kPlanes>
__device__ __forceinline__ void pv_block(uint32_t p_tiles, uint32_t k_tile, int c, float (&o)[128]) {
  sm90::fence_registers(o);  // the rescaled O is written before the fence the wgmma needs after it
  sm90::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < layout::kRows / 16; ++ks)
#pragma unroll
    for (int plane = 0; plane < kPlanes; ++plane)
      sm90::wgmma_m64n256k16_ss_tb(o, k_major_desc(k_major_start(p_tiles + plane * kPTile, 0, ks)),
                                   mn_major_desc(mn_major_start(k_tile, (kDimsPerConsumer / 64) * c, ks)), 1);
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::fence_registers(o);
}

// ---- the end of a consumer's work (v3, v4, v5) --------------------------------------------------

// Consumer c's O (64 heads x dims 256c .. 256c+255, accumulator layout), with the running max m_run
// and sum l of the thread's two heads head_base + rows[h] of query row `row`. splits == 1: O / (l +
// exp(sink - m)) as bf16 into the output (0 for a head without a valid slot) and, by consumer 0,
// the lse (m + log l; +inf without a valid slot) and max logit (m; -inf) where asked; splits > 1:
// the unnormalised O, m and l into split `split`'s partials (split_combine.cuh).
template <class Params>
__device__ __forceinline__ void write_output(const Params& p, const float (&o)[128], const float (&m_run)[2],
                                             const float (&l)[2], int64_t row, int head_base, int split, int splits,
                                             detail::SplitOut ws, int c, int t, const int (&rows)[2]) {
  const int d0 = kDimsPerConsumer * c;
  if (splits == 1) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int head = head_base + rows[h];
      const float sink = p.sink ? p.sink[head] : -INFINITY;
      const float den = l[h] + expf(sink - m_run[h]);
      uint16_t* out = p.out_row(row, head) + d0;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int e = 4 * j + 2 * h;
        const float x0 = l[h] > 0.0f ? o[e] / den : 0.0f;
        const float x1 = l[h] > 0.0f ? o[e + 1] / den : 0.0f;
        *reinterpret_cast<uint32_t*>(out + acc_col(t, e)) =
            static_cast<uint32_t>(bf16_bits(x0)) | (static_cast<uint32_t>(bf16_bits(x1)) << 16);
      }
      if (c == 0 && (t & 3) == 0) {
        if (float* lse = p.lse_at(row, head)) *lse = l[h] > 0.0f ? m_run[h] + logf(l[h]) : INFINITY;
        if (float* ml = p.max_logit_at(row, head)) *ml = l[h] > 0.0f ? m_run[h] : -INFINITY;
      }
    }
    return;
  }
  const int64_t part = (static_cast<int64_t>(split) * p.rows() + row) * p.n_heads + head_base;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float* o_part = ws.o + (part + rows[h]) * kHeadDim + d0;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int e = 4 * j + 2 * h;
      *reinterpret_cast<float2*>(o_part + acc_col(t, e)) = make_float2(o[e], o[e + 1]);
    }
    if (c == 0 && (t & 3) == 0) {
      ws.m[part + rows[h]] = m_run[h];
      ws.l[part + rows[h]] = l[h];
    }
  }
}

}  // namespace dsv4::cuda::attention::v3
