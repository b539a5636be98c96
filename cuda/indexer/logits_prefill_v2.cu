// v2 of the indexer prefill logits (sm_90a, wgmma): a CTA of 2 warpgroups = 2 queries (64 heads
// each, the A operand built once) walks a chunk of 128-key column tiles; the keys stream through a
// 3-stage cp.async ring in shared memory (FP4 codes unpacked to e4m3 once per tile for both
// queries); each warpgroup runs the tile MMA and its epilogue (logits_tile.cuh) and stores 128
// logits of its query. Columns outside a query's [ks, ke) are -inf exactly; keys outside the
// CTA's [min ks, max ke) are never read (their rows are zero-filled).
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/common/numerics.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/logits_launch.h"
#include "cuda/indexer/logits_tile.cuh"

namespace dsv4::cuda {
namespace {

using namespace logits_tile;

constexpr int kTileKeys = 128;  // N
constexpr int kGroups = 2;      // queries per CTA
constexpr int kThreads = kGroups * kGroupThreads;
constexpr int kStages = 3;
constexpr int kTilesPerCta = 16;                             // a CTA's chunk of column tiles (2048 keys)
constexpr int kBBytes = kTileKeys * kIndexerDim;             // e4m3 B operand of a tile
constexpr int kScaleBytes = kTileKeys * kIndexerScaleBytes;  // the tile's scale words

struct PrefillArgs {
  IndexerQueries q;
  DenseKeys keys;
  const int32_t* ks;
  const int32_t* ke;
  float* logits;
  int64_t n_cols;
  int* inexact;  // FP4: elements whose relative q scale left the e4m3 grid (nullptr: not counted)
};

// Shared memory of one CTA (dynamic; 16-byte aligned pieces).
template <IndexerFormat F, ScoreStorage S>
struct Smem {
  static constexpr int kStageCodes = kTileKeys * code_bytes(F);  // FP8: the B operand; FP4: packed
  alignas(128) uint8_t a[kGroups][kQBytes];
  alignas(128) uint8_t stage_codes[kStages][kStageCodes];
  alignas(16) uint8_t stage_scales[kStages][kScaleBytes];
  alignas(128) uint8_t b_unpacked[F == IndexerFormat::fp4 ? kBBytes : 16];
  float slice_scale[F == IndexerFormat::fp4 ? 4 : 1][kTileKeys];
  HeadSum<S> red[kGroups][4 * kTileKeys];
};

// Issues the copies of column tile `tile` (keys 128 tile ..) into stage `st`; keys outside
// [lo, hi) are zero-filled from a clamped (valid) address.
template <IndexerFormat F, ScoreStorage S>
__device__ inline void load_tile(Smem<F, S>& sm, int st, int64_t tile, int64_t lo, int64_t hi, const DenseKeys& keys,
                                 int t) {
  constexpr int kCb = code_bytes(F);
  if constexpr (F == IndexerFormat::fp8) {
    // Thread u: key row u % 128, 16-byte chunks 2p and 2p + 1 (p = u / 128, one 32-byte sector):
    // consecutive threads store consecutive rows of a chunk (conflict-free in the tile layout).
#pragma unroll
    for (int u = t; u < kTileKeys * 4; u += kThreads) {
      const int row = u % kTileKeys, pair = u / kTileKeys;
      const int64_t key = tile * kTileKeys + row;
      const bool valid = key >= lo && key < hi;
      const uint8_t* src = keys.codes + (valid ? key : lo) * kCb + 32 * pair;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        copy16_l1(sm.stage_codes[st] + wgmma::tile_offset(kTileKeys, row, 32 * pair + 16 * h), src + 16 * h, valid);
    }
  } else {  // packed FP4, row-major staging: 4 chunks a key, consecutive threads contiguous
#pragma unroll
    for (int u = t; u < kTileKeys * kCb / 16; u += kThreads) {
      const int row = u / (kCb / 16), chunk = u % (kCb / 16);
      const int64_t key = tile * kTileKeys + row;
      const bool valid = key >= lo && key < hi;
      copy16(sm.stage_codes[st] + row * kCb + 16 * chunk, keys.codes + (valid ? key : lo) * kCb + 16 * chunk, valid);
    }
  }
  if (t < kScaleBytes / 16) {  // 4 keys' scale words a thread
    const int64_t key = tile * kTileKeys + 4 * t;
    const bool valid = key >= lo && key + 3 < hi;  // the 4 keys are inside [lo, hi) or each copied alone
    if (valid) {
      copy16(sm.stage_scales[st] + 16 * t, keys.scales + key * kIndexerScaleBytes, true);
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool in = key + i >= lo && key + i < hi;
        copy4(sm.stage_scales[st] + 16 * t + 4 * i, keys.scales + (in ? key + i : lo) * kIndexerScaleBytes, in);
      }
    }
  }
}

template <IndexerFormat F, ScoreStorage S>
__global__ void __launch_bounds__(kThreads, F == IndexerFormat::fp8 ? 2 : 1) prefill_logits_v2(const PrefillArgs a) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  Smem<F, S>& sm = *reinterpret_cast<Smem<F, S>*>(smem_raw);
  const int t = threadIdx.x, g = t / kGroupThreads, tg = t % kGroupThreads, lane = t % 32;
  const int64_t query = 2 * static_cast<int64_t>(blockIdx.x) + g;
  const bool has_query = query < a.q.count;

  // The CTA's key range: the union of its queries' ranges.
  int64_t lo = INT64_MAX, hi = 0;
  for (int k = 0; k < kGroups; ++k) {
    const int64_t i = 2 * static_cast<int64_t>(blockIdx.x) + k;
    if (i < a.q.count && a.ke[i] > a.ks[i]) {
      lo = min(lo, static_cast<int64_t>(a.ks[i]));
      hi = max(hi, static_cast<int64_t>(a.ke[i]));
    }
  }
  const int64_t ks = has_query ? a.ks[query] : 0, ke = has_query ? a.ke[query] : 0;
  const int64_t n_col_tiles = (a.n_cols + kTileKeys - 1) / kTileKeys;
  const int64_t chunk_begin = static_cast<int64_t>(blockIdx.y) * kTilesPerCta;
  const int64_t chunk_end = min(chunk_begin + kTilesPerCta, n_col_tiles);
  // Tiles of the chunk that hold keys of [lo, hi): computed; the others are -inf for both queries.
  const int64_t first = hi > lo ? max(chunk_begin, lo / kTileKeys) : chunk_end;
  const int64_t last = hi > lo ? min(chunk_end, (hi + kTileKeys - 1) / kTileKeys) : chunk_end;
  float* out_row = a.logits + query * a.n_cols;
  if (has_query)
    for (int64_t tile = chunk_begin; tile < chunk_end; ++tile) {
      if (tile >= first && tile < last) continue;
      const int64_t col = tile * kTileKeys + tg;
      if (col < a.n_cols) out_row[col] = -INFINITY;
    }
  const int64_t n_tiles = last > first ? last - first : 0;
  if (n_tiles == 0) return;  // uniform across the CTA: lo, hi and the chunk are the CTA's

  for (int p = 0; p < kStages - 1; ++p) {
    if (p < n_tiles) load_tile<F, S>(sm, p, first + p, lo, hi, a.keys, t);
    copy_commit();
  }
  float row_weights[2] = {0, 0};
  {
    int inexact = 0;
    const int64_t qi = has_query ? query : 0;  // a missing query builds query 0's operand, never stored
    build_query<F>(sm.a[g], a.q.codes + qi * kHeads * code_bytes(F), a.q.scales + qi * kHeads * kIndexerScaleBytes,
                   a.q.weights + qi * kHeads, tg, row_weights, inexact);
    if (F == IndexerFormat::fp4 && has_query && a.inexact != nullptr && inexact > 0) atomicAdd(a.inexact, inexact);
  }

  for (int64_t it = 0; it < n_tiles; ++it) {
    const int st = static_cast<int>(it % kStages);
    copy_wait<kStages - 2>();
    wgmma::fence_shared_for_async();
    __syncthreads();  // the tile landed for every thread; every warpgroup is done with the stage refilled below
    if (it + kStages - 1 < n_tiles)
      load_tile<F, S>(sm, (st + kStages - 1) % kStages, first + it + kStages - 1, lo, hi, a.keys, t);
    copy_commit();
    const uint8_t* b_tile = sm.stage_codes[st];
    if constexpr (F == IndexerFormat::fp4) {
      // Unpack the packed codes into the e4m3 tile layout, 2^e of each key's 4 blocks into the
      // slice-scale table, once for both warpgroups.
      unpack_fp4_tile<kTileKeys, kThreads>(sm.b_unpacked, sm.slice_scale, sm.stage_codes[st], sm.stage_scales[st], t);
      wgmma::fence_shared_for_async();
      __syncthreads();
      b_tile = sm.b_unpacked;
    }
    float acc[kTileKeys / 2];
    tile_mma<F, kTileKeys>(acc, sm.a[g], b_tile, lane,
                           [&](int b, int col) { return sm.slice_scale[F == IndexerFormat::fp4 ? b : 0][col]; });
    const HeadSum<S> sum = head_sum<S, kTileKeys>(acc, row_weights, sm.red[g], tg, g);
    const int64_t col = (first + it) * kTileKeys + tg;
    if (has_query && col < a.n_cols) {
      float key_scale = 1.0f;  // FP4: the key's block scales are in the sum already
      if constexpr (F == IndexerFormat::fp8) key_scale = ue8m0_value(sm.stage_scales[st][tg * kIndexerScaleBytes]);
      out_row[col] = col >= ks && col < ke ? finish<S>(sum, key_scale) : -INFINITY;
    }
  }
}

template <IndexerFormat F, ScoreStorage S>
void launch(const PrefillArgs& a, cudaStream_t stream) {
  const int smem = static_cast<int>(sizeof(Smem<F, S>));
  CUDA_CHECK(cudaFuncSetAttribute(prefill_logits_v2<F, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const int64_t n_col_tiles = (a.n_cols + kTileKeys - 1) / kTileKeys;
  const dim3 grid(detail::grid_blocks(a.q.count, kGroups, "indexer_logits_prefill v2"),
                  static_cast<unsigned>((n_col_tiles + kTilesPerCta - 1) / kTilesPerCta));
  detail::require(grid.y <= 65535, "indexer_logits_prefill v2: " + std::to_string(a.n_cols) +
                                       " columns need more than 65535 chunks of 2048");
  prefill_logits_v2<F, S><<<grid, kThreads, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

namespace detail {

void prefill_logits_v2(const LogitsParams& p, const IndexerQueries& q, const DenseKeys& keys, const int32_t* ks,
                       const int32_t* ke, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream) {
  if (q.count == 0 || n_cols == 0) return;
  const PrefillArgs a{q, keys, ks, ke, logits, n_cols, inexact};
  if (p.format == IndexerFormat::fp4)
    p.scores == ScoreStorage::bf16 ? launch<IndexerFormat::fp4, ScoreStorage::bf16>(a, stream)
                                   : launch<IndexerFormat::fp4, ScoreStorage::fp32>(a, stream);
  else
    p.scores == ScoreStorage::bf16 ? launch<IndexerFormat::fp8, ScoreStorage::bf16>(a, stream)
                                   : launch<IndexerFormat::fp8, ScoreStorage::fp32>(a, stream);
}

}  // namespace detail
}  // namespace dsv4::cuda
