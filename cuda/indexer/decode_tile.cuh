#pragma once
// What the decode logits kernels (logits_decode_v2.cu, v3, v4; sm_90a) share: the scoring of one
// 64-key tile staged in shared memory by one warpgroup (FP4 codes unpacked to e4m3 with their slice
// scales, the tile MMA and epilogue of logits_tile.cuh, the key's scale word, -inf past the
// sequence's length), the shared memory of the one-warpgroup kernels (v2, v3), the tiles of a CTA's
// chunk, a key's place in the pool in page_walk.h's 32-bit arithmetic (v3, v4), and the launch. The kernels differ only
// in how the keys reach shared memory, so that they all compute the same logits bit for bit.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/formats.h"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/logits_tile.cuh"
#include "cuda/indexer/page_walk.h"

namespace dsv4::cuda::decode_tile {

using namespace logits_tile;

inline constexpr int kTileKeys = 64;                                // N of the tile MMA
inline constexpr int kBBytes = kTileKeys * kIndexerDim;             // e4m3 B operand of a tile
inline constexpr int kScaleBytes = kTileKeys * kIndexerScaleBytes;  // a tile's scale words
inline constexpr int kChunkTiles = 64;                              // a CTA's chunk: 4096 keys
template <IndexerFormat F>
inline constexpr int kStageCodes = kTileKeys* code_bytes(F);  // FP8: the B operand; FP4: packed, row-major

// How a stage holds a tile's FP8 codes: the B operand itself (tile layout: per-thread copies, v2 to
// v4), or the pool's rows, 128 bytes a key (bulk copies, v5), which score_tile lays out as the B
// operand in its scratch first, or (v7) a full tile's rows with the 128-byte swizzle (one TMA box,
// read by the MMA in place; the stage 1024-byte aligned) and the tile ending at the sequence's length
// (fewer than 64 keys) as rows. FP4 codes are always staged as the pool's rows (64 bytes a key).
enum class StagedCodes { tile, rows, swizzled_or_rows };

// Whether score_tile always builds the B operand in its scratch (from the staged rows).
template <IndexerFormat F, StagedCodes C>
inline constexpr bool kBuildsB = F == IndexerFormat::fp4 || C == StagedCodes::rows;

// What score_tile needs beside the staged tile, per warpgroup.
template <IndexerFormat F, ScoreStorage S, StagedCodes C = StagedCodes::tile>
struct Scratch {
  alignas(128) uint8_t b_unpacked[kBuildsB<F, C> || C == StagedCodes::swizzled_or_rows ? kBBytes : 16];
  float slice_scale[F == IndexerFormat::fp4 ? 4 : 1][kTileKeys];
  HeadSum<S> red[4 * kTileKeys];
};

// Shared memory of a one-warpgroup kernel (v2, v3): one query's A operand, a ring of kStages tiles, the
// scratch of its one warpgroup.
template <IndexerFormat F, ScoreStorage S, int kStages>
struct Smem {
  alignas(128) uint8_t a[kQBytes];
  alignas(128) uint8_t stage_codes[kStages][kStageCodes<F>];
  alignas(16) uint8_t stage_scales[kStages][kScaleBytes];
  Scratch<F, S> scratch;
};

// FP8 codes of a tile's 64 keys as the pool stores them (rows: 128 bytes a key) -> the B operand
// (tile layout), by the 128 threads of a warpgroup (t < 128), 4 16-byte moves each. Of 8 neighbouring
// threads, thread k takes key 8 r + k and K chunk (k + d) % 8 for r, d < 8: their loads (key x 8 + chunk
// 16-byte units) and their stores (chunk x 64 + key units) fall in 8 different bank quads.
__device__ inline void lay_out_fp8_rows(uint8_t* b_tile, const uint8_t* rows, int t) {
#pragma unroll 2
  for (int i = 0; i < 4; ++i) {
    const int k = t % 8, pair = t / 8 + (kGroupThreads / 8) * i;  // pair < 64: (r, d)
    const int key = 8 * (pair % 8) + k, chunk = (k + pair / 8) % 8;
    *reinterpret_cast<uint4*>(b_tile + wgmma::tile_offset(kTileKeys, key, 16 * chunk)) =
        *reinterpret_cast<const uint4*>(rows + key * kIndexerDim + 16 * chunk);
  }
}

// The logits of keys [first_col, +64) of one sequence (length len) into out_row[first_col ..], the
// columns < n_cols: -inf at and past len. a_tile: the query's A operand (build_query); codes: the
// tile's codes (FP8: StagedCodes C; FP4: packed, 64 bytes a key, row-major); scales:
// each key's scale word (FP8: fp32 2^c_j; FP4: four UE8M0 block scales). Called by the 128 threads
// (t = thread in group) of warpgroup g, which synchronises on its named barrier only; codes and
// scales must have landed and be visible to the async proxy for every thread of the group.
// release(): called by every thread of the group once its warp no longer reads codes and scales (the
// B operand built in the scratch, or the MMA over the staged one completed): a ring's stage can be
// handed back there.
struct KeepStage {
  __device__ void operator()() const {}
};
template <IndexerFormat F, ScoreStorage S, StagedCodes C = StagedCodes::tile, class Release = KeepStage>
__device__ inline void score_tile(const uint8_t* a_tile, const uint8_t* codes, const uint8_t* scales,
                                  Scratch<F, S, C>& scratch, const float (&row_weights)[2], float* out_row,
                                  int64_t first_col, int64_t len, int64_t n_cols, int t, int g, Release release = {}) {
  const int lane = t % 32;
  // The key's 2^c_j: FP8 the fp32 scale word of the paged layouts; FP4 1 (its block scales are in
  // the sum already). Read before the MMA, so that no pointer into the stage stays live across it.
  const float key_scale = F == IndexerFormat::fp8 && t < kTileKeys
                              ? *reinterpret_cast<const float*>(scales + t * kIndexerScaleBytes)
                              : 1.0f;
  // The B operand from the staged rows into the scratch; the stage is released once they are read.
  const auto build_b = [&] {
    if constexpr (F == IndexerFormat::fp4)
      unpack_fp4_tile<kTileKeys, kGroupThreads>(scratch.b_unpacked, scratch.slice_scale, codes, scales, t);
    else
      lay_out_fp8_rows(scratch.b_unpacked, codes, t);
    release();
    wgmma::fence_shared_for_async();
    group_barrier(g);
  };
  const auto slice_scale = [&](int blk, int col) {
    return scratch.slice_scale[F == IndexerFormat::fp4 ? blk : 0][col];
  };
  float acc[kTileKeys / 2];
  if constexpr (C == StagedCodes::swizzled_or_rows) {
    static_assert(F == IndexerFormat::fp8, "swizzled stages hold FP8 codes");
    if (first_col + kTileKeys <= len) {  // a full tile (uniform across the group): the TMA's swizzled box
      tile_mma<F, kTileKeys, true>(acc, a_tile, codes, lane, slice_scale);
      release();  // the MMA has completed: the stage is no longer read
    } else {
      build_b();
      tile_mma<F, kTileKeys>(acc, a_tile, scratch.b_unpacked, lane, slice_scale);
    }
  } else {
    const uint8_t* b_tile = codes;
    if constexpr (kBuildsB<F, C>) {
      build_b();
      b_tile = scratch.b_unpacked;
    }
    tile_mma<F, kTileKeys>(acc, a_tile, b_tile, lane, slice_scale);
    if constexpr (!kBuildsB<F, C>) release();
  }
  const HeadSum<S> sum = head_sum<S, kTileKeys>(acc, row_weights, scratch.red, t, g);
  const int64_t col = first_col + t;
  if (t < kTileKeys && col < n_cols) out_row[col] = col < len ? finish<S>(sum, key_scale) : -INFINITY;
}

// ---- a CTA's chunk (v2 to v5) -----------------------------------------------------------------

// The column tiles of the CTA of chunk blockIdx.y of a sequence of length len, in a row of n_cols
// columns: [begin, end) the chunk's, [begin, last) those that hold keys (none where last <= begin).
struct ChunkTiles {
  int64_t begin, end, last;
};

__device__ inline ChunkTiles chunk_tiles(int64_t len, int64_t n_cols) {
  const int64_t n_col_tiles = (n_cols + kTileKeys - 1) / kTileKeys;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * kChunkTiles;
  const int64_t end = min(begin + kChunkTiles, n_col_tiles);
  const int64_t key_tiles = (len + kTileKeys - 1) / kTileKeys;
  return {begin, end, min(end, key_tiles)};
}

// -inf into the chunk's columns below n_cols in the tiles that hold no key (from max(last, begin)
// to end), by the `threads` threads of the CTA (thread t), a column at a time.
__device__ inline void write_keyless_tiles(float* out_row, const ChunkTiles& chunk, int64_t n_cols, int t,
                                           int threads) {
  const int64_t first_empty = max(chunk.last, chunk.begin);
  for (int64_t i = t; i < (chunk.end - first_empty) * kTileKeys; i += threads) {
    const int64_t col = first_empty * kTileKeys + i;
    if (col < n_cols) out_row[col] = -INFINITY;
  }
}

// A consumer's wait for tile j of a ring of kStages stages whose tiles go round-robin to kConsumers
// consumers and whose full barriers complete as each tile's bulk copies land (v5, v6). The wait on
// stage j % kStages's full barrier is by phase parity, which is only unambiguous if that barrier is
// at most one phase behind: with kStages % kConsumers != 0 the previous tile of the stage, j - kStages,
// is another consumer's, and if its copies had not landed yet (copies land in any order, and this
// consumer may be done with j - kConsumers) the full barrier would be two phases behind and the parity
// wait would pass at once. So first the stage's empty barrier for round j / kStages - 1: complete
// once tile j - kStages was released by its consumer (after its copies landed); it is never further
// ahead (round j / kStages needs this consumer's release of tile j) nor two behind (tile
// j - kConsumers, already scored, was issued after tile j - kStages, i.e. after round
// j / kStages - 2 completed). Where kStages % kConsumers == 0 a stage always has the same consumer
// and the full wait alone is exact.
template <int kStages, int kConsumers>
__device__ __forceinline__ void wait_for_tile(uint32_t full, uint32_t empty, int j) {
  if constexpr (kStages % kConsumers != 0)
    if (j >= kStages) mbarrier_wait(empty, static_cast<uint32_t>(j / kStages - 1) & 1);
  mbarrier_wait(full, static_cast<uint32_t>(j / kStages) & 1);
}

// ---- the page walk on the device (v3, v4) ----------------------------------------------------

// One sequence's pages as its CTA's copies see them (loop-invariant: built once).
struct SequencePages {
  const uint8_t* pool;
  const int32_t* table;  // the sequence's block-table row
  page_walk::PageDivider divider;
  page_walk::SlotStrides strides;
  uint32_t len;
};

// Key `key` of the sequence: the pool offsets of its code bytes and scale word. Past the length
// nothing is looked up and both offsets are 0 (the zero-byte copies still need a valid address).
struct KeyAt {
  uint64_t codes = 0, scale = 0;
  bool valid = false;
};

__device__ inline KeyAt locate(const SequencePages& s, uint32_t key) {
  KeyAt at;
  at.valid = key < s.len;
  if (at.valid) {
    const page_walk::PageSlot ps = page_walk::split(s.divider, key);
    const uint32_t page = static_cast<uint32_t>(__ldg(s.table + ps.page));
    at.codes = page_walk::code_offset(s.strides, page, ps.slot);
    at.scale = page_walk::scale_offset(s.strides, page, ps.slot);
  }
  return at;
}

// The arguments of the kernels that walk pages in 32-bit arithmetic (v3, v4): the call's, and the
// page size's divider and slot strides taken once on the host.
struct WalkArgs {
  IndexerQueries q;
  PagedKeys keys;
  page_walk::PageDivider divider;
  page_walk::SlotStrides strides;
  const int32_t* context_lens;
  float* logits;
  int64_t n_cols;
  int* inexact;
};

// Checks what the 32-bit walk needs (a grid x of the batch; pages below 2^31 bytes), then builds the
// arguments. who: "indexer_logits_decode vN".
inline WalkArgs walk_args(const IndexerQueries& q, const PagedKeys& keys, const int32_t* context_lens, float* logits,
                          int64_t n_cols, int* inexact, const char* who) {
  const std::string w(who);
  detail::require(q.count <= 0x7fffffffLL, w + ": batch " + std::to_string(q.count) + " too large");
  detail::require(keys.page_bytes() <= INT_MAX, w + ": pages of " + std::to_string(keys.page_bytes()) +
                                                    " bytes, at most " + std::to_string(INT_MAX) +
                                                    " (32-bit slot offsets)");
  return {q,
          keys,
          page_walk::make_page_divider(keys.page_keys),
          page_walk::slot_strides(keys.layout, keys.format, keys.page_keys),
          context_lens,
          logits,
          n_cols,
          inexact};
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

// The launch of v2 to v7: a CTA per (sequence, chunk of kChunkTiles tiles), `smem` bytes of dynamic
// shared memory, the kernel's arguments a and `extra` (v7: its tensor map). who: "indexer_logits_decode
// vN" for the errors.
template <class Args, class... Extra>
void launch_chunks(void (*kernel)(Args, Extra...), const Args& a, int64_t batch, int64_t n_cols, int threads, int smem,
                   const char* who, cudaStream_t stream, const Extra&... extra) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t n_col_tiles = (n_cols + kTileKeys - 1) / kTileKeys;
  const dim3 grid(static_cast<unsigned>(batch), static_cast<unsigned>((n_col_tiles + kChunkTiles - 1) / kChunkTiles));
  detail::require(grid.y <= 65535, std::string(who) + ": " + std::to_string(n_cols) +
                                       " columns need more than 65535 chunks of " +
                                       std::to_string(kChunkTiles * kTileKeys));
  kernel<<<grid, threads, smem, stream>>>(a, extra...);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda::decode_tile
