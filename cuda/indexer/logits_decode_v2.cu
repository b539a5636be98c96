// v2 of the indexer decode logits over a paged key cache (sm_90a, wgmma): a CTA of one warpgroup
// takes one sequence's query (A operand built once) and a chunk of its keys; 64-key tiles stream
// through a 4-stage cp.async ring (each key's code bytes and scale word found through the block
// table and the layout: 16-byte copies for DeepGEMM's layout, 4-byte copies for the interleaved
// one, whose key slots are 4-byte aligned only), then decode_tile.cuh's scoring (the tile MMA and
// the epilogue of logits_tile.cuh), 64 logits a tile. Keys past the sequence's length are never
// read; their columns are -inf exactly.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/common/numerics.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/cache_layout.cuh"
#include "cuda/indexer/decode_tile.cuh"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/logits_launch.h"

namespace dsv4::cuda {
namespace {

using namespace decode_tile;

constexpr int kThreads = kGroupThreads;
constexpr int kStages = 4;

struct DecodeArgs {
  IndexerQueries q;
  PagedKeys keys;
  const int32_t* context_lens;
  float* logits;
  int64_t n_cols;
  int* inexact;
};

template <IndexerFormat F, ScoreStorage S>
using Smem = decode_tile::Smem<F, S, kStages>;

// The copies of keys [64 tile, +64) of sequence b (those < len) into stage st.
template <IndexerFormat F, ScoreStorage S, IndexerCacheLayout L>
__device__ inline void load_tile(Smem<F, S>& sm, int st, int64_t tile, int64_t len, const PagedKeys& keys, int64_t b,
                                 int t) {
  constexpr int kCb = code_bytes(F);
  const int32_t* table = keys.block_table + b * keys.table_stride;
  if constexpr (L == IndexerCacheLayout::deepgemm) {
    // FP8: thread u copies key row u % 64, the 32-byte sector u / 64 (two 16-byte halves through L1);
    // FP4: row-major staging, 4 chunks a key, consecutive threads contiguous.
    constexpr int kUnits = F == IndexerFormat::fp8 ? kTileKeys * 4 : kTileKeys * kCb / 16;
#pragma unroll
    for (int u = t; u < kUnits; u += kThreads) {
      const int row = F == IndexerFormat::fp8 ? u % kTileKeys : u / (kCb / 16);
      const int part = F == IndexerFormat::fp8 ? u / kTileKeys : u % (kCb / 16);
      const int64_t key = tile * kTileKeys + row;
      const bool valid = key < len;
      const int64_t k = valid ? key : 0;  // key 0 of the sequence: a valid address (len > 0 here)
      const KeyOffsets at =
          key_offsets(L, F, keys.page_keys, table[k / keys.page_keys], static_cast<int>(k % keys.page_keys));
      if constexpr (F == IndexerFormat::fp8) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
          copy16_l1(sm.stage_codes[st] + wgmma::tile_offset(kTileKeys, row, 32 * part + 16 * h),
                    keys.pool + at.codes + 32 * part + 16 * h, valid);
      } else {
        copy16(sm.stage_codes[st] + row * kCb + 16 * part, keys.pool + at.codes + 16 * part, valid);
      }
    }
  } else {  // interleaved: slots 4-byte aligned
    constexpr int kWords = kTileKeys * kCb / 4;
#pragma unroll 4
    for (int u = t; u < kWords; u += kThreads) {
      const int row = u / (kCb / 4), word = u % (kCb / 4);
      const int64_t key = tile * kTileKeys + row;
      const bool valid = key < len;
      const int64_t k = valid ? key : 0;
      const KeyOffsets at =
          key_offsets(L, F, keys.page_keys, table[k / keys.page_keys], static_cast<int>(k % keys.page_keys));
      uint8_t* dst = F == IndexerFormat::fp8 ? sm.stage_codes[st] + wgmma::tile_offset(kTileKeys, row, 4 * word)
                                             : sm.stage_codes[st] + row * kCb + 4 * word;
      copy4(dst, keys.pool + at.codes + 4 * word, valid);
    }
  }
  if (t < kTileKeys) {  // one scale word a key
    const int64_t key = tile * kTileKeys + t;
    const bool valid = key < len;
    const int64_t k = valid ? key : 0;
    const KeyOffsets at =
        key_offsets(L, F, keys.page_keys, table[k / keys.page_keys], static_cast<int>(k % keys.page_keys));
    copy4(sm.stage_scales[st] + 4 * t, keys.pool + at.scale_word, valid);
  }
}

template <IndexerFormat F, ScoreStorage S, IndexerCacheLayout L>
__global__ void __launch_bounds__(kThreads) decode_logits_v2(const DecodeArgs a) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  Smem<F, S>& sm = *reinterpret_cast<Smem<F, S>*>(smem_raw);
  const int t = threadIdx.x;
  const int64_t b = blockIdx.x;
  const int64_t len = a.context_lens[b];
  const ChunkTiles chunk = chunk_tiles(len, a.n_cols);
  float* out_row = a.logits + b * a.n_cols;
  write_keyless_tiles(out_row, chunk, a.n_cols, t, kThreads);
  const int64_t n_tiles = chunk.last - chunk.begin;
  if (n_tiles <= 0) return;

  for (int p = 0; p < kStages - 1; ++p) {
    if (p < n_tiles) load_tile<F, S, L>(sm, p, chunk.begin + p, len, a.keys, b, t);
    copy_commit();
  }
  float row_weights[2];
  {
    int inexact = 0;
    build_query<F>(sm.a, a.q.codes + b * kHeads * code_bytes(F), a.q.scales + b * kHeads * kIndexerScaleBytes,
                   a.q.weights + b * kHeads, t, row_weights, inexact);
    if (F == IndexerFormat::fp4 && a.inexact != nullptr && inexact > 0) atomicAdd(a.inexact, inexact);
  }

  for (int64_t it = 0; it < n_tiles; ++it) {
    const int st = static_cast<int>(it % kStages);
    copy_wait<kStages - 2>();
    wgmma::fence_shared_for_async();
    __syncthreads();
    if (it + kStages - 1 < n_tiles)
      load_tile<F, S, L>(sm, (st + kStages - 1) % kStages, chunk.begin + it + kStages - 1, len, a.keys, b, t);
    copy_commit();
    score_tile<F, S>(sm.a, sm.stage_codes[st], sm.stage_scales[st], sm.scratch, row_weights, out_row,
                     (chunk.begin + it) * kTileKeys, len, a.n_cols, t, 0);
  }
}

template <IndexerFormat F, ScoreStorage S, IndexerCacheLayout L>
void launch(const DecodeArgs& a, cudaStream_t stream) {
  launch_chunks(decode_logits_v2<F, S, L>, a, a.q.count, a.n_cols, kThreads, static_cast<int>(sizeof(Smem<F, S>)),
                "indexer_logits_decode v2", stream);
}

}  // namespace

namespace detail {

void decode_logits_v2(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream) {
  if (q.count == 0 || n_cols == 0) return;
  require(q.count <= 0x7fffffffLL, "indexer_logits_decode v2: batch " + std::to_string(q.count) + " too large");
  const DecodeArgs a{q, keys, context_lens, logits, n_cols, inexact};
  dispatch(p.format, p.scores, keys.layout, [&](auto f, auto s, auto l) {
    launch<decltype(f)::value, decltype(s)::value, decltype(l)::value>(a, stream);
  });
}

}  // namespace detail
}  // namespace dsv4::cuda
