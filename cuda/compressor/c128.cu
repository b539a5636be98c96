// Ratio-128 (HCA) compressor with DeepSeek's stored state: the v3 prefill and decode kernels and
// the entry points.
//
// v3: a 512-thread block = 4 slabs of 128 threads. Every slab holds the same 512/d entries with
// the entry-slab layout of postprocess_fused.cuh (4 channels a thread) and pools a quarter of the
// 128 rows (slab g: rows 32g .. 32g+31) in 8 chunks of 4 rows with a running max (16-byte loads,
// 12 in flight a thread; at most 64 registers so that two blocks share an SM and one block's merge
// overlaps the other's loads); the 4 partial (max, sum e, sum kv e) are merged in slab order
// through shared memory, then slab 0 post-processes. Prefill and decode run the same pooling code.
#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/compressor/compressor_api.h"
#include "cuda/compressor/kernel_args.h"
#include "cuda/compressor/param_checks.h"
#include "cuda/compressor/pooling.cuh"
#include "cuda/compressor/postprocess_fused.cuh"
#include "cuda/compressor/rows.cuh"
#include "cuda/compressor/v1_kernels.h"

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

// Pools this slab's kRowsPerSlab rows in chunks of kChunk rows with the running softmax;
// load_chunk(first, wkv, ws) gives the kChunk rows from slab row `first` on (logits gated).
template <class LoadChunk>
__device__ inline void pool_slab_rows(RunningPool& rp, LoadChunk load_chunk) {
#pragma unroll 1
  for (int k = 0; k < kRowsPerSlab / kChunk; ++k) {
    float4 wkv[kChunk], ws[kChunk];
    load_chunk(k * kChunk, wkv, ws);
    rp.add_chunk<kChunk>(wkv, ws);
  }
}

template <int D, Kind K>
__global__ void __launch_bounds__(kThreads, 2) c128_prefill_v3(const CompressorArgs a) {
  __shared__ MergeSmem sm;
  const int g = threadIdx.x / kSlab;
  const int64_t item = slab_row<D, kSlab>();
  const int c = slab_channel<D>();
  RunningPool rp;
  int64_t j = 0;
  if (item < a.n_items) {
    const EntryDesc e = a.items[item];
    const ChunkDesc ch = e.chunk;
    j = e.entry;
    if (128 * j >= ch.start_pos) {  // the whole block is this call's input: consecutive rows
      const int64_t row0 = ch.first_row + (128 * j - ch.start_pos) + g * kRowsPerSlab;
      const float* kv0 = a.kv + row0 * D + c;
      const float* sc0 = a.score + row0 * D + c;
      const float* ape0 = a.ape + g * kRowsPerSlab * D + c;
      pool_slab_rows(rp, [&](int first, float4(&wkv)[kChunk], float4(&ws)[kChunk]) {
#pragma unroll
        for (int i = 0; i < kChunk; ++i) {
          wkv[i] = load4_stream(kv0 + (first + i) * D);
          ws[i] = load4_stream(sc0 + (first + i) * D);
        }
#pragma unroll
        for (int i = 0; i < kChunk; ++i) ws[i] = add4(ws[i], load4(ape0 + (first + i) * D));
      });
    } else {
      const float* skv = sequence_state<const float>(a.state_kv, ch.state_index, 128LL * D);
      const float* sscore = sequence_state<const float>(a.state_score, ch.state_index, 128LL * D);
      pool_slab_rows(rp, [&](int first, float4(&wkv)[kChunk], float4(&ws)[kChunk]) {
        float4 wape[kChunk];
        bool gate[kChunk];
#pragma unroll
        for (int i = 0; i < kChunk; ++i) {
          const int slot = g * kRowsPerSlab + first + i;
          const RowRef row = token_row(ch, 128, 128 * j + slot, a.kv, a.score, skv, sscore, D);
          gate[i] = row.from_input;
          wkv[i] = load4(row.kv + c);
          ws[i] = load4(row.score + c);
          wape[i] = load4(a.ape + slot * D + c);
        }
#pragma unroll
        for (int i = 0; i < kChunk; ++i)
          if (gate[i]) ws[i] = add4(ws[i], wape[i]);
      });
    }
  }
  float p[4] = {0, 0, 0, 0};
  merge_slabs(rp, sm, p);
  const bool writes = g == 0 && item < a.n_items;
  if (writes && a.pooled != nullptr) store4(a.pooled + item * D + c, make_float4(p[0], p[1], p[2], p[3]));
  postprocess_fused<D, K>(p, j, a.norm, a.eps, a.rope, writes ? a.entries + item * D : nullptr, sm.sums);
}

// v3 decode, one token per sequence: the slab that pools its row writes it (row t mod 128, the
// thread's own columns), so no thread reads what another writes; on the block's last token all
// slabs pool the state rows exactly as the prefill pools them.
template <int D, Kind K>
__global__ void __launch_bounds__(kThreads, 2) c128_decode_v3(const CompressorArgs a) {
  __shared__ MergeSmem sm;
  const int g = threadIdx.x / kSlab;
  const int64_t b = slab_row<D, kSlab>();
  const int c = slab_channel<D>();
  RunningPool rp;
  int64_t pos = 0;
  bool emits = false;
  if (b < a.batch) {
    pos = a.positions[b];
    const int slot = static_cast<int>(pos % 128);
    float* skv = sequence_state(a.state_kv, a.state_index[b], 128LL * D);
    float* sscore = sequence_state(a.state_score, a.state_index[b], 128LL * D);
    if (slot / kRowsPerSlab == g) write_token_row(a, skv, sscore, b, slot, slot, c, D);
    emits = slot == 127;
    if (emits)
      pool_slab_rows(rp, [&](int first, float4(&wkv)[kChunk], float4(&ws)[kChunk]) {
#pragma unroll
        for (int i = 0; i < kChunk; ++i) {
          const int row = g * kRowsPerSlab + first + i;
          wkv[i] = load4_plain(skv + row * D + c);
          ws[i] = load4_plain(sscore + row * D + c);
        }
      });
  }
  float p[4] = {0, 0, 0, 0};
  merge_slabs(rp, sm, p);
  const bool writes = g == 0 && emits;
  if (writes && a.pooled != nullptr) store4(a.pooled + b * D + c, make_float4(p[0], p[1], p[2], p[3]));
  postprocess_fused<D, K>(p, pos / 128, a.norm, a.eps, a.rope, writes ? a.entries + b * D : nullptr, sm.sums);
}

template <int D>
void launch_prefill(const CompressorArgs& a, cudaStream_t stream) {
  const unsigned blocks = detail::grid_blocks(a.n_items, kSlab / (D / 4), "c128_prefill");
  c128_prefill_v3<D, Kind::main><<<blocks, kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

template <int D>
void launch_decode(const CompressorArgs& a, cudaStream_t stream) {
  const unsigned blocks = detail::grid_blocks(a.batch, kSlab / (D / 4), "c128_decode");
  c128_decode_v3<D, Kind::main><<<blocks, kThreads, 0, stream>>>(a);
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
  detail::require_variant(v == Variant::v1 || v == Variant::v3, v, "c128_prefill", "v1, v3");
  CompressorArgs a = prefill_args(p, plan, kv, score, state_kv, state_score, entries, pooled);
  if (plan.n_entries() > 0) {
    if (v == Variant::v1) {
      detail::ScratchFloats scratch(pooled ? 0 : plan.n_entries() * p.head_dim, stream);
      a.pooled = pooled ? pooled : scratch.get();
      detail::v1_pool_prefill(p, a, stream);
      detail::v1_postprocess_prefill(p, a, stream);
    } else if (p.head_dim == 512) {
      launch_prefill<512>(a, stream);
    } else {
      launch_prefill<128>(a, stream);
    }
  }
  detail::state_write_pass(p, a, stream);
}

void c128_decode(const CompressorParams& p, const DecodePlan& plan, const float* kv, const float* score,
                 float* state_kv, float* state_score, uint16_t* entries, float* pooled, Variant v,
                 cudaStream_t stream) {
  detail::check_params(p, 128, plan.ratio(), plan.max_entry(), "c128_decode");
  require_main(p, "c128_decode");
  detail::require_variant(v == Variant::v1 || v == Variant::v3, v, "c128_decode", "v1, v3");
  if (plan.batch() == 0) return;
  CompressorArgs a = decode_args(p, plan, kv, score, state_kv, state_score, entries, pooled);
  if (v == Variant::v1) {
    detail::ScratchFloats scratch(pooled ? 0 : static_cast<size_t>(plan.batch()) * p.head_dim, stream);
    a.pooled = pooled ? pooled : scratch.get();
    detail::v1_decode_pool(p, a, stream);
    detail::v1_postprocess_decode(p, a, stream);
  } else if (p.head_dim == 512) {
    launch_decode<512>(a, stream);
  } else {
    launch_decode<128>(a, stream);
  }
}

}  // namespace dsv4::cuda
