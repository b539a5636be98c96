#pragma once
// The key-tile ring of the persistent prefill logits kernels (v3 and v4, logits_prefill_v3.cu /
// logits_prefill_v4.cu; docs/cuda-indexer.md "Logits prefill v3"): the call's arguments, a unit
// with its key range (prefill_schedule.h), the producer that loads every computed 128-key tile
// of the CTA's units with one TMA each (128-byte swizzle) into a ring of kStages stages (full
// barrier: the tile's bytes have landed; empty: the consumer warps are done reading it), the CTA's
// body that splits it into the producer warpgroup and the consumers, and the host side of a call.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/register_budget.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/logits_launch.h"
#include "cuda/indexer/logits_tile.cuh"
#include "cuda/indexer/prefill_schedule.h"

namespace dsv4::cuda::prefill_ring {

struct PrefillArgs {
  IndexerQueries q;
  const uint8_t* key_scales;  // [n keys][4] UE8M0, byte 0
  const int32_t* ks;
  const int32_t* ke;
  float* logits;
  int64_t n_cols;
};

// Unit u with its key range (the union of its queries' ranges).
__device__ inline prefill_v3::Unit unit_with_range(const prefill_v3::Schedule& sched, const PrefillArgs& a, int u) {
  int64_t lo, hi;
  const int group = prefill_v3::unit_query_group(u, static_cast<int>(sched.chunks()));
  prefill_v3::unit_key_range(a.ks, a.ke, static_cast<int64_t>(group) * prefill_v3::kUnitQueries, a.q.count, lo, hi);
  return prefill_v3::unit_of(sched, u, lo, hi);
}

// The producer (one lane): every computed tile of the CTA's units, in the consumers' order.
template <int kStages, int kTileBytes>
__device__ inline void produce(const CUtensorMap* keys_map, const PrefillArgs& a, const prefill_v3::Schedule& sched,
                               uint8_t (*b)[kTileBytes], uint64_t* full, uint64_t* empty) {
  tma_prefetch_map(keys_map);
  // Tile k of the CTA uses stage k % kStages for the (k / kStages)-th time: (st, round) below.
  int st = 0;
  uint32_t round = 0;
  const int units = static_cast<int>(sched.units());
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const prefill_v3::Unit w = unit_with_range(sched, a, u);
    for (int64_t tile = w.first; tile < w.last; ++tile) {
      if (round > 0) mbarrier_wait(smem_addr(&empty[st]), (round - 1) & 1);
      mbarrier_arrive_expect_tx(smem_addr(&full[st]), kTileBytes);
      tma_load_2d(smem_addr(b[st]), keys_map, 0, static_cast<int>(tile * prefill_v3::kTileKeys), smem_addr(&full[st]));
      if (++st == kStages) {
        st = 0;
        ++round;
      }
    }
  }
}

// The body of a persistent prefill kernel (v3, v4) of kConsumerWarps consumer warps and one producer
// warpgroup after them. Smem: the kernel's shared memory (dynamic, its base rounded up to 1024 bytes:
// the swizzled tiles), with the ring's tiles b[kStages][tile bytes] and barriers full[kStages],
// empty[kStages]. Thread 0 initialises the barriers (full: the producer's one expect_tx arrival;
// empty: lane 0 of every consumer warp); the producer warpgroup gives its registers back down to
// kProducerRegisters and its first lane loads the tiles; the consumer warps take kConsumerRegisters
// each and run kConsume(sm, a, sched, warpgroup, thread in warpgroup).
template <class Smem, int kStages, int kConsumerWarps, int kProducerRegisters, int kConsumerRegisters,
          void (*kConsume)(Smem&, const PrefillArgs&, const prefill_v3::Schedule&, int, int)>
__device__ __forceinline__ void persistent_cta(const CUtensorMap& keys_map, const PrefillArgs& a) {
  extern __shared__ uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const prefill_v3::Schedule sched{a.q.count, a.n_cols};
  if (t == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(smem_addr(&sm.full[s]), 1);                // the producer's expect_tx arrival
      mbarrier_init(smem_addr(&sm.empty[s]), kConsumerWarps);  // lane 0 of every consumer warp
    }
    fence_mbarrier_init();
  }
  __syncthreads();
  if (warp >= kConsumerWarps) {  // the producer warpgroup
    setmaxnreg_dec<kProducerRegisters>();
    if (warp == kConsumerWarps && lane == 0) produce<kStages>(&keys_map, a, sched, sm.b, sm.full, sm.empty);
    return;
  }
  setmaxnreg_inc<kConsumerRegisters>();
  kConsume(sm, a, sched, warp / 4, t % logits_tile::kGroupThreads);
}

// One instantiation of a prefill kernel (v3, v4): the kernel, its CTA's threads and dynamic shared
// memory in bytes.
using PrefillKernel = void (*)(CUtensorMap, PrefillArgs);
struct KernelShape {
  PrefillKernel kernel;
  int threads, smem;
};

// The persistent grid of a prefill kernel (v3, v4): min(units, SMs) CTAs of the shape's threads and
// shared memory, each looping over the schedule's units of kUnitQueries queries x 2048 columns.
// who: the name errors give.
inline void launch_persistent(const KernelShape& k, const CUtensorMap& keys_map, const PrefillArgs& a, const char* who,
                              cudaStream_t stream) {
  CUDA_CHECK(cudaFuncSetAttribute(k.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, k.smem));
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const prefill_v3::Schedule sched{a.q.count, a.n_cols};
  const int64_t units = sched.units();
  detail::require(units <= prefill_v3::kMaxUnits, std::string(who) + ": " + std::to_string(a.q.count) + " queries x " +
                                                      std::to_string(a.n_cols) +
                                                      " columns make more than 2^31 - 1 units of 4 x 2048");
  const unsigned grid = static_cast<unsigned>(units < sms ? units : sms);
  k.kernel<<<grid, k.threads, k.smem, stream>>>(keys_map, a);
  CUDA_CHECK_LAUNCH();
}

// A prefill call of v3 or v4 (detail::prefill_logits_v3 / v4; indexer_api.h): nothing for an empty
// one; v2 where the ring is not implemented (FP4 keys; no keys at all: nothing to map); otherwise the
// key codes' tensor map (16-byte aligned: indexer_logits_prefill checks it) and the persistent
// launch of the kernel for the call's score storage. who: "indexer_logits_prefill vN".
inline void call_prefill(const KernelShape& bf16_scores, const KernelShape& fp32_scores, const LogitsParams& p,
                         const IndexerQueries& q, const DenseKeys& keys, const int32_t* ks, const int32_t* ke,
                         float* logits, int64_t n_cols, int* inexact, cudaStream_t stream, const char* who) {
  if (q.count == 0 || n_cols == 0) return;
  if (p.format == IndexerFormat::fp4 || keys.count == 0) {
    detail::prefill_logits_v2(p, q, keys, ks, ke, logits, n_cols, inexact, stream);
    return;
  }
  const CUtensorMap keys_map = tensor_map_rows_sw128(keys.codes, keys.count, kIndexerDim, prefill_v3::kTileKeys, who);
  const PrefillArgs a{q, keys.scales, ks, ke, logits, n_cols};
  launch_persistent(p.scores == ScoreStorage::bf16 ? bf16_scores : fp32_scores, keys_map, a, who, stream);
}

}  // namespace dsv4::cuda::prefill_ring
