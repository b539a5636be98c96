// Ratio-128 (HCA) compressor with DeepSeek's stored state: tuned prefill and decode kernels and the
// entry points.
//
// Tuned: a 512-thread block = 4 slabs of 128 threads. Every slab holds the same 512/d entries with
// the entry-slab layout of postprocess_fused.cuh (4 channels a thread) and pools a quarter of the
// 128 rows (slab g: rows 32g .. 32g+31) in 8 chunks of 4 rows with a running max (16-byte loads,
// 12 in flight a thread; at most 64 registers so that two blocks share an SM and one block's merge
// overlaps the other's loads); the 4 partial (max, sum e, sum kv e) are merged in slab order
// through shared memory, then slab 0 post-processes. Prefill and decode run the same pooling code.
#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/compressor/compressor_api.h"
#include "cuda/compressor/launch_checks.h"
#include "cuda/compressor/pooling.cuh"
#include "cuda/compressor/postprocess_fused.cuh"
#include "cuda/compressor/row_source.cuh"
#include "cuda/compressor/simple_kernels.h"

namespace dsv4::cuda {
namespace {

constexpr int kSlab = 128;
constexpr int kSlabs = 4;
constexpr int kThreads = kSlab * kSlabs;
constexpr int kRowsPerSlab = 128 / kSlabs;
constexpr int kChunk = 4;

struct alignas(16) MergeSmem {
  float m[kSlabs][kSlab][4];
  float den[kSlabs][kSlab][4];
  float num[kSlabs][kSlab][4];
  double sums[kThreads / 32];
};

// Merges the slabs' running pools; returns the pooled values of this thread's 4 channels (meaningful
// in slab 0). Every thread of the block must call it.
__device__ inline void merge_slabs(const RunningPool& rp, MergeSmem& sm, float (&p)[4]) {
  const int g = threadIdx.x / kSlab, i = threadIdx.x % kSlab;
  // 16-byte stores by consecutive threads: no bank conflicts.
  *reinterpret_cast<float4*>(sm.m[g][i]) = make_float4(rp.m[0], rp.m[1], rp.m[2], rp.m[3]);
  *reinterpret_cast<float4*>(sm.den[g][i]) = make_float4(rp.den[0], rp.den[1], rp.den[2], rp.den[3]);
  *reinterpret_cast<float4*>(sm.num[g][i]) = make_float4(rp.num[0], rp.num[1], rp.num[2], rp.num[3]);
  __syncthreads();
  if (g == 0) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float m = sm.m[0][i][k];
#pragma unroll
      for (int s = 1; s < kSlabs; ++s) m = fmaxf(m, sm.m[s][i][k]);
      float den = 0, num = 0;
#pragma unroll
      for (int s = 0; s < kSlabs; ++s) {
        const float w = expf(sm.m[s][i][k] - m);
        den = fmaf(sm.den[s][i][k], w, den);
        num = fmaf(sm.num[s][i][k], w, num);
      }
      p[k] = num / den;
    }
  }
}

template <int D, Kind K>
__global__ void __launch_bounds__(kThreads, 2) c128_prefill_tuned(const EntryDesc* __restrict__ items, int64_t n_items,
                                                               const float* __restrict__ kv,
                                                               const float* __restrict__ score,
                                                               const float* __restrict__ ape,
                                                               const float* __restrict__ state_kv,
                                                               const float* __restrict__ state_score,
                                                               const float* __restrict__ norm, double eps,
                                                               const float* __restrict__ rope,
                                                               uint16_t* __restrict__ entries,
                                                               float* __restrict__ pooled) {
  constexpr int kPerBlock = kSlab / (D / 4);
  __shared__ MergeSmem sm;
  const int g = threadIdx.x / kSlab;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kPerBlock + (threadIdx.x % kSlab) / (D / 4);
  const int c = 4 * (threadIdx.x % (D / 4));
  RunningPool rp;
  int64_t j = 0;
  if (item < n_items) {
    const EntryDesc e = items[item];
    const ChunkDesc ch = e.chunk;
    j = e.entry;
    const float* skv = state_kv + ch.state_index * (128LL * D);
    const float* sscore = state_score + ch.state_index * (128LL * D);
    if (128 * j >= ch.start_pos) {  // the whole block is this call's input: consecutive rows
      const int64_t row0 = ch.first_row + (128 * j - ch.start_pos) + g * kRowsPerSlab;
      const float* kv0 = kv + row0 * D + c;
      const float* sc0 = score + row0 * D + c;
      const float* ape0 = ape + g * kRowsPerSlab * D + c;
#pragma unroll 1
      for (int k = 0; k < kRowsPerSlab / kChunk; ++k) {
        float4 wkv[kChunk], ws[kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; ++i) {
          wkv[i] = load4_stream(kv0 + (k * kChunk + i) * D);
          ws[i] = load4_stream(sc0 + (k * kChunk + i) * D);
        }
#pragma unroll
        for (int i = 0; i < kChunk; ++i) ws[i] = add4(ws[i], load4(ape0 + (k * kChunk + i) * D));
        rp.add_chunk<kChunk>(wkv, ws);
      }
    } else {
#pragma unroll 1
      for (int k = 0; k < kRowsPerSlab / kChunk; ++k) {
        float4 wkv[kChunk], ws[kChunk], wape[kChunk];
        bool gate[kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; ++i) {
          const int slot = g * kRowsPerSlab + k * kChunk + i;
          const RowRef row = token_row(ch, 128, 128 * j + slot, kv, score, skv, sscore, D);
          gate[i] = row.from_input;
          wkv[i] = load4(row.kv + c);
          ws[i] = load4(row.score + c);
          wape[i] = load4(ape + slot * D + c);
        }
#pragma unroll
        for (int i = 0; i < kChunk; ++i)
          if (gate[i]) ws[i] = add4(ws[i], wape[i]);
        rp.add_chunk<kChunk>(wkv, ws);
      }
    }
  }
  float p[4] = {0, 0, 0, 0};
  merge_slabs(rp, sm, p);
  const bool writes = g == 0 && item < n_items;
  if (writes && pooled != nullptr) store4(pooled + item * D + c, make_float4(p[0], p[1], p[2], p[3]));
  postprocess_fused<D, K>(p, j, norm, eps, rope, writes ? entries + item * D : nullptr, sm.sums);
}

// One decode token per sequence: the slab that pools its row writes it (row t mod 128, thread's
// own columns), so no thread reads what another writes; on the block's last token all slabs pool
// the state rows exactly as the prefill pools them.
template <int D, Kind K>
__global__ void __launch_bounds__(kThreads, 2) c128_decode_tuned(int batch, const int64_t* __restrict__ positions,
                                                              const int32_t* __restrict__ state_index,
                                                              const float* __restrict__ kv,
                                                              const float* __restrict__ score,
                                                              const float* __restrict__ ape, float* state_kv,
                                                              float* state_score, const float* __restrict__ norm,
                                                              double eps, const float* __restrict__ rope,
                                                              uint16_t* __restrict__ entries,
                                                              float* __restrict__ pooled) {
  constexpr int kPerBlock = kSlab / (D / 4);
  __shared__ MergeSmem sm;
  const int g = threadIdx.x / kSlab;
  const int b = blockIdx.x * kPerBlock + (threadIdx.x % kSlab) / (D / 4);
  const int c = 4 * (threadIdx.x % (D / 4));
  RunningPool rp;
  int64_t pos = 0;
  bool emits = false;
  if (b < batch) {
    pos = positions[b];
    const int slot = static_cast<int>(pos % 128);
    float* skv = state_kv + state_index[b] * (128LL * D);
    float* sscore = state_score + state_index[b] * (128LL * D);
    if (slot / kRowsPerSlab == g) {
      store4(skv + slot * D + c, load4(kv + static_cast<int64_t>(b) * D + c));
      store4(sscore + slot * D + c, add4(load4(score + static_cast<int64_t>(b) * D + c), load4(ape + slot * D + c)));
    }
    emits = slot == 127;
    if (emits) {
#pragma unroll 1
      for (int k = 0; k < kRowsPerSlab / kChunk; ++k) {
        float4 wkv[kChunk], ws[kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; ++i) {
          const int row = g * kRowsPerSlab + k * kChunk + i;
          wkv[i] = *reinterpret_cast<const float4*>(skv + row * D + c);
          ws[i] = *reinterpret_cast<const float4*>(sscore + row * D + c);
        }
        rp.add_chunk<kChunk>(wkv, ws);
      }
    }
  }
  float p[4] = {0, 0, 0, 0};
  merge_slabs(rp, sm, p);
  const bool writes = g == 0 && emits;
  if (writes && pooled != nullptr) store4(pooled + static_cast<int64_t>(b) * D + c, make_float4(p[0], p[1], p[2], p[3]));
  postprocess_fused<D, K>(p, pos / 128, norm, eps, rope, writes ? entries + static_cast<int64_t>(b) * D : nullptr,
                          sm.sums);
}

template <int D>
void launch_prefill(const CompressorParams& p, const BatchPlan& plan, const float* kv, const float* score,
                    const float* state_kv, const float* state_score, uint16_t* entries, float* pooled,
                    cudaStream_t stream) {
  constexpr int kPerBlock = kSlab / (D / 4);
  const int64_t blocks = (plan.n_entries() + kPerBlock - 1) / kPerBlock;
  c128_prefill_tuned<D, Kind::main><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      plan.device_items(), plan.n_entries(), kv, score, p.ape, state_kv, state_score, p.norm,
      p.norm_eps, p.rope, entries, pooled);
  CUDA_CHECK_LAUNCH();
}

template <int D>
void launch_decode(const CompressorParams& p, const DecodePlan& plan, const float* kv, const float* score,
                   float* state_kv, float* state_score, uint16_t* entries, float* pooled, cudaStream_t stream) {
  constexpr int kPerBlock = kSlab / (D / 4);
  const int blocks = (plan.batch() + kPerBlock - 1) / kPerBlock;
  c128_decode_tuned<D, Kind::main><<<blocks, kThreads, 0, stream>>>(
      plan.batch(), plan.device_positions(), plan.device_state_index(), kv, score, p.ape, state_kv, state_score,
      p.norm, p.norm_eps, p.rope, entries, pooled);
  CUDA_CHECK_LAUNCH();
}

void require_main(const CompressorParams& p, const char* who) {
  detail::require(p.kind == Kind::main, std::string(who) + ": ratio 128 has only the main kind (FP8 nope)");
}

}  // namespace

void c128_prefill(const CompressorParams& p, const BatchPlan& plan, const float* kv, const float* score,
                  float* state_kv, float* state_score, uint16_t* entries, float* pooled, Variant v,
                  cudaStream_t stream) {
  detail::check_params(p, 128, plan.ratio(), plan.max_entry(), "c128_prefill");
  require_main(p, "c128_prefill");
  if (plan.n_entries() > 0) {
    if (v == Variant::simple) {
      detail::ScratchFloats scratch(pooled ? 0 : plan.n_entries() * p.head_dim, stream);
      float* pool_out = pooled ? pooled : scratch.get();
      detail::simple_pool_prefill(p, plan, kv, score, state_kv, state_score, pool_out, stream);
      detail::simple_postprocess(p, plan, pool_out, entries, stream);
    } else if (p.head_dim == 512) {
      launch_prefill<512>(p, plan, kv, score, state_kv, state_score, entries, pooled, stream);
    } else {
      launch_prefill<128>(p, plan, kv, score, state_kv, state_score, entries, pooled, stream);
    }
  }
  detail::state_write_pass(p, plan, kv, score, state_kv, state_score, stream);
}

void c128_decode(const CompressorParams& p, const DecodePlan& plan, const float* kv, const float* score,
                 float* state_kv, float* state_score, uint16_t* entries, float* pooled, Variant v,
                 cudaStream_t stream) {
  detail::check_params(p, 128, plan.ratio(), plan.max_entry(), "c128_decode");
  require_main(p, "c128_decode");
  if (plan.batch() == 0) return;
  if (v == Variant::simple) {
    detail::ScratchFloats scratch(pooled ? 0 : static_cast<size_t>(plan.batch()) * p.head_dim, stream);
    float* pool_out = pooled ? pooled : scratch.get();
    detail::simple_decode_pool(p, plan, kv, score, state_kv, state_score, pool_out, stream);
    detail::simple_postprocess(p, plan, pool_out, entries, stream);
  } else if (p.head_dim == 512) {
    launch_decode<512>(p, plan, kv, score, state_kv, state_score, entries, pooled, stream);
  } else {
    launch_decode<128>(p, plan, kv, score, state_kv, state_score, entries, pooled, stream);
  }
}

}  // namespace dsv4::cuda
