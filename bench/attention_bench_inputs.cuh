#pragma once
// Inputs of the attention benchmarks, made on the GPU (bench/cuda_attention_bench.cu and the
// export for the Python FlashMLA / PyTorch script, bench/cuda_attention_export.cu use the same).
//
// Decode (FlashMLA's MODEL1 decode interface): `batch` sequences, each with its own window page
// (page_size 256, its 128 window tokens in slots 0..127) and its own `extra_tokens` compressed
// tokens (pages of 64); every query token's window list is its sequence's 128 tokens, its extra
// list `extra_topk` distinct tokens of its sequence (a different set per query token). Every token
// holds valid MODEL1 bytes: random e4m3 codes (no NaN code), UE8M0 scale bytes 112..124 (scales
// 2^-15..2^-3), random bf16 rope dims of magnitude 2^-8..2^1.
// Prefill (flash_mla_sparse_fwd): q [s_q, h, 512], kv [s_kv, 512] bf16 random, indices [s_q, topk]
// distinct rows (a + k * b mod s_kv with b odd and s_kv a power of two).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/model1_codec.cuh"
#include "cuda/attention/sparse_mqa_api.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"

namespace dsv4::bench {

using cuda::DeviceBuffer;
namespace attn = cuda::attention;

inline constexpr int kWindowPage = 256;
inline constexpr int kWindowTokens = 128;
inline constexpr int kExtraPage = 64;

__host__ __device__ inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A random bf16 of magnitude 2^-8 .. 2^1 with a random sign.
__device__ inline uint16_t random_bf16(uint64_t r) {
  const uint32_t sign = static_cast<uint32_t>(r & 1u) << 15;
  const uint32_t exponent = 119u + static_cast<uint32_t>((r >> 1) % 10u);  // 2^-8 .. 2^1
  const uint32_t mantissa = static_cast<uint32_t>((r >> 8) & 0x7Fu);
  return static_cast<uint16_t>(sign | (exponent << 7) | mantissa);
}

__global__ void fill_bf16_kernel(uint16_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = random_bf16(mix64(static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + seed));
}

// Every byte of a MODEL1 pool of `pages` pages: valid tokens everywhere (page padding 0).
__global__ void fill_model1_kernel(uint8_t* pool, int64_t pages, int page_size, uint64_t seed) {
  const int64_t page_bytes = attn::model1_page_bytes(page_size);
  const int64_t total = pages * page_bytes;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t in_page = i % page_bytes;
    const uint64_t r = mix64(static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + seed);
    uint8_t b = 0;
    if (in_page < int64_t{page_size} * attn::kModel1TokenDataBytes) {
      const int64_t in_token = in_page % attn::kModel1TokenDataBytes;
      if (in_token < attn::kModel1NopeDims) {
        b = static_cast<uint8_t>(r);
        if ((b & 0x7F) == 0x7F) b &= 0xFE;  // no NaN code
      } else {                              // rope dims: bytes of a random bf16, little-endian
        const int64_t pair = (i - (in_token - attn::kModel1NopeDims) % 2);
        const uint16_t v = random_bf16(mix64(static_cast<uint64_t>(pair) * 0x9E3779B97F4A7C15ull + seed + 1));
        b = static_cast<uint8_t>((in_token - attn::kModel1NopeDims) % 2 ? v >> 8 : v & 0xFF);
      }
    } else if (in_page < int64_t{page_size} * 584) {
      const int64_t in_scales =
          (in_page - int64_t{page_size} * attn::kModel1TokenDataBytes) % attn::kModel1TokenScaleBytes;
      b = in_scales < 7 ? static_cast<uint8_t>(112 + r % 13) : 0;
    }
    pool[i] = b;
  }
}

// Decode index lists: window [rows, 128] = the sequence's window page, extra [rows, extra_topk] =
// distinct tokens of its extra range (a + k * b mod extra_tokens, b odd, extra_tokens a power of 2).
__global__ void decode_indices_kernel(int32_t* window, int32_t* extra, int64_t rows, int s_q, int extra_topk,
                                      int extra_tokens, uint64_t seed) {
  const int64_t row = blockIdx.x;
  if (row >= rows) return;
  const int64_t b = row / s_q;
  const uint64_t r = mix64(static_cast<uint64_t>(row) + seed);
  const uint32_t start = static_cast<uint32_t>(r % static_cast<uint64_t>(extra_tokens));
  const uint32_t stride = static_cast<uint32_t>((r >> 32) % static_cast<uint64_t>(extra_tokens)) | 1u;
  for (int k = threadIdx.x; k < kWindowTokens; k += blockDim.x)
    window[row * kWindowTokens + k] = static_cast<int32_t>(b * kWindowPage + k);
  for (int k = threadIdx.x; k < extra_topk; k += blockDim.x)
    extra[row * extra_topk + k] = static_cast<int32_t>(b * extra_tokens + (start + static_cast<uint64_t>(k) * stride) %
                                                                              static_cast<uint32_t>(extra_tokens));
}

__global__ void prefill_indices_kernel(int32_t* idx, int64_t rows, int topk, int64_t s_kv, uint64_t seed) {
  const int64_t row = blockIdx.x;
  if (row >= rows) return;
  const uint64_t r = mix64(static_cast<uint64_t>(row) + seed);
  const uint64_t start = r % static_cast<uint64_t>(s_kv);
  const uint64_t stride = ((r >> 32) % static_cast<uint64_t>(s_kv)) | 1u;
  for (int k = threadIdx.x; k < topk; k += blockDim.x)
    idx[row * topk + k] =
        static_cast<int32_t>((start + static_cast<uint64_t>(k) * stride) % static_cast<uint64_t>(s_kv));
}

__global__ void fill_sink_kernel(float* sink, int n, uint64_t seed) {
  const int h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h < n) sink[h] = static_cast<float>(static_cast<int64_t>(mix64(seed + h) % 2001) - 1000) * 1e-3f;  // [-1, 1]
}

struct DecodeShape {
  const char* name;
  int n_heads, extra_topk, extra_tokens;
  int batch, s_q;
  int64_t rows() const { return int64_t{batch} * s_q; }
  int topk() const { return kWindowTokens; }
};

// One decode problem on the device, outputs included.
struct DecodeInputs {
  DecodeShape shape;
  DeviceBuffer<uint16_t> q;
  DeviceBuffer<uint8_t> window_pool, extra_pool;
  DeviceBuffer<int32_t> window_idx, extra_idx;
  DeviceBuffer<float> sink;
  DeviceBuffer<uint16_t> out;
  DeviceBuffer<float> lse;

  explicit DecodeInputs(const DecodeShape& s)
      : shape(s),
        q(static_cast<size_t>(s.rows() * s.n_heads * attn::kHeadDim)),
        window_pool(static_cast<size_t>(s.batch * attn::model1_page_bytes(kWindowPage))),
        extra_pool(
            static_cast<size_t>(int64_t{s.batch} * s.extra_tokens / kExtraPage * attn::model1_page_bytes(kExtraPage))),
        window_idx(static_cast<size_t>(s.rows() * kWindowTokens)),
        extra_idx(static_cast<size_t>(s.rows() * s.extra_topk)),
        sink(static_cast<size_t>(s.n_heads)),
        out(q.size()),
        lse(static_cast<size_t>(s.rows() * s.n_heads)) {
    fill_bf16_kernel<<<1024, 256>>>(q.get(), static_cast<int64_t>(q.size()), 11);
    fill_model1_kernel<<<2048, 256>>>(window_pool.get(), s.batch, kWindowPage, 12);
    fill_model1_kernel<<<2048, 256>>>(extra_pool.get(), int64_t{s.batch} * s.extra_tokens / kExtraPage, kExtraPage, 13);
    decode_indices_kernel<<<static_cast<unsigned>(s.rows()), 128>>>(window_idx.get(), extra_idx.get(), s.rows(), s.s_q,
                                                                    s.extra_topk, s.extra_tokens, 14);
    fill_sink_kernel<<<1, 128>>>(sink.get(), s.n_heads, 15);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  attn::DecodeArgs args(attn::Probs probs) const {
    attn::DecodeArgs a;
    a.batch = shape.batch;
    a.s_q = shape.s_q;
    a.n_heads = shape.n_heads;
    a.q = q.get();
    a.pool = attn::PagedPool{window_pool.get(), kWindowPage, shape.batch};
    a.list = attn::IndexList{window_idx.get(), kWindowTokens, nullptr};
    a.extra_pool =
        attn::PagedPool{extra_pool.get(), kExtraPage, int64_t{shape.batch} * shape.extra_tokens / kExtraPage};
    a.extra_list = attn::IndexList{extra_idx.get(), shape.extra_topk, nullptr};
    a.sink = sink.get();
    a.softmax_scale = 0.044194173824159216f;
    a.probs = probs;
    a.out = out.get();
    a.lse = lse.get();
    return a;
  }

  // FlashMLA's count: 2 h (d_qk + d_v) per attended key; every slot here is valid.
  double flops() const {
    return 2.0 * shape.n_heads * (512 + 512) * static_cast<double>(shape.rows()) * (kWindowTokens + shape.extra_topk);
  }
  // Bytes that must move: q, every distinct token's 584 bytes once (the two query tokens of a
  // sequence share the window; their extra sets are drawn independently), indices, out, lse.
  double bytes() const {
    const double extra_unique_per_seq =
        s_unique(static_cast<double>(shape.extra_tokens), static_cast<double>(shape.extra_topk), shape.s_q);
    const double tokens = static_cast<double>(shape.batch) * (kWindowTokens + extra_unique_per_seq);
    return static_cast<double>(q.size()) * 2 * 2 + tokens * 584 +
           static_cast<double>(shape.rows()) * (kWindowTokens + shape.extra_topk) * 4 +
           static_cast<double>(lse.size()) * 4;
  }
  // Expected distinct tokens when s_q independent k-subsets of n are drawn: n (1 - (1 - k/n)^s_q).
  static double s_unique(double n, double k, int s_q) {
    double miss = 1;
    for (int i = 0; i < s_q; ++i) miss *= 1 - k / n;
    return n * (1 - miss);
  }
};

struct PrefillShape {
  const char* name;
  int n_heads, topk;
  int64_t s_kv;
  int s_q;
};

struct PrefillInputs {
  PrefillShape shape;
  DeviceBuffer<uint16_t> q, kv;
  DeviceBuffer<int32_t> idx;
  DeviceBuffer<float> sink;
  DeviceBuffer<uint16_t> out;
  DeviceBuffer<float> lse, max_logits;

  explicit PrefillInputs(const PrefillShape& s)
      : shape(s),
        q(static_cast<size_t>(int64_t{s.s_q} * s.n_heads * attn::kHeadDim)),
        kv(static_cast<size_t>(s.s_kv * attn::kHeadDim)),
        idx(static_cast<size_t>(int64_t{s.s_q} * s.topk)),
        sink(static_cast<size_t>(s.n_heads)),
        out(q.size()),
        lse(static_cast<size_t>(int64_t{s.s_q} * s.n_heads)),
        max_logits(lse.size()) {
    fill_bf16_kernel<<<1024, 256>>>(q.get(), static_cast<int64_t>(q.size()), 21);
    fill_bf16_kernel<<<1024, 256>>>(kv.get(), static_cast<int64_t>(kv.size()), 22);
    prefill_indices_kernel<<<static_cast<unsigned>(s.s_q), 128>>>(idx.get(), s.s_q, s.topk, s.s_kv, 23);
    fill_sink_kernel<<<1, 128>>>(sink.get(), s.n_heads, 24);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  attn::PrefillArgs args(attn::Probs probs) const {
    attn::PrefillArgs a;
    a.s_q = shape.s_q;
    a.n_heads = shape.n_heads;
    a.head_dim = attn::kHeadDim;
    a.s_kv = shape.s_kv;
    a.q = q.get();
    a.kv = kv.get();
    a.list = attn::IndexList{idx.get(), shape.topk, nullptr};
    a.sink = sink.get();
    a.softmax_scale = 0.044194173824159216f;
    a.probs = probs;
    a.out = out.get();
    a.lse = lse.get();
    a.max_logits = max_logits.get();
    return a;
  }

  double flops() const { return 2.0 * shape.n_heads * 1024 * static_cast<double>(shape.s_q) * shape.topk; }
  // FlashMLA's prefill count: every valid index's bf16 row (2 bytes x 512) once per query, q and out.
  double bytes() const {
    return static_cast<double>(shape.s_q) * shape.topk * 512 * 2 + static_cast<double>(q.size()) * 2 * 2;
  }
};

}  // namespace dsv4::bench
