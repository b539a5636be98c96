// v4 of the top-k (topk_api.h): v3's cluster, slices and selection (topk_v3.cu: 3 radix passes of
// 11, 11 and 10 bits, the ties at the k-th key shared out by rank from the last histograms) with
// fewer dependent steps in each phase (docs/cuda-indexer.md, "Top-k v4"):
//  - a resident slice counts pass 0 from registers as its 16-byte loads land (no sweep for it);
//  - the share reduction is one remote round trip: a thread a bin of the CTA's share loads the C
//    CTAs' counts of it at once (v3: 4 at a time) and stores the sum into every CTA's merged
//    counts; no block barrier a pass besides the digit search's (the next pass's histogram is
//    cleared before it, and its barrier orders the clear);
//  - the digit search has one block barrier: each warp publishes the total of its bins, then every
//    warp finds the warp holding the k-th key and the digit inside its bins (the same answer in
//    every warp, so no broadcast);
//  - the collection at pass 1 keeps every key at or above pass 0's digit, in index order (each warp
//    placed after the lower ones by one block barrier, no atomic a chunk), and counts pass 1 as it
//    goes; a CTA that takes all of its ties or none picks from that list instead of its slice;
//  - up to 512 picks are sorted as 16 runs of 32 (one warp each, in registers) and written at their
//    ranks (a pick's rank: how many picks of every run beat it, by binary search); more picks go
//    through v3's network.
// Selection rule and output: v1's.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/topk/cluster_launch.cuh"
#include "cuda/topk/topk_api.h"
#include "cuda/topk/topk_cluster.cuh"
#include "cuda/topk/topk_keys.cuh"
#include "cuda/topk/topk_launch.h"
#include "cuda/topk/topk_picks.cuh"
#include "cuda/topk/topk_v3_plan.h"

namespace cg = cooperative_groups;

namespace dsv4::cuda {
namespace {

using namespace topk_v3_plan;
using namespace topk_cluster;

__global__ void __launch_bounds__(kThreads, 1) topk_v4_kernel(const TopkArgs a) {
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
  // Pass 0's histogram, cleared before the load counts into it.
  for (int b = t; b < digit_bins(0); b += kThreads) sm.hist[b] = 0;
  if (t == 0) sm.n_picks = 0;
  __syncthreads();
  if (resident) {  // pass 0's count as the chunks land
    const PassDigit pass0{0u, 0u, digit_shift(0), static_cast<uint32_t>(digit_bins(0) - 1)};
    const unsigned hist_base = shared_address(sm.hist);
    load_resident_slice(slice, static_cast<int>(s.hi - s.lo), sm.keys, t,
                        [&](const Keys4& r) { count_chunk(hist_base, pass0, r, lane); });
  }
  // This warp's segment as offsets into the slice: [w_lo, w_hi), whole chunks but the last.
  const int w_lo = static_cast<int>(warp_begin(s, warp) - s.lo), w_hi = static_cast<int>(warp_end(s, warp) - s.lo);
  // The keys of this lane in the chunk at slice offset o (0 past the warp's segment): keys.at(o).
  const LaneKeys keys{resident, shared_address(sm.keys) + 16u * static_cast<unsigned>(lane), slice, w_hi, lane};
  // Pass p's histogram of this CTA. One CTA a row searches its digit in it, so it alternates two
  // buffers (its merged counts are unused): pass p + 1's is cleared while pass p's is searched. A
  // cluster searches merged, and clears hist after pass p's two cluster barriers.
  auto pass_hist = [&](int p) { return c == 1 && (p & 1) ? sm.merged : sm.hist; };

  uint32_t prefix = 0, mask = 0;  // the digits of the k-th key found so far
  int need = a.k;                 // keys with this prefix still to pick
  bool take_all = false;          // at most k visible keys: every one is picked
  int digit = 0;
  int n_collected = 0;  // a resident slice's collected keys (from pass 1 on)
  // Not unrolled: the copies of the loop body would not fit the 64 registers of 1024 threads.
#pragma unroll 1
  for (int p = 0; p < kPasses; ++p) {
    const int shift = digit_shift(p), bins = digit_bins(p);
    const PassDigit pass{prefix, mask, shift, static_cast<uint32_t>(bins - 1)};
    unsigned* hist = pass_hist(p);
    const unsigned hist_base = shared_address(hist);
    count_pass(sm, keys, p, pass, hist_base, prefix, w_lo, w_hi, warp, lane, below, n_collected);
    // One CTA a row: its counts are the row's. Else this CTA's share of the bins, [share_lo,
    // share_lo + share_bins), after a cluster barrier: a thread a bin loads its c counts at once,
    // adds them and stores the sum into every CTA's merged counts; the second cluster barrier
    // completes them. Nobody reads merged then: this CTA's warps finished pass p - 1's digit search
    // before the first cluster barrier, the other CTAs' before they arrived at it.
    const unsigned* counts = hist;
    if (c == 1) {
      __syncthreads();
    } else {
      cluster.sync();
      const int per_cta = (bins + c - 1) / c;
      const int share_lo = min(bins, rank * per_cta), share_bins = min(bins, share_lo + per_cta) - share_lo;
      for (int b = share_lo + t; b < share_lo + share_bins; b += kThreads) {  // one round: share_bins <= 1024
        unsigned part[kMaxCluster];
#pragma unroll
        for (int r = 0; r < kMaxCluster; ++r) part[r] = r < c ? cluster.map_shared_rank(hist, r)[b] : 0u;
        unsigned sum = 0;
#pragma unroll
        for (int r = 0; r < kMaxCluster; ++r) sum += part[r];
          // Not unrolled: the 16 remote addresses of the stores would spill.
#pragma unroll 1
        for (int r = 0; r < c; ++r) cluster.map_shared_rank(sm.merged, r)[b] = sum;
      }
      cluster.sync();  // every CTA's merged counts complete
      counts = sm.merged;
    }
    // Pass p + 1's histogram cleared now, and the clear ordered before its counts by find_digit's
    // barrier: nobody reads it any more (a cluster's hist: the other CTAs, between this pass's two
    // cluster barriers; one CTA's other buffer: pass p - 1's digit search, before this pass's
    // barrier). The last pass's histogram stays: the ties are counted in it.
    if (p + 1 < kPasses)
      for (int b = t; b < digit_bins(p + 1); b += kThreads) pass_hist(p + 1)[b] = 0;
    const DigitFound found = find_digit(counts, bins, need, sm.scratch);
    if (p == 0 && found.total <= a.k) {  // the same in every thread of the cluster
      take_all = true;
      break;
    }
    digit = found.digit;
    need -= found.above;
    prefix |= static_cast<uint32_t>(digit) << shift;
    mask |= static_cast<uint32_t>(bins - 1) << shift;
  }
  // Unless take_all: prefix is the k-th key K (visible, so not 0); pick every key > K and the `need`
  // lowest-indexed keys == K (the ties counted in the last pass's histogram).
  const KthKey kth{prefix, prefix, need, digit, take_all, false};
  pick_into_cta0<false>(sm, cluster, kth, pass_hist(kPasses - 1), keys, n_collected, slice_lo, rank, w_lo, w_hi, warp,
                        lane, below);
  cluster.sync();  // every pick is in CTA 0's list; no CTA touches another's memory after this
  if (rank != 0) return;
  const int n = sm.n_picks;
  int32_t* out = a.out + static_cast<int64_t>(blockIdx.x / c) * a.k;
  write_sorted_picks(sm.picks, n, out, a.k, a.offset);
}

}  // namespace

namespace detail {

void topk_v4(const TopkArgs& a, cudaStream_t stream) {
  topk_cluster_launch::launch<topk_v4_kernel>(a, static_cast<int>(sizeof(Smem)), "topk v4", stream);
}

}  // namespace detail
}  // namespace dsv4::cuda
