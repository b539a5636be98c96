#pragma once
// The picks of the cluster top-k kernels v4 and v5, once their radix passes found the k-th key:
// each CTA's ties at it shared out by rank, every CTA's picks written into CTA 0's list, and CTA 0's
// sorted write of that list. kBoundaryBin: v5's variant, whose passes may stop at the k-th key's
// bin (its keys go to CTA 0's boundary list, which v5 ranks itself between the two functions).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/topk/topk_cluster.cuh"
#include "cuda/topk/topk_keys.cuh"
#include "cuda/topk/topk_v3_plan.h"

namespace dsv4::cuda::topk_cluster {

// What the radix passes found, the same in every thread of the cluster. Unless take_all: the k-th
// key K lies in [prefix, ceiling]; ceiling == prefix == K unless boundary (then prefix holds K's
// top digits and ceiling the highest key of its bin). need: the keys of [prefix, ceiling] still to
// pick; digit: K's digit in the last histogram (where not boundary).
struct KthKey {
  uint32_t prefix, ceiling;
  int need, digit;
  bool take_all;  // at most k visible keys: every one is picked
  bool boundary;  // only with kBoundaryBin
};

// A key of the boundary bin into CTA 0's boundary list (a few a row: one atomic each; the list's
// order does not matter, CTA 0 ranks it).
template <class SmemT>
__device__ __forceinline__ void to_boundary_list(SmemT& sm, cooperative_groups::cluster_group& cluster, uint32_t key,
                                                 uint32_t index) {
  const int slot = atomicAdd(cluster.map_shared_rank(&sm.n_boundary, 0), 1);
  cluster.map_shared_rank(sm.boundary, 0)[slot] = composite(key, index);
}

// This CTA's picks into CTA 0's list (sm.picks, counted by sm.n_picks). Every key > ceiling is
// picked, and of the keys == K the `need` lowest-indexed of the cluster: this CTA's keys == K are
// bin `digit` of its last histogram `last`, the lower ranks' ones come first (lane r of every warp
// reads rank r's; nobody writes a histogram after the last pass). Where boundary, the bin's keys go
// to CTA 0's boundary list instead. A resident CTA that takes all of its ties or none picks from its
// collected list (n_collected offsets in sm.candidates), else from its slice (keys; this warp's
// segment [w_lo, w_hi), slice_lo: the row index of the slice's first candidate). Every thread of
// the cluster calls it; the caller's cluster barrier completes CTA 0's list.
template <bool kBoundaryBin, class SmemT>
__device__ __forceinline__ void pick_into_cta0(SmemT& sm, cooperative_groups::cluster_group& cluster, const KthKey& kth,
                                               const unsigned* last, const LaneKeys& keys, int n_collected,
                                               uint32_t slice_lo, int rank, int w_lo, int w_hi, int warp, int lane,
                                               unsigned below) {
  const bool take_all = kth.take_all, boundary = kBoundaryBin && kth.boundary, resident = keys.resident;
  const uint32_t prefix = kth.prefix, ceiling = kBoundaryBin ? kth.ceiling : kth.prefix;
  int tie_take = 0, tie_mine = 0;
  if (!take_all && !boundary) {
    const unsigned theirs = lane < rank ? cluster.map_shared_rank(last, lane)[kth.digit] : 0u;
    const int before = static_cast<int>(__reduce_add_sync(kFull, theirs));
    tie_mine = static_cast<int>(last[kth.digit]);
    tie_take = kth.need - before < 0 ? 0 : (kth.need - before > tie_mine ? tie_mine : kth.need - before);
  }
  const bool ties_partial = tie_take > 0 && tie_take < tie_mine;  // uniform in the CTA
  int* count0 = cluster.map_shared_rank(&sm.n_picks, 0);
  uint64_t* picks0 = cluster.map_shared_rank(sm.picks, 0);
  // Reserves CTA 0's slots for a warp's picks (pick: this lane's) and returns this lane's.
  auto reserve = [&](int picks_before, int picks_in_warp) {
    int slot = 0;
    if (lane == 0) slot = atomicAdd(count0, picks_in_warp);
    return __shfl_sync(kFull, slot, 0) + picks_before;
  };
  if (resident && !take_all && !ties_partial) {
    // Every key > ceiling and, where this CTA takes its ties, every key == K, or the boundary bin's
    // keys: all in the collected list.
    const bool ties_taken = !boundary && tie_take == tie_mine;
    for (int q0 = 32 * warp; q0 < n_collected; q0 += kThreads) {
      const int q = q0 + lane;
      const int o = q < n_collected ? sm.candidates[q] : 0;
      const uint32_t key = q < n_collected ? sm.keys[o] : 0u;
      const bool pick = key > ceiling || (ties_taken && key == prefix);
      if constexpr (kBoundaryBin)
        if (boundary && key >= prefix && key <= ceiling)
          to_boundary_list(sm, cluster, key, slice_lo + static_cast<uint32_t>(o));
      const unsigned picked = __ballot_sync(kFull, pick);
      if (picked == 0) continue;
      const int slot = reserve(__popc(picked & below), __popc(picked));
      if (pick) picks0[slot] = composite(key, slice_lo + static_cast<uint32_t>(o));
    }
  } else {
    // The slice in index order (ranks, warps, chunks and lanes hold increasing indices): the ties of a
    // partial share are taken by their rank among this CTA's.
    int tie_rank = 0;  // keys == K before this lane's chunk in this CTA (partial only)
    if (ties_partial) {
      unsigned mine = 0;
      for (int o = w_lo; o < w_hi; o += kChunk) {
        const Keys4 r = keys.at(o);
#pragma unroll
        for (int j = 0; j < 4; ++j) mine += r.k[j] == prefix;
      }
      mine = __reduce_add_sync(kFull, mine);
      if (lane == 0) sm.warp_ties[warp] = static_cast<int>(mine);
      __syncthreads();
      for (int w = 0; w < warp; ++w) tie_rank += sm.warp_ties[w];
    }
    const uint32_t least = take_all ? 1u : prefix;  // a chunk without a key >= least holds no pick and no tie
    for (int o = w_lo; o < w_hi; o += kChunk) {
      const Keys4 r = keys.at(o);
      if (!__any_sync(kFull, r.k[0] >= least || r.k[1] >= least || r.k[2] >= least || r.k[3] >= least)) continue;
      bool pick[4];
      if (!ties_partial) {
        const bool ties_taken = !take_all && !boundary && tie_take == tie_mine;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          pick[j] = take_all ? r.k[j] != 0 : r.k[j] > ceiling || (ties_taken && r.k[j] == prefix);
          if constexpr (kBoundaryBin)
            if (boundary && r.k[j] >= prefix && r.k[j] <= ceiling)
              to_boundary_list(sm, cluster, r.k[j], slice_lo + static_cast<uint32_t>(o + 4 * lane) + j);
        }
      } else {
        pick_with_partial_ties(r, prefix, tie_take, below, lane, tie_rank, pick);
      }
      int picks_before = 0, picks_in_chunk = 0;
      count_picks(pick, below, picks_before, picks_in_chunk);
      if (picks_in_chunk == 0) continue;
      int slot = reserve(picks_before, picks_in_chunk);
      const uint32_t i = slice_lo + static_cast<uint32_t>(o + 4 * lane);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (pick[j]) picks0[slot++] = composite(r.k[j], i + j);
    }
  }
}

// CTA 0's list of n picks (list[0 .. n), n <= k) sorted descending into the row's output out[0 ..
// k) as index + offset, -1 past n: up to 512 picks by sort_by_runs, more by the bitonic network.
// Every thread of CTA 0 calls it.
__device__ __forceinline__ void write_sorted_picks(uint64_t* list, int n, int32_t* out, int k, int32_t offset) {
  const int t = threadIdx.x;
  for (int col = n + t; col < k; col += kThreads) out[col] = -1;
  if (n <= 512) {
    sort_by_runs(list, n, out, offset);
    return;
  }
  uint64_t sorted[2];
  sort_descending(list, n, sorted);
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int col = t + kThreads * e;
    if (col < n) out[col] = static_cast<int32_t>(composite_index(sorted[e])) + offset;
  }
}

}  // namespace dsv4::cuda::topk_cluster
