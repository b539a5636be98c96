#pragma once
// The index arithmetic of the v3 top-k (topk_v3.cu), host- and device-compiled so that the host
// test (tests/test_cuda_indexer_host.cpp) checks every piece on the CPU: the cluster size, the
// slice of the row a CTA owns, the contiguous segment of it a warp walks, the three radix digits,
// the bins a thread owns in the select, and the compare-exchange rule of the block sort.
#include <cstdint>

#include "cuda/common/numerics.cuh"  // DSV4_HD

namespace dsv4::cuda::topk_v3_plan {

inline constexpr int kThreads = 1024;
inline constexpr int kWarps = kThreads / 32;
inline constexpr int kChunk = 128;          // candidates a warp reads at once: 4 consecutive ones a lane
inline constexpr int kMaxCluster = 16;      // CTAs a row gets at most
inline constexpr int kResident = 32768;     // keys of a CTA's slice held in shared memory (128 KiB)
inline constexpr int kTargetSlice = 16384;  // a row gets one more CTA per 16384 candidates
inline constexpr int kPasses = 3;           // digits of 11, 11 and 10 bits: 32 bits in all
inline constexpr int kMaxBins = 2048;

// CTAs a row gets: one per kTargetSlice candidates of the longest row, 1 .. max_cluster.
DSV4_HD inline int cluster_size(int64_t max_length, int max_cluster) {
  const int64_t c = (max_length + kTargetSlice - 1) / kTargetSlice;
  return c < 1 ? 1 : (c > max_cluster ? max_cluster : static_cast<int>(c));
}

DSV4_HD inline int64_t whole_chunks(int64_t n) { return (n + kChunk - 1) / kChunk * kChunk; }

// Candidates of a CTA's slice (the same for every CTA of a launch with this row length): whole
// chunks, so that a slice of <= kResident candidates fits its shared-memory buffer with the tail of
// its last chunk.
DSV4_HD inline int64_t slice_part(int64_t len, int c) { return whole_chunks((len + c - 1) / c); }

// CTA `rank` of the row's cluster owns [lo, hi); warp w of it walks [lo + w seg, lo + (w+1) seg)
// clipped to hi, one chunk an iteration (lane l: the chunk's candidates 4l .. 4l+3). Ranks, warps,
// chunks and lanes hold increasing indices.
struct Slice {
  int64_t lo, hi, seg;
};
DSV4_HD inline Slice slice_of(int64_t len, int c, int rank) {
  const int64_t part = slice_part(len, c);
  const int64_t lo = rank * part < len ? rank * part : len;
  const int64_t hi = lo + part < len ? lo + part : len;
  const int64_t seg = whole_chunks((hi - lo + kWarps - 1) / kWarps);
  return {lo, hi, seg};
}
DSV4_HD inline int64_t warp_begin(const Slice& s, int w) { return s.lo + w * s.seg < s.hi ? s.lo + w * s.seg : s.hi; }
DSV4_HD inline int64_t warp_end(const Slice& s, int w) { return warp_begin(s, w + 1); }

// Pass p's digit: key bits [shift, shift + bits).
DSV4_HD inline int digit_shift(int p) { return p == 0 ? 21 : (p == 1 ? 10 : 0); }
DSV4_HD inline int digit_bins(int p) { return p == 2 ? 1024 : 2048; }

// In the select, thread t owns bins bins-1-2t (the higher) and bins-2-2t, counted from the top.
DSV4_HD inline int high_bin(int bins, int t) { return bins - 1 - 2 * t; }

// Bitonic sort into descending order: at stage (span, stride) the element at position p compares
// with the one at p ^ stride and keeps the larger of the two when this returns true.
DSV4_HD inline bool bitonic_keeps_max(int p, int stride, int span) {
  const bool descending = (p & span) == 0;
  const bool lower = (p & stride) == 0;
  return descending == lower;
}

}  // namespace dsv4::cuda::topk_v3_plan
