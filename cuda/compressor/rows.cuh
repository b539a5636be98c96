#pragma once
// Where the compressor kernels find their rows, and the thread layout the fused kernels share.
//
// Token t of a sequence during a call that starts at start_pos: a token of this call is a row of
// the ragged input (its logit still needs + ape[t mod r]); an earlier token is a row of the
// sequence's state (logit already gated). Ratio 4: the current block's earlier tokens are state
// rows 4 + t mod 4, the previous block's are rows t mod 4. Ratio 128: rows t mod 128.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/vec4.cuh"
#include "cuda/compressor/compressor_api.h"
#include "cuda/compressor/kernel_args.h"

namespace dsv4::cuda {

struct RowRef {
  const float* kv;     // the row's channel 0
  const float* score;  // the row's channel 0
  bool from_input;     // true: score + ape[t mod r] still to be added
};

// width = coff * d (the row length); state_* point at this sequence's state.
__device__ inline RowRef token_row(const ChunkDesc& ch, int ratio, int64_t t, const float* kv, const float* score,
                                   const float* state_kv, const float* state_score, int width) {
  if (t >= ch.start_pos) {
    const int64_t row = ch.first_row + (t - ch.start_pos);
    return {kv + row * width, score + row * width, true};
  }
  int srow = static_cast<int>(t % ratio);
  if (ratio == 4 && t >= ch.start_pos / 4 * 4) srow += 4;
  return {state_kv + static_cast<int64_t>(srow) * width, state_score + static_cast<int64_t>(srow) * width, false};
}

// The state of pool slot `index`, each state `floats` floats.
template <typename T>
__device__ inline T* sequence_state(T* pool, int32_t index, int64_t floats) {
  return pool + index * floats;
}

// The entry slab (postprocess_fused.cuh): an entry of D channels is held by D/4 consecutive threads
// of a kSlab-thread slab, 4 channels each. slab_row: the work item of this thread (plan item or
// decode batch row) when block b holds items [b * kSlab/(D/4), ...); slab_channel: its first channel.
template <int D, int kSlab>
__device__ inline int64_t slab_row() {
  return static_cast<int64_t>(blockIdx.x) * (kSlab / (D / 4)) + (threadIdx.x % kSlab) / (D / 4);
}
template <int D>
__device__ inline int slab_channel() {
  return 4 * (threadIdx.x % (D / 4));
}

// The 8-row window of C4 entry j, channels c .. c+3, from any mix of this call's input rows and the
// state: rows 0..3 are tokens 4(j-1) .. 4j-1 at channels [0, d), rows 4..7 tokens 4j .. 4j+3 at
// channels [d, 2d); a row before token 0 is kv 0, logit -inf (weight 0); an input row's logit gets
// + ape. kStream (v2 as measured): every row streamed (evict-first) and its ape row loaded with it,
// the gated adds after all loads; else (v3's rare path: its common entries take the consecutive-row
// fast path) read-only loads, ape only for input rows.
template <int D, bool kStream>
__device__ inline void c4_window(const ChunkDesc& ch, int64_t j, int c, const float* __restrict__ kv,
                                 const float* __restrict__ score, const float* __restrict__ ape,
                                 const float* __restrict__ skv, const float* __restrict__ sscore, float4 (&wkv)[8],
                                 float4 (&ws)[8]) {
  constexpr int kWidth = 2 * D;
  float4 wape[8];
  bool gate[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t t = 4 * (j - 1) + i;
    const int col = i < 4 ? c : D + c;
    gate[i] = false;
    if (t < 0) {
      wkv[i] = make_float4(0, 0, 0, 0);
      ws[i] = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      continue;
    }
    const RowRef row = token_row(ch, 4, t, kv, score, skv, sscore, kWidth);
    if constexpr (kStream) {
      gate[i] = row.from_input;
      wkv[i] = load4_stream(row.kv + col);
      ws[i] = load4_stream(row.score + col);
      wape[i] = load4(ape + (t % 4) * kWidth + col);
    } else {
      wkv[i] = load4(row.kv + col);
      ws[i] = load4(row.score + col);
      if (row.from_input) ws[i] = add4(ws[i], load4(ape + (t % 4) * kWidth + col));
    }
  }
  if constexpr (kStream) {
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (gate[i]) ws[i] = add4(ws[i], wape[i]);
  }
}

// Decode: the new token of batch row b into state row `row`, channels col .. col+3 of kv and of the
// gated logit (score + ape[slot]); width = coff * d.
__device__ inline void write_token_row(const CompressorArgs& a, float* skv, float* sscore, int64_t b, int row, int slot,
                                       int col, int width) {
  store4(skv + row * width + col, load4(a.kv + b * width + col));
  store4(sscore + row * width + col, add4(load4(a.score + b * width + col), load4(a.ape + slot * width + col)));
}

}  // namespace dsv4::cuda
