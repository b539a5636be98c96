// v3 of the indexer prefill logits (sm_90a; FP8 keys, docs/cuda-indexer.md "Logits prefill v3"): a
// persistent grid of one CTA an SM working through units of 4 queries x 16 column tiles
// (prefill_schedule.h). Warpgroup 4 is the producer (its registers mostly given to the consumers
// with setmaxnreg): one lane of warp 16 loads each computed 128-key tile with one
// TMA (128-byte swizzle) into a 6-stage ring of mbarriers (full: the tile's 16 KiB have landed;
// empty: the 16 consumer warps are done reading it). Warps 0-15 are four consumer warpgroups of
// one query each: per unit they build their query's A operand (v2's build_query), then per tile
// issue one m64n128 MMA group, wait for it, release the stage and run the epilogue; with four
// warps a scheduler, one warpgroup's epilogue runs while the others' MMAs are in flight. The
// epilogue is v2's (head_sum, finish: logits_tile.cuh) and the MMA v2's instruction
// on the same operand values, so the logits are v2's bit for bit. The key's scale byte is read by
// the thread that owns its column, from global memory, only for columns in its query's range.
// Columns outside a query's [ks, ke) are -inf exactly; tiles holding no key of the unit's ranges
// are not read; a computed tile's keys outside the ranges are read (rows below keys.count; TMA
// fills the rest with zeros) and their columns written -inf.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/mbarrier.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/logits_launch.h"
#include "cuda/indexer/logits_tile.cuh"
#include "cuda/indexer/prefill_ring.cuh"
#include "cuda/indexer/prefill_schedule.h"

namespace dsv4::cuda {
namespace {

using namespace logits_tile;
using namespace prefill_ring;
using prefill_v3::kTileKeys;
using prefill_v3::kUnitQueries;

constexpr int kConsumerGroups = 4;                               // warpgroups, one query each
constexpr int kConsumerWarps = kConsumerGroups * 4;              // arrivals on an empty barrier
constexpr int kThreads = (kConsumerGroups + 1) * kGroupThreads;  // + the producer warpgroup
constexpr int kStages = 6;
// Register budgets (setmaxnreg) out of the 640 x 96 a CTA of 640 threads is given (65536 / 640,
// rounded down to the allocation's 8): the producer's one lane needs a few dozen, a consumer one
// 64-register accumulator and the epilogue.
constexpr int kLaunchRegisters = 96, kProducerRegisters = 24, kConsumerRegisters = 112;
static_assert(kGroupThreads * kProducerRegisters + kConsumerGroups * kGroupThreads * kConsumerRegisters <=
                  kThreads * kLaunchRegisters,
              "the register budgets exceed what a 640-thread CTA of one per SM is given");
constexpr int kTileBytes = kTileKeys * kIndexerDim;  // one FP8 key tile (16 KiB)
static_assert(kUnitQueries == kConsumerGroups, "a consumer warpgroup holds one query of a unit");

// Shared memory of one CTA (dynamic, its base rounded up to 1024 bytes: the swizzled tiles).
template <ScoreStorage S>
struct Smem {
  alignas(1024) uint8_t b[kStages][kTileBytes];    // key tiles, 128B-swizzled (TMA)
  alignas(128) uint8_t a[kUnitQueries][kQBytes];   // the unit's A operands (wgmma.cuh tile layout)
  HeadSum<S> red[kConsumerGroups][4 * kTileKeys];  // head_sum's exchange, per warpgroup
  alignas(8) uint64_t full[kStages];
  uint64_t empty[kStages];
};

// The 4 MMAs of one query against one key tile into acc, committed as one group (not waited for).
__device__ inline void issue_tile_mma(float (&acc)[kTileKeys / 2], const uint8_t* a_tile, const uint8_t* b_tile) {
  wgmma::fence();
#pragma unroll
  for (int s = 0; s < 4; ++s)
    wgmma::wgmma_m64n128k32_e4m3(acc, wgmma::slice_descriptor(a_tile, kHeads, s),
                                 wgmma::slice_descriptor_sw128(b_tile, s), s > 0);
  wgmma::commit();
}

// Consumer warpgroup g (thread tg of it): query g of every unit of the CTA.
template <ScoreStorage S>
__device__ inline void consume(Smem<S>& sm, const PrefillArgs& a, const prefill_v3::Schedule& sched, int g, int tg) {
  const int lane = tg % 32;
  int st = 0;  // the stage and round of the next tile, as the producer counts them
  uint32_t round = 0;
  const int units = static_cast<int>(sched.units());
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const prefill_v3::Unit w = unit_with_range(sched, a, u);
    const int64_t q = w.first_query + g;
    const bool has = q < a.q.count;
    const int64_t ks = has ? a.ks[q] : 0, ke = has ? a.ke[q] : 0;
    float* const out = a.logits + q * a.n_cols;
    for (int64_t tile = w.chunk_begin; tile < w.chunk_end; ++tile) {
      if (w.computed(tile)) continue;
      const int64_t col = tile * kTileKeys + tg;
      if (has && col < a.n_cols) out[col] = -INFINITY;
    }
    if (w.last == w.first) continue;  // uniform across the CTA (the unit's ranges); the producer skips it too

    // The query's A operand. The previous unit's MMAs have completed (waited for) and its last
    // epilogue ended on a barrier of this warpgroup: no thread still reads it.
    float rw[2];
    {
      int inexact = 0;                // FP8: always 0
      const int64_t i = has ? q : 0;  // a missing query builds query 0's, never stored
      build_query<IndexerFormat::fp8>(sm.a[g], a.q.codes + i * kHeads * kIndexerDim,
                                      a.q.scales + i * kHeads * kIndexerScaleBytes, a.q.weights + i * kHeads, tg, rw,
                                      inexact);
      wgmma::fence_shared_for_async();
      group_barrier(g);
    }

    for (int64_t tile = w.first; tile < w.last; ++tile) {
      const int64_t col = tile * kTileKeys + tg;
      const bool in = has && col >= ks && col < ke;
      const float key_scale = in ? ue8m0_value(a.key_scales[col * kIndexerScaleBytes]) : 1.0f;
      float acc[kTileKeys / 2];
      mbarrier_wait(smem_addr(&sm.full[st]), round & 1);
      issue_tile_mma(acc, sm.a[g], sm.b[st]);
      wgmma::wait<0>();
      wgmma::fence_operands(acc);
      __syncwarp();
      if (lane == 0) mbarrier_arrive(smem_addr(&sm.empty[st]));  // this warp's reads of the tile are done
      const HeadSum<S> sum = head_sum<S, kTileKeys>(acc, rw, sm.red[g], tg, g);
      if (has && col < a.n_cols) out[col] = in ? finish<S>(sum, key_scale) : -INFINITY;
      if (++st == kStages) {
        st = 0;
        ++round;
      }
    }
  }
}

template <ScoreStorage S>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_logits_v3(const __grid_constant__ CUtensorMap keys_map, const PrefillArgs a) {
  persistent_cta<Smem<S>, kStages, kConsumerWarps, kProducerRegisters, kConsumerRegisters, consume<S>>(keys_map, a);
}

template <ScoreStorage S>
KernelShape shape() {
  return {prefill_logits_v3<S>, kThreads, static_cast<int>(sizeof(Smem<S>)) + 1024};  // + the base's rounding to 1024
}

}  // namespace

namespace detail {

void prefill_logits_v3(const LogitsParams& p, const IndexerQueries& q, const DenseKeys& keys, const int32_t* ks,
                       const int32_t* ke, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream) {
  call_prefill(shape<ScoreStorage::bf16>(), shape<ScoreStorage::fp32>(), p, q, keys, ks, ke, logits, n_cols, inexact,
               stream, "indexer_logits_prefill v3");
}

}  // namespace detail
}  // namespace dsv4::cuda
