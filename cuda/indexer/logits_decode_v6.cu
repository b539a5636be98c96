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
// v7 (docs/cuda-indexer.md "Logits decode v7 (TMA-swizzled codes)"; kTensorCodes here): v6 whose
// owner lane copies the FP8 codes of a full tile (64 keys of one page) by one TMA box with the 128-byte
// swizzle, the B operand's layout, so that the consumers' MMA reads the stage in place instead of
// laying the rows out in their scratch first (score_tile's StagedCodes::swizzled_or_rows); the stage is
// then released after the MMA. The tile ending at the length keeps v6's rows. The same MMA operands
// and epilogue: v6's logits bit for bit. FP4 (its codes are unpacked by the consumers anyway) runs v6.
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>

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

// How v6 (rows) and v7 (swizzled full tiles) stage the codes.
template <bool kTensorCodes>
inline constexpr StagedCodes kStaged = kTensorCodes ? StagedCodes::swizzled_or_rows : StagedCodes::rows;
// v7's CTA rounds its dynamic shared memory up to 1024 bytes (the swizzled boxes): that much more.
template <bool kTensorCodes>
inline constexpr int kBaseSlack = kTensorCodes ? 1024 : 0;

// Shared memory of one CTA. v7: a is 8 KiB, so stage_codes starts 1024-byte aligned (asserted below).
template <IndexerFormat F, ScoreStorage S, int kStages, bool kTensorCodes>
struct RingSmem {
  alignas(128) uint8_t a[kQBytes];  // the query's A operand, read by every consumer
  alignas(128) uint8_t stage_codes[kStages][kStageCodes<F>];
  alignas(16) uint8_t stage_scales[kStages][kScaleBytes];
  Scratch<F, S, kStaged<kTensorCodes>> scratch[kConsumers];
  // The stage's copies have landed: the producer's 32 lanes arrive, the tile's owner with the bytes
  // its copies complete.
  alignas(8) uint64_t full[kStages];
  uint64_t empty[kStages];  // its consumer's 4 warps are done reading it
};

// The most stages (at most kMaxStages) for which kCtasPerSm CTAs fit an SM.
template <IndexerFormat F, ScoreStorage S, int kCtasPerSm, bool kTensorCodes, int kStages = kMaxStages>
constexpr int fitting_stages() {
  if constexpr (kStages <= kConsumers + 1 ||
                sizeof(RingSmem<F, S, kStages, kTensorCodes>) + kBaseSlack<kTensorCodes> + kSmemReserved <=
                    kSmemPerSm / kCtasPerSm)
    return kStages;
  else
    return fitting_stages<F, S, kCtasPerSm, kTensorCodes, kStages - 1>();
}

// v5's CTA shape (logits_decode_v4.cu's Config: FP8 2 CTAs an SM at a 72-register cap, FP4 1).
template <IndexerFormat F, ScoreStorage S, bool kTensorCodes>
struct Config {
  static constexpr int kCtasPerSm = F == IndexerFormat::fp8 ? 2 : 1;
  static constexpr int kStages = fitting_stages<F, S, kCtasPerSm, kTensorCodes>();
  using Smem = RingSmem<F, S, kStages, kTensorCodes>;
  static constexpr int kSmemBytes = static_cast<int>(sizeof(Smem)) + kBaseSlack<kTensorCodes>;
  static_assert(kStages > kConsumers + 1, "decode v6: the ring must hold more tiles than the consumers");
  static_assert(!kTensorCodes ||
                    (F == IndexerFormat::fp8 && offsetof(Smem, stage_codes) % 1024 == 0 && kStageCodes<F> % 1024 == 0),
                "decode v7: the swizzled boxes need 1024-byte aligned FP8 stages");
};

// The producer warp: tiles [0, n_tiles) of the chunk into the ring, in order; lane `lane` issues the
// copies of tiles lane, lane + 32, ... (the pages hold a multiple of 64 keys: a tile is one page's
// slots [slot, slot + n_valid)). At the start of each window of 32 tiles every lane works out its
// tile's two sources from the table entry loaded a window earlier, and loads the entry of
// its tile of the next window. Per tile, after the stage's empty barrier: v5's stores for a tile
// ending at the length, then every lane arrives on the full barrier (the owner adding its copies'
// bytes first) and the owner issues the copies. v7 (kTensorCodes): a full tile's codes are one TMA
// box of codes_map (the pool's pages, tensor_map_page_rows_sw128) at (slot, page).
template <IndexerFormat F, ScoreStorage S, bool kTensorCodes>
__device__ inline void produce(typename Config<F, S, kTensorCodes>::Smem& sm, const SequencePages& s,
                               uint32_t chunk_first_key, int n_tiles, int lane, const CUtensorMap* codes_map) {
  using C = Config<F, S, kTensorCodes>;
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
  uint32_t tile_page = 0, tile_slot = 0;                  // the same, v7's box coordinates
  if constexpr (kTensorCodes)
    if (lane == 0) tma_prefetch_map(codes_map);
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
        tile_page = page;
        tile_slot = slot;
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
      if (kTensorCodes && n_valid == kTileKeys)                                   // the same bytes, swizzled
        tma_load_3d(codes0 + kStageCodes<F> * st, codes_map, static_cast<int>(tile_slot), static_cast<int>(tile_page),
                    full);
      else
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
template <IndexerFormat F, ScoreStorage S, bool kTensorCodes>
__device__ inline void consume(typename Config<F, S, kTensorCodes>::Smem& sm, const DecodeArgs& a, int64_t b,
                               int64_t len, int64_t chunk_begin, int n_tiles, int g, int tg) {
  using C = Config<F, S, kTensorCodes>;
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
    score_tile<F, S, kStaged<kTensorCodes>>(
        a_tile, sm.stage_codes[st], sm.stage_scales[st], sm.scratch[g], row_weights, out_row,
        (chunk_begin + j) * kTileKeys, len, a.n_cols, tg, g, [&] {
          __syncwarp();
          if (lane == 0) mbarrier_arrive(smem_addr(&sm.empty[st]));  // this warp's reads are done
        });
  }
}

// The CTA of sequence blockIdx.x, chunk blockIdx.y; smem_raw its dynamic shared memory (v7: rounded
// up to 1024 bytes here, Config::kSmemBytes allocated), codes_map v7's tensor map (v6: unused).
template <IndexerFormat F, ScoreStorage S, bool kTensorCodes>
__device__ __forceinline__ void run_chunk(uint8_t* smem_raw, const DecodeArgs& a, const CUtensorMap* codes_map) {
  using C = Config<F, S, kTensorCodes>;
  if constexpr (kTensorCodes) smem_raw += (1024 - smem_addr(smem_raw) % 1024) % 1024;
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
    produce<F, S, kTensorCodes>(sm, pages, static_cast<uint32_t>(chunk.begin * kTileKeys), n_tiles, lane, codes_map);
    return;
  }
  consume<F, S, kTensorCodes>(sm, a, b, len, chunk.begin, n_tiles, warp / 4, t % kGroupThreads);
}

template <IndexerFormat F, ScoreStorage S>
__global__ void __launch_bounds__(kThreads, Config<F, S, false>::kCtasPerSm) decode_logits_v6(const DecodeArgs a) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  run_chunk<F, S, false>(smem_raw, a, nullptr);
}

// v7: codes_map the pool's pages (tensor_map_page_rows_sw128), a kernel parameter (the TMA reads it
// from the parameter space).
template <IndexerFormat F, ScoreStorage S>
__global__ void __launch_bounds__(kThreads, Config<F, S, true>::kCtasPerSm)
    decode_logits_v7(const DecodeArgs a, const __grid_constant__ CUtensorMap codes_map) {
  extern __shared__ __align__(128) uint8_t smem_raw[];
  run_chunk<F, S, true>(smem_raw, a, &codes_map);
}

template <IndexerFormat F, ScoreStorage S>
void launch(const DecodeArgs& a, cudaStream_t stream, const char* who) {
  launch_chunks(decode_logits_v6<F, S>, a, a.q.count, a.n_cols, kThreads, Config<F, S, false>::kSmemBytes, who, stream);
}

template <ScoreStorage S>
void launch_v7(const DecodeArgs& a, const CUtensorMap& codes_map, cudaStream_t stream, const char* who) {
  launch_chunks(decode_logits_v7<IndexerFormat::fp8, S>, a, a.q.count, a.n_cols, kThreads,
                Config<IndexerFormat::fp8, S, true>::kSmemBytes, who, stream, codes_map);
}

static_assert(page_walk::kTileKeys == kTileKeys, "page_walk's bulk runs are for a 64-key tile");

// v6's and v7's pages: DeepGEMM's, of a multiple of 64 keys, so that every tile lies in one page.
bool tiles_within_pages(const PagedKeys& keys) {
  return keys.layout == IndexerCacheLayout::deepgemm && keys.page_keys % kTileKeys == 0;
}

}  // namespace

namespace detail {

void decode_logits_v6(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream) {
  if (q.count == 0 || n_cols == 0) return;
  if (!tiles_within_pages(keys)) {
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

void decode_logits_v7(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream) {
  if (q.count == 0 || n_cols == 0) return;
  // FP4, v6's fallbacks, and an empty pool (no key to read, no tensor map to make).
  if (p.format != IndexerFormat::fp8 || !tiles_within_pages(keys) || keys.pool_pages < 1) {
    decode_logits_v6(p, q, keys, context_lens, logits, n_cols, inexact, stream);
    return;
  }
  const char* who = "indexer_logits_decode v7";
  const DecodeArgs a = walk_args(q, keys, context_lens, logits, n_cols, inexact, who);
  // The pool as [pool_pages][page_keys][128] code bytes (a DeepGEMM page: its keys' codes, then their
  // scale words; cache_layout.cuh), a box a full tile.
  const CUtensorMap codes_map =
      tensor_map_page_rows_sw128(keys.pool, keys.pool_pages, keys.page_keys, keys.page_bytes(), kTileKeys, who);
  if (p.scores == ScoreStorage::bf16)
    launch_v7<ScoreStorage::bf16>(a, codes_map, stream, who);
  else
    launch_v7<ScoreStorage::fp32>(a, codes_map, stream, who);
}

}  // namespace detail
}  // namespace dsv4::cuda
