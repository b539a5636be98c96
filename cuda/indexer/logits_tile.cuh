#pragma once
// Building blocks of the v2 logits kernels (prefill and decode; sm_90a): one warpgroup computes the
// 64 heads of one query against a tile of N keys with wgmma (M = 64 heads, K = 128 dims in four
// k32 slices), then reduces over the heads in its epilogue.
//
// Operands (cuda/common/wgmma.cuh tile layout): A = the query's 64 heads as e4m3 codes, B = the
// tile's keys as e4m3 codes.
//   FP8: codes as stored; q's scale 2^e_h is folded into the head weight (w'_h = w_h 2^e_h) and the
//        key's 2^e_j multiplies the head sum: x_hj = A_h . B_j (four slices accumulated by wgmma).
//   FP4: e2m1 unpacked exactly to e4m3; q's block scales go into A relative to the head's largest
//        (2^(e_hb - c_h), exact while e_hb - c_h >= -7, counted otherwise) and c_h into w'_h; each
//        slice b is its own wgmma (a sum of 32 e2m1 x e2m1 products: a multiple of 2^-2 below 2^11,
//        exact however the tensor core sums), multiplied by the key's 2^e_jb and added in fp32:
//        x_hj = sum_b 2^e_jb (A_hb . B_jb), exact while the four terms fit fp32's 24 bits.
// Epilogue, per key j: logit = S( 2^c_j * sum_h t_hj ) with
//   bf16 scores: t = S(w'_h relu(S(x))) in fp32 (products of two bf16 values are exact), the head
//                sum in double (exact for bf16 terms); equal to the oracle's order because scaling
//                by a power of two commutes with every rounding (away from the subnormal range);
//   fp32 scores: t = w'_h relu(x) accumulated in fp32 (DeepGEMM's form; fma, tree order).
// The head sum: a lane adds its two rows, a 3-round exchange across the lanes that share its columns
// halves the columns each round, then the 4 warps' partial sums are added in warp order through
// shared memory: a fixed order, so the logits are bitwise reproducible and batch-invariant.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/numerics.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/formats.h"
#include "cuda/indexer/tile_math.cuh"

namespace dsv4::cuda::logits_tile {

inline constexpr int kHeads = 64;  // M of one warpgroup: the 64 heads of one query
inline constexpr int kGroupThreads = 128;
inline constexpr int kQBytes = kHeads * kIndexerDim;  // the A operand of one query (8 KiB)
inline constexpr int kMaxRelativeExponent = -7;       // FP4: smallest 2^r that keeps e2m1 x 2^r on e4m3

// ---- asynchronous copies --------------------------------------------------------------------------

// 16 (or 4) bytes from global to shared memory; !valid: zeros are written and nothing is read (the
// address must still be a valid one: callers pass a clamped one).
__device__ inline void copy16(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
// As copy16, through L1: the FP8 tile loaders copy the two 16-byte halves of a 32-byte sector back
// to back from one thread, and the second one hits L1 instead of fetching the sector again.
__device__ inline void copy16_l1(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
__device__ inline void copy4(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 4 : 0) : "memory");
}
__device__ inline void copy_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ inline void copy_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// A barrier of the 128 threads of warpgroup g (named barrier 1 + g; 0 is __syncthreads).
__device__ inline void group_barrier(int g) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + g), "n"(kGroupThreads) : "memory");
}

// ---- the query operand ----------------------------------------------------------------------------

// The folded weight w'_h = w_h 2^(e_h) of this thread's two accumulator rows (row_weights[r] for row
// 16 warp + lane / 4 + 8 r of warpgroup thread t): the query's scale exponent (FP4: the largest of
// its four blocks') folded into the head weight. Exact: a power of two (e in [-126, 127] for these
// rules). build_query returns them; decode v6's consumers that do not build the operand call it.
template <IndexerFormat F>
__device__ inline void query_row_weights(const uint8_t* scales, const float* weights, int t, float (&row_weights)[2]) {
  const int warp = (t / 32) % 4, lane = t % 32;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = 16 * warp + lane / 4 + 8 * r;
    const uint8_t* sc = scales + row * kIndexerScaleBytes;
    int e = ue8m0_exponent(sc[0]);
    if constexpr (F == IndexerFormat::fp4)
      for (int b = 1; b < 4; ++b) e = max(e, ue8m0_exponent(sc[b]));
    row_weights[r] = weights[row] * pow2f(e);
  }
}

// Builds the A operand of one query in `a_tile` (kQBytes, tile layout of 64 rows) from its codes
// [64][code_bytes] and UE8M0 scale bytes [64][4], by the 128 threads of its warpgroup (thread t:
// head t / 2, dims 64 (t % 2) .. +63), and returns the folded weight w'_h of this thread's two
// accumulator rows (row_weights[r] for row 16 warp + lane / 4 + 8 r). Returns through `inexact` the
// number of FP4 elements whose relative scale left the e4m3 grid (0 on every input the docs
// promise bitwise results for). The caller fences and synchronises before the MMA.
template <IndexerFormat F>
__device__ inline void build_query(uint8_t* a_tile, const uint8_t* codes, const uint8_t* scales, const float* weights,
                                   int t, float (&row_weights)[2], int& inexact) {
  const int h = t / 2, half = t % 2;
  inexact = 0;
  if constexpr (F == IndexerFormat::fp8) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int k_byte = 64 * half + 16 * c;
      *reinterpret_cast<uint4*>(a_tile + wgmma::tile_offset(kHeads, h, k_byte)) =
          *reinterpret_cast<const uint4*>(codes + h * kIndexerDim + k_byte);
    }
  } else {
    const uint8_t* sc = scales + h * kIndexerScaleBytes;
    int top = ue8m0_exponent(sc[0]);
#pragma unroll
    for (int b = 1; b < 4; ++b) top = max(top, ue8m0_exponent(sc[b]));
#pragma unroll
    for (int c = 0; c < 4; ++c) {  // 16 dims of block (64 half + 16 c) / 32
      const int k_byte = 64 * half + 16 * c;
      const int r = ue8m0_exponent(sc[k_byte / 32]) - top;
      const uint2 packed = *reinterpret_cast<const uint2*>(codes + h * (kIndexerDim / 2) + k_byte / 2);
      uint4 out;
      if (r == 0) {
        out = unpack16(packed);
      } else {  // element * 2^r onto the e4m3 grid, exactly while r >= -7
        uint32_t words[4] = {0, 0, 0, 0};
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const uint32_t word = i < 8 ? packed.x : packed.y;
          const float v = e2m1_value(static_cast<uint8_t>((word >> (4 * (i % 8))) & 0xfu)) * pow2f(max(r, -126));
          const float on_grid = e4m3_round(v);
          inexact += on_grid != v;
          words[i / 4] |= static_cast<uint32_t>(e4m3_code(on_grid)) << (8 * (i % 4));
        }
        out = make_uint4(words[0], words[1], words[2], words[3]);
      }
      *reinterpret_cast<uint4*>(a_tile + wgmma::tile_offset(kHeads, h, k_byte)) = out;
    }
  }
  query_row_weights<F>(scales, weights, t, row_weights);
}

// ---- the FP4 B operand ----------------------------------------------------------------------------

// N keys' packed FP4 codes (row-major, 64 bytes a key) -> their e4m3 codes in the tile layout of N
// rows (b_unpacked), and 2^e of each key's 4 block scales (UE8M0 bytes, 4 a key) into
// slice_scale[block][key]; by kThreads threads (t < kThreads). The caller fences and synchronises
// before the MMA.
template <int N, int kThreads>
__device__ inline void unpack_fp4_tile(uint8_t* b_unpacked, float (*slice_scale)[N], const uint8_t* codes,
                                       const uint8_t* scales, int t) {
#pragma unroll
  for (int u = t; u < N * 8; u += kThreads) {
    const int row = u % N, chunk = u / N;  // 16 dims = 8 packed bytes
    const uint2 packed = *reinterpret_cast<const uint2*>(codes + row * 64 + 8 * chunk);
    *reinterpret_cast<uint4*>(b_unpacked + wgmma::tile_offset(N, row, 16 * chunk)) = unpack16(packed);
  }
  for (int u = t; u < 4 * N; u += kThreads) {
    const int key = u % N, blk = u / N;
    slice_scale[blk][key] = ue8m0_value(scales[key * kIndexerScaleBytes + blk]);
  }
}

// ---- the tile MMA ---------------------------------------------------------------------------------

// acc = x of the tile (see the file comment). a_tile: the query operand; b_tile: N keys' e4m3 codes
// (tile layout of N rows, or with kBSwizzled their 128-byte rows with the 128-byte swizzle as TMA
// writes them, 1024-byte aligned: the same operand values, hence the same acc bit for bit);
// slice_scale(b, col): FP4 only, 2^e of key `col`'s block b.
template <int N>
__device__ inline void mma_n(float (&d)[N / 2], uint64_t da, uint64_t db, bool accumulate) {
  if constexpr (N == 128)
    wgmma::wgmma_m64n128k32_e4m3(d, da, db, accumulate);
  else
    wgmma::wgmma_m64n64k32_e4m3(d, da, db, accumulate);
}

template <IndexerFormat F, int N, bool kBSwizzled = false, class SliceScale>
__device__ inline void tile_mma(float (&acc)[N / 2], const uint8_t* a_tile, const uint8_t* b_tile, int lane,
                                SliceScale slice_scale) {
  static_assert(!kBSwizzled || F == IndexerFormat::fp8, "a swizzled B operand is FP8 codes");
  if constexpr (F == IndexerFormat::fp8) {
    wgmma::fence();
#pragma unroll
    for (int s = 0; s < 4; ++s)
      mma_n<N>(acc, wgmma::slice_descriptor(a_tile, kHeads, s),
               kBSwizzled ? wgmma::slice_descriptor_sw128(b_tile, s) : wgmma::slice_descriptor(b_tile, N, s), s > 0);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(acc);
  } else {
    float part[N / 2];
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      wgmma::fence();
      mma_n<N>(part, wgmma::slice_descriptor(a_tile, kHeads, s), wgmma::slice_descriptor(b_tile, N, s), false);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(part);
#pragma unroll
      for (int k = 0; k < N / 2; ++k) {
        const float scale = slice_scale(s, wgmma::acc_col(k, lane));
        // part * scale is exact (a power of two): fmaf rounds once, as the fp32 addition would.
        acc[k] = s == 0 ? part[k] * scale : fmaf(part[k], scale, acc[k]);
      }
    }
  }
}

// ---- the epilogue ---------------------------------------------------------------------------------

template <typename T, int kSlots, int kRound = 0>
__device__ inline void reduce_lanes(T (&v)[kSlots], int lane) {
  // Rounds over lane bits 2, 3, 4 (the lanes sharing this lane's columns): each keeps half of its
  // slots and adds the partner's copy of them. Afterwards v[k], k < kSlots / 8, is the warp's sum
  // of slot k + (kSlots/2) bit2 + (kSlots/4) bit3 + (kSlots/8) bit4 of the lane. One round per
  // instantiation, so that every index is a constant and v stays in registers (a loop over the
  // rounds left the inner loop's bound to the optimizer, which kept v on the stack).
  if constexpr (kRound < 3) {
    constexpr int half = kSlots >> (kRound + 1);
    const bool upper = kept_upper(kRound, lane);
#pragma unroll
    for (int k = 0; k < half; ++k) {
      const T keep = upper ? v[half + k] : v[k];
      const T send = upper ? v[k] : v[half + k];
      v[k] = keep + __shfl_xor_sync(0xffffffffu, send, 4 << kRound);
    }
    reduce_lanes<T, kSlots, kRound + 1>(v, lane);
  }
}

template <ScoreStorage S>
using HeadSum = typename std::conditional<S == ScoreStorage::bf16, double, float>::type;

// Reduces the tile over the 64 heads. red: shared memory of 4 * N HeadSum<S> for this warpgroup.
// Returns, for the group's thread t < N, the head sum of column t (before the key's 2^c_j and S);
// every thread of the warpgroup must call it.
template <ScoreStorage S, int N>
__device__ inline HeadSum<S> head_sum(const float (&acc)[N / 2], const float (&row_weights)[2], HeadSum<S>* red, int t,
                                      int g) {
  using Sum = HeadSum<S>;
  constexpr int kSlots = N / 4;
  const int warp = (t / 32) % 4, lane = t % 32;
  Sum v[kSlots];
#pragma unroll
  for (int c = 0; c < kSlots; ++c) {
    const float x0 = acc[4 * (c / 2) + c % 2], x8 = acc[4 * (c / 2) + 2 + c % 2];  // rows m0, m0 + 8
    if constexpr (S == ScoreStorage::bf16) {
      float r0, r8, t0, t8;  // bf16_round_hw2: bf16_round's values (a NaN stays NaN: only arithmetic follows)
      bf16_round_hw2(x0, x8, r0, r8);
      bf16_round_hw2(row_weights[0] * relu_keep_nan(r0), row_weights[1] * relu_keep_nan(r8), t0, t8);
      v[c] = static_cast<double>(t0) + static_cast<double>(t8);
    } else {
      v[c] = fmaf(relu_keep_nan(x8), row_weights[1], relu_keep_nan(x0) * row_weights[0]);
    }
  }
  reduce_lanes<Sum, kSlots>(v, lane);
#pragma unroll
  for (int k = 0; k < kSlots / 8; ++k) red[warp * N + slot_col(owned_slot<kSlots>(k, lane), lane)] = v[k];
  group_barrier(g);
  Sum total = 0;
  if (t % kGroupThreads < N) {
    const int col = t % kGroupThreads;
    total = ((red[col] + red[N + col]) + red[2 * N + col]) + red[3 * N + col];
  }
  group_barrier(g);  // red is reused by the next tile
  return total;
}

// The logit of a column from its head sum and the key's 2^c_j (exact), rounded to S. The product
// plus +0 in one fma: a sum of 64 terms that are all -0 (every relu'd zero times a negative weight,
// or x = -0 times a positive one) becomes +0, as the oracle's head sum, which starts from +0;
// nothing else changes (p + 0 = p for every other p, NaN included, and the fma rounds the exact
// product once, as the multiplication alone would). No instruction more: the FMUL / DMUL becomes
// an FFMA / DFMA with a zero addend, which the compiler may not drop (x + 0 is not x for x = -0).
template <ScoreStorage S>
__device__ inline float finish(HeadSum<S> sum, float key_scale) {
  if constexpr (S == ScoreStorage::bf16)
    return bf16_round(static_cast<float>(fma(sum, static_cast<double>(key_scale), 0.0)));
  else
    return fmaf(sum, key_scale, 0.0f);
}

}  // namespace dsv4::cuda::logits_tile
