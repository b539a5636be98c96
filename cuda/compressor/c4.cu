// Ratio-4 (CSA, overlap) compressor: the v2 and v3 prefill kernels, the v3 decode kernel and the
// entry points.
//
// Prefill (v2 c4_prefill_v2, v3 c4_prefill_v3): one 128-thread block per entry (d = 512) or per 4
// entries (d = 128); a thread owns 4 channels and loads its 8 window rows of kv and logits as 16
// independent 16-byte loads before the first use, pools them (pooling.cuh) and runs the fused
// post-processing (postprocess_fused.cuh). The state is read here and written by the separate
// write pass, so no block reads what another writes.
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

constexpr int kThreads = 128;

// v2: every entry's window through the per-row source lookup, input rows streamed.
template <int D, Kind K>
__global__ void __launch_bounds__(kThreads) c4_prefill_v2(const CompressorArgs a) {
  constexpr int kWidth = 2 * D;
  __shared__ double smem[kThreads / 32];
  const int64_t item = slab_row<D, kThreads>();
  const int c = slab_channel<D>();
  float p[4] = {0, 0, 0, 0};
  int64_t j = 0;
  if (item < a.n_items) {
    const EntryDesc e = a.items[item];
    const ChunkDesc ch = e.chunk;
    j = e.entry;
    float4 wkv[8], ws[8];
    c4_window<D, true>(ch, j, c, a.kv, a.score, a.ape,
                       sequence_state<const float>(a.state_kv, ch.state_index, 8LL * kWidth),
                       sequence_state<const float>(a.state_score, ch.state_index, 8LL * kWidth), wkv, ws);
    const float4 out = pool_rows<8>(wkv, ws);
    to_array(out, p);
    if (a.pooled != nullptr) store4(a.pooled + item * D + c, out);
  }
  postprocess_fused<D, K>(p, j, a.norm, a.eps, a.rope, item < a.n_items ? a.entries + item * D : nullptr, smem);
}

// v3: as v2, plus a fast path for the common entry whose 8 rows are consecutive rows of this call's
// input (rows 4(j-1) .. 4j+3 all at or after start_pos): one base address, compile-time offsets
// and ape rows, instead of a per-row source lookup; and at most 96 registers (5 blocks per SM).
template <int D, Kind K>
__global__ void __launch_bounds__(kThreads, 5) c4_prefill_v3(const CompressorArgs a) {
  constexpr int kWidth = 2 * D;
  __shared__ double smem[kThreads / 32];
  const int64_t item = slab_row<D, kThreads>();
  const int c = slab_channel<D>();
  float p[4] = {0, 0, 0, 0};
  int64_t j = 0;
  if (item < a.n_items) {
    const EntryDesc e = a.items[item];
    const ChunkDesc ch = e.chunk;
    j = e.entry;
    float4 wkv[8], ws[8];
    const int64_t t0 = 4 * (j - 1);  // token of window row 0
    if (j >= 1 && t0 >= ch.start_pos) {
      const int64_t row0 = ch.first_row + (t0 - ch.start_pos);
      const float* kv0 = a.kv + row0 * kWidth + c;
      const float* sc0 = a.score + row0 * kWidth + c;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int off = i * kWidth + (i < 4 ? 0 : D);
        wkv[i] = load4_stream(kv0 + off);
        ws[i] = load4_stream(sc0 + off);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) ws[i] = add4(ws[i], load4(a.ape + (i % 4) * kWidth + (i < 4 ? 0 : D) + c));
    } else {
      c4_window<D, false>(ch, j, c, a.kv, a.score, a.ape,
                          sequence_state<const float>(a.state_kv, ch.state_index, 8LL * kWidth),
                          sequence_state<const float>(a.state_score, ch.state_index, 8LL * kWidth), wkv, ws);
    }
    const float4 out = pool_rows<8>(wkv, ws);
    to_array(out, p);
    if (a.pooled != nullptr) store4(a.pooled + item * D + c, out);
  }
  postprocess_fused<D, K>(p, j, a.norm, a.eps, a.rope, item < a.n_items ? a.entries + item * D : nullptr, smem);
}

// v3 decode, one token per sequence: row 4 + t mod 4 of its state gets the token (both halves);
// when the block completes, the 8-row window is pooled exactly as the prefill pools it, rows [4, 8)
// are copied to [0, 4), and the entry is post-processed into output row b. A thread reads and
// writes only its own 4 columns of each half, so no thread reads what another writes.
template <int D, Kind K>
__global__ void __launch_bounds__(kThreads) c4_decode_v3(const CompressorArgs a) {
  constexpr int kWidth = 2 * D;
  __shared__ double smem[kThreads / 32];
  const int64_t b = slab_row<D, kThreads>();
  const int c = slab_channel<D>();
  float p[4] = {0, 0, 0, 0};
  int64_t pos = 0;
  bool emits = false;
  if (b < a.batch) {
    pos = a.positions[b];
    const int slot = static_cast<int>(pos % 4);
    float* skv = sequence_state(a.state_kv, a.state_index[b], 8LL * kWidth);
    float* sscore = sequence_state(a.state_score, a.state_index[b], 8LL * kWidth);
#pragma unroll
    for (int h = 0; h < 2; ++h) write_token_row(a, skv, sscore, b, 4 + slot, slot, h * D + c, kWidth);
    emits = slot == 3;
    if (emits) {
      float4 wkv[8], ws[8];
      const bool first_block = pos < 4;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        wkv[i] = first_block ? make_float4(0, 0, 0, 0) : load4_plain(skv + i * kWidth + c);
        ws[i] = first_block ? make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY)
                            : load4_plain(sscore + i * kWidth + c);
        wkv[4 + i] = load4_plain(skv + (4 + i) * kWidth + D + c);
        ws[4 + i] = load4_plain(sscore + (4 + i) * kWidth + D + c);
      }
      const float4 out = pool_rows<8>(wkv, ws);
      to_array(out, p);
      if (a.pooled != nullptr) store4(a.pooled + b * D + c, out);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int col = h * D + c;
          store4(skv + i * kWidth + col, load4_plain(skv + (4 + i) * kWidth + col));
          store4(sscore + i * kWidth + col, load4_plain(sscore + (4 + i) * kWidth + col));
        }
    }
  }
  postprocess_fused<D, K>(p, pos / 4, a.norm, a.eps, a.rope, emits ? a.entries + b * D : nullptr, smem);
}

template <int D, Kind K>
void launch_prefill(const CompressorArgs& a, Variant v, cudaStream_t stream) {
  const unsigned blocks = detail::grid_blocks(a.n_items, kThreads / (D / 4), "c4_prefill");
  if (v == Variant::v2)
    c4_prefill_v2<D, K><<<blocks, kThreads, 0, stream>>>(a);
  else
    c4_prefill_v3<D, K><<<blocks, kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

template <int D, Kind K>
void launch_decode(const CompressorArgs& a, cudaStream_t stream) {
  const unsigned blocks = detail::grid_blocks(a.batch, kThreads / (D / 4), "c4_decode");
  c4_decode_v3<D, K><<<blocks, kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void c4_prefill(const CompressorParams& p, const BatchPlan& plan, const float* kv, const float* score, float* state_kv,
                float* state_score, uint16_t* entries, float* pooled, Variant v, cudaStream_t stream) {
  detail::check_params(p, 4, plan.ratio(), plan.max_entry(), "c4_prefill");
  detail::require_variant(v == Variant::v1 || v == Variant::v2 || v == Variant::v3, v, "c4_prefill", "v1, v2, v3");
  CompressorArgs a = prefill_args(p, plan, kv, score, state_kv, state_score, entries, pooled);
  if (plan.n_entries() > 0) {
    if (v == Variant::v1) {
      detail::ScratchFloats scratch(pooled ? 0 : plan.n_entries() * p.head_dim, stream);
      a.pooled = pooled ? pooled : scratch.get();
      detail::v1_pool_prefill(p, a, stream);
      detail::v1_postprocess_prefill(p, a, stream);
    } else if (p.head_dim == 512) {
      launch_prefill<512, Kind::main>(a, v, stream);
    } else if (p.kind == Kind::main) {
      launch_prefill<128, Kind::main>(a, v, stream);
    } else {
      launch_prefill<128, Kind::indexer>(a, v, stream);
    }
  }
  detail::state_write_pass(p, a, stream);
}

void c4_decode(const CompressorParams& p, const DecodePlan& plan, const float* kv, const float* score, float* state_kv,
               float* state_score, uint16_t* entries, float* pooled, Variant v, cudaStream_t stream) {
  detail::check_params(p, 4, plan.ratio(), plan.max_entry(), "c4_decode");
  detail::require_variant(v == Variant::v1 || v == Variant::v3, v, "c4_decode", "v1, v3");
  if (plan.batch() == 0) return;
  CompressorArgs a = decode_args(p, plan, kv, score, state_kv, state_score, entries, pooled);
  if (v == Variant::v1) {
    detail::ScratchFloats scratch(pooled ? 0 : static_cast<size_t>(plan.batch()) * p.head_dim, stream);
    a.pooled = pooled ? pooled : scratch.get();
    detail::v1_decode_pool(p, a, stream);
    detail::v1_postprocess_decode(p, a, stream);
  } else if (p.head_dim == 512) {
    launch_decode<512, Kind::main>(a, stream);
  } else if (p.kind == Kind::main) {
    launch_decode<128, Kind::main>(a, stream);
  } else {
    launch_decode<128, Kind::indexer>(a, stream);
  }
}

}  // namespace dsv4::cuda
