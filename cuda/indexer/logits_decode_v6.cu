// v6 of the indexer decode logits over a paged key cache (sm_90a; docs/cuda-indexer.md "Logits
// decode v6"): v5 (logits_decode_v4.cu: the same grid, CTA shape, consumers, ring protocol and tile
// scoring, so the logits are v5's bit for bit) with two changes, for the DeepGEMM layout with pages
// of a multiple of 64 keys (every tile then lies in one page: one run of codes, one of scale words):
//   - the producer warp's tile is one lane's work, not the warp's: lane l owns the tiles j = l mod 32
//     of the chunk, works out their pool offsets a window of 32 tiles at a time (the block-table
//     entries of the next window loaded while this one is copied), and for its tile arrives on the
//     stage's full barrier with the byte count and issues the two bulk copies; the other lanes only
//     arrive. v5's producer walked each tile's page runs in the warp (a multiply-shift split, a
//     shuffle of the table entry, the copies' offsets computed by lane 0 after it: ~130 warp
//     instructions a tile on one dependent chain); here a tile is ~75 (the owner's ~42);
//   - the query's A operand is built once a CTA (by consumer 0) and read by the three consumers,
//     where v5 built three identical copies: 16 KiB freed, two more ring stages (FP8 fp32: 9, v5 7).
// The tile ending at the sequence's length gets v5's treatment (its last n_valid % 4 scale words and
// the zeros past the length stored by the lanes before they arrive). Other page sizes, and the
// interleaved layout, run v5.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/decode_tile.cuh"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/logits_launch.h"
#include "cuda/indexer/page_walk.h"

namespace dsv4::cuda {
namespace {

using namespace decode_tile;
using DecodeArgs = WalkArgs;

constexpr int kSmemPerSm = 228 * 1024;  // H100/H200: shared memory an SM
constexpr int kSmemReserved = 1024;     // the runtime's share of each CTA
constexpr int kMaxStages = 16;
constexpr int kConsumers = 3;
constexpr int kThreads = kConsumers * kGroupThreads + page_walk::kProducerLanes;
constexpr int kProducerWarp = kConsumers * 4;
constexpr int kWindow = page_walk::kProducerLanes;  // tiles whose offsets the lanes work out at once
// Named barrier of the consumer warpgroups (0 is __syncthreads, 1 + g warpgroup g's group_barrier).
constexpr int kConsumersBarrier = 1 + kConsumers;

// Shared memory of one CTA.
template <IndexerFormat F, ScoreStorage S, int kStages>
struct RingSmem {
  alignas(128) uint8_t a[kQBytes];  // the query's A operand, read by every consumer
  alignas(128) uint8_t stage_codes[kStages][kStageCodes<F>];
  alignas(16) uint8_t stage_scales[kStages][kScaleBytes];
  Scratch<F, S, StagedCodes::rows> scratch[kConsumers];
  // The stage's copies have landed: the producer's 32 lanes arrive, the tile's owner with the bytes
  // its copies complete.
  alignas(8) uint64_t full[kStages];
  uint64_t empty[kStages];  // its consumer's 4 warps are done reading it
};

// The most stages (at most kMaxStages) for which kCtasPerSm CTAs fit an SM.
template <IndexerFormat F, ScoreStorage S, int kCtasPerSm, int kStages = kMaxStages>
constexpr int fitting_stages() {
  if constexpr (kStages <= kConsumers + 1 || sizeof(RingSmem<F, S, kStages>) + kSmemReserved <= kSmemPerSm / kCtasPerSm)
    return kStages;
  else
    return fitting_stages<F, S, kCtasPerSm, kStages - 1>();
}

// v5's CTA shape (logits_decode_v4.cu's Config: FP8 2 CTAs an SM at a 72-register cap, FP4 1).
template <IndexerFormat F, ScoreStorage S>
struct Config {
  static constexpr int kCtasPerSm = F == IndexerFormat::fp8 ? 2 : 1;
  static constexpr int kStages = fitting_stages<F, S, kCtasPerSm>();
  using Smem = RingSmem<F, S, kStages>;
  static_assert(kStages > kConsumers + 1, "decode v6: the ring must hold more tiles than the consumers");
};

// The producer warp: tiles [0, n_tiles) of the chunk into the ring, in order; lane `lane` issues the
// copies of tiles lane, lane + 32, ... (the pages hold a multiple of 64 keys: a tile is one page's
// slots [slot, slot + n_valid)). At the start of each window of 32 tiles every lane works out its
// tile's two sources from the table entry loaded a window earlier, and loads the entry of
// its tile of the next window. Per tile, after the stage's empty barrier: v5's stores for a tile
// ending at the length, then every lane arrives on the full barrier (the owner adding its copies'
// bytes first) and the owner issues the copies.
template <IndexerFormat F, ScoreStorage S>
__device__ inline void produce(typename Config<F, S>::Smem& sm, const SequencePages& s, uint32_t chunk_first_key,
                               int n_tiles, int lane) {
  using C = Config<F, S>;
  constexpr uint32_t kCb = code_bytes(F);
  const auto first_key = [&](int tile) { return chunk_first_key + static_cast<uint32_t>(tile) * kTileKeys; };
  const auto entry = [&](int tile) {  // the block-table entry of the page holding the tile (0 past the chunk)
    return tile < n_tiles ? __ldg(s.table + page_walk::split(s.divider, first_key(tile)).page) : 0;
  };
  // The ring's shared addresses, opaque to the compiler: otherwise it rebuilds them from the CTA's
  // shared window (an S2R of SR_CgaCtaId on the tile's chain) at every use.
  uint32_t codes0 = smem_addr(sm.stage_codes[0]), scales0 = smem_addr(sm.stage_scales[0]);
  uint32_t full0 = smem_addr(&sm.full[0]), empty0 = smem_addr(&sm.empty[0]);
  asm volatile("" : "+r"(codes0), "+r"(scales0), "+r"(full0), "+r"(empty0));
  int32_t next_page = entry(lane);
  const uint8_t *code_src = s.pool, *scale_src = s.pool;  // this lane's tile of the current window
  int st = 0;
  uint32_t round = 0;
  for (int j = 0; j < n_tiles; ++j) {
    if (j % kWindow == 0) {  // warp-uniform
      const int mine = j + lane;
      const uint32_t page = static_cast<uint32_t>(next_page);
      next_page = entry(mine + kWindow);
      if (mine < n_tiles) {
        const uint32_t first = first_key(mine);
        const uint32_t slot = page_walk::split(s.divider, first).slot;
        code_src = s.pool + page_walk::code_offset(s.strides, page, slot);
        scale_src = s.pool + page_walk::scale_offset(s.strides, page, slot);
      }
    }
    const uint32_t first = first_key(j);
    const uint32_t n_valid = min(static_cast<uint32_t>(kTileKeys), s.len - first);
    if (round > 0) mbarrier_wait(empty0 + 8 * st, (round - 1) & 1);
    if (n_valid < kTileKeys) {  // v5's tail: the scale words the bulk copy leaves, zeros past the length
      uint8_t* const codes = sm.stage_codes[st];
      uint8_t* const scales = sm.stage_scales[st];
      const uint32_t tail = page_walk::bulk_scale_keys(n_valid);
      if (tail + lane < n_valid) {
        const KeyAt at = locate(s, first + tail + lane);
        *reinterpret_cast<uint32_t*>(scales + kIndexerScaleBytes * (tail + lane)) =
            __ldg(reinterpret_cast<const uint32_t*>(s.pool + at.scale));
      }
      for (uint32_t u = n_valid * (kCb / 16) + lane; u < kTileKeys * (kCb / 16); u += 32)
        reinterpret_cast<uint4*>(codes)[u] = make_uint4(0, 0, 0, 0);
      for (uint32_t r = n_valid + lane; r < kTileKeys; r += 32)
        *reinterpret_cast<uint32_t*>(scales + kIndexerScaleBytes * r) = 0;
    }
    const uint32_t full = full0 + 8 * st;
    if (lane == j % kWindow) {                                                    // this lane's tile
      mbarrier_arrive_expect_tx(full, page_walk::bulk_tile_bytes(kCb, n_valid));  // before its copies
      bulk_load(codes0 + kStageCodes<F> * st, code_src, kCb * n_valid, full);
      const uint32_t scale_keys = page_walk::bulk_scale_keys(n_valid);
      if (scale_keys > 0) bulk_load(scales0 + kScaleBytes * st, scale_src, kIndexerScaleBytes * scale_keys, full);
    } else {
      mbarrier_arrive(full);
    }
    if (++st == C::kStages) {
      st = 0;
      ++round;
    }
  }
}

// Consumer warpgroup g (thread tg of it): tiles g, g + kConsumers, ... of the chunk. Consumer 0
// builds the query's operand; all three meet on the consumers' barrier before their first MMA.
template <IndexerFormat F, ScoreStorage S>
__device__ inline void consume(typename Config<F, S>::Smem& sm, const DecodeArgs& a, int64_t b, int64_t len,
                               int64_t chunk_begin, int n_tiles, int g, int tg) {
  using C = Config<F, S>;
  const uint8_t* const q_scales = a.q.scales + b * kHeads * kIndexerScaleBytes;
  const float* const q_weights = a.q.weights + b * kHeads;
  float row_weights[2];
  if (g == 0) {
    int inexact = 0;
    build_query<F>(sm.a, a.q.codes + b * kHeads * code_bytes(F), q_scales, q_weights, tg, row_weights, inexact);
    // Counted once a CTA, as v3 to v5 do.
    if (F == IndexerFormat::fp4 && a.inexact != nullptr && inexact > 0) atomicAdd(a.inexact, inexact);
    wgmma::fence_shared_for_async();
  } else {
    query_row_weights<F>(q_scales, q_weights, tg, row_weights);
  }
  asm volatile("bar.sync %0, %1;\n" ::"n"(kConsumersBarrier), "n"(kConsumers * kGroupThreads) : "memory");
  float* const out_row = a.logits + b * a.n_cols;
  const int lane = tg % 32;
  for (int j = g; j < n_tiles; j += kConsumers) {
    const int st = j % C::kStages;
    // The operand's address, opaque to the compiler each tile: with the constant one, ptxas kept more
    // values live across the loop and spilled 8 bytes (FP8 bf16 scores, at the 72-register cap).
    const uint8_t* a_tile = sm.a;
    asm volatile("" : "+l"(a_tile));
    wait_for_tile<C::kStages, kConsumers>(smem_addr(&sm.full[st]), smem_addr(&sm.empty[st]), j);
    score_tile<F, S, StagedCodes::rows>(a_tile, sm.stage_codes[st], sm.stage_scales[st], sm.scratch[g], row_weights,
                                        out_row, (chunk_begin + j) * kTileKeys, len, a.n_cols, tg, g, [&] {
                                          __syncwarp();
                                          if (lane == 0)
                                            mbarrier_arrive(smem_addr(&sm.empty[st]));  // this warp's reads are done
                                        });
  }
}

// The CTA of sequence blockIdx.x, chunk blockIdx.y.
template <IndexerFormat F, ScoreStorage S>
__global__ void __launch_bounds__(kThreads, Config<F, S>::kCtasPerSm) decode_logits_v6(const DecodeArgs a) {
  using C = Config<F, S>;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  typename C::Smem& sm = *reinterpret_cast<typename C::Smem*>(smem_raw);
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int64_t b = blockIdx.x;
  const int64_t len = a.context_lens[b];
  const ChunkTiles chunk = chunk_tiles(len, a.n_cols);
  write_keyless_tiles(a.logits + b * a.n_cols, chunk, a.n_cols, t, kThreads);
  const int n_tiles = static_cast<int>(chunk.last - chunk.begin);
  if (n_tiles <= 0) return;  // uniform across the CTA

  if (t == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      mbarrier_init(smem_addr(&sm.full[s]), page_walk::kProducerLanes);
      mbarrier_init(smem_addr(&sm.empty[s]), 4);
    }
    fence_mbarrier_init();
  }
  __syncthreads();
  if (warp == kProducerWarp) {
    // Keys below len < 2^31: a tile's first key fits 32 bits.
    const SequencePages pages{a.keys.pool, a.keys.block_table + b * a.keys.table_stride, a.divider, a.strides,
                              static_cast<uint32_t>(len)};
    produce<F, S>(sm, pages, static_cast<uint32_t>(chunk.begin * kTileKeys), n_tiles, lane);
    return;
  }
  consume<F, S>(sm, a, b, len, chunk.begin, n_tiles, warp / 4, t % kGroupThreads);
}

template <IndexerFormat F, ScoreStorage S>
void launch(const DecodeArgs& a, cudaStream_t stream, const char* who) {
  launch_chunks(decode_logits_v6<F, S>, a, a.q.count, a.n_cols, kThreads,
                static_cast<int>(sizeof(typename Config<F, S>::Smem)), who, stream);
}

static_assert(page_walk::kTileKeys == kTileKeys, "page_walk's bulk runs are for a 64-key tile");

}  // namespace

namespace detail {

void decode_logits_v6(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream) {
  if (q.count == 0 || n_cols == 0) return;
  if (keys.layout != IndexerCacheLayout::deepgemm || keys.page_keys % kTileKeys != 0) {
    decode_logits_v5(p, q, keys, context_lens, logits, n_cols, inexact, stream);  // a tile may span pages
    return;
  }
  const char* who = "indexer_logits_decode v6";
  const DecodeArgs a = walk_args(q, keys, context_lens, logits, n_cols, inexact, who);
  dispatch(p.format, p.scores, keys.layout, [&](auto f, auto s, auto l) {
    if constexpr (decltype(l)::value == IndexerCacheLayout::deepgemm)
      launch<decltype(f)::value, decltype(s)::value>(a, stream, who);
  });
}

}  // namespace detail
}  // namespace dsv4::cuda
