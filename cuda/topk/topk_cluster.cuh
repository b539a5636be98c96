#pragma once
// Device pieces the cluster top-k kernels (topk_v3.cu, topk_v4.cu) share: their shared-memory
// layout, 32-bit shared-memory addressing, the count of a key into a radix pass's histogram, and the
// bitonic sort of the picks held in registers. The index arithmetic is in topk_v3_plan.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/topk/topk_api.h"
#include "cuda/topk/topk_v3_plan.h"

namespace dsv4::cuda::topk_cluster {

using namespace topk_v3_plan;

inline constexpr unsigned kFull = 0xffffffffu;

// A CTA's shared memory (about 224 KiB of the 227 a CTA may have).
struct Smem {
  uint32_t keys[kResident];   // the slice's order keys, 0 to the chunk's end
  unsigned hist[kMaxBins];    // this CTA's counts (the current pass)
  unsigned merged[kMaxBins];  // the cluster's counts of every bin (the current pass)
  uint64_t picks[kMaxTopk];   // CTA 0's list
  // Slice offsets of the keys passes 1 and 2 count (v3: those in pass 0's digit, in any order; v4:
  // those at or above it, in index order).
  uint16_t candidates[kResident];
  int scratch[33];
  int warp_ties[kWarps];
  int digit, above, n_picks, n_candidates;
};

// 32-bit shared-memory addresses, computed once (the generic ones cost a cluster-window computation
// at every use under these kernels' 64 registers).
__device__ inline unsigned shared_address(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
__device__ inline void shared_add(unsigned address, unsigned v) {
  asm volatile("red.shared.add.u32 [%0], %1;\n" ::"r"(address), "r"(v) : "memory");
}
__device__ inline uint4 shared_load4(unsigned address) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(address));
  return v;
}

// A radix pass's digit: key bits [shift, shift + log2(bins)); the pass counts the visible keys whose
// higher digits are the k-th key's found so far (key & mask == prefix).
struct PassDigit {
  uint32_t prefix, mask;
  int shift;
  uint32_t last_bin;  // bins - 1
  __device__ bool counts(uint32_t key) const { return key != 0 && (key & mask) == prefix; }
};

// Counts `key` n times (n equal keys) into the histogram at shared address hist_base when the pass
// counts it.
__device__ inline void count_key(unsigned hist_base, const PassDigit& d, uint32_t key, unsigned n) {
  if (d.counts(key)) shared_add(hist_base + 4u * ((key >> d.shift) & d.last_bin), n);
}

// The 4 keys of a lane: candidates first .. first+3 of a chunk.
struct Keys4 {
  uint32_t k[4];
};

// One compare-exchange of the network: the larger of the pair where keep_max, else the smaller (the
// composites are distinct, or both 0).
__device__ inline uint64_t exchanged(uint64_t v, uint64_t other, bool keep_max) {
  return (other > v) == keep_max ? other : v;
}

// The bitonic network of kSize (64 .. 2048) positions, unrolled: thread t holds positions t and
// t + kThreads in v (the second only when kSize > kThreads); the warps past kSize only meet the
// barriers of the strides >= 32, which go through list (room for kSize). Every thread calls it.
template <int kSize>
__device__ inline void bitonic_network(uint64_t* list, uint64_t (&v)[2]) {
  constexpr int kHeld = kSize > kThreads ? 2 : 1;
  const int t = threadIdx.x;
  const bool idle = (t & ~31) >= kSize;
#pragma unroll
  for (int span = 2; span <= kSize; span <<= 1)
#pragma unroll
    for (int stride = span / 2; stride > 0; stride >>= 1) {
      uint64_t other[2] = {0, 0};
      if (stride < 32) {
        if (!idle)
#pragma unroll
          for (int e = 0; e < kHeld; ++e) other[e] = __shfl_xor_sync(kFull, v[e], stride);
      } else if (stride == kThreads) {
        other[0] = v[1];
        other[1] = v[0];
      } else {
        if (!idle)
#pragma unroll
          for (int e = 0; e < kHeld; ++e) list[t + kThreads * e] = v[e];
        __syncthreads();
        if (!idle)
#pragma unroll
          for (int e = 0; e < kHeld; ++e) other[e] = list[(t + kThreads * e) ^ stride];
        __syncthreads();
      }
      if (!idle)
#pragma unroll
        for (int e = 0; e < kHeld; ++e)
          v[e] = exchanged(v[e], other[e], bitonic_keeps_max(t + kThreads * e, stride, span));
    }
}

// The n (<= kMaxTopk) distinct nonzero composites at list[0 .. n) sorted descending; thread t
// returns positions t and t + kThreads of the result (0 past n). Every thread calls it.
__device__ inline void sort_descending(uint64_t* list, int n, uint64_t (&v)[2]) {
  const int t = threadIdx.x;
#pragma unroll
  for (int e = 0; e < 2; ++e) v[e] = t + kThreads * e < n ? list[t + kThreads * e] : 0;
  __syncthreads();  // every read of the list done before the first exchange writes it
  if (n <= 64)
    bitonic_network<64>(list, v);
  else if (n <= 128)
    bitonic_network<128>(list, v);
  else if (n <= 256)
    bitonic_network<256>(list, v);
  else if (n <= 512)
    bitonic_network<512>(list, v);
  else if (n <= 1024)
    bitonic_network<1024>(list, v);
  else
    bitonic_network<2048>(list, v);
}

}  // namespace dsv4::cuda::topk_cluster
