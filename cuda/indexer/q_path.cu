// The indexer's q path (indexer_api.h indexer_q): per (token, head) vector RoPE on the last 64
// dims, Hadamard, block quantization; per (token, head) the head weight
// w = bf16(fp32(weights_proj(x) * multiplier)) (reference/stages/indexer.cpp indexer_weights).
//
// v1: one thread per vector running q_vector_serial (indexer_math.cuh) as the oracle orders it.
// v2: one warp per vector, 4 channels a lane (the compressor's entry-slab layout): the RoPE pairs
//     of a lane are its own, the Hadamard is hadamard128_warp (the oracle's stages and pairings), the
//     block amax a lane-group max; bitwise the same as v1.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/hadamard.cuh"
#include "cuda/common/launch_checks.h"
#include "cuda/common/numerics.cuh"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/indexer_math.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 128;

struct QPathArgs {
  int64_t vectors;  // s * IH
  int heads;
  IndexerFormat format;
  bool hadamard;
  float multiplier;
  const uint16_t* q_proj;
  const float* rope;
  const uint16_t* weights_proj;
  IndexerQOut out;
};

__device__ inline void head_weight(const QPathArgs& a, int64_t vec) {
  if (a.weights_proj != nullptr) a.out.weights[vec] = bf16_round(bf16_value(a.weights_proj[vec]) * a.multiplier);
}

__global__ void __launch_bounds__(kThreads) q_path_v1(const QPathArgs a) {
  const int64_t vec = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (vec >= a.vectors) return;
  const int64_t token = vec / a.heads;
  if (a.q_proj != nullptr)
    q_vector_serial(a.q_proj + vec * kIndexerDim, a.rope + token * kRopeDim, a.hadamard, a.format,
                    a.out.codes + vec * code_bytes(a.format), a.out.scales + vec * kIndexerScaleBytes,
                    a.out.values != nullptr ? a.out.values + vec * kIndexerDim : nullptr);
  head_weight(a, vec);
}

template <IndexerFormat F>
__global__ void __launch_bounds__(kThreads) q_path_v2(const QPathArgs a) {
  constexpr int kFirstRope = kIndexerDim - kRopeDim;
  const int64_t vec = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
  if (vec >= a.vectors) return;  // whole warps leave together: a warp is one vector
  const int lane = threadIdx.x % 32;
  if (a.q_proj == nullptr) {  // the head weights only
    if (lane == 0) head_weight(a, vec);
    return;
  }
  const int c0 = 4 * lane;
  const int64_t token = vec / a.heads;

  const uint2 raw = *reinterpret_cast<const uint2*>(a.q_proj + vec * kIndexerDim + c0);
  float y[4] = {bf16_value(static_cast<uint16_t>(raw.x & 0xffff)), bf16_value(static_cast<uint16_t>(raw.x >> 16)),
                bf16_value(static_cast<uint16_t>(raw.y & 0xffff)), bf16_value(static_cast<uint16_t>(raw.y >> 16))};
  if (c0 >= kFirstRope) {  // pairs (c0 - 64) / 2 and the next: this lane's own 4 channels
    const float4 cs = *reinterpret_cast<const float4*>(a.rope + token * kRopeDim + (c0 - kFirstRope));
    const float a0 = y[0], b0 = y[1], a1 = y[2], b1 = y[3];
    y[0] = rope_re(a0, b0, cs.x, cs.y);
    y[1] = rope_im(a0, b0, cs.x, cs.y);
    y[2] = rope_re(a1, b1, cs.z, cs.w);
    y[3] = rope_im(a1, b1, cs.z, cs.w);
  }
  if (a.hadamard) {
    double v[4] = {y[0], y[1], y[2], y[3]};
    hadamard128_warp(v);
    const double scale = 1.0 / sqrt(static_cast<double>(kIndexerDim));
#pragma unroll
    for (int i = 0; i < 4; ++i) y[i] = bf16_round(static_cast<float>(v[i] * scale));
  }
  float amax = 0;  // NaN never compares greater: skipped, as in the oracle
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (fabsf(y[i]) > amax) amax = fabsf(y[i]);
  constexpr bool kFp4 = F == IndexerFormat::fp4;
  amax = group_max < kFp4 ? 8 : 32 > (amax);  // 8 lanes = 32 dims = one FP4 block; the warp = one FP8 block
  const int e =
      kFp4 ? ue8m0_ceil_exponent(amax, kFp4AmaxFloor, kFp4Max) : ue8m0_ceil_exponent(amax, kFp8AmaxFloor, kFp8Max);
  uint32_t codes = 0;
  uint16_t values[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float q = kFp4 ? fake_quant_fp4(y[i], e) : fake_quant_fp8(y[i], e);
    values[i] = bf16_bits(q);
    const float element = q != q ? (kFp4 ? kFp4Max : q) : q * pow2f(-e);  // as q_vector_serial
    codes |= static_cast<uint32_t>(kFp4 ? e2m1_code(element) : e4m3_code(element)) << (i * (kFp4 ? 4 : 8));
  }
  if constexpr (kFp4) {
    *reinterpret_cast<uint16_t*>(a.out.codes + vec * code_bytes(F) + 2 * lane) = static_cast<uint16_t>(codes);
    if (lane % 8 == 0) a.out.scales[vec * kIndexerScaleBytes + lane / 8] = ue8m0_code(e);
  } else {
    *reinterpret_cast<uint32_t*>(a.out.codes + vec * code_bytes(F) + 4 * lane) = codes;
    if (lane == 0) *reinterpret_cast<uint32_t*>(a.out.scales + vec * kIndexerScaleBytes) = ue8m0_code(e);
  }
  if (a.out.values != nullptr) {
    uint2 packed;
    packed.x = static_cast<uint32_t>(values[0]) | (static_cast<uint32_t>(values[1]) << 16);
    packed.y = static_cast<uint32_t>(values[2]) | (static_cast<uint32_t>(values[3]) << 16);
    *reinterpret_cast<uint2*>(a.out.values + vec * kIndexerDim + c0) = packed;
  }
  if (lane == 0) head_weight(a, vec);
}

}  // namespace

void indexer_q(const IndexerQParams& p, int64_t s, const uint16_t* q_proj, const float* rope,
               const uint16_t* weights_proj, const IndexerQOut& out, Variant v, cudaStream_t stream) {
  detail::require(p.heads >= 1, "indexer_q: heads must be >= 1, got " + std::to_string(p.heads));
  detail::require(s >= 0, "indexer_q: s must be >= 0, got " + std::to_string(s));
  detail::require_variant(v == Variant::v1 || v == Variant::v2, v, "indexer_q", "v1, v2");
  if (s == 0) return;
  detail::require(q_proj != nullptr || weights_proj != nullptr,
                  "indexer_q: q_proj and weights_proj are both nullptr: nothing to compute");
  detail::require(q_proj == nullptr || (rope && out.codes && out.scales),
                  "indexer_q: with q_proj, rope, out.codes and out.scales must be device pointers, got a nullptr");
  detail::require(weights_proj == nullptr || out.weights != nullptr,
                  "indexer_q: weights_proj is given but out.weights is nullptr");
  const QPathArgs a{s * p.heads, p.heads, p.format, p.hadamard, p.weight_multiplier, q_proj, rope, weights_proj, out};
  if (v == Variant::v1) {
    q_path_v1<<<detail::grid_blocks(a.vectors, kThreads, "indexer_q"), kThreads, 0, stream>>>(a);
  } else {
    const unsigned blocks = detail::grid_blocks(a.vectors, kThreads / 32, "indexer_q");
    if (p.format == IndexerFormat::fp4)
      q_path_v2<IndexerFormat::fp4><<<blocks, kThreads, 0, stream>>>(a);
    else
      q_path_v2<IndexerFormat::fp8><<<blocks, kThreads, 0, stream>>>(a);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
