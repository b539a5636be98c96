// v5 of the indexer prefill logits (sm_90a; FP8 keys, docs/cuda-indexer.md "Logits prefill v5"):
// v4's grid, work units (prefill_schedule.h), key-tile ring (prefill_ring.cuh), operand layout
// (A = 64 keys, B = the 64 heads of two queries, m64n128k32) and epilogue (key_major_tile.cuh:
// v2's arithmetic in v2's tree, so v2's logits bit for bit), in two consumer warpgroups instead of
// four. Warpgroup g (warps 4g .. 4g + 3) owns query pair g of each unit and both 64-key halves of
// every tile, with two accumulators: while the epilogue of one half runs, the MMA of the next half
// (the tile's other half, or half 0 of the next tile) is in flight, so a warpgroup's MMAs overlap
// its own epilogues (v4: only the four warpgroups' MMAs and epilogues interleave). Warpgroup 2 is
// the producer (one lane: TMA into a 6-stage ring; its registers given to the consumers, 240 each).
// Per unit a warpgroup builds its pair's B operand and folded weights w'_h = w_h 2^e_h (v2's values)
// between two barriers of its own; columns outside a query's [ks, ke) are -inf exactly; tiles
// holding no key of the unit's ranges are not read, as in v3.
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

constexpr int kConsumerGroups = kUnitQueries / key_major::kPairQueries;  // one a query pair of a unit
constexpr int kHalves = kTileKeys / key_major::kKeys;                    // 64-key halves of a tile
constexpr int kConsumerWarps = kConsumerGroups * 4;                      // arrivals on an empty barrier
constexpr int kThreads = (kConsumerGroups + 1) * kGroupThreads;          // + the producer warpgroup
constexpr int kStages = 6;
constexpr int kTileBytes = kTileKeys * kIndexerDim;          // one FP8 key tile (16 KiB)
constexpr int kPairRows = key_major::kPairQueries * kHeads;  // N of the MMA
constexpr int kPairBytes = kPairRows * kIndexerDim;          // B operand of a pair (16 KiB)
constexpr int kHalfBytes = key_major::kKeys * kIndexerDim;   // A operand offset of a half
static_assert(kConsumerGroups == 2 && kHalves == 2, "two consumer warpgroups of a query pair and two key halves");
// Register budgets (setmaxnreg): 168 a thread at launch (65536 / 384, rounded down to 8), the
// producer's one lane needs a few dozen, a consumer two 64-register accumulators beside v4's epilogue.
constexpr int kLaunchRegisters = 168, kProducerRegisters = 24, kConsumerRegisters = 240;
static_assert(kGroupThreads * kProducerRegisters + kConsumerGroups * kGroupThreads * kConsumerRegisters <=
                  kThreads * kLaunchRegisters,
              "the register budgets exceed what a 384-thread CTA of one per SM is given");
static_assert(kHalfBytes % wgmma::kSwizzle128AtomBytes == 0, "a half starts on a swizzle atom");

// Shared memory of one CTA (dynamic, its base rounded up to 1024 bytes: the swizzled tiles).
template <ScoreStorage S>
struct Smem {
  alignas(1024) uint8_t b[kStages][kTileBytes];         // key tiles, 128B-swizzled (TMA)
  alignas(128) uint8_t q[kConsumerGroups][kPairBytes];  // B operands (wgmma.cuh tile layout, 128 rows)
  alignas(64) uint8_t exchange[kConsumerWarps][key_major::kExchangeBytes<S>];  // the epilogue's, a warp each
  alignas(16) float weights[kConsumerGroups][key_major::kWeightFloats];        // w'_h (weight_slot)
  alignas(8) uint64_t full[kStages];
  uint64_t empty[kStages];
};

// A barrier of the 128 threads of consumer warpgroup g (named barrier 1 + g).
__device__ inline void group_barrier(int g) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + g), "n"(kGroupThreads) : "memory");
}

// A descriptor moved `bytes` further in shared memory (the address field, bits 0-13 of addr >> 4,
// does not carry: shared addresses are below 2^18).
__device__ inline uint64_t descriptor_plus(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

// The 4 MMAs of 64 keys against a query pair into acc, committed as one group (not waited for).
// keys: the descriptor of slice 0 of the keys' half tile; pair: of slice 0 of the pair's operand.
__device__ inline void issue_half_mma(float (&acc)[64], uint64_t keys, uint64_t pair) {
  wgmma::fence();
#pragma unroll
  for (int s = 0; s < 4; ++s)
    wgmma::wgmma_m64n128k32_e4m3(acc, descriptor_plus(keys, 32u * s),
                                 descriptor_plus(pair, 2u * s * kPairRows * wgmma::kChunkBytes), s > 0);
  wgmma::commit();
}

// Query `query` (a missing one builds query 0's, never stored) into rows 64 qi .. of the pair's
// B operand and its folded weights, by the 128 threads of the warpgroup (thread t: head t / 2,
// dims 64 (t % 2) .. +63). weights: the shared-memory address of the pair's.
__device__ inline void build_query(uint8_t* pair_tile, uint32_t weights, const IndexerQueries& q, int64_t query, int qi,
                                   int t) {
  const int64_t i = query < q.count ? query : 0;
  const int h = t / 2, k_half = t % 2;
  const uint4* src = reinterpret_cast<const uint4*>(q.codes + (i * kHeads + h) * kIndexerDim + 64 * k_half);
  uint8_t* dst = pair_tile + wgmma::tile_offset(kPairRows, kHeads * qi + h, 64 * k_half);
#pragma unroll
  for (int c = 0; c < 4; ++c)  // 16-byte chunk 4 k_half + c: kPairRows x 16 bytes further each
    *reinterpret_cast<uint4*>(dst + c * kPairRows * wgmma::kChunkBytes) = src[c];
  if (t < kHeads) {  // exact: a power of two (FP8: the scale's byte 0)
    const uint8_t scale = q.scales[(i * kHeads + t) * kIndexerScaleBytes];
    const float w = q.weights[i * kHeads + t] * pow2f(ue8m0_exponent(scale));
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(weights + 4u * key_major::weight_slot(qi, t)), "f"(w) : "memory");
  }
}

// Consumer warpgroup `group` (thread tg of it): its query pair of every unit of the CTA, both
// halves of every computed tile. Per tile t (its half-0 MMA already in flight): issue half 1's,
// wait for half 0's, run half 0's epilogue; issue half 0's of tile t + 1, wait for half 1's,
// release the stage, run half 1's epilogue.
template <ScoreStorage S>
__device__ inline void consume(Smem<S>& sm, const PrefillArgs& a, const prefill_v3::Schedule& sched, int group,
                               int tg) {
  // The warpgroup's index through a shuffle: the compiler then knows it is uniform across the warp
  // and keeps the descriptors' arithmetic in uniform registers.
  const int pair = __shfl_sync(0xffffffffu, group, 0);
  const int warp = tg / 32, lane = tg % 32;
  const int key = key_major::out_key(warp, lane);  // this lane's column in half 0 of a tile (half 1: + 64)
  // Slice 0 of stage 0's tile and of the pair's operand (the halves, slices and stages are
  // constant offsets from them).
  const uint64_t keys_desc = wgmma::slice_descriptor_sw128(sm.b[0], 0);
  const uint64_t pair_desc = wgmma::slice_descriptor(sm.q[pair], kPairRows, 0);
  const uint32_t weights = smem_addr(sm.weights[pair]) + key_major::weight_base(lane);
  const uint32_t exchange = smem_addr(sm.exchange[4 * pair + warp]);
  const uint32_t exchange_store = exchange + key_major::store_base(lane);
  const uint32_t exchange_load = exchange + key_major::load_base(lane, key_major::kPieces<S>);
  int st = 0;  // the stage and round of the next tile, as the producer counts them
  uint32_t round = 0;
  const int units = static_cast<int>(sched.units());
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const prefill_v3::Unit w = unit_with_range(sched, a, u);
    const int64_t pair_first = w.first_query + key_major::kPairQueries * pair;
    {  // -inf over the chunk's tiles that are not computed: thread tg, query tg / 64, key tg % 64 of each half
      const int64_t qf = pair_first + tg / key_major::kKeys;
      for (int64_t tile = w.chunk_begin; tile < w.chunk_end; ++tile) {
        if (w.computed(tile)) continue;
#pragma unroll
        for (int half = 0; half < kHalves; ++half) {
          const int64_t col = tile * kTileKeys + key_major::kKeys * half + tg % key_major::kKeys;
          if (qf < a.q.count && col < a.n_cols) a.logits[qf * a.n_cols + col] = -INFINITY;
        }
      }
    }
    if (w.last == w.first) continue;  // uniform across the CTA (the unit's ranges); the producer skips it too

    // The pair's B operand and weights: the warpgroup has waited for its MMAs of the previous unit
    // and read its weights (the first barrier), then sees the whole (the second).
    group_barrier(pair);
    for (int qi = 0; qi < key_major::kPairQueries; ++qi)
      build_query(sm.q[pair], smem_addr(sm.weights[pair]), a.q, pair_first + qi, qi, tg);
    wgmma::fence_shared_for_async();
    group_barrier(pair);
    const int64_t q = pair_first + key_major::out_query(lane);
    const bool has = q < a.q.count;
    // [ks, ke) as ks and a length (0: empty or no query), so that one unsigned compare tests it.
    // This lane's half-0 column of the unit's first computed tile, stepped a tile at a time: its
    // distance from ks, the columns left from it (none: no query; capped at 2^30, far above the at
    // most kUnitTiles tiles of a unit), its scale byte and its logit (half 1: 64 further).
    const int64_t ks = has ? a.ks[q] : 0, len = has && a.ke[q] > ks ? a.ke[q] - ks : 0;
    const int64_t first_col = w.first * kTileKeys + key;
    int64_t from_ks = first_col - ks;
    const int64_t left = has ? a.n_cols - first_col : 0;
    int cols_left = static_cast<int>(left < (int64_t{1} << 30) ? left : (int64_t{1} << 30));
    const uint8_t* scale_byte = a.key_scales + first_col * kIndexerScaleBytes;
    float* out = a.logits + (has ? q : 0) * a.n_cols + first_col;
    float acc0[64], acc1[64];  // halves 0 and 1 of a tile
    mbarrier_wait(smem_addr(&sm.full[st]), round & 1);
    issue_half_mma(acc0, descriptor_plus(keys_desc, static_cast<uint32_t>(st) * kTileBytes), pair_desc);
    for (int64_t tile = w.first; tile < w.last; ++tile) {
      const bool in0 = static_cast<uint64_t>(from_ks) < static_cast<uint64_t>(len);
      const bool in1 = static_cast<uint64_t>(from_ks + key_major::kKeys) < static_cast<uint64_t>(len);
      const float key_scale0 = in0 ? ue8m0_value(scale_byte[0]) : 1.0f;
      const float key_scale1 = in1 ? ue8m0_value(scale_byte[key_major::kKeys * kIndexerScaleBytes]) : 1.0f;
      const uint32_t stage_bytes = static_cast<uint32_t>(st) * kTileBytes;
      issue_half_mma(acc1, descriptor_plus(keys_desc, stage_bytes + kHalfBytes), pair_desc);
      wgmma::wait<1>();  // half 0's group (half 1's stays in flight)
      wgmma::fence_operands(acc0);
      const HeadSum<S> sum0 = key_major::head_sum<S>(acc0, weights, exchange_store, exchange_load, lane);
      if (cols_left > 0) out[0] = in0 ? finish<S>(sum0, key_scale0) : -INFINITY;
      const int done_st = st;
      if (++st == kStages) {
        st = 0;
        ++round;
      }
      if (tile + 1 < w.last) {  // half 0 of the next tile in flight during half 1's epilogue
        mbarrier_wait(smem_addr(&sm.full[st]), round & 1);
        issue_half_mma(acc0, descriptor_plus(keys_desc, static_cast<uint32_t>(st) * kTileBytes), pair_desc);
        wgmma::wait<1>();  // half 1's group
      } else {
        wgmma::wait<0>();
      }
      wgmma::fence_operands(acc1);
      __syncwarp();
      if (lane == 0) mbarrier_arrive(smem_addr(&sm.empty[done_st]));  // this warp's reads of the tile are done
      const HeadSum<S> sum1 = key_major::head_sum<S>(acc1, weights, exchange_store, exchange_load, lane);
      if (cols_left > key_major::kKeys) out[key_major::kKeys] = in1 ? finish<S>(sum1, key_scale1) : -INFINITY;
      from_ks += kTileKeys;
      cols_left -= kTileKeys;
      scale_byte += kTileKeys * kIndexerScaleBytes;
      out += kTileKeys;
    }
  }
}

template <ScoreStorage S>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_logits_v5(const __grid_constant__ CUtensorMap keys_map, const PrefillArgs a) {
  persistent_cta<Smem<S>, kStages, kConsumerWarps, kProducerRegisters, kConsumerRegisters, consume<S>>(keys_map, a);
}

template <ScoreStorage S>
KernelShape shape() {
  return {prefill_logits_v5<S>, kThreads, static_cast<int>(sizeof(Smem<S>)) + 1024};  // + the base's rounding to 1024
}

}  // namespace

namespace detail {

void prefill_logits_v5(const LogitsParams& p, const IndexerQueries& q, const DenseKeys& keys, const int32_t* ks,
                       const int32_t* ke, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream) {
  call_prefill(shape<ScoreStorage::bf16>(), shape<ScoreStorage::fp32>(), p, q, keys, ks, ke, logits, n_cols, inexact,
               stream, "indexer_logits_prefill v5");
}

}  // namespace detail
}  // namespace dsv4::cuda
