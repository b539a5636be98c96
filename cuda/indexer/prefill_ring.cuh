#pragma once
// The key-tile ring of the persistent prefill logits kernels (v3 and v4, logits_prefill_v3.cu /
// logits_prefill_v4.cu; docs/cuda-indexer.md "Logits prefill v3"): the call's arguments, a unit
// with its key range (prefill_schedule.h), and the producer that loads every computed 128-key tile
// of the CTA's units with one TMA each (128-byte swizzle) into a ring of kStages stages (full
// barrier: the tile's bytes have landed; empty: the consumer warps are done reading it).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/common/mbarrier.cuh"
#include "cuda/common/tma.cuh"
#include "cuda/indexer/indexer_api.h"
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

__device__ inline uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

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

// The persistent grid of a prefill kernel (v3, v4): min(units, SMs) CTAs of `threads` with `smem`
// bytes of dynamic shared memory, each looping over the schedule's units of kUnitQueries queries x
// 2048 columns. who: the name errors give.
using PrefillKernel = void (*)(CUtensorMap, PrefillArgs);
inline void launch_persistent(PrefillKernel kernel, int smem, int threads, const CUtensorMap& keys_map,
                              const PrefillArgs& a, const char* who, cudaStream_t stream) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const prefill_v3::Schedule sched{a.q.count, a.n_cols};
  const int64_t units = sched.units();
  detail::require(units <= prefill_v3::kMaxUnits, std::string(who) + ": " + std::to_string(a.q.count) + " queries x " +
                                                      std::to_string(a.n_cols) +
                                                      " columns make more than 2^31 - 1 units of 4 x 2048");
  const unsigned grid = static_cast<unsigned>(units < sms ? units : sms);
  kernel<<<grid, threads, smem, stream>>>(keys_map, a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda::prefill_ring
