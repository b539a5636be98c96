// v4 of the indexer prefill logits (sm_90a; FP8 keys, docs/cuda-indexer.md "Logits prefill v4"):
// v3's persistent grid, work units (prefill_schedule.h) and key-tile ring (prefill_ring.cuh) with
// the MMA's operands swapped: A = 64 keys of the tile (its 128B-swizzled rows), B = the 64 heads
// of two queries (N = 128), so a lane holds 16 heads of each of its keys and the head sum needs a
// 2-round exchange within a quad instead of v3's 3 rounds and 4-warp sum through shared memory.
// A CTA: warps 0-15 are four consumer warpgroups, g = 2 pair + half computing queries 2 pair and
// 2 pair + 1 of each unit against keys 64 half .. 64 half + 63 of each tile; warpgroup 4 is the
// producer warpgroup (one lane: TMA into a 6-stage ring; its registers given to the consumers). Per unit the two
// warpgroups of a pair build its B operand and folded weights w'_h = w_h 2^e_h (one query each, v2's values) between
// two barriers of the pair; per tile a warpgroup waits for the stage, issues 4 m64n128k32, waits for them, releases the
// stage and runs the epilogue (key_major_tile.cuh: v2's arithmetic in v2's tree), each lane storing one logit. Columns
// outside a query's [ks, ke) are -inf exactly; tiles holding no key of the unit's ranges are not read, as in v3.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/mbarrier.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/key_major_tile.cuh"
#include "cuda/indexer/logits_launch.h"
#include "cuda/indexer/prefill_ring.cuh"
#include "cuda/indexer/prefill_schedule.h"

namespace dsv4::cuda {
namespace {

using namespace prefill_ring;
using logits_tile::finish;
using logits_tile::HeadSum;
using logits_tile::kGroupThreads;
using logits_tile::kHeads;
using prefill_v3::kTileKeys;
using prefill_v3::kUnitQueries;

constexpr int kPairs = kUnitQueries / key_major::kPairQueries;  // query pairs of a unit
constexpr int kHalves = kTileKeys / key_major::kKeys;           // 64-key halves of a tile
constexpr int kConsumerGroups = kPairs * kHalves;
constexpr int kConsumerWarps = kConsumerGroups * 4;              // arrivals on an empty barrier
constexpr int kThreads = (kConsumerGroups + 1) * kGroupThreads;  // + the producer warpgroup
constexpr int kStages = 6;
constexpr int kTileBytes = kTileKeys * kIndexerDim;          // one FP8 key tile (16 KiB)
constexpr int kPairRows = key_major::kPairQueries * kHeads;  // N of the MMA
constexpr int kPairBytes = kPairRows * kIndexerDim;          // B operand of a pair (16 KiB)
constexpr int kHalfBytes = key_major::kKeys * kIndexerDim;   // A operand offset of a half
static_assert(kConsumerGroups == 4, "four consumer warpgroups: 2 query pairs x 2 key halves");
// Register budgets (setmaxnreg) as v3's: 96 a thread at launch (65536 / 640, rounded down to 8),
// the producer's one lane needs a few dozen, a consumer the 64-register accumulator, its 32 head
// weights and the epilogue. (A producer warp instead of a warpgroup gains nothing: the fifth warp
// of one scheduler's register file caps the launch at 96 all the same.)
constexpr int kLaunchRegisters = 96, kProducerRegisters = 24, kConsumerRegisters = 112;
static_assert(kGroupThreads * kProducerRegisters + kConsumerGroups * kGroupThreads * kConsumerRegisters <=
                  kThreads * kLaunchRegisters,
              "the register budgets exceed what a 640-thread CTA of one per SM is given");
static_assert(kHalfBytes % wgmma::kSwizzle128AtomBytes == 0, "a half starts on a swizzle atom");

// Shared memory of one CTA (dynamic, its base rounded up to 1024 bytes: the swizzled tiles).
template <ScoreStorage S>
struct Smem {
  alignas(1024) uint8_t b[kStages][kTileBytes];  // key tiles, 128B-swizzled (TMA)
  alignas(128) uint8_t q[kPairs][kPairBytes];    // B operands (wgmma.cuh tile layout, 128 rows)
  alignas(64) uint8_t exchange[kConsumerWarps][key_major::kExchangeBytes<S>];  // the epilogue's, a warp each
  alignas(16) float weights[kPairs][key_major::kWeightFloats];                 // w'_h (weight_slot)
  alignas(8) uint64_t full[kStages];
  uint64_t empty[kStages];
};

// A barrier of the 256 threads of query pair p's two warpgroups (named barrier 1 + p).
__device__ inline void pair_barrier(int p) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + p), "n"(2 * kGroupThreads) : "memory");
}

// A descriptor moved `bytes` further in shared memory (the address field, bits 0-13 of addr >> 4,
// does not carry: shared addresses are below 2^18).
__device__ inline uint64_t descriptor_plus(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// The 4 MMAs of 64 keys against a query pair into acc, committed as one group (not waited for).
// keys: the descriptor of slice 0 of the keys' half tile; pair: of slice 0 of the pair's operand.
__device__ inline void issue_tile_mma(float (&acc)[64], uint64_t keys, uint64_t pair) {
  wgmma::fence();
#pragma unroll
  for (int s = 0; s < 4; ++s)
    wgmma::wgmma_m64n128k32_e4m3(acc, descriptor_plus(keys, 32u * s),
                                 descriptor_plus(pair, 2u * s * kPairRows * wgmma::kChunkBytes), s > 0);
  wgmma::commit();
}

// Query `query` (a missing one builds query 0's, never stored) into rows 64 half .. of the pair's
// B operand and its folded weights, by the 128 threads of one warpgroup (thread t: head t / 2,
// dims 64 (t % 2) .. +63).
// weights: the shared-memory address of the pair's (a 32-bit address: a generic pointer hoisted out of
// the unit loop was spilled).
__device__ inline void build_half(uint8_t* pair_tile, uint32_t weights, const IndexerQueries& q, int64_t query,
                                  int half, int t) {
  const int64_t i = query < q.count ? query : 0;
  const int h = t / 2, k_half = t % 2;
  // One source pointer and constant offsets (four hoisted pointers were spilled across the units).
  const uint4* src = reinterpret_cast<const uint4*>(q.codes + (i * kHeads + h) * kIndexerDim + 64 * k_half);
  uint8_t* dst = pair_tile + wgmma::tile_offset(kPairRows, kHeads * half + h, 64 * k_half);
#pragma unroll
  for (int c = 0; c < 4; ++c)  // 16-byte chunk 4 k_half + c: kPairRows x 16 bytes further each
    *reinterpret_cast<uint4*>(dst + c * kPairRows * wgmma::kChunkBytes) = src[c];
  if (t < kHeads) {  // exact: a power of two (FP8: the scale's byte 0)
    const uint8_t scale = q.scales[(i * kHeads + t) * kIndexerScaleBytes];
    const float w = q.weights[i * kHeads + t] * pow2f(ue8m0_exponent(scale));
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(weights + 4u * key_major::weight_slot(half, t)), "f"(w) : "memory");
  }
}

// Consumer warpgroup `group` (thread tg of it): its pair and half of every unit of the CTA.
template <ScoreStorage S>
__device__ inline void consume(Smem<S>& sm, const PrefillArgs& a, const prefill_v3::Schedule& sched, int group,
                               int tg) {
  // The warpgroup's index through a shuffle: the compiler then knows it is uniform across the warp
  // and keeps the descriptors' arithmetic in uniform registers.
  const int g = __shfl_sync(0xffffffffu, group, 0);
  const int pair = g / kHalves, half = g % kHalves;
  const int warp = tg / 32, lane = tg % 32;
  const int key = key_major::kKeys * half + key_major::out_key(warp, lane);  // this lane's column in a tile
  // Slice 0 of this half of stage 0's tile, and of the pair's operand (the slices and stages are
  // constant offsets from them).
  const uint64_t keys_desc = wgmma::slice_descriptor_sw128(sm.b[0] + kHalfBytes * half, 0);
  const uint64_t pair_desc = wgmma::slice_descriptor(sm.q[pair], kPairRows, 0);
  const uint32_t weights = smem_addr(sm.weights[pair]) + key_major::weight_base(lane);
  const uint32_t exchange = smem_addr(sm.exchange[4 * g + warp]);
  const uint32_t exchange_store = exchange + key_major::store_base(lane);
  const uint32_t exchange_load = exchange + key_major::load_base(lane, key_major::kPieces<S>);
  int st = 0;  // the stage and round of the next tile, as the producer counts them
  uint32_t round = 0;
  const int units = static_cast<int>(sched.units());
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const prefill_v3::Unit w = unit_with_range(sched, a, u);
    const int64_t pair_first = w.first_query + key_major::kPairQueries * pair;
    {  // -inf over the chunk's tiles that are not computed: thread tg, query tg / 64, key tg % 64
      const int64_t qf = pair_first + tg / key_major::kKeys;
      for (int64_t tile = w.chunk_begin; tile < w.chunk_end; ++tile) {
        if (w.computed(tile)) continue;
        const int64_t col = tile * kTileKeys + key_major::kKeys * half + tg % key_major::kKeys;
        if (qf < a.q.count && col < a.n_cols) a.logits[qf * a.n_cols + col] = -INFINITY;
      }
    }
    if (w.last == w.first) continue;  // uniform across the CTA (the unit's ranges); the producer skips it too

    // The pair's B operand and weights. Both warpgroups of the pair have waited for their MMAs of
    // the previous unit and read its weights (the first barrier), then see the whole (the second).
    pair_barrier(pair);
    build_half(sm.q[pair], smem_addr(sm.weights[pair]), a.q, pair_first + half, half, tg);
    wgmma::fence_shared_for_async();
    pair_barrier(pair);
    const int64_t q = pair_first + key_major::out_query(lane);
    const bool has = q < a.q.count;
    // [ks, ke) as ks and a length (0: empty or no query), so that one unsigned compare tests it.
    // This lane's column of the unit's first computed tile, stepped a tile at a time: its distance
    // from ks, the columns left from it (none: no query; capped at 2^30, far above the at most
    // kUnitTiles tiles of a unit), its scale byte and its logit.
    const int64_t ks = has ? a.ks[q] : 0, len = has && a.ke[q] > ks ? a.ke[q] - ks : 0;
    const int64_t first_col = w.first * kTileKeys + key;
    int64_t from_ks = first_col - ks;
    const int64_t left = has ? a.n_cols - first_col : 0;
    int cols_left = static_cast<int>(left < (int64_t{1} << 30) ? left : (int64_t{1} << 30));
    const uint8_t* scale_byte = a.key_scales + first_col * kIndexerScaleBytes;
    float* out = a.logits + (has ? q : 0) * a.n_cols + first_col;
    for (int64_t tile = w.first; tile < w.last; ++tile) {
      const bool in = static_cast<uint64_t>(from_ks) < static_cast<uint64_t>(len);
      const float key_scale = in ? ue8m0_value(*scale_byte) : 1.0f;
      float acc[64];
      mbarrier_wait(smem_addr(&sm.full[st]), round & 1);
      issue_tile_mma(acc, descriptor_plus(keys_desc, static_cast<uint32_t>(st) * kTileBytes), pair_desc);
      wgmma::wait<0>();
      wgmma::fence_operands(acc);
      __syncwarp();
      if (lane == 0) mbarrier_arrive(smem_addr(&sm.empty[st]));  // this warp's reads of the tile are done
      const HeadSum<S> sum = key_major::head_sum<S>(acc, weights, exchange_store, exchange_load, lane);
      if (cols_left > 0) *out = in ? finish<S>(sum, key_scale) : -INFINITY;
      from_ks += kTileKeys;
      cols_left -= kTileKeys;
      scale_byte += kTileKeys * kIndexerScaleBytes;
      out += kTileKeys;
      if (++st == kStages) {
        st = 0;
        ++round;
      }
    }
  }
}

template <ScoreStorage S>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_logits_v4(const __grid_constant__ CUtensorMap keys_map, const PrefillArgs a) {
  persistent_cta<Smem<S>, kStages, kConsumerWarps, kProducerRegisters, kConsumerRegisters, consume<S>>(keys_map, a);
}

template <ScoreStorage S>
KernelShape shape() {
  return {prefill_logits_v4<S>, kThreads, static_cast<int>(sizeof(Smem<S>)) + 1024};  // + the base's rounding to 1024
}

}  // namespace

namespace detail {

void prefill_logits_v4(const LogitsParams& p, const IndexerQueries& q, const DenseKeys& keys, const int32_t* ks,
                       const int32_t* ke, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream) {
  call_prefill(shape<ScoreStorage::bf16>(), shape<ScoreStorage::fp32>(), p, q, keys, ks, ke, logits, n_cols, inexact,
               stream, "indexer_logits_prefill v4");
}

}  // namespace detail
}  // namespace dsv4::cuda
