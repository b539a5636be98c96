#pragma once
// The consumer pieces of v4 (sparse_mqa_v4.cu), shared with the probe kernels (v3_probes.cu): each
// consumer warpgroup computes S for all 64 slots of a block (wgmma m64n64k16, A = q, B = the k tile,
// both from shared memory, as v3's QK but N = 64), and P V for its 256 dims with P taken from its own
// registers (wgmma m64n256k16, A from registers, B = the k tile read transposed, as v3's PV); between
// the two, the online-softmax step of the block (also v5's). v7 runs the same QK and P V with their
// descriptors stepped in the low word (kStepped) and its own softmax step in the base-2 domain.
// Addresses and descriptors: v3_layout.cuh.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/mma_layout.cuh"
#include "cuda/attention/v3_layout.cuh"
#include "cuda/attention/wgmma_sm90.cuh"
#include "cuda/common/numerics.cuh"

namespace dsv4::cuda::attention::v4 {

using namespace v3;

// v7's descriptors (qk_block_all and pv_block_regs with kStepped) ------------------------------------

// A descriptor of v3_layout.cuh from its low word: the high word (stride byte offset 1,024, 128-byte
// swizzle) is the same constant for every descriptor v3's layouts build.
inline constexpr uint32_t kDescHigh = static_cast<uint32_t>(descriptor(0, 0, kSbo) >> 32);
DSV4_HD constexpr uint64_t desc_from_low(uint32_t low) { return (static_cast<uint64_t>(kDescHigh) << 32) | low; }
// The low word of k_major_desc(tile) / mn_major_desc(tile); a start `off` bytes further (off a
// multiple of 16) is this word + off / 16: the 14-bit start field does not carry into the leading
// byte offset while tile + off < 2^18 (every plan ends below 232,448 bytes).
DSV4_HD constexpr uint32_t k_major_low(uint32_t tile) { return static_cast<uint32_t>(k_major_desc(tile)); }
DSV4_HD constexpr uint32_t mn_major_low(uint32_t tile) { return static_cast<uint32_t>(mn_major_desc(tile)); }
// Every descriptor the stepped QK and P V build equals v4's, for the q and k tiles of v3's plan at any
// 1,024-aligned base that leaves them inside a CTA's 227 KiB.
DSV4_HD constexpr bool stepped_descriptors_match() {
  const Plan pl = plan(0);
  for (uint32_t base = 0; base + pl.k[kStages - 1] + kTile <= 232448u; base += 1024u) {
    const uint32_t tiles[3] = {base + pl.q, base + pl.k[0], base + pl.k[1]};
    for (uint32_t tile : tiles)
      for (int ks = 0; ks < kHeadDim / 16; ++ks)
        if (desc_from_low(k_major_low(tile) + k_major_start(0, 0, ks) / 16) != k_major_desc(k_major_start(tile, 0, ks)))
          return false;
    for (int s = 0; s < kStages; ++s)
      for (int c = 0; c < kConsumers; ++c)
        for (int ks = 0; ks < 4; ++ks) {
          const uint32_t first = mn_major_start(base + pl.k[s], (kDimsPerConsumer / 64) * c, 0);
          if (desc_from_low(mn_major_low(first) + mn_major_start(0, 0, ks) / 16) !=
              mn_major_desc(mn_major_start(base + pl.k[s], (kDimsPerConsumer / 64) * c, ks)))
            return false;
        }
  }
  return true;
}
static_assert(stepped_descriptors_match(), "a start offset adds to the descriptor's low word without a carry");

// S (64 heads x 64 slots) = q k^T over 512 dims: 32 wgmma k-steps, then waited for. Element e of the
// accumulator sits at (acc_row(t, e), acc_col(t, e)), e < 32. Once the wgmmas are issued (before
// waiting), arrives on named barrier `issued` (256 threads; < 0: none). kStepped (v7): the two
// descriptors' low words computed once and stepped by constants (k-step ks moves both starts by
// k_major_start(0, 0, ks) bytes; stepped_descriptors_match above), the same wgmmas on the same
// operands with one 32-bit add each instead of the 64-bit descriptor arithmetic.
template <bool kStepped = false>
__device__ __forceinline__ void qk_block_all(uint32_t q_tile, uint32_t k_tile, float (&s)[32], int issued) {
  const uint32_t q_low = k_major_low(q_tile), k_low = k_major_low(k_tile);  // kStepped's
#pragma unroll
  for (int e = 0; e < 32; ++e) s[e] = 0.0f;
  sm90::fence_registers(s);
  sm90::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks) {
    if constexpr (kStepped) {
      const uint32_t step = k_major_start(0, 0, ks) / 16;
      sm90::wgmma_m64n64k16_ss(s, desc_from_low(q_low + step), desc_from_low(k_low + step), 1);
    } else {
      sm90::wgmma_m64n64k16_ss(s, k_major_desc(k_major_start(q_tile, 0, ks)),
                               k_major_desc(k_major_start(k_tile, 0, ks)), 1);
    }
  }
  sm90::wgmma_commit();
  if (issued >= 0) sm90::named_barrier_arrive(issued, 256);
  sm90::wgmma_wait<0>();
  sm90::fence_registers(s);
}

// The online-softmax step of one block (v4, v5), after qk_block_all: s (S of the block; the slots
// whose bit of `valid` is set, at least one) becomes p = exp(scale s - m_run) in place (0 at the
// other slots); for each of the thread's two heads (element e: head (e >> 1) & 1), m_run becomes the
// max of itself and the block's scale s (over the quad's 4 lanes), l_run is rescaled by
// exp(m_old - m_new) and the block's sum of p added, and o is rescaled the same.
__device__ __forceinline__ void softmax_block(float (&s_acc)[32], uint64_t valid, float scale, int t, float (&m_run)[2],
                                              float (&l_run)[2], float (&o)[128]) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int e = 0; e < 32; ++e) {
    const bool ok = (valid >> acc_col(t, e)) & 1u;
    s_acc[e] = ok ? s_acc[e] * scale : -INFINITY;
    mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], s_acc[e]);
  }
  float rescale[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 2));
    const float m_new = fmaxf(m_run[h], mx[h]);  // finite: the block has a valid slot
    rescale[h] = expf(m_run[h] - m_new);         // 0 before the first valid slot (m_run = -inf)
    m_run[h] = m_new;
  }
#pragma unroll
  for (int e = 0; e < 32; ++e) {
    const bool ok = (valid >> acc_col(t, e)) & 1u;
    s_acc[e] = ok ? expf(s_acc[e] - m_run[(e >> 1) & 1]) : 0.0f;  // now p
    sum[(e >> 1) & 1] += s_acc[e];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sum[h] += __shfl_xor_sync(0xFFFFFFFFu, sum[h], 1);
    sum[h] += __shfl_xor_sync(0xFFFFFFFFu, sum[h], 2);
    l_run[h] = l_run[h] * rescale[h] + sum[h];
  }
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] *= rescale[(e >> 1) & 1];
}

// The A fragment of k-step ks (slots 16ks .. 16ks+15) from the accumulator layout of S / P: the warp's
// 16 rows, word k = the pair of elements 8ks + 2k, 8ks + 2k + 1 (row l/4 or l/4 + 8, columns
// 16ks + 2(l%4) [+ 8]): the accumulator of m64nN and the A operand of m64nNk16 share this layout.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(bf16_bits(lo)) | (static_cast<uint32_t>(bf16_bits(hi)) << 16);
}

// pack_bf16 in one instruction (cvt.rn.bf16x2.f32, F2FP): round to nearest even as bf16_bits, so the
// same bits for every non-NaN value (a NaN probability, from a NaN score, makes the output NaN either
// way); pack_bf16's integer rounding costs ≈ 7 instructions an element.
__device__ __forceinline__ uint32_t pack_bf16_rn(float lo, float hi) {
  uint32_t packed;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));  // the first source is the high half
  return packed;
}

// O (64 heads x dims 256c .. 256c+255) += P V over the block's 64 slots. P = bf16(prob) (kPlanes 1),
// or prob split exactly into three bf16 planes (hi + mid + lo = prob), one plane after the other
// (each plane's 16 words stay untouched until its wgmmas have completed). `prob` is consumed.
// kStepped (v7): the B descriptor's low word computed once and stepped (k-step ks: + 2,048 bytes) and
// the probabilities packed by pack_bf16_rn: the same wgmmas on the same operands.
template <int kPlanes, bool kStepped = false>
__device__ __forceinline__ void pv_block_regs(float (&prob)[32], uint32_t k_tile, int c, float (&o)[128]) {
  const uint32_t v_low = mn_major_low(mn_major_start(k_tile, (kDimsPerConsumer / 64) * c, 0));
#pragma unroll
  for (int plane = 0; plane < kPlanes; ++plane) {
    uint32_t a[4][4];
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int e = 8 * ks + 2 * k;
        a[ks][k] = kStepped ? pack_bf16_rn(prob[e], prob[e + 1]) : pack_bf16(prob[e], prob[e + 1]);
        prob[e] = prob[e] - bf16_value(static_cast<uint16_t>(a[ks][k] & 0xFFFFu));  // exact: the part still missing
        prob[e + 1] = prob[e + 1] - bf16_value(static_cast<uint16_t>(a[ks][k] >> 16));
      }
    sm90::fence_registers(o);
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
      sm90::wgmma_m64n256k16_rs_tb(o, a[ks],
                                   kStepped ? desc_from_low(v_low + mn_major_start(0, 0, ks) / 16)
                                            : mn_major_desc(mn_major_start(k_tile, (kDimsPerConsumer / 64) * c, ks)),
                                   1);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::fence_registers(o);
  }
}

// ex2.approx.ftz.f32 (PTX ISA, "ex2"): 2^x in one MUFU.EX2, a relative error of at most 2^-22.5 for
// a normal result by the PTX ISA, measured against 2 fp32 ulps on every argument v7 passes by the GPU
// test "v7 pieces: ex2.approx ..." (docs/cuda-attention.md, v7: why the oracle's bounds hold with
// it); a result below 2^-126 is flushed to +0, ex2(-inf) = +0.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// v7's online-softmax step, in the base-2 domain, after qk_block_all<true>. With c = scale log2(e)
// (`scale_log2`, scale > 0) and, for each of the thread's two heads h, m_raw[h] the running max of
// the raw scores q.k (the max of scale s, v5's m_run, is scale m_raw: rounding is monotone) and
// mc[h] = c m_raw[h] rounded: p = 2^(c s - mc) (one FFMA and one MUFU.EX2 per element; 0 at the slots
// whose bit of `valid` is clear, at least one set), l rescaled by 2^(mc_old - mc_new) and the
// block's sum of p added, o rescaled the same. The rescales use the same mc as the p's, so the
// shifts telescope: l = sum of 2^(c s - mc) over the slots so far, o likewise.
__device__ __forceinline__ void softmax_block_exp2(float (&s_acc)[32], uint64_t valid, float scale_log2, int t,
                                                   float (&m_raw)[2], float (&mc)[2], float (&l_run)[2],
                                                   float (&o)[128]) {
  // The thread's columns are 8j + 2(t % 4) + i (acc_col): one shift by 2(t % 4), then bit 8j + i, a
  // constant of the unrolled loop, tests element e's slot.
  const uint64_t mine = valid >> (2 * (t & 3));
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int e = 0; e < 32; ++e) {
    const bool ok = (mine >> (acc_col(0, e))) & 1u;
    s_acc[e] = ok ? s_acc[e] : -INFINITY;
    mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], s_acc[e]);
  }
  float rescale[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 2));
    m_raw[h] = fmaxf(m_raw[h], mx[h]);  // finite: the block has a valid slot
    const float mc_new = m_raw[h] * scale_log2;
    rescale[h] = ex2_approx(mc[h] - mc_new);  // 0 before the first valid slot (mc = -inf)
    mc[h] = mc_new;
  }
#pragma unroll
  for (int e = 0; e < 32; ++e) {
    s_acc[e] = ex2_approx(fmaf(s_acc[e], scale_log2, -mc[(e >> 1) & 1]));  // now p; 2^-inf = 0 at masked slots
    sum[(e >> 1) & 1] += s_acc[e];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sum[h] += __shfl_xor_sync(0xFFFFFFFFu, sum[h], 1);
    sum[h] += __shfl_xor_sync(0xFFFFFFFFu, sum[h], 2);
    l_run[h] = l_run[h] * rescale[h] + sum[h];
  }
#pragma unroll
  for (int e = 0; e < 128; ++e) o[e] *= rescale[(e >> 1) & 1];
}

}  // namespace dsv4::cuda::attention::v4
