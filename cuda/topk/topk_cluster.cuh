#pragma once
// Device pieces the cluster top-k kernels (topk_v3.cu, topk_v4.cu, topk_v5.cu) share: v3's and v4's
// shared-memory layout, 32-bit shared-memory addressing, the count of a key into a radix pass's
// histogram, the bitonic sort of the picks held in registers, and v4's chunk count, digit search
// and rank sort (v5 reuses them). The index arithmetic is in topk_v3_plan.h.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/topk/topk_api.h"
#include "cuda/topk/topk_keys.cuh"
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

// Counts the 128 keys of a warp's chunk (lane l holds r, keys 4l .. 4l+3): one atomic where the
// whole chunk holds one key (ReLU's plateaus), else one a counted key. Every lane calls it.
__device__ inline void count_chunk(unsigned hist_base, const PassDigit& d, const Keys4& r, int lane) {
  const uint32_t first = __shfl_sync(kFull, r.k[0], 0);
  if (__all_sync(kFull, r.k[0] == first && r.k[1] == first && r.k[2] == first && r.k[3] == first)) {
    if (lane == 0) count_key(hist_base, d, first, kChunk);
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) count_key(hist_base, d, r.k[j], 1u);
}

// A resident slice's scores (filled of them at `slice`) into `keys` as order keys, by the kThreads
// threads of a CTA (thread t): 4 scores a thread and load, 4 loads in flight; 16-byte loads where
// the slice is aligned, one score at a time at its end (nothing past the row's length is read), -inf
// past it up to whole chunks. A warp's 4 keys a lane of one load are a chunk (128 consecutive
// candidates), handed to on_chunk(keys) as they land (v4, v5: pass 0's count; v3: nothing).
template <class OnChunk>
__device__ inline void load_resident_slice(const float* slice, int filled, uint32_t* keys, int t, OnChunk on_chunk) {
  const bool aligned = (reinterpret_cast<uintptr_t>(slice) & 15u) == 0;
  const int padded = static_cast<int>(whole_chunks(filled));
  for (int o0 = 4 * t; o0 < padded; o0 += 16 * kThreads) {  // warp-uniform: padded is whole chunks
    float4 v[4];
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int o = o0 + 4 * kThreads * m;
      if (aligned && o + 4 <= filled) {
        v[m] = *reinterpret_cast<const float4*>(slice + o);
      } else {
        v[m].x = o < filled ? slice[o] : -INFINITY;
        v[m].y = o + 1 < filled ? slice[o + 1] : -INFINITY;
        v[m].z = o + 2 < filled ? slice[o + 2] : -INFINITY;
        v[m].w = o + 3 < filled ? slice[o + 3] : -INFINITY;
      }
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const int o = o0 + 4 * kThreads * m;
      if (o < padded) {  // warp-uniform
        const Keys4 r = {{order_key(v[m].x), order_key(v[m].y), order_key(v[m].z), order_key(v[m].w)}};
        *reinterpret_cast<uint4*>(&keys[o]) = make_uint4(r.k[0], r.k[1], r.k[2], r.k[3]);
        on_chunk(r);
      }
    }
  }
}

// The keys of one lane in the chunk at slice offset o of its warp's segment (keys 4 lane .. +3):
// from shared memory when the slice is resident, else read from the scores (0 past the segment's
// end w_hi).
struct LaneKeys {
  bool resident;
  unsigned keys_base;  // shared address of the lane's first key in the resident keys
  const float* slice;
  int w_hi, lane;
  __device__ Keys4 at(int o) const {
    Keys4 r;
    if (resident) {
      const uint4 v = shared_load4(keys_base + 4u * static_cast<unsigned>(o));
      r = {{v.x, v.y, v.z, v.w}};
    } else {
      const int i = o + 4 * lane;
#pragma unroll
      for (int j = 0; j < 4; ++j) r.k[j] = i + j < w_hi ? order_key(slice[i + j]) : 0;
    }
    return r;
  }
};

// The picks of a chunk whose CTA takes only part of its ties at the k-th key `prefix`: the keys
// above it, and of the keys equal to it those ranked below tie_take in index order (tie_rank: this
// warp's ties before the chunk, advanced past the chunk's). r: this lane's keys 4 lane .. 4 lane + 3.
__device__ inline void pick_with_partial_ties(const Keys4& r, uint32_t prefix, int tie_take, unsigned below, int lane,
                                              int& tie_rank, bool (&pick)[4]) {
  int ties_before = 0, ties_in_chunk = 0;  // keys == K in the chunk before this lane's, and in all
  unsigned ties[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    pick[j] = r.k[j] > prefix;
    ties[j] = __ballot_sync(kFull, r.k[j] == prefix);
    ties_before += __popc(ties[j] & below);
    ties_in_chunk += __popc(ties[j]);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if ((ties[j] >> lane) & 1u) {
      pick[j] = tie_rank + ties_before < tie_take;
      ++ties_before;  // this lane's later keys come after this one
    }
  tie_rank += ties_in_chunk;
}

// A chunk's picks: before = those of the lanes before this one (below), in_chunk = all of them.
__device__ inline void count_picks(const bool (&pick)[4], unsigned below, int& before, int& in_chunk) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const unsigned picked = __ballot_sync(kFull, pick[j]);
    before += __popc(picked & below);
    in_chunk += __popc(picked);
  }
}

// Inclusive prefix sum over the lanes of a warp.
__device__ inline int warp_inclusive_sum(int v, int lane) {
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int y = __shfl_up_sync(kFull, v, off);
    if (lane >= off) v += y;
  }
  return v;
}

// Pass p's count of this CTA's keys (pass: the digit and the prefix found so far) into the histogram
// at hist_base, by warp `warp` over its segment [w_lo, w_hi) of the slice (lane; below: the lanes
// before it). A slice that is not resident counts every key of the segment at every pass; a resident
// one was counted at pass 0 as it landed (load_resident_slice), and from pass 1 on counts only the
// keys it collects (n_collected of them, listed in sm.candidates at pass 1). v4 and v5.
template <class SmemT>
__device__ __forceinline__ void count_pass(SmemT& sm, const LaneKeys& keys, int p, const PassDigit& pass,
                                           unsigned hist_base, uint32_t prefix, int w_lo, int w_hi, int warp, int lane,
                                           unsigned below, int& n_collected) {
  const bool resident = keys.resident;
  if (!resident) {
    for (int o = w_lo; o < w_hi; o += kChunk) count_chunk(hist_base, pass, keys.at(o), lane);
  } else if (p > 0) {
    // A resident slice: passes 1 and 2 count only the collected keys, those whose pass-0 digit is
    // at or above the k-th key's (those above it are picked later without being counted again).
    // At pass 1 the slice is walked twice: each warp counts what it collects, a block barrier,
    // then each warp writes its offsets from its place after the lower warps' (the list in index
    // order: warps, chunks, lanes, keys) and counts pass 1 as it goes. Pass 2 counts the list.
    if (p == 1) {
      int in_warp = 0;
      for (int o = w_lo; o < w_hi; o += kChunk) {
        const Keys4 r = keys.at(o);
        int mine = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) mine += r.k[j] != 0 && r.k[j] >= prefix;
        in_warp += static_cast<int>(__reduce_add_sync(kFull, static_cast<unsigned>(mine)));
      }
      // warp_ties, not scratch: a warp may still be reading pass 0's digit search's scratch.
      if (lane == 0) sm.warp_ties[warp] = in_warp;
      __syncthreads();
      const int through_warp = warp_inclusive_sum(sm.warp_ties[lane], lane);
      n_collected = __shfl_sync(kFull, through_warp, 31);
      int slot = __shfl_sync(kFull, through_warp, warp) - in_warp;
      for (int o = w_lo; o < w_hi; o += kChunk) {
        const Keys4 r = keys.at(o);
        int before = 0, in_chunk = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const unsigned lanes = __ballot_sync(kFull, r.k[j] != 0 && r.k[j] >= prefix);
          before += __popc(lanes & below);
          in_chunk += __popc(lanes);
        }
        int mine = slot + before;
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (r.k[j] != 0 && r.k[j] >= prefix) sm.candidates[mine++] = static_cast<uint16_t>(o + 4 * lane + j);
        slot += in_chunk;
        count_chunk(hist_base, pass, r, lane);
      }
    } else {
      for (int q0 = 32 * warp; q0 < n_collected; q0 += kThreads) {
        const int q = q0 + lane;
        const uint32_t key = q < n_collected ? sm.keys[sm.candidates[q]] : 0u;
        const uint32_t first = __shfl_sync(kFull, key, 0);
        if (__all_sync(kFull, key == first)) {  // one key over the 32 (a plateau)
          if (lane == 0) count_key(hist_base, pass, first, 32u);
        } else {
          count_key(hist_base, pass, key, 1u);
        }
      }
    }
  }
}

// The digit of a pass: the bin of `counts` (bins bins, counted from the top) holding the need-th
// largest counted key, and how many counted keys lie in the bins above it. Thread t owns bins
// high_bin(bins, t) and the one below (none where that is <= 0). One block barrier: each warp
// writes its bins' total into scratch (32 ints); then every warp reads the 32 totals, finds the
// warp holding the need-th key, scans that warp's bins and finds the digit, each warp the same
// answer. total: the counted keys of the pass. scratch must not be read or written by the block
// between the previous call's return and this call's barrier. Every thread calls it.
struct DigitFound {
  int digit, above, total;
};
__device__ inline DigitFound find_digit(const unsigned* counts, int bins, int need, int* scratch) {
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int top = high_bin(bins, t);
  const int mine = top > 0 ? static_cast<int>(counts[top] + counts[top - 1]) : 0;
  const int through_me = warp_inclusive_sum(mine, lane);
  if (lane == 31) scratch[warp] = through_me;
  __syncthreads();
  // Lane w: the keys in warp w's bins and in every warp's before it (bins above).
  const int through_warp = warp_inclusive_sum(scratch[lane], lane);
  const int total = __shfl_sync(kFull, through_warp, 31);
  if (need > total) return {0, 0, total};  // pass 0 with at most k counted keys: no digit needed
  const int holder = __ffs(__ballot_sync(kFull, through_warp >= need)) - 1;
  const int before_holder = __shfl_sync(kFull, through_warp - scratch[lane], holder);
  // Lane l: thread (holder, l)'s two bins.
  const int h_top = high_bin(bins, 32 * holder + lane);
  const int hi = h_top > 0 ? static_cast<int>(counts[h_top]) : 0;
  const int lo = h_top > 0 ? static_cast<int>(counts[h_top - 1]) : 0;
  const int above_lane = before_holder + warp_inclusive_sum(hi + lo, lane) - (hi + lo);
  const bool here = above_lane < need && need <= above_lane + hi + lo;
  const int at = __ffs(__ballot_sync(kFull, here)) - 1;
  const bool in_hi = need <= above_lane + hi;
  const int digit = in_hi ? h_top : h_top - 1, above = in_hi ? above_lane : above_lane + hi;
  return {__shfl_sync(kFull, digit, at), __shfl_sync(kFull, above, at), total};
}

// Up to 512 distinct nonzero composites at list[0 .. n) (room for 512) sorted descending, thread t's
// place written to out: warps 0..15 sort runs of 32 in registers, then the pick at list position e
// (two threads a pick: t = 2e, 2e + 1, each searching every other run) lands at its rank, the
// number of picks that beat it. Every thread calls it. Returns nothing; writes out[0 .. n).
__device__ inline void sort_by_runs(uint64_t* list, int n, int32_t* out, int32_t offset) {
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  constexpr int kRuns = 16;
  uint64_t v = t < n ? list[t] : 0;
  if (warp < kRuns) {
#pragma unroll
    for (int span = 2; span <= 32; span <<= 1)
#pragma unroll
      for (int stride = span / 2; stride > 0; stride >>= 1)
        v = exchanged(v, __shfl_xor_sync(kFull, v, stride), bitonic_keeps_max(lane, stride, span));
  }
  __syncthreads();  // every read of the unsorted list done
  if (warp < kRuns) list[t] = v;
  __syncthreads();
  // The picks that beat list[e] in run r, searched from the front of the run (descending; 0s last):
  // the first `count` entries beat it.
  const int e = t / 2, half = t % 2;
  const uint64_t mine = list[e];
  int count[kRuns / 2];
#pragma unroll
  for (int i = 0; i < kRuns / 2; ++i) count[i] = 0;
#pragma unroll
  for (int step = 16; step > 0; step >>= 1)
#pragma unroll
    for (int i = 0; i < kRuns / 2; ++i) count[i] += list[32 * (2 * i + half) + count[i] + step - 1] > mine ? step : 0;
  int beaten_by = 0;
#pragma unroll
  for (int i = 0; i < kRuns / 2; ++i) beaten_by += count[i] + (list[32 * (2 * i + half) + count[i]] > mine ? 1 : 0);
  beaten_by += __shfl_xor_sync(kFull, beaten_by, 1);
  if (half == 0 && e < n) out[beaten_by] = static_cast<int32_t>(composite_index(mine)) + offset;
}

}  // namespace dsv4::cuda::topk_cluster
