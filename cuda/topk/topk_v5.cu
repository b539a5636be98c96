// v5 of the top-k (topk_api.h): v4's cluster, slices, collection and rank sort (topk_v4.cu) with
// two fewer steps (docs/cuda-indexer.md, "Top-k v5"):
//  - one cluster barrier a radix pass: each CTA counts into its own histogram of the pass, each warp
//    writes the total of the bins it owns in the digit search (its segment), one cluster barrier,
//    then warp 0 reads every CTA's segment totals, finds the segment holding the k-th key, reads
//    that segment's bins from every CTA, finds the digit and hands it to its CTA by a block barrier
//    (v4: a share reduction between two cluster barriers, then a local search);
//  - pass 2 skipped when the bin of the k-th key after pass 1 holds at most kBoundary keys in the
//    row: the keys above the bin are picked, the bin's keys go to a boundary list in CTA 0, which
//    ranks them directly and keeps the best `need`.
// Selection rule and output: v1's.
//
// The cross-CTA protocol (c > 1). Buffers: hist[0] holds passes 0 and 2, hist[1] pass 1;
// segments[p & 1] the segment totals of pass p. Writes to a CTA's buffers come only from its own
// threads (its counts, its segment totals, its clear); other CTAs only read them, and only inside
// the window of one pass: after that pass's cluster barrier (barrier.cluster.arrive.release /
// wait.acquire, cluster.sync(): every CTA's counts and totals of the pass, written before its
// arrival, are visible to every CTA after its wait) and before the reader arrives at the next
// pass's cluster barrier (the reads are warp 0's, done before the block barrier that hands out the
// digit, which every warp of the reader passes before it counts the next pass). A CTA overwrites a
// buffer of pass p only at pass p + 2: segments[p & 1] after pass p + 2's block barrier, hist[0]
// (pass 0's, cleared for pass 2) after pass 1's cluster barrier; both come after every CTA arrived
// at pass p + 1's cluster barrier, hence after every read of pass p's window. The tie share-out reads
// the lower ranks' pass-2 histogram after pass 2's barrier; nobody writes it again. CTA 0's picks,
// boundary list and their counters are set before pass 0's cluster barrier and written by the
// other CTAs only after it; the kernel's last cluster barrier completes them before CTA 0 reads
// them, and no CTA touches another's memory after it.
//
// Inside a CTA, the one word that lane 0 of warp 0 hands to every warp after a pass's cluster
// barrier (sm.found: digit, above, total, bin) is an aligned int4, stored with one 16-byte store
// and loaded with one 16-byte load, so that the load reads those 16 bytes and no other word. The
// CTA's next write to a word that the load reads is warp 0's at the next pass, after the next
// cluster barrier, which every warp reaches only after its load. As four ints at a 16-byte
// boundary + 4 (the build of 2026-12-02), ptxas merged the loads of digit, above and total into one
// 16-byte load from 4 bytes below them, which read warp_ties[31] too; warp 31 writes that word
// without a barrier after the hand-out (the pass-1 collection's count; the partial tie share's
// count after the last pass), while a slower warp may not have loaded yet. The stray value was
// never used, but the read raced with the write (racecheck: docs/cuda-indexer.md, "Top-k v5").
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/topk/cluster_launch.cuh"
#include "cuda/topk/topk_api.h"
#include "cuda/topk/topk_cluster.cuh"
#include "cuda/topk/topk_keys.cuh"
#include "cuda/topk/topk_launch.h"
#include "cuda/topk/topk_picks.cuh"
#include "cuda/topk/topk_probes.h"
#include "cuda/topk/topk_v3_plan.h"

namespace cg = cooperative_groups;

namespace dsv4::cuda {
namespace {

using namespace topk_v3_plan;
using namespace topk_cluster;

// The keys of the k-th key's bin after pass 1 that CTA 0 ranks directly (more: pass 2 runs).
inline constexpr int kBoundary = 128;
inline constexpr int kRankers = kThreads / kBoundary;  // threads ranking one boundary key

// A CTA's shared memory (about 226 KiB of the 227 a CTA may have).
struct SmemV5 {
  uint32_t keys[kResident];        // the slice's order keys, 0 to the chunk's end
  unsigned hist[2][kMaxBins];      // this CTA's counts: passes 0 and 2 in [0], pass 1 in [1]
  uint64_t picks[kMaxTopk];        // CTA 0's list
  uint64_t boundary[kBoundary];    // CTA 0's list of the boundary bin's keys (pass 2 skipped)
  uint16_t candidates[kResident];  // as v4: the keys at or above pass 0's digit, in index order
  unsigned segments[2][kWarps];    // pass p's totals of each warp's bins in [p & 1]
  int scratch[33];
  int warp_ties[kWarps];
  // Warp 0's digit search: digit, above, total, bin (the digit's keys in the row). One aligned
  // 16-byte word, stored and loaded whole (the file comment says why).
  int4 found;
  int n_picks, n_boundary;
};
static_assert(sizeof(SmemV5) <= 226 * 1024, "SmemV5: a CTA may have 227 KiB of shared memory, 1 KiB of it static");

__device__ inline unsigned cluster_address(unsigned local, unsigned rank) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ inline unsigned cluster_load(unsigned address) {
  unsigned v;
  asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(v) : "r"(address));
  return v;
}
__device__ inline uint2 cluster_load2(unsigned address) {
  uint2 v;
  asm volatile("ld.shared::cluster.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(address));
  return v;
}

// find_digit over the sum of the c CTAs' counts, by one warp (every lane returns the answer): lane
// l loads segment l's total from every CTA at once (segments_base: this CTA's address of the
// pass's segment totals), the warp finds the segment (the bins of thread block warp `holder` in
// find_digit's ownership) that holds the need-th key, then lane l loads that warp's thread l's two
// bins (adjacent: high_bin is odd) from every CTA at once and the warp finds the digit. bin: the
// row's keys in the digit's bin.
struct ClusterDigit {
  int digit, above, total, bin;
};
__device__ inline ClusterDigit cluster_find_digit(unsigned segments_base, unsigned hist_base, int bins, int need, int c,
                                                  int lane) {
  unsigned part[kMaxCluster];
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r)
    part[r] = r < c ? cluster_load(cluster_address(segments_base + 4u * static_cast<unsigned>(lane), r)) : 0u;
  int segment = 0;
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) segment += static_cast<int>(part[r]);
  const int through = warp_inclusive_sum(segment, lane);
  const int total = __shfl_sync(kFull, through, 31);
  if (need > total) return {0, 0, total, 0};  // pass 0 with at most k counted keys: no digit needed
  const int holder = __ffs(__ballot_sync(kFull, through >= need)) - 1;
  const int before_holder = __shfl_sync(kFull, through - segment, holder);
  const int h_top = high_bin(bins, 32 * holder + lane);
  int hi = 0, lo = 0;
  if (h_top > 0) {
    const unsigned pair = hist_base + 4u * static_cast<unsigned>(h_top - 1);
    uint2 v[kMaxCluster];
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) v[r] = r < c ? cluster_load2(cluster_address(pair, r)) : make_uint2(0u, 0u);
#pragma unroll
    for (int r = 0; r < kMaxCluster; ++r) {
      lo += static_cast<int>(v[r].x);
      hi += static_cast<int>(v[r].y);
    }
  }
  const int above_lane = before_holder + warp_inclusive_sum(hi + lo, lane) - (hi + lo);
  const bool here = above_lane < need && need <= above_lane + hi + lo;
  const int at = __ffs(__ballot_sync(kFull, here)) - 1;
  const bool in_hi = need <= above_lane + hi;
  const int digit = in_hi ? h_top : h_top - 1, above = in_hi ? above_lane : above_lane + hi, bin = in_hi ? hi : lo;
  return {__shfl_sync(kFull, digit, at), __shfl_sync(kFull, above, at), total, __shfl_sync(kFull, bin, at)};
}

// The stamped instantiation's stamps (topk_probes.h): set by topk_v5_stamped before its launch; a
// global, not a kernel argument, so that the production instantiation keeps its arguments and code.
__device__ uint64_t* v5_stamps;

// Thread 0's stamp s of this CTA where kStamped (else nothing): clock64 for the cycles between two
// stamps of one CTA (the SM's counter, not comparable across SMs), %globaltimer for the order of
// the CTAs' stamps (one clock for the GPU, in ns). Volatile with a memory clobber: kept in place
// among the kernel's memory operations and barriers.
template <bool kStamped>
__device__ __forceinline__ void stamp(int s) {
  if constexpr (kStamped) {
    if (threadIdx.x == 0) {
      uint64_t cycles, ns;
      asm volatile("mov.u64 %0, %%clock64;" : "=l"(cycles)::"memory");
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns)::"memory");
      uint64_t* at = v5_stamps + 2 * (static_cast<uint64_t>(blockIdx.x) * topk_probes::kV5Stamps + s);
      at[0] = cycles;
      at[1] = ns;
    }
  }
}

// kStamped: the probe's instantiation (topk_v5_stamped), stamping each phase boundary; the
// production one (false) compiles to the code it had without stamps.
template <bool kStamped>
__global__ void __launch_bounds__(kThreads, 1) topk_v5_kernel(const TopkArgs a) {
  stamp<kStamped>(topk_probes::kEntry);
  extern __shared__ __align__(16) uint8_t smem_raw[];
  SmemV5& sm = *reinterpret_cast<SmemV5*>(smem_raw);
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
  // Passes 0 and 1's histograms, cleared before the load counts into the first.
  for (int b = t; b < 2 * kMaxBins; b += kThreads) sm.hist[b / kMaxBins][b % kMaxBins] = 0;
  if (t == 0) {
    sm.n_picks = 0;
    sm.n_boundary = 0;
  }
  __syncthreads();
  stamp<kStamped>(topk_probes::kCleared);
  if (resident) {  // pass 0's count as the chunks land
    const PassDigit pass0{0u, 0u, digit_shift(0), static_cast<uint32_t>(digit_bins(0) - 1)};
    const unsigned hist_base = shared_address(sm.hist);
    load_resident_slice(slice, static_cast<int>(s.hi - s.lo), sm.keys, t,
                        [&](const Keys4& r) { count_chunk(hist_base, pass0, r, lane); });
  }
  stamp<kStamped>(topk_probes::kLoaded);
  // This warp's segment as offsets into the slice: [w_lo, w_hi), whole chunks but the last.
  const int w_lo = static_cast<int>(warp_begin(s, warp) - s.lo), w_hi = static_cast<int>(warp_end(s, warp) - s.lo);
  // The keys of this lane in the chunk at slice offset o (0 past the warp's segment): keys.at(o).
  const LaneKeys keys{resident, shared_address(sm.keys) + 16u * static_cast<unsigned>(lane), slice, w_hi, lane};

  uint32_t prefix = 0, mask = 0;  // the digits of the k-th key found so far
  int need = a.k;                 // keys with this prefix still to pick
  bool take_all = false;          // at most k visible keys: every one is picked
  bool boundary = false;          // pass 2 skipped: the keys of the k-th key's bin go to CTA 0's boundary list
  int digit = 0;
  int n_collected = 0;  // a resident slice's collected keys (from pass 1 on)
  // Not unrolled: the copies of the loop body would not fit the 64 registers of 1024 threads.
#pragma unroll 1
  for (int p = 0; p < kPasses; ++p) {
    const int shift = digit_shift(p), bins = digit_bins(p);
    const PassDigit pass{prefix, mask, shift, static_cast<uint32_t>(bins - 1)};
    unsigned* hist = sm.hist[p == 1 ? 1 : 0];
    const unsigned hist_base = shared_address(hist);
    count_pass(sm, keys, p, pass, hist_base, prefix, w_lo, w_hi, warp, lane, below, n_collected);
    // This CTA's counts complete. One CTA a row: they are the row's, searched as v4 does. Else
    // each warp publishes its bins' total, one cluster barrier, and warp 0 searches the sum of the
    // CTAs' counts and hands the digit out (the protocol: the file comment).
    __syncthreads();
    stamp<kStamped>(topk_probes::kCount0 + 3 * p);
    DigitFound found;
    int bin = 0;  // the row's keys in the digit's bin
    if (c == 1) {
      // Pass 2's histogram (pass 0's buffer) cleared: pass 0's search read it before this barrier;
      // find_digit's barrier orders the clear before pass 2's counts.
      if (p == 1)
        for (int b = t; b < digit_bins(2); b += kThreads) sm.hist[0][b] = 0;
      found = find_digit(hist, bins, need, sm.scratch);
      bin = static_cast<int>(hist[found.digit]);
      stamp<kStamped>(topk_probes::kSearch0 + 3 * p);
    } else {
      const int top = high_bin(bins, t);
      const unsigned mine = top > 0 ? hist[top] + hist[top - 1] : 0u;
      const unsigned segment = __reduce_add_sync(kFull, mine);
      if (lane == 0) sm.segments[p & 1][warp] = segment;
      cluster.sync();  // every CTA's counts and segment totals of pass p complete and visible
      stamp<kStamped>(topk_probes::kCluster0 + 3 * p);
      // Pass 2's histogram (pass 0's buffer) cleared: every CTA read pass 0's before arriving at
      // this barrier; the hand-out barrier below orders the clear before pass 2's counts.
      if (p == 1)
        for (int b = t; b < digit_bins(2); b += kThreads) sm.hist[0][b] = 0;
      if (warp == 0) {
        const ClusterDigit d = cluster_find_digit(shared_address(sm.segments[p & 1]), hist_base, bins, need, c, lane);
        if (lane == 0) sm.found = make_int4(d.digit, d.above, d.total, d.bin);
      }
      // The hand-out: sm.found is written again only after pass p + 1's first barrier; one load of
      // exactly its 16 bytes (the file comment).
      __syncthreads();
      stamp<kStamped>(topk_probes::kSearch0 + 3 * p);
      const int4 f = sm.found;
      found = {f.x, f.y, f.z};
      bin = f.w;
    }
    if (p == 0 && found.total <= a.k) {  // the same in every thread of the cluster
      take_all = true;
      break;
    }
    digit = found.digit;
    need -= found.above;
    prefix |= static_cast<uint32_t>(digit) << shift;
    mask |= static_cast<uint32_t>(bins - 1) << shift;
    if (p == 1 && bin <= kBoundary) {  // the same in every thread of the cluster
      boundary = true;
      break;
    }
  }
  // Where boundary: the k-th key lies in [prefix, ceiling] (its top 22 bits found); every key above
  // ceiling is picked and every key in the bin goes to CTA 0's boundary list (bin <= kBoundary of
  // them). Else, unless take_all: prefix is the k-th key K (visible, so not 0) and ceiling == K;
  // pick every key > K and the `need` lowest-indexed keys == K (the ties counted in pass 2's
  // histogram, hist[0]).
  const KthKey kth{prefix, prefix | ~mask, need, digit, take_all, boundary};
  pick_into_cta0<true>(sm, cluster, kth, sm.hist[0], keys, n_collected, slice_lo, rank, w_lo, w_hi, warp, lane, below);
  stamp<kStamped>(topk_probes::kPicked);
  cluster.sync();  // every pick is in CTA 0's list; no CTA touches another's memory after this
  stamp<kStamped>(topk_probes::kLastBarrier);
  if (rank != 0) {
    stamp<kStamped>(topk_probes::kExit);
    return;
  }
  int n = sm.n_picks;
  if (boundary) {
    // The `need` best of the boundary bin's keys (need <= bin: the bin holds the k-th key) land after
    // the other picks, each at n + the number of boundary keys that beat it: kRankers threads a key,
    // each comparing every kRankers-th key of the list.
    const int n_boundary = sm.n_boundary, e = t / kRankers, part = t % kRankers;
    const uint64_t mine = e < n_boundary ? sm.boundary[e] : 0;
    int beaten_by = 0;
#pragma unroll
    for (int m = 0; m < kBoundary / kRankers; ++m) {
      const int j = part + kRankers * m;
      beaten_by += j < n_boundary && sm.boundary[j] > mine ? 1 : 0;
    }
#pragma unroll
    for (int off = 1; off < kRankers; off <<= 1) beaten_by += __shfl_xor_sync(kFull, beaten_by, off);
    if (part == 0 && e < n_boundary && beaten_by < need) sm.picks[n + beaten_by] = mine;
    n += need;
    __syncthreads();  // the list complete before the sort reads it
    stamp<kStamped>(topk_probes::kBoundaryRanked);
  }
  int32_t* out = a.out + static_cast<int64_t>(blockIdx.x / c) * a.k;
  write_sorted_picks(sm.picks, n, out, a.k, a.offset);
  stamp<kStamped>(topk_probes::kExit);
}

}  // namespace

namespace detail {

void topk_v5(const TopkArgs& a, cudaStream_t stream) {
  topk_cluster_launch::launch<topk_v5_kernel<false>>(a, static_cast<int>(sizeof(SmemV5)), "topk v5", stream);
}

}  // namespace detail

namespace topk_probes {

int topk_v5_stamped(int64_t rows, const float* scores, int64_t stride, const int32_t* lengths, int64_t max_length,
                    int k, int32_t* out, uint64_t* stamps, cudaStream_t stream) {
  detail::require(rows >= 1 && k >= 1 && k <= kMaxTopk && max_length >= 1 && max_length <= stride,
                  "topk_v5_stamped: expected rows >= 1, 1 <= k <= kMaxTopk and 1 <= max_length <= stride");
  detail::require(scores && lengths && out && stamps, "topk_v5_stamped: a nullptr argument");
  CUDA_CHECK(cudaMemcpyToSymbolAsync(v5_stamps, &stamps, sizeof(stamps), 0, cudaMemcpyHostToDevice, stream));
  const TopkArgs a{rows, scores, stride, lengths, max_length, k, 0, out};
  constexpr int kSmem = static_cast<int>(sizeof(SmemV5));
  topk_cluster_launch::launch<topk_v5_kernel<true>>(a, kSmem, "topk v5 stamped", stream);
  return cluster_size(max_length, topk_cluster_launch::max_cluster_for_device<topk_v5_kernel<true>>(kSmem));
}

}  // namespace topk_probes
}  // namespace dsv4::cuda
