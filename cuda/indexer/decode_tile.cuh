#pragma once
// What the decode logits kernels (logits_decode_v2.cu, v3, v4; sm_90a) share: the scoring of one
// 64-key tile staged in shared memory by one warpgroup (FP4 codes unpacked to e4m3 with their slice
// scales, the tile MMA and epilogue of logits_tile.cuh, the key's scale word, -inf past the
// sequence's length), the shared memory of the chunked kernels (v2, v3), and their launch. The
// kernels differ only in how the keys reach shared memory, so that they all compute the same
// logits bit for bit.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/formats.h"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/logits_tile.cuh"

namespace dsv4::cuda::decode_tile {

using namespace logits_tile;

inline constexpr int kTileKeys = 64;                                // N of the tile MMA
inline constexpr int kBBytes = kTileKeys * kIndexerDim;             // e4m3 B operand of a tile
inline constexpr int kScaleBytes = kTileKeys * kIndexerScaleBytes;  // a tile's scale words
inline constexpr int kChunkTiles = 64;                              // v2, v3: a CTA's chunk, 4096 keys
template <IndexerFormat F>
inline constexpr int kStageCodes = kTileKeys* code_bytes(F);  // FP8: the B operand; FP4: packed, row-major

// What score_tile needs beside the staged tile, per warpgroup.
template <IndexerFormat F, ScoreStorage S>
struct Scratch {
  alignas(128) uint8_t b_unpacked[F == IndexerFormat::fp4 ? kBBytes : 16];
  float slice_scale[F == IndexerFormat::fp4 ? 4 : 1][kTileKeys];
  HeadSum<S> red[4 * kTileKeys];
};

// Shared memory of a chunked kernel (v2, v3): one query's A operand, a ring of kStages tiles, the
// scratch of its one warpgroup.
template <IndexerFormat F, ScoreStorage S, int kStages>
struct Smem {
  alignas(128) uint8_t a[kQBytes];
  alignas(128) uint8_t stage_codes[kStages][kStageCodes<F>];
  alignas(16) uint8_t stage_scales[kStages][kScaleBytes];
  Scratch<F, S> scratch;
};

// The logits of keys [first_col, +64) of one sequence (length len) into out_row[first_col ..], the
// columns < n_cols: -inf at and past len. a_tile: the query's A operand (build_query); codes: the
// tile's codes (FP8: the B operand, tile layout; FP4: packed, 64 bytes a key, row-major); scales:
// each key's scale word (FP8: fp32 2^c_j; FP4: four UE8M0 block scales). Called by the 128 threads
// (t = thread in group) of warpgroup g, which synchronises on its named barrier only; codes and
// scales must have landed and be visible to the async proxy for every thread of the group.
template <IndexerFormat F, ScoreStorage S>
__device__ inline void score_tile(const uint8_t* a_tile, const uint8_t* codes, const uint8_t* scales,
                                  Scratch<F, S>& scratch, const float (&row_weights)[2], float* out_row,
                                  int64_t first_col, int64_t len, int64_t n_cols, int t, int g) {
  const int lane = t % 32;
  // The key's 2^c_j: FP8 the fp32 scale word of the paged layouts; FP4 1 (its block scales are in
  // the sum already). Read before the MMA, so that no pointer into the stage stays live across it.
  const float key_scale = F == IndexerFormat::fp8 && t < kTileKeys
                              ? *reinterpret_cast<const float*>(scales + t * kIndexerScaleBytes)
                              : 1.0f;
  const uint8_t* b_tile = codes;
  if constexpr (F == IndexerFormat::fp4) {
    unpack_fp4_tile<kTileKeys, kGroupThreads>(scratch.b_unpacked, scratch.slice_scale, codes, scales, t);
    wgmma::fence_shared_for_async();
    group_barrier(g);
    b_tile = scratch.b_unpacked;
  }
  float acc[kTileKeys / 2];
  tile_mma<F, kTileKeys>(acc, a_tile, b_tile, lane,
                         [&](int blk, int col) { return scratch.slice_scale[F == IndexerFormat::fp4 ? blk : 0][col]; });
  const HeadSum<S> sum = head_sum<S, kTileKeys>(acc, row_weights, scratch.red, t, g);
  const int64_t col = first_col + t;
  if (t < kTileKeys && col < n_cols) out_row[col] = col < len ? finish<S>(sum, key_scale) : -INFINITY;
}

// Calls launch(F, S, L) with std::integral_constant tags of the call's format, score storage and
// cache layout: one kernel instantiation each.
template <class Launch>
void dispatch(IndexerFormat f, ScoreStorage s, IndexerCacheLayout l, Launch&& launch) {
  using Fmt = IndexerFormat;
  using Sc = ScoreStorage;
  using Lay = IndexerCacheLayout;
  const auto by_layout = [&](auto F, auto S) {
    if (l == Lay::deepgemm)
      launch(F, S, std::integral_constant<Lay, Lay::deepgemm>{});
    else
      launch(F, S, std::integral_constant<Lay, Lay::interleaved>{});
  };
  const auto by_scores = [&](auto F) {
    if (s == Sc::bf16)
      by_layout(F, std::integral_constant<Sc, Sc::bf16>{});
    else
      by_layout(F, std::integral_constant<Sc, Sc::fp32>{});
  };
  if (f == Fmt::fp4)
    by_scores(std::integral_constant<Fmt, Fmt::fp4>{});
  else
    by_scores(std::integral_constant<Fmt, Fmt::fp8>{});
}

// A chunked kernel's launch: a CTA per (sequence, chunk of kChunkTiles tiles), `smem` bytes of
// dynamic shared memory. who: "indexer_logits_decode vN" for the errors.
template <class Args>
void launch_chunks(void (*kernel)(Args), const Args& a, int64_t batch, int64_t n_cols, int threads, int smem,
                   const char* who, cudaStream_t stream) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t n_col_tiles = (n_cols + kTileKeys - 1) / kTileKeys;
  const dim3 grid(static_cast<unsigned>(batch), static_cast<unsigned>((n_col_tiles + kChunkTiles - 1) / kChunkTiles));
  detail::require(grid.y <= 65535, std::string(who) + ": " + std::to_string(n_cols) +
                                       " columns need more than 65535 chunks of " +
                                       std::to_string(kChunkTiles * kTileKeys));
  kernel<<<grid, threads, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda::decode_tile
