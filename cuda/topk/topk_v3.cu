// v3 of the top-k (topk_api.h): a cluster of C CTAs per row (one per 16384 candidates of the longest
// row, up to 16 where the GPU schedules 16-CTA clusters, else 8), one launch. Each CTA loads its
// slice (16-byte loads, 16 scores a thread in flight) and keeps it in shared memory as order keys
// (a slice longer than 32768 is re-read from global memory in every pass). A warp reads 4
// consecutive keys a lane (a chunk of 128). Radix select of the k-th key in 3 passes of 11, 11 and
// 10 bits: each pass every CTA counts its slice into its own histogram with one shared atomic a
// counted key (one a chunk where the whole chunk holds one key: ReLU's zero plateaus); after a
// cluster barrier CTA r adds up its share of the bins (bins/C of them) over the cluster's CTAs
// through distributed shared memory and writes the sums into every CTA's merged counts; after a
// second barrier every CTA finds the digit in its own merged counts (one block scan). A resident
// slice collects the offsets of its keys in pass 0's digit once, and passes 1 and 2 count those
// alone (one thread a candidate). The ties at
// the k-th key are shared out by index without another pass: CTA r's count of them is bin d of its
// last histogram, the lower ranks' counts say how many it takes; only a CTA that takes some but not
// all of its ties counts them per warp. The picks go to CTA 0 (one atomic a warp and chunk; a
// chunk without a candidate is skipped after one vote), which sorts them with a bitonic network
// unrolled for its size and held in registers (one element a thread up to 1024 picks; strides
// below 32 by shuffles, the others through shared memory) and writes the row. Selection rule and
// output: v1's (docs/cuda-indexer.md).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/topk/cluster_launch.cuh"
#include "cuda/topk/topk_api.h"
#include "cuda/topk/topk_block.cuh"
#include "cuda/topk/topk_cluster.cuh"
#include "cuda/topk/topk_keys.cuh"
#include "cuda/topk/topk_launch.h"
#include "cuda/topk/topk_v3_plan.h"

namespace cg = cooperative_groups;

namespace dsv4::cuda {
namespace {

using namespace topk_v3_plan;
using namespace topk_cluster;

__global__ void __launch_bounds__(kThreads, 1) topk_v3_kernel(const TopkArgs a) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  cg::cluster_group cluster = cg::this_cluster();
  const int c = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const unsigned below = (1u << lane) - 1;  // the lanes before this one
  const int64_t len = a.lengths[blockIdx.x / c];
  const Slice s = slice_of(len, c, rank);
  // The slice's scores, and the row index of its first candidate (< 2^32: topk() checks the lengths).
  const float* slice = a.scores + static_cast<int64_t>(blockIdx.x / c) * a.stride + s.lo;
  const uint32_t slice_lo = static_cast<uint32_t>(s.lo);
  const bool resident = slice_part(len, c) <= kResident;
  if (resident) load_resident_slice(slice, static_cast<int>(s.hi - s.lo), sm.keys, t, [](const Keys4&) {});
  if (t == 0) {
    sm.n_picks = 0;
    sm.n_candidates = 0;
  }
  __syncthreads();
  // This warp's segment as offsets into the slice: [w_lo, w_hi), whole chunks but the last.
  const int w_lo = static_cast<int>(warp_begin(s, warp) - s.lo), w_hi = static_cast<int>(warp_end(s, warp) - s.lo);
  // The keys of this lane in the chunk at slice offset o (0 past the warp's segment): keys.at(o).
  const LaneKeys keys{resident, shared_address(sm.keys) + 16u * static_cast<unsigned>(lane), slice, w_hi, lane};

  uint32_t prefix = 0, mask = 0;  // the digits of the k-th key found so far
  int need = a.k;                 // keys with this prefix still to pick
  bool take_all = false;          // at most k visible keys: every one is picked
  int digit = 0;
  // Not unrolled: the three copies of the loop body spilled at this kernel's 64 registers.
#pragma unroll 1
  for (int p = 0; p < kPasses; ++p) {
    const int shift = digit_shift(p), bins = digit_bins(p);
    const PassDigit pass{prefix, mask, shift, static_cast<uint32_t>(bins - 1)};
    unsigned* hist = sm.hist;
    const unsigned hist_base = shared_address(hist);
    for (int b = t; b < bins; b += kThreads) hist[b] = 0;
    __syncthreads();
    if (p == 0 || !resident) {
      for (int o = w_lo; o < w_hi; o += kChunk) {
        const Keys4 r = keys.at(o);
        const uint32_t first = __shfl_sync(kFull, r.k[0], 0);
        if (__all_sync(kFull, r.k[0] == first && r.k[1] == first && r.k[2] == first && r.k[3] == first)) {
          // One key over the whole chunk (keys past the segment are 0, so these are 128 candidates).
          if (lane == 0) count_key(hist_base, pass, first, kChunk);
          continue;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) count_key(hist_base, pass, r.k[j], 1u);
      }
    } else {
      // A resident slice: passes 1 and 2 count only the keys in pass 0's digit, collected once
      // (their offsets, a warp's with one atomic a chunk) at the start of pass 1.
      if (p == 1) {
        for (int o = w_lo; o < w_hi; o += kChunk) {
          const Keys4 r = keys.at(o);
          int before = 0, in_chunk = 0;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const bool in = pass.counts(r.k[j]);
            const unsigned lanes = __ballot_sync(kFull, in);
            before += __popc(lanes & below);
            in_chunk += __popc(lanes);
          }
          if (in_chunk == 0) continue;
          int slot = 0;
          if (lane == 0) slot = atomicAdd(&sm.n_candidates, in_chunk);
          slot = __shfl_sync(kFull, slot, 0) + before;
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (pass.counts(r.k[j])) sm.candidates[slot++] = static_cast<uint16_t>(o + 4 * lane + j);
        }
        __syncthreads();
      }
      const int n_candidates = sm.n_candidates;
      for (int q0 = 32 * warp; q0 < n_candidates; q0 += kThreads) {
        const int q = q0 + lane;
        const uint32_t key = q < n_candidates ? sm.keys[sm.candidates[q]] : 0u;
        const uint32_t first = __shfl_sync(kFull, key, 0);
        if (__all_sync(kFull, key == first)) {  // one key over the 32 (a plateau)
          if (lane == 0) count_key(hist_base, pass, first, 32u);
        } else {
          count_key(hist_base, pass, key, 1u);
        }
      }
    }
    // hist was last read (by the other CTAs, or by this one's digit search) before pass p - 1's last
    // barrier, so clearing it above raced with nobody; merged was last read in pass p - 1, before
    // every CTA arrived at this pass's first barrier, so the writes below race with nobody either.
    // One CTA a row: its counts are the row's. Else, after a cluster barrier, this CTA's share of
    // the bins, [share_lo, share_lo + share_bins): each summed over the c CTAs (4 remote reads in
    // flight at a time) and written into every CTA's merged counts.
    const unsigned* counts = sm.hist;
    if (c == 1) {
      __syncthreads();
    } else {
      cluster.sync();
      const int per_cta = (bins + c - 1) / c;
      const int share_lo = min(bins, rank * per_cta), share_bins = min(bins, share_lo + per_cta) - share_lo;
      for (int b = t; b < share_bins; b += kThreads) {
        unsigned sum = 0;
        for (int r0 = 0; r0 < c; r0 += 4) {
          unsigned part[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) part[q] = r0 + q < c ? cluster.map_shared_rank(hist, r0 + q)[share_lo + b] : 0u;
#pragma unroll
          for (int q = 0; q < 4; ++q) sum += part[q];
        }
        for (int r = 0; r < c; ++r) cluster.map_shared_rank(sm.merged, r)[share_lo + b] = sum;
      }
      cluster.sync();  // every CTA's merged counts complete
      counts = sm.merged;
    }
    // The digit: thread t owns bins top and top - 1 (from the top); one block scan.
    unsigned count_hi = 0, count_lo = 0;
    const int top = high_bin(bins, t);
    if (top > 0) {
      count_hi = counts[top];
      count_lo = counts[top - 1];
    }
    int total = 0;
    const int higher = topk_block::exclusive_scan(static_cast<int>(count_hi + count_lo), sm.scratch, total);
    if (p == 0 && total <= a.k) {  // the same in every thread of the cluster
      take_all = true;
      break;
    }
    if (top > 0) {
      if (higher < need && need <= higher + static_cast<int>(count_hi)) {
        sm.digit = top;
        sm.above = higher;
      } else if (higher + static_cast<int>(count_hi) < need && need <= higher + static_cast<int>(count_hi + count_lo)) {
        sm.digit = top - 1;
        sm.above = higher + static_cast<int>(count_hi);
      }
    }
    __syncthreads();
    digit = sm.digit;
    need -= sm.above;
    prefix |= static_cast<uint32_t>(digit) << shift;
    mask |= static_cast<uint32_t>(bins - 1) << shift;
  }
  // Unless take_all: prefix is the k-th key K (visible, so not 0); pick every key > K and the `need`
  // lowest-indexed keys == K. This CTA's keys == K: bin `digit` of its last histogram; the lower
  // ranks' ones come first (lane r of every warp reads rank r's). Nobody writes a histogram after
  // the last pass.
  int tie_take = 0, tie_mine = 0;
  if (!take_all) {
    unsigned* last = sm.hist;
    const unsigned theirs = lane < rank ? cluster.map_shared_rank(last, lane)[digit] : 0u;
    const int before = static_cast<int>(__reduce_add_sync(kFull, theirs));
    tie_mine = static_cast<int>(last[digit]);
    tie_take = need - before < 0 ? 0 : (need - before > tie_mine ? tie_mine : need - before);
  }
  const bool ties_partial = tie_take > 0 && tie_take < tie_mine;  // uniform in the CTA
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
  int* count0 = cluster.map_shared_rank(&sm.n_picks, 0);
  uint64_t* picks0 = cluster.map_shared_rank(sm.picks, 0);
  const uint32_t least = take_all ? 1u : prefix;  // a chunk without a key >= least holds no pick and no tie
  for (int o = w_lo; o < w_hi; o += kChunk) {
    const Keys4 r = keys.at(o);
    if (!__any_sync(kFull, r.k[0] >= least || r.k[1] >= least || r.k[2] >= least || r.k[3] >= least)) continue;
    bool pick[4];
    unsigned picked[4];
    if (!ties_partial) {  // this CTA's ties are all taken or none: no ranks needed
      const bool ties_taken = !take_all && tie_take == tie_mine;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        pick[j] = take_all ? r.k[j] != 0 : r.k[j] > prefix || (ties_taken && r.k[j] == prefix);
    } else {
      pick_with_partial_ties(r, prefix, tie_take, below, lane, tie_rank, pick);
    }
    int picks_before = 0, picks_in_chunk = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      picked[j] = __ballot_sync(kFull, pick[j]);
      picks_before += __popc(picked[j] & below);
      picks_in_chunk += __popc(picked[j]);
    }
    if (picks_in_chunk == 0) continue;
    int slot = 0;
    if (lane == 0) slot = atomicAdd(count0, picks_in_chunk);
    slot = __shfl_sync(kFull, slot, 0) + picks_before;
    const uint32_t i = slice_lo + static_cast<uint32_t>(o + 4 * lane);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (pick[j]) picks0[slot++] = composite(r.k[j], i + j);
  }
  cluster.sync();  // every pick is in CTA 0's list; no CTA touches another's memory after this
  if (rank != 0) return;
  const int n = sm.n_picks;
  uint64_t sorted[2];
  sort_descending(sm.picks, n, sorted);
  int32_t* out = a.out + static_cast<int64_t>(blockIdx.x / c) * a.k;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int col = t + kThreads * e;
    if (col < a.k) out[col] = col < n ? static_cast<int32_t>(composite_index(sorted[e])) + a.offset : -1;
  }
}

}  // namespace

namespace detail {

void topk_v3(const TopkArgs& a, cudaStream_t stream) {
  topk_cluster_launch::launch<topk_v3_kernel>(a, static_cast<int>(sizeof(Smem)), "topk v3", stream);
}

}  // namespace detail
}  // namespace dsv4::cuda
