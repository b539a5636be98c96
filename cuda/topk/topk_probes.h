#pragma once
// Top-k v5 with phase stamps (topk_v5.cu's stamped instantiation): where its time goes, phase by
// phase, on the H200 (docs/cuda-indexer.md, "Top-k v5 phase stamps"). Test support
// (cuda/tests/test_cuda_topk.cpp), not an API. All pointers are device pointers.
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda::topk_probes {

// The phase boundaries thread 0 of every CTA stamps, in kernel order. Pass p's three stamps are
// kCount0 + 3p (this CTA's counts complete: after the block barrier that ends the count; pass 1's
// includes the collection), kCluster0 + 3p (after the pass's cluster barrier; none for one CTA a
// row) and kSearch0 + 3p (the digit known to every warp: after the hand-out barrier, or one CTA's
// find_digit). Pass 2's stay 0 where v5 skips it (the boundary bin), kBoundaryRanked is CTA 0's
// only, and only then.
enum V5Stamp : int {
  kEntry = 0,    // the kernel's first instruction
  kCleared = 1,  // the histograms cleared (the first block barrier passed)
  kLoaded = 2,   // warp 0's share of the slice loaded and counted into pass 0's histogram
  kCount0 = 3,   // pass 0: kCount0, kCluster0, kSearch0; pass 1: + 3; pass 2: + 6
  kCluster0 = 4,
  kSearch0 = 5,
  kPicked = 12,       // warp 0's picks written into CTA 0's list
  kLastBarrier = 13,  // the kernel's last cluster barrier passed (every pick in CTA 0's list)
  kBoundaryRanked = 14,
  kExit = 15,  // CTA 0: the sorted picks written; the others: right after the last barrier
  kV5Stamps = 16
};

// The name of stamp s in tables.
inline const char* v5_stamp_name(int s) {
  static const char* const names[kV5Stamps] = {"entry",          "cleared",       "loaded",          "pass 0 count",
                                               "pass 0 cluster", "pass 0 search", "pass 1 count",    "pass 1 cluster",
                                               "pass 1 search",  "pass 2 count",  "pass 2 cluster",  "pass 2 search",
                                               "picks written",  "last barrier",  "boundary ranked", "exit"};
  return s >= 0 && s < kV5Stamps ? names[s] : "?";
}

// topk(..., Variant::v5) on the same arguments (topk_api.h; the picks written to out are v5's),
// by v5's stamped instantiation: CTA b (b = row * cluster + rank) writes stamps[(b * kV5Stamps + s)
// * 2] = clock64 (SM cycles: within a CTA) and [.. + 1] = %globaltimer (ns: comparable across CTAs)
// at stamp s; stamps must hold rows * cluster * kV5Stamps * 2 words, zeroed by the caller (a stamp
// not reached stays 0). Returns cluster, the CTAs a row. Needs rows >= 1, 1 <= k <= kMaxTopk,
// 1 <= max_length <= stride.
int topk_v5_stamped(int64_t rows, const float* scores, int64_t stride, const int32_t* lengths, int64_t max_length,
                    int k, int32_t* out, uint64_t* stamps, cudaStream_t stream = nullptr);

}  // namespace dsv4::cuda::topk_probes
