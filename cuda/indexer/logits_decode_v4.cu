// v4 of the indexer decode logits over a paged key cache (sm_90a; docs/cuda-indexer.md "Logits
// decode v4"): v3's work split (a CTA per sequence and chunk of 4096 keys) and v3's scoring of a
// 64-key tile (decode_tile.cuh), so the logits are v3's bit for bit; what changes is who waits for
// what. v3's one warpgroup copied, waited, scored and copied again: one dependent chain a CTA, 4 an
// SM. Here a CTA is kConsumers consumer warpgroups and one producer warp around a ring of kStages
// tiles with mbarriers:
//   - the producer warp (the last warp) walks the chunk's tiles in order with cp.async (page_walk.h:
//     DeepGEMM layout 16-byte copies, each lane looking up 4 keys; interleaved 4-byte copies with
//     the offsets shuffled from the lane that looked the key up), keeps kInFlight tiles' copy groups
//     in flight, and for the oldest waits for its group, fences its writes for the async proxy (the
//     MMA reads them) and arrives on the stage's full barrier (32 arrivals); it refills a stage once
//     its empty barrier completes;
//   - consumer warpgroup c scores tiles c, c + kConsumers, ...: waits on the stage's full barrier,
//     runs score_tile with its own A operand (built once, v3's build_query), each warp arriving on
//     the stage's empty barrier (4 arrivals) as soon as its MMA has completed, before the epilogue.
// The tiles past the sequence's length are -inf, written without being read, as in v3; keys past it
// inside a tile are never read (zero-filled) and their columns are -inf.
//
// v5 (docs/cuda-indexer.md "Logits decode v5"; kernel decode_logits_v5) is v4 with another producer
// for the DeepGEMM layout: one lane issues a bulk copy (cp.async.bulk) of each run of the tile's
// keys that share a page, for their codes and for their scale words (page_walk.h's BulkRun), and
// arrives on the stage's full barrier with the bytes they complete (the other lanes arrive too);
// nothing waits for a copy but the consumers. The stage holds the pool's rows, which each consumer
// lays out as the B operand in its scratch (score_tile, StagedCodes::rows) before handing the
// stage back, so the MMA and epilogue, and the logits, are v4's. The interleaved layout (a key's
// codes and scale word side by side) runs v4's producer.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/common/mbarrier.cuh"
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

// How the producer warp copies a tile: v4's 32 lanes of cp.async (any layout), or v5's bulk copies
// of page runs (DeepGEMM layout), the stage then holding the pool's rows.
enum class Copies { lanes, bulk };
template <Copies M>
inline constexpr StagedCodes kStaged = M == Copies::bulk ? StagedCodes::rows : StagedCodes::tile;

// Shared memory of one CTA.
template <IndexerFormat F, ScoreStorage S, Copies M, int kConsumers, int kStages>
struct RingSmem {
  alignas(128) uint8_t a[kConsumers][kQBytes];  // each consumer's A operand
  alignas(128) uint8_t stage_codes[kStages][kStageCodes<F>];
  alignas(16) uint8_t stage_scales[kStages][kScaleBytes];
  Scratch<F, S, kStaged<M>> scratch[kConsumers];
  // The stage's copies have landed: the producer's 32 lanes arrive (bulk: lane 0 with the bytes the
  // copies complete).
  alignas(8) uint64_t full[kStages];
  uint64_t empty[kStages];  // its consumer's 4 warps are done reading it
};

// The most stages (at most kMaxStages) for which kCtasPerSm CTAs fit an SM.
template <IndexerFormat F, ScoreStorage S, Copies M, int kConsumers, int kCtasPerSm, int kStages = kMaxStages>
constexpr int fitting_stages() {
  if constexpr (kStages <= kConsumers + 1 ||
                sizeof(RingSmem<F, S, M, kConsumers, kStages>) + kSmemReserved <= kSmemPerSm / kCtasPerSm)
    return kStages;
  else
    return fitting_stages<F, S, M, kConsumers, kCtasPerSm, kStages - 1>();
}

// The shape of a CTA. An SM's 64 K registers are 4 sub-partitions of 16 K, each holding a quarter of
// the resident warps (rounded up), so a cap is 16384 / (32 x the warps of the fullest sub-partition),
// rounded down to the allocation's 8. FP8: 3 consumers and 2 CTAs an SM (2 x 13 warps: 7 on one
// sub-partition, 72 registers; v2's FP8 kernels used 64-80 uncapped), 6 consumer warpgroups an SM.
// FP4 (two 32-register accumulators a consumer thread: tile_mma's slices; v3 used 122-128): 3
// consumers and 1 CTA an SM (13 warps: cap 128; 4 consumers would be 17 warps, 5 on one
// sub-partition, cap 96, and spilled).
template <IndexerFormat F, ScoreStorage S, Copies M>
struct Config {
  static constexpr int kConsumers = 3;
  static constexpr int kCtasPerSm = F == IndexerFormat::fp8 ? 2 : 1;
  static constexpr int kThreads = kConsumers * kGroupThreads + page_walk::kProducerLanes;
  static constexpr int kProducerWarp = kConsumers * 4;
  static constexpr int kStages = fitting_stages<F, S, M, kConsumers, kCtasPerSm>();
  // lanes: tiles whose copies the producer has issued but not yet signalled. At most kStages -
  // kConsumers, so that every stage it waits for was signalled before (no cycle) and each consumer can
  // hold one. (bulk: the copies signal themselves; every stage a consumer does not hold is in flight.)
  static constexpr int kInFlight = kStages - kConsumers;
  using Smem = RingSmem<F, S, M, kConsumers, kStages>;
  static_assert(kInFlight >= 2, "decode v4: the ring must keep at least 2 tiles in flight");
};

// The producer's copies of keys [first_key, +64) of the sequence (those < len; zeros for the
// others) into one stage: codes (FP8: the tile layout; FP4: row-major) and scale words.
template <IndexerFormat F, IndexerCacheLayout L>
__device__ inline void copy_tile(uint8_t* codes, uint8_t* scales, uint32_t first_key, const SequencePages& s,
                                 int lane) {
  constexpr int kCb = code_bytes(F);
  const auto code_dst = [&](page_walk::CopyUnit u) {
    return F == IndexerFormat::fp8 ? codes + wgmma::tile_offset(kTileKeys, u.row, u.byte)
                                   : codes + u.row * kCb + u.byte;
  };
  if constexpr (L == IndexerCacheLayout::deepgemm) {
#pragma unroll
    for (int j = 0; j < page_walk::kLaneLookups; ++j) {
      const int row = page_walk::producer_deepgemm_unit(lane, j, 0).row;
      const KeyAt at = locate(s, first_key + row);
#pragma unroll
      for (int m = 0; m < kCb / 32; ++m) {
        const page_walk::CopyUnit u = page_walk::producer_deepgemm_unit(lane, j, m);
        copy16(code_dst(u), s.pool + at.codes + u.byte, at.valid);
      }
      if (lane % 2 == 0) copy4(scales + kIndexerScaleBytes * row, s.pool + at.scale, at.valid);
    }
  } else {
    constexpr int kWords = kCb / 4;  // code words a key: FP8 32, FP4 16
    KeyAt mine[2];
    int64_t my_codes[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      mine[i] = locate(s, first_key + 32 * i + lane);
      my_codes[i] = mine[i].valid ? static_cast<int64_t>(mine[i].codes) : -1;
    }
#pragma unroll
    for (int p = 0; p < kTileKeys * kWords / 32; ++p) {
      const page_walk::CopyUnit u = page_walk::producer_interleaved_unit(kWords, lane, p);
      const int64_t at = __shfl_sync(0xffffffffu, my_codes[page_walk::producer_lookup(kWords, p)], u.row % 32);
      const bool valid = at >= 0;
      copy4(code_dst(u), s.pool + (valid ? at : 0) + u.byte, valid);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
      copy4(scales + kIndexerScaleBytes * (32 * i + lane), s.pool + mine[i].scale, mine[i].valid);
  }
}

// The producer warp (v4): tiles [0, n_tiles) of the chunk into the ring, in order.
template <IndexerFormat F, ScoreStorage S, IndexerCacheLayout L>
__device__ inline void produce(typename Config<F, S, Copies::lanes>::Smem& sm, const SequencePages& pages,
                               uint32_t chunk_first_key, int n_tiles, int lane) {
  using C = Config<F, S, Copies::lanes>;
  int st = 0, signal_st = 0;  // the stage of the next tile to copy, and of the oldest not yet signalled
  uint32_t round = 0;         // how often the ring has wrapped before the next tile to copy
  const auto signal_oldest = [&] {
    mbarrier_arrive(smem_addr(&sm.full[signal_st]));
    signal_st = signal_st + 1 == C::kStages ? 0 : signal_st + 1;
  };
  for (int j = 0; j < n_tiles; ++j) {
    if (round > 0) mbarrier_wait(smem_addr(&sm.empty[st]), (round - 1) & 1);
    copy_tile<F, L>(sm.stage_codes[st], sm.stage_scales[st], chunk_first_key + static_cast<uint32_t>(j) * kTileKeys,
                    pages, lane);
    copy_commit();
    if (j >= C::kInFlight - 1) {  // tile j - kInFlight + 1: its copies done, visible to the MMA
      copy_wait<C::kInFlight - 1>();
      wgmma::fence_shared_for_async();
      signal_oldest();
    }
    if (++st == C::kStages) {
      st = 0;
      ++round;
    }
  }
  copy_wait<0>();
  wgmma::fence_shared_for_async();
  for (int j = max(0, n_tiles - C::kInFlight + 1); j < n_tiles; ++j) signal_oldest();
}

// The producer warp (v5, DeepGEMM layout): tiles [0, n_tiles) of the chunk into the ring, in order,
// as bulk copies of page runs, which lane 0 issues. The block-table entries come in windows of 32
// pages, lane i holding page window + i (`current`) and window + 32 + i (`ahead`, loaded a window
// early), so that no copy waits for a table load; runs advance one page at a time, and the window
// with them. A tile ending at the sequence's length also gets, by plain stores of the lanes before
// they arrive, the scale words of its last n_valid % 4 keys and zeros for the keys past the length
// (the chunk's last tile: no later bulk copy writes its stage). Every lane arrives on the full barrier
// (its stores released by its own arrival), lane 0 first adding the copies' bytes.
template <IndexerFormat F, ScoreStorage S>
__device__ inline void produce_bulk(typename Config<F, S, Copies::bulk>::Smem& sm, const SequencePages& s,
                                    uint32_t chunk_first_key, int n_tiles, int lane) {
  using C = Config<F, S, Copies::bulk>;
  constexpr uint32_t kCb = code_bytes(F);
  constexpr uint32_t kWindow = page_walk::kProducerLanes;
  const uint32_t last_page = page_walk::split(s.divider, s.len - 1).page;  // len >= 1: n_tiles > 0
  const auto entry = [&](uint32_t page) { return page <= last_page ? __ldg(s.table + page) : 0; };
  uint32_t window = page_walk::split(s.divider, chunk_first_key).page;
  int32_t current = entry(window + lane), ahead = entry(window + kWindow + lane);
  int st = 0;
  uint32_t round = 0;
  for (int j = 0; j < n_tiles; ++j) {
    const uint32_t first = chunk_first_key + static_cast<uint32_t>(j) * kTileKeys;
    const uint32_t n_valid = min(static_cast<uint32_t>(kTileKeys), s.len - first);
    if (round > 0) mbarrier_wait(smem_addr(&sm.empty[st]), (round - 1) & 1);
    uint8_t* const codes = sm.stage_codes[st];
    uint8_t* const scales = sm.stage_scales[st];
    if (n_valid < kTileKeys) {
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
    const uint32_t full = smem_addr(&sm.full[st]);
    if (lane == 0)
      mbarrier_arrive_expect_tx(full, page_walk::bulk_tile_bytes(kCb, n_valid));  // before its copies
    else
      mbarrier_arrive(full);
    for (uint32_t row = 0; row < n_valid;) {  // warp-uniform: the shuffle needs every lane
      page_walk::BulkRun run = page_walk::bulk_run(s.divider, first, window, row, n_valid);
      if (run.page_index >= kWindow) {  // == kWindow: the walk has reached the next window
        window += kWindow;
        run.page_index -= kWindow;
        current = ahead;
        ahead = entry(window + kWindow + lane);
      }
      const uint32_t page = static_cast<uint32_t>(__shfl_sync(0xffffffffu, current, static_cast<int>(run.page_index)));
      if (lane == 0) {
        bulk_load(smem_addr(codes + kCb * run.row), s.pool + page_walk::code_offset(s.strides, page, run.slot),
                  kCb * run.keys, full);
        const uint32_t scale_keys = page_walk::bulk_scale_keys(run.keys);
        if (scale_keys > 0)
          bulk_load(smem_addr(scales + kIndexerScaleBytes * run.row),
                    s.pool + page_walk::scale_offset(s.strides, page, run.slot), kIndexerScaleBytes * scale_keys, full);
      }
      row += run.keys;
    }
    if (++st == C::kStages) {
      st = 0;
      ++round;
    }
  }
}

// Consumer warpgroup g (thread tg of it): tiles g, g + kConsumers, ... of the chunk.
template <IndexerFormat F, ScoreStorage S, Copies M>
__device__ inline void consume(typename Config<F, S, M>::Smem& sm, const DecodeArgs& a, int64_t b, int64_t len,
                               int64_t chunk_begin, int n_tiles, int g, int tg) {
  using C = Config<F, S, M>;
  float row_weights[2];
  {
    int inexact = 0;
    build_query<F>(sm.a[g], a.q.codes + b * kHeads * code_bytes(F), a.q.scales + b * kHeads * kIndexerScaleBytes,
                   a.q.weights + b * kHeads, tg, row_weights, inexact);
    // Counted once a CTA, as v3 does (every consumer builds the same operand).
    if (F == IndexerFormat::fp4 && g == 0 && a.inexact != nullptr && inexact > 0) atomicAdd(a.inexact, inexact);
    wgmma::fence_shared_for_async();
    group_barrier(g);
  }
  float* const out_row = a.logits + b * a.n_cols;
  const int lane = tg % 32;
  for (int j = g; j < n_tiles; j += C::kConsumers) {
    const int st = j % C::kStages;
    if constexpr (M == Copies::bulk)  // v5: the copies land in any order (decode_tile.cuh)
      wait_for_tile<C::kStages, C::kConsumers>(smem_addr(&sm.full[st]), smem_addr(&sm.empty[st]), j);
    else  // v4: the producer signals the tiles in order, after their copies
      mbarrier_wait(smem_addr(&sm.full[st]), static_cast<uint32_t>(j / C::kStages) & 1);
    score_tile<F, S, kStaged<M>>(sm.a[g], sm.stage_codes[st], sm.stage_scales[st], sm.scratch[g], row_weights, out_row,
                                 (chunk_begin + j) * kTileKeys, len, a.n_cols, tg, g, [&] {
                                   __syncwarp();
                                   if (lane == 0)
                                     mbarrier_arrive(smem_addr(&sm.empty[st]));  // this warp's reads are done
                                 });
  }
}

// The CTA of sequence blockIdx.x, chunk blockIdx.y (v4's and v5's kernels).
template <IndexerFormat F, ScoreStorage S, IndexerCacheLayout L, Copies M>
__device__ inline void decode_chunk(const DecodeArgs& a) {
  using C = Config<F, S, M>;
  static_assert(M == Copies::lanes || L == IndexerCacheLayout::deepgemm, "decode v5: bulk copies of DeepGEMM pages");
  extern __shared__ __align__(128) uint8_t smem_raw[];
  typename C::Smem& sm = *reinterpret_cast<typename C::Smem*>(smem_raw);
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int64_t b = blockIdx.x;
  const int64_t len = a.context_lens[b];
  const ChunkTiles chunk = chunk_tiles(len, a.n_cols);
  write_keyless_tiles(a.logits + b * a.n_cols, chunk, a.n_cols, t, C::kThreads);
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
  if (warp == C::kProducerWarp) {
    // Keys below len < 2^31: a tile's first key fits 32 bits.
    const SequencePages pages{a.keys.pool, a.keys.block_table + b * a.keys.table_stride, a.divider, a.strides,
                              static_cast<uint32_t>(len)};
    if constexpr (M == Copies::bulk)
      produce_bulk<F, S>(sm, pages, static_cast<uint32_t>(chunk.begin * kTileKeys), n_tiles, lane);
    else
      produce<F, S, L>(sm, pages, static_cast<uint32_t>(chunk.begin * kTileKeys), n_tiles, lane);
    return;
  }
  consume<F, S, M>(sm, a, b, len, chunk.begin, n_tiles, warp / 4, t % kGroupThreads);
}

// Two kernel names, so that profilers tell v4 from v5.
template <IndexerFormat F, ScoreStorage S, IndexerCacheLayout L>
__global__ void __launch_bounds__(Config<F, S, Copies::lanes>::kThreads, Config<F, S, Copies::lanes>::kCtasPerSm)
    decode_logits_v4(const DecodeArgs a) {
  decode_chunk<F, S, L, Copies::lanes>(a);
}
template <IndexerFormat F, ScoreStorage S>
__global__ void __launch_bounds__(Config<F, S, Copies::bulk>::kThreads, Config<F, S, Copies::bulk>::kCtasPerSm)
    decode_logits_v5(const DecodeArgs a) {
  decode_chunk<F, S, IndexerCacheLayout::deepgemm, Copies::bulk>(a);
}

template <IndexerFormat F, ScoreStorage S, IndexerCacheLayout L, Copies M>
void launch(const DecodeArgs& a, cudaStream_t stream, const char* who) {
  using C = Config<F, S, M>;
  if constexpr (M == Copies::bulk)
    launch_chunks(decode_logits_v5<F, S>, a, a.q.count, a.n_cols, C::kThreads,
                  static_cast<int>(sizeof(typename C::Smem)), who, stream);
  else
    launch_chunks(decode_logits_v4<F, S, L>, a, a.q.count, a.n_cols, C::kThreads,
                  static_cast<int>(sizeof(typename C::Smem)), who, stream);
}

static_assert(page_walk::kTileKeys == kTileKeys, "page_walk's copy plans are for a 64-key tile");

}  // namespace

namespace detail {

void decode_logits_v4(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream) {
  if (q.count == 0 || n_cols == 0) return;
  const char* who = "indexer_logits_decode v4";
  const DecodeArgs a = walk_args(q, keys, context_lens, logits, n_cols, inexact, who);
  dispatch(p.format, p.scores, keys.layout, [&](auto f, auto s, auto l) {
    launch<decltype(f)::value, decltype(s)::value, decltype(l)::value, Copies::lanes>(a, stream, who);
  });
}

void decode_logits_v5(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream) {
  if (q.count == 0 || n_cols == 0) return;
  const char* who = "indexer_logits_decode v5";
  const DecodeArgs a = walk_args(q, keys, context_lens, logits, n_cols, inexact, who);
  dispatch(p.format, p.scores, keys.layout, [&](auto f, auto s, auto l) {
    constexpr IndexerCacheLayout kLayout = decltype(l)::value;
    launch<decltype(f)::value, decltype(s)::value, kLayout,
           kLayout == IndexerCacheLayout::deepgemm ? Copies::bulk : Copies::lanes>(a, stream, who);
  });
}

}  // namespace detail
}  // namespace dsv4::cuda
