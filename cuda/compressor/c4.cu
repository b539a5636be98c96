// Ratio-4 (CSA, overlap) compressor: tuned prefill and decode kernels and the entry points.
//
// Tuned prefill (v2 c4_prefill_tuned, v3 c4_prefill_v3): one 128-thread block per entry (d = 512) or per 4 entries (d = 128); a thread owns
// 4 channels and loads its 8 window rows of kv and logits as 16 independent 16-byte loads before
// the first use, pools them (pooling.cuh) and runs the fused post-processing
// (postprocess_fused.cuh). The state is read here and written by the separate write pass, so no
// block reads what another writes.
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

constexpr int kThreads = 128;

template <int D, Kind K>
__global__ void __launch_bounds__(kThreads) c4_prefill_tuned(const EntryDesc* __restrict__ items, int64_t n_items,
                                                             const float* __restrict__ kv,
                                                             const float* __restrict__ score,
                                                             const float* __restrict__ ape,
                                                             const float* __restrict__ state_kv,
                                                             const float* __restrict__ state_score,
                                                             const float* __restrict__ norm, double eps,
                                                             const float* __restrict__ rope,
                                                             uint16_t* __restrict__ entries,
                                                             float* __restrict__ pooled) {
  constexpr int kWidth = 2 * D;
  constexpr int kPerBlock = kThreads / (D / 4);
  __shared__ double smem[kThreads / 32];
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kPerBlock + threadIdx.x / (D / 4);
  const int c = 4 * (threadIdx.x % (D / 4));
  float p[4] = {0, 0, 0, 0};
  int64_t j = 0;
  if (item < n_items) {
    const EntryDesc e = items[item];
    const ChunkDesc ch = e.chunk;
    j = e.entry;
    const float* skv = state_kv + ch.state_index * (8LL * kWidth);
    const float* sscore = state_score + ch.state_index * (8LL * kWidth);
    float4 wkv[8], ws[8], wape[8];
    bool gate[8];
    // Rows 0..3: tokens 4(j-1) .. 4j-1, channels [0, d); rows 4..7: tokens 4j .. 4j+3, channels [d, 2d).
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int64_t t = 4 * (j - 1) + i;
      const int col = i < 4 ? c : D + c;
      if (t < 0) {
        wkv[i] = make_float4(0, 0, 0, 0);
        ws[i] = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        wape[i] = make_float4(0, 0, 0, 0);
        gate[i] = false;
        continue;
      }
      const RowRef row = token_row(ch, 4, t, kv, score, skv, sscore, kWidth);
      gate[i] = row.from_input;
      wkv[i] = load4_stream(row.kv + col);
      ws[i] = load4_stream(row.score + col);
      wape[i] = load4(ape + (t % 4) * kWidth + col);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (gate[i]) ws[i] = add4(ws[i], wape[i]);
    const float4 out = pool_rows<8>(wkv, ws);
    p[0] = out.x, p[1] = out.y, p[2] = out.z, p[3] = out.w;
    if (pooled != nullptr) store4(pooled + item * D + c, out);
  }
  postprocess_fused<D, K>(p, j, norm, eps, rope, item < n_items ? entries + item * D : nullptr, smem);
}

// v3: as v2, plus a fast path for the common entry whose 8 rows are consecutive rows of this call's
// input (rows 4(j-1) .. 4j+3 all at or after start_pos): one base address, compile-time offsets
// and ape rows, instead of a per-row source lookup; and at most 96 registers (5 blocks per SM).
template <int D, Kind K>
__global__ void __launch_bounds__(kThreads, 5) c4_prefill_v3(const EntryDesc* __restrict__ items, int64_t n_items,
                                                             const float* __restrict__ kv,
                                                             const float* __restrict__ score,
                                                             const float* __restrict__ ape,
                                                             const float* __restrict__ state_kv,
                                                             const float* __restrict__ state_score,
                                                             const float* __restrict__ norm, double eps,
                                                             const float* __restrict__ rope,
                                                             uint16_t* __restrict__ entries,
                                                             float* __restrict__ pooled) {
  constexpr int kWidth = 2 * D;
  constexpr int kPerBlock = kThreads / (D / 4);
  __shared__ double smem[kThreads / 32];
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kPerBlock + threadIdx.x / (D / 4);
  const int c = 4 * (threadIdx.x % (D / 4));
  float p[4] = {0, 0, 0, 0};
  int64_t j = 0;
  if (item < n_items) {
    const EntryDesc e = items[item];
    const ChunkDesc ch = e.chunk;
    j = e.entry;
    float4 wkv[8], ws[8];
    const int64_t t0 = 4 * (j - 1);  // token of window row 0
    if (j >= 1 && t0 >= ch.start_pos) {
      const int64_t row0 = ch.first_row + (t0 - ch.start_pos);
      const float* kv0 = kv + row0 * kWidth + c;
      const float* sc0 = score + row0 * kWidth + c;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int off = i * kWidth + (i < 4 ? 0 : D);
        wkv[i] = load4_stream(kv0 + off);
        ws[i] = load4_stream(sc0 + off);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) ws[i] = add4(ws[i], load4(ape + (i % 4) * kWidth + (i < 4 ? 0 : D) + c));
    } else {
      const float* skv = state_kv + ch.state_index * (8LL * kWidth);
      const float* sscore = state_score + ch.state_index * (8LL * kWidth);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int64_t t = t0 + i;
        const int col = i < 4 ? c : D + c;
        if (t < 0) {
          wkv[i] = make_float4(0, 0, 0, 0);
          ws[i] = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
          continue;
        }
        const RowRef row = token_row(ch, 4, t, kv, score, skv, sscore, kWidth);
        wkv[i] = load4(row.kv + col);
        ws[i] = load4(row.score + col);
        if (row.from_input) ws[i] = add4(ws[i], load4(ape + (t % 4) * kWidth + col));
      }
    }
    const float4 out = pool_rows<8>(wkv, ws);
    p[0] = out.x, p[1] = out.y, p[2] = out.z, p[3] = out.w;
    if (pooled != nullptr) store4(pooled + item * D + c, out);
  }
  postprocess_fused<D, K>(p, j, norm, eps, rope, item < n_items ? entries + item * D : nullptr, smem);
}

// One decode token per sequence: row 4 + t mod 4 of its state gets the token (both halves); when the
// block completes, the 8-row window is pooled exactly as the prefill pools it, rows [4, 8) are
// copied to [0, 4), and the entry is post-processed into output row b. A thread reads and writes only
// its own 4 columns of each half, so no thread reads what another writes.
template <int D, Kind K>
__global__ void __launch_bounds__(kThreads) c4_decode_tuned(int batch, const int64_t* __restrict__ positions,
                                                            const int32_t* __restrict__ state_index,
                                                            const float* __restrict__ kv,
                                                            const float* __restrict__ score,
                                                            const float* __restrict__ ape, float* state_kv,
                                                            float* state_score, const float* __restrict__ norm,
                                                            double eps, const float* __restrict__ rope,
                                                            uint16_t* __restrict__ entries,
                                                            float* __restrict__ pooled) {
  constexpr int kWidth = 2 * D;
  constexpr int kPerBlock = kThreads / (D / 4);
  __shared__ double smem[kThreads / 32];
  const int b = blockIdx.x * kPerBlock + threadIdx.x / (D / 4);
  const int c = 4 * (threadIdx.x % (D / 4));
  float p[4] = {0, 0, 0, 0};
  int64_t pos = 0;
  bool emits = false;
  if (b < batch) {
    pos = positions[b];
    const int slot = static_cast<int>(pos % 4);
    float* skv = state_kv + state_index[b] * (8LL * kWidth);
    float* sscore = state_score + state_index[b] * (8LL * kWidth);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = h * D + c;
      store4(skv + (4 + slot) * kWidth + col, load4(kv + static_cast<int64_t>(b) * kWidth + col));
      store4(sscore + (4 + slot) * kWidth + col,
             add4(load4(score + static_cast<int64_t>(b) * kWidth + col), load4(ape + slot * kWidth + col)));
    }
    emits = slot == 3;
    if (emits) {
      float4 wkv[8], ws[8];
      const bool first_block = pos < 4;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        wkv[i] = first_block ? make_float4(0, 0, 0, 0) : *reinterpret_cast<const float4*>(skv + i * kWidth + c);
        ws[i] = first_block ? make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY)
                            : *reinterpret_cast<const float4*>(sscore + i * kWidth + c);
        wkv[4 + i] = *reinterpret_cast<const float4*>(skv + (4 + i) * kWidth + D + c);
        ws[4 + i] = *reinterpret_cast<const float4*>(sscore + (4 + i) * kWidth + D + c);
      }
      const float4 out = pool_rows<8>(wkv, ws);
      p[0] = out.x, p[1] = out.y, p[2] = out.z, p[3] = out.w;
      if (pooled != nullptr) store4(pooled + static_cast<int64_t>(b) * D + c, out);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int col = h * D + c;
          store4(skv + i * kWidth + col, *reinterpret_cast<const float4*>(skv + (4 + i) * kWidth + col));
          store4(sscore + i * kWidth + col, *reinterpret_cast<const float4*>(sscore + (4 + i) * kWidth + col));
        }
    }
  }
  postprocess_fused<D, K>(p, pos / 4, norm, eps, rope, emits ? entries + static_cast<int64_t>(b) * D : nullptr,
                          smem);
}

template <int D, Kind K>
void launch_prefill(const CompressorParams& p, const BatchPlan& plan, const float* kv, const float* score,
                    const float* state_kv, const float* state_score, uint16_t* entries, float* pooled, Variant v,
                    cudaStream_t stream) {
  constexpr int kPerBlock = kThreads / (D / 4);
  const unsigned blocks = static_cast<unsigned>((plan.n_entries() + kPerBlock - 1) / kPerBlock);
  if (v == Variant::tuned_v2)
    c4_prefill_tuned<D, K><<<blocks, kThreads, 0, stream>>>(plan.device_items(), plan.n_entries(), kv, score, p.ape,
                                                            state_kv, state_score, p.norm, p.norm_eps, p.rope,
                                                            entries, pooled);
  else
    c4_prefill_v3<D, K><<<blocks, kThreads, 0, stream>>>(plan.device_items(), plan.n_entries(), kv, score, p.ape,
                                                         state_kv, state_score, p.norm, p.norm_eps, p.rope, entries,
                                                         pooled);
  CUDA_CHECK_LAUNCH();
}

template <int D, Kind K>
void launch_decode(const CompressorParams& p, const DecodePlan& plan, const float* kv, const float* score,
                   float* state_kv, float* state_score, uint16_t* entries, float* pooled, cudaStream_t stream) {
  constexpr int kPerBlock = kThreads / (D / 4);
  const int blocks = (plan.batch() + kPerBlock - 1) / kPerBlock;
  c4_decode_tuned<D, K><<<blocks, kThreads, 0, stream>>>(plan.batch(), plan.device_positions(),
                                                         plan.device_state_index(), kv, score, p.ape, state_kv,
                                                         state_score, p.norm, p.norm_eps, p.rope, entries, pooled);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void c4_prefill(const CompressorParams& p, const BatchPlan& plan, const float* kv, const float* score,
                float* state_kv, float* state_score, uint16_t* entries, float* pooled, Variant v,
                cudaStream_t stream) {
  detail::check_params(p, 4, plan.ratio(), plan.max_entry(), "c4_prefill");
  if (plan.n_entries() > 0) {
    if (v == Variant::simple) {
      detail::ScratchFloats scratch(pooled ? 0 : plan.n_entries() * p.head_dim, stream);
      float* pool_out = pooled ? pooled : scratch.get();
      detail::simple_pool_prefill(p, plan, kv, score, state_kv, state_score, pool_out, stream);
      detail::simple_postprocess(p, plan, pool_out, entries, stream);
    } else if (p.head_dim == 512) {
      launch_prefill<512, Kind::main>(p, plan, kv, score, state_kv, state_score, entries, pooled, v, stream);
    } else if (p.kind == Kind::main) {
      launch_prefill<128, Kind::main>(p, plan, kv, score, state_kv, state_score, entries, pooled, v, stream);
    } else {
      launch_prefill<128, Kind::indexer>(p, plan, kv, score, state_kv, state_score, entries, pooled, v, stream);
    }
  }
  detail::state_write_pass(p, plan, kv, score, state_kv, state_score, stream);
}

void c4_decode(const CompressorParams& p, const DecodePlan& plan, const float* kv, const float* score,
               float* state_kv, float* state_score, uint16_t* entries, float* pooled, Variant v,
               cudaStream_t stream) {
  detail::check_params(p, 4, plan.ratio(), plan.max_entry(), "c4_decode");
  if (plan.batch() == 0) return;
  if (v == Variant::simple) {
    detail::ScratchFloats scratch(pooled ? 0 : static_cast<size_t>(plan.batch()) * p.head_dim, stream);
    float* pool_out = pooled ? pooled : scratch.get();
    detail::simple_decode_pool(p, plan, kv, score, state_kv, state_score, pool_out, stream);
    detail::simple_postprocess(p, plan, pool_out, entries, stream);
  } else if (p.head_dim == 512) {
    launch_decode<512, Kind::main>(p, plan, kv, score, state_kv, state_score, entries, pooled, stream);
  } else if (p.kind == Kind::main) {
    launch_decode<128, Kind::main>(p, plan, kv, score, state_kv, state_score, entries, pooled, stream);
  } else {
    launch_decode<128, Kind::indexer>(p, plan, kv, score, state_kv, state_score, entries, pooled, stream);
  }
}

}  // namespace dsv4::cuda
