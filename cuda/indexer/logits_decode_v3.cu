// v3 of the indexer decode logits over a paged key cache (sm_90a, wgmma). v2's CTA (one warpgroup:
// one sequence's query, A operand built once, against a chunk of 4096 of its keys), v2's tile MMA and
// epilogue (logits_tile.cuh) and v2's zeros for keys past the length, so the logits are v2's bit for
// bit. What changes is the copy producer (docs/cuda-indexer.md "Logits decode v3"), whose per-tile
// instructions bounded v2:
//   - a key's page and slot come from page_walk.h in 32-bit arithmetic (a multiply and a shift),
//     once per key and thread, where v2 divided 64-bit integers for every copy;
//   - each thread's share of a tile is fixed so that it looks up as few keys as possible
//     (page_walk.h): DeepGEMM layout FP8 one key a thread, four 16-byte copies; FP4 two keys, one
//     copy each; interleaved (slots 4-byte aligned only) lane r < 16 of warp w looks up key 16w + r
//     and the warp's 4-byte copies, consecutive lanes on consecutive words of one key, take the
//     offsets by shuffles;
//   - 16-byte copies bypass L1 (cp.async.cg: each sector is read whole by one instruction), so L1
//     keeps the block table;
//   - a 5-stage ring, 4 tiles in flight: 4 CTAs an SM by shared memory (FP8: 8 KiB query + 5 x
//     8.25 KiB stages + epilogue ~1.3-2.3 KiB = 51.6-52.6 KiB, + 1 KiB reserved a CTA: 4 x 53.6 <= 228
//     KiB), 16 tiles (132 KiB) in flight an SM, and the 2048 CTAs of batch 128 x 64K in 3.9 waves
//     of 528 (v2: 5 CTAs an SM, 3.1 waves of 660, the last one a tenth full).
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/common/numerics.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/decode_tile.cuh"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/logits_launch.h"
#include "cuda/indexer/page_walk.h"

namespace dsv4::cuda {
namespace {

using namespace decode_tile;

constexpr int kThreads = kGroupThreads;
constexpr int kStages = 5;
constexpr int kCtasPerSm = 4;
using page_walk::kWarpKeys;

using DecodeArgs = WalkArgs;

template <IndexerFormat F, ScoreStorage S>
using Smem = decode_tile::Smem<F, S, kStages>;

// The copies of keys [first_key, +64) of the sequence (those < len; zeros for the others, as v2)
// into stage st.
template <IndexerFormat F, ScoreStorage S, IndexerCacheLayout L>
__device__ inline void load_tile(Smem<F, S>& sm, int st, uint32_t first_key, const SequencePages& s, int t) {
  constexpr int kCb = code_bytes(F);
  uint8_t* codes = sm.stage_codes[st];
  uint8_t* scales = sm.stage_scales[st];
  if constexpr (L == IndexerCacheLayout::deepgemm) {
    if constexpr (F == IndexerFormat::fp8) {  // one key a thread
      const KeyAt at = locate(s, first_key + page_walk::deepgemm_fp8_unit(t, 0).row);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const page_walk::CopyUnit u = page_walk::deepgemm_fp8_unit(t, i);
        copy16(codes + wgmma::tile_offset(kTileKeys, u.row, u.byte), s.pool + at.codes + u.byte, at.valid);
        if (i == 0 && u.byte == 0) copy4(scales + kIndexerScaleBytes * u.row, s.pool + at.scale, at.valid);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const page_walk::CopyUnit u = page_walk::deepgemm_fp4_unit(t, i);
        const KeyAt at = locate(s, first_key + u.row);
        copy16(codes + u.row * kCb + u.byte, s.pool + at.codes + u.byte, at.valid);
        if (u.byte == 0) copy4(scales + kIndexerScaleBytes * u.row, s.pool + at.scale, at.valid);
      }
    }
  } else {
    constexpr int kWords = kCb / 4;  // code words a key: FP8 32, FP4 16
    const int warp = t / 32, lane = t % 32;
    const KeyAt mine = locate(s, first_key + kWarpKeys * warp + page_walk::lookup_key(lane));
    const int64_t my_codes = mine.valid ? static_cast<int64_t>(mine.codes) : -1;
#pragma unroll
    for (int p = 0; p < kWarpKeys * kWords / 32; ++p) {
      const page_walk::CopyUnit u = page_walk::interleaved_unit(kWords, t, p);
      const int64_t at = __shfl_sync(0xffffffffu, my_codes, page_walk::warp_key(kWords, lane, p));
      const bool valid = at >= 0;
      const uint8_t* key_bytes = s.pool + (valid ? at : 0);
      uint8_t* dst =
          F == IndexerFormat::fp8 ? codes + wgmma::tile_offset(kTileKeys, u.row, u.byte) : codes + u.row * kCb + u.byte;
      copy4(dst, key_bytes + u.byte, valid);
      if (u.byte == 0) copy4(scales + kIndexerScaleBytes * u.row, key_bytes + kCb, valid);  // the slot's scale word
    }
  }
}

template <IndexerFormat F, ScoreStorage S, IndexerCacheLayout L>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) decode_logits_v3(const DecodeArgs a) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  Smem<F, S>& sm = *reinterpret_cast<Smem<F, S>*>(smem_raw);
  const int t = threadIdx.x;
  const int64_t b = blockIdx.x;
  const int64_t len = a.context_lens[b];
  const ChunkTiles chunk = chunk_tiles(len, a.n_cols);
  float* out_row = a.logits + b * a.n_cols;
  write_keyless_tiles(out_row, chunk, a.n_cols, t, kThreads);
  const int n_tiles = static_cast<int>(chunk.last - chunk.begin);
  if (n_tiles <= 0) return;

  // Keys below len < 2^31: a tile's first key fits 32 bits.
  const SequencePages pages{a.keys.pool, a.keys.block_table + b * a.keys.table_stride, a.divider, a.strides,
                            static_cast<uint32_t>(len)};
  const uint32_t chunk_first_key = static_cast<uint32_t>(chunk.begin * kTileKeys);
  for (int p = 0; p < kStages - 1; ++p) {
    if (p < n_tiles) load_tile<F, S, L>(sm, p, chunk_first_key + p * kTileKeys, pages, t);
    copy_commit();
  }
  float row_weights[2];
  {
    int inexact = 0;
    build_query<F>(sm.a, a.q.codes + b * kHeads * code_bytes(F), a.q.scales + b * kHeads * kIndexerScaleBytes,
                   a.q.weights + b * kHeads, t, row_weights, inexact);
    if (F == IndexerFormat::fp4 && a.inexact != nullptr && inexact > 0) atomicAdd(a.inexact, inexact);
  }

  int st = 0, ahead = kStages - 1;  // the stage of tile it, and of tile it + kStages - 1
  for (int it = 0; it < n_tiles; ++it) {
    copy_wait<kStages - 2>();
    wgmma::fence_shared_for_async();
    __syncthreads();
    if (it + kStages - 1 < n_tiles)
      load_tile<F, S, L>(sm, ahead, chunk_first_key + static_cast<uint32_t>(it + kStages - 1) * kTileKeys, pages, t);
    copy_commit();
    score_tile<F, S>(sm.a, sm.stage_codes[st], sm.stage_scales[st], sm.scratch, row_weights, out_row,
                     (chunk.begin + it) * kTileKeys, len, a.n_cols, t, 0);
    st = st + 1 == kStages ? 0 : st + 1;
    ahead = ahead + 1 == kStages ? 0 : ahead + 1;
  }
}

template <IndexerFormat F, ScoreStorage S, IndexerCacheLayout L>
void launch(const DecodeArgs& a, cudaStream_t stream) {
  launch_chunks(decode_logits_v3<F, S, L>, a, a.q.count, a.n_cols, kThreads, static_cast<int>(sizeof(Smem<F, S>)),
                "indexer_logits_decode v3", stream);
}

// The shared-memory arithmetic of the file comment.
static_assert(sizeof(Smem<IndexerFormat::fp8, ScoreStorage::bf16>) + 1024 <= 228 * 1024 / kCtasPerSm,
              "decode v3: kCtasPerSm CTAs of the largest variant must fit an SM's 228 KiB");
static_assert(page_walk::kTileThreads == kThreads && page_walk::kTileKeys == kTileKeys,
              "page_walk's copy plan is for one warpgroup and a 64-key tile");

}  // namespace

namespace detail {

void decode_logits_v3(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream) {
  if (q.count == 0 || n_cols == 0) return;
  const DecodeArgs a = walk_args(q, keys, context_lens, logits, n_cols, inexact, "indexer_logits_decode v3");
  dispatch(p.format, p.scores, keys.layout, [&](auto f, auto s, auto l) {
    launch<decltype(f)::value, decltype(s)::value, decltype(l)::value>(a, stream);
  });
}

}  // namespace detail
}  // namespace dsv4::cuda
