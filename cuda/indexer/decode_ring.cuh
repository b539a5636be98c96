#pragma once
// The decode ring of v6 and v7 (sm_90a; docs/cuda-indexer.md "Logits decode v6", "v7"): one producer
// warp copies a sequence's 64-key tiles into a ring of stages with bulk copies (DeepGEMM layout, pages
// of a multiple of 64 keys: a tile is one page's run of codes and one of scale words), three consumer
// warpgroups score them (score_tile, so the logits are v5's bit for bit) against one query operand a
// CTA. v6 runs one work unit (sequence, chunk) a CTA; v7 runs many on the same ring, so the per-unit
// bodies below take the ring's running position: a unit's tile j is the CTA's tile n_first + j, in
// stage (n_first + j) % kStages at phase ((n_first + j) / kStages) & 1, scored by consumer
// (n_first + j) % kConsumers (v6: n_first = 0).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/mbarrier.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/decode_tile.cuh"
#include "cuda/indexer/page_walk.h"

namespace dsv4::cuda::decode_ring {

using namespace decode_tile;
using DecodeArgs = WalkArgs;

inline constexpr int kSmemPerSm = 228 * 1024;  // H100/H200: shared memory an SM
inline constexpr int kSmemReserved = 1024;     // the runtime's share of each CTA
inline constexpr int kMaxStages = 16;
inline constexpr int kConsumers = 3;
inline constexpr int kThreads = kConsumers * kGroupThreads + page_walk::kProducerLanes;
inline constexpr int kProducerWarp = kConsumers * 4;
inline constexpr int kWindow = page_walk::kProducerLanes;  // tiles whose offsets the lanes work out at once
// Named barrier of the consumer warpgroups (0 is __syncthreads, 1 + g warpgroup g's group_barrier).
inline constexpr int kConsumersBarrier = 1 + kConsumers;

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
  static_assert(kStages > kConsumers + 1, "decode ring: the ring must hold more tiles than the consumers");
};

// The ring's barriers, by thread 0; the CTA's __syncthreads must follow before any use.
template <IndexerFormat F, ScoreStorage S>
__device__ inline void init_ring(typename Config<F, S>::Smem& sm) {
  for (int s = 0; s < Config<F, S>::kStages; ++s) {
    mbarrier_init(smem_addr(&sm.full[s]), page_walk::kProducerLanes);
    mbarrier_init(smem_addr(&sm.empty[s]), 4);
  }
  fence_mbarrier_init();
}

// Where the producer's next tile goes: its stage and how many times the ring has wrapped before it.
struct RingSlot {
  int stage = 0;
  uint32_t round = 0;
};

// The producer warp: tiles [0, n_tiles) of one unit (a chunk of one sequence) into the ring, in
// order, from `at` on (advanced past them); lane `lane` issues the copies of the unit's tiles lane,
// lane + 32, ... (the pages hold a multiple of 64 keys: a tile is one page's slots [slot, slot +
// n_valid)). At the start of each window of 32 tiles every lane works out its tile's two sources from
// the table entry loaded a window earlier, and loads the entry of its tile of the next window. Per
// tile, after the stage's empty barrier: v5's stores for a tile ending at the length, then every lane
// arrives on the full barrier (the owner adding its copies' bytes first) and the owner issues the
// copies.
template <IndexerFormat F, ScoreStorage S>
__device__ inline void produce_unit(typename Config<F, S>::Smem& sm, const SequencePages& s, uint32_t chunk_first_key,
                                    int n_tiles, int lane, RingSlot& at) {
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
  int st = at.stage;
  uint32_t round = at.round;
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
        const KeyAt key = locate(s, first + tail + lane);
        *reinterpret_cast<uint32_t*>(scales + kIndexerScaleBytes * (tail + lane)) =
            __ldg(reinterpret_cast<const uint32_t*>(s.pool + key.scale));
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
  at = {st, round};
}

// The query of sequence b for consumer warpgroup g (thread tg of it): consumer 0 builds the A
// operand into sm.a (every consumer reads it), the others take their row weights alone. The
// consumers' barrier (kConsumersBarrier) must follow before any reads the operand.
template <IndexerFormat F, ScoreStorage S>
__device__ inline void prepare_query(typename Config<F, S>::Smem& sm, const DecodeArgs& a, int64_t b, int g, int tg,
                                     float (&row_weights)[2]) {
  const uint8_t* const q_scales = a.q.scales + b * kHeads * kIndexerScaleBytes;
  const float* const q_weights = a.q.weights + b * kHeads;
  if (g == 0) {
    int inexact = 0;
    build_query<F>(sm.a, a.q.codes + b * kHeads * code_bytes(F), q_scales, q_weights, tg, row_weights, inexact);
    // Counted once a unit (a CTA in v6), as v3 to v5 count once a CTA.
    if (F == IndexerFormat::fp4 && a.inexact != nullptr && inexact > 0) atomicAdd(a.inexact, inexact);
    wgmma::fence_shared_for_async();
  } else {
    query_row_weights<F>(q_scales, q_weights, tg, row_weights);
  }
}

// The 384 consumer threads meet (after prepare_query: the operand is built).
__device__ inline void consumers_barrier() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kConsumersBarrier), "n"(kConsumers * kGroupThreads) : "memory");
}

// Consumer warpgroup g (thread tg of it): its tiles of one unit (sequence b of length len, column
// tiles [chunk_begin, chunk_begin + n_tiles)), whose tile j is the CTA's tile n_first + j: the j from
// j_own on, every kConsumers-th, where j_own is the first with (n_first + j) % kConsumers == g
// (first_own_tile; v6: n_first 0, j_own g).
template <IndexerFormat F, ScoreStorage S>
__device__ inline void consume_unit(typename Config<F, S>::Smem& sm, const DecodeArgs& a, const float (&row_weights)[2],
                                    int64_t b, int64_t len, int64_t chunk_begin, int n_tiles, int n_first, int j_own,
                                    int g, int tg) {
  using C = Config<F, S>;
  float* const out_row = a.logits + b * a.n_cols;
  const int lane = tg % 32;
  // Over the CTA's tile index n: the unit's tile n - n_first is column tile first_tile + n.
  const int64_t first_tile = chunk_begin - n_first;
  for (int n = n_first + j_own; n < n_first + n_tiles; n += kConsumers) {
    const int st = n % C::kStages;
    // The operand's address, opaque to the compiler each tile: with the constant one, ptxas kept more
    // values live across the loop and spilled 8 bytes (FP8 bf16 scores, at the 72-register cap).
    const uint8_t* a_tile = sm.a;
    asm volatile("" : "+l"(a_tile));
    mbarrier_wait(smem_addr(&sm.full[st]), static_cast<uint32_t>(n / C::kStages) & 1);
    score_tile<F, S, StagedCodes::rows>(a_tile, sm.stage_codes[st], sm.stage_scales[st], sm.scratch[g], row_weights,
                                        out_row, (first_tile + n) * kTileKeys, len, a.n_cols, tg, g, [&] {
                                          __syncwarp();
                                          if (lane == 0)
                                            mbarrier_arrive(smem_addr(&sm.empty[st]));  // this warp's reads are done
                                        });
  }
}

// The first tile j of a unit whose CTA-wide index n_first + j falls to consumer g.
__device__ inline int first_own_tile(int n_first, int g) {
  return (g - n_first % kConsumers + kConsumers) % kConsumers;
}

// A sequence's pages as the producer sees them. Keys below len < 2^31: a tile's first key fits 32 bits.
__device__ inline SequencePages sequence_pages(const DecodeArgs& a, int64_t b, int64_t len) {
  return {a.keys.pool, a.keys.block_table + b * a.keys.table_stride, a.divider, a.strides, static_cast<uint32_t>(len)};
}

static_assert(page_walk::kTileKeys == kTileKeys, "page_walk's bulk runs are for a 64-key tile");

}  // namespace dsv4::cuda::decode_ring
