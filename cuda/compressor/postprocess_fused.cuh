#pragma once
// The post-processing fused into the v2 and v3 kernels. Thread layout (the "entry slab"): an entry of d
// channels is held by Q = d/4 consecutive threads, each with 4 consecutive channels (one float4);
// a 128-thread slab holds 512/d entries. The cross-channel steps become:
//   RMSNorm sum of squares: per thread in double, then a shuffle butterfly inside each warp and,
//     for d = 512, the 4 warp sums added in warp order through shared memory (fixed order);
//   FP8 amax over 64 channels: a max over 16 lanes (xor 8, 4, 2, 1);
//   Hadamard (indexer, d = 128 = one warp): butterfly stages h = 1, 2 inside the thread, h = 4 ... 64
//     across lanes (xor 1 ... 16), the same stage order and pairing as the oracle, in double;
//   FP4 amax over 32 channels: a max over 8 lanes.
// Everything else is the per-element code of numerics.cuh, in the oracle's order.
//
// The RMSNorm sum is the one place the order differs from the oracle (sequential over channels).
// The squares of bf16 values have 16-bit significands, so the double sum is exact, and then equal to
// the oracle's, whenever the entry's largest square is within 2^(53-16-log2 d) of its smallest
// nonzero one; otherwise the two double sums can differ in their last bits and the fp32 mean of
// squares rounds differently with probability about 2^-26 per entry (see docs/cuda-compressor.md).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/hadamard.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/compressor/postprocess_serial.cuh"

namespace dsv4::cuda {

// Sum of one double per thread over the Q = d/4 threads of an entry, identical in every one of them.
// smem: one double per warp of the block. Every thread of the block must call it (it may sync).
template <int D>
__device__ inline double entry_sum(double v, double* smem) {
  constexpr int kWarpsPerEntry = D / 4 / 32;
  static_assert(kWarpsPerEntry >= 1, "an entry spans whole warps");
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if constexpr (kWarpsPerEntry == 1) {
    return v;
  } else {
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) smem[warp] = v;
    __syncthreads();
    const int first = warp / kWarpsPerEntry * kWarpsPerEntry;
    double total = smem[first];
#pragma unroll
    for (int w = 1; w < kWarpsPerEntry; ++w) total += smem[first + w];
    __syncthreads();  // smem is reused by the next call
    return total;
  }
}

// p: this thread's 4 pooled fp32 values (channels 4q .. 4q+3 of its entry, q = threadIdx.x % (D/4)).
// entry: the entry index j (its RoPE table row). out_row: the entry's output row, or nullptr for
// a thread whose entry does not exist (it still takes part in the block-wide steps).
template <int D, Kind K>
__device__ inline void postprocess_fused(const float (&p)[4], int64_t entry, const float* __restrict__ norm, double eps,
                                         const float* __restrict__ rope, uint16_t* __restrict__ out_row, double* smem) {
  static_assert(D == 128 || D == 512, "head dims 128 and 512");
  static_assert(K == Kind::main || D == 128, "the indexer's head dim is 128");
  constexpr int kFirstRope = D - kRopeDim;
  const int q = threadIdx.x % (D / 4);
  const int c0 = 4 * q;

  float y[4];
  double squares = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    y[i] = bf16_round(p[i]);
    squares += static_cast<double>(y[i]) * y[i];
  }
  const float r = rms_scale(entry_sum<D>(squares, smem), D, eps);
  const float4 w = *reinterpret_cast<const float4*>(norm + c0);
  y[0] = rms_apply(y[0], r, w.x);
  y[1] = rms_apply(y[1], r, w.y);
  y[2] = rms_apply(y[2], r, w.z);
  y[3] = rms_apply(y[3], r, w.w);

  if (c0 >= kFirstRope && out_row != nullptr) {
    // (cos, sin) of pairs (c0 - kFirstRope) / 2 and the next one.
    const float4 cs = *reinterpret_cast<const float4*>(rope + entry * kRopeDim + (c0 - kFirstRope));
    const float a0 = y[0], b0 = y[1], a1 = y[2], b1 = y[3];
    y[0] = rope_re(a0, b0, cs.x, cs.y);
    y[1] = rope_im(a0, b0, cs.x, cs.y);
    y[2] = rope_re(a1, b1, cs.z, cs.w);
    y[3] = rope_im(a1, b1, cs.z, cs.w);
  }

  if constexpr (K == Kind::main) {
    // 16 lanes = 64 channels = one FP8 block; the rope lanes form their own groups (result unused).
    float amax = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (fabsf(y[i]) > amax) amax = fabsf(y[i]);
    amax = group_max<16>(amax);
    if (c0 < kFirstRope) {
      const int e = ue8m0_ceil_exponent(amax, kFp8AmaxFloor, kFp8Max);
#pragma unroll
      for (int i = 0; i < 4; ++i) y[i] = fake_quant_fp8(y[i], e);
    }
  } else {
    double v[4] = {y[0], y[1], y[2], y[3]};
    hadamard128_warp(v);
    const double scale = 1.0 / sqrt(static_cast<double>(D));
    float amax = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      y[i] = bf16_round(static_cast<float>(v[i] * scale));
      if (fabsf(y[i]) > amax) amax = fabsf(y[i]);
    }
    amax = group_max<8>(amax);  // 8 lanes = 32 channels = one FP4 block
    const int e = ue8m0_ceil_exponent(amax, kFp4AmaxFloor, kFp4Max);
#pragma unroll
    for (int i = 0; i < 4; ++i) y[i] = fake_quant_fp4(y[i], e);
  }

  if (out_row != nullptr) {
    uint2 packed;
    packed.x = static_cast<uint32_t>(bf16_bits(y[0])) | (static_cast<uint32_t>(bf16_bits(y[1])) << 16);
    packed.y = static_cast<uint32_t>(bf16_bits(y[2])) | (static_cast<uint32_t>(bf16_bits(y[3])) << 16);
    *reinterpret_cast<uint2*>(out_row + c0) = packed;
  }
}

}  // namespace dsv4::cuda
