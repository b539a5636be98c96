// v3 of the top-k (topk_api.h): a cluster of C CTAs per row (one per 16384 candidates of the longest
// row, up to 16 where the GPU schedules 16-CTA clusters, else 8), one launch. Each CTA copies its
// slice into shared memory with asynchronous copies all in flight at once (a slice longer than
// 32768 is re-read from global memory in every pass). Radix select of the k-th key in 3 passes of
// 11, 11 and 10 bits: each pass every CTA counts its slice into its own histogram (double-buffered,
// so one cluster barrier a pass), then every thread adds its 2 bins over the cluster's CTAs through
// distributed shared memory and one block scan finds the digit. The ties at the k-th key are shared
// out by index without another pass: CTA r's count of them is bin d of its last histogram, the
// lower ranks' counts say how many it takes; only a CTA that takes some but not all of its ties
// counts them per warp. The picks go to CTA 0 (one atomic a warp and chunk), which sorts them with
// a bitonic network held in registers (strides below 32 by shuffles, the others through shared
// memory) and writes the row. Selection rule and output: v1's (docs/cuda-indexer.md).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/topk/topk_api.h"
#include "cuda/topk/topk_block.cuh"
#include "cuda/topk/topk_keys.cuh"
#include "cuda/topk/topk_launch.h"
#include "cuda/topk/topk_v3_plan.h"

namespace cg = cooperative_groups;

namespace dsv4::cuda {
namespace {

using namespace topk_v3_plan;

constexpr unsigned kFull = 0xffffffffu;

struct Smem {
  float x[kResident];          // the slice as stored (order keys are computed on each read)
  unsigned hist[2][kMaxBins];  // this CTA's counts; pass p uses hist[p % 2]
  uint64_t picks[kMaxTopk];    // CTA 0's list
  int scratch[33];
  int warp_ties[kWarps];
  int digit, above, n_picks;
};

__device__ inline void copy4_async(float* dst, const float* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ inline void copies_wait_all() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Adds 1 to hist[bin] for every active lane, one shared atomic per distinct bin of the warp (as v2:
// ReLU's zero plateaus would otherwise serialise on one address). Every lane of the warp calls it.
__device__ inline void hist_add(unsigned* hist, unsigned bin, bool active) {
  const unsigned lanes = __ballot_sync(kFull, active);
  if (!active) return;
  const unsigned peers = __match_any_sync(lanes, bin);
  if (static_cast<int>(threadIdx.x % 32) == __ffs(peers) - 1)
    atomicAdd(&hist[bin], static_cast<unsigned>(__popc(peers)));
}

// The n (<= kMaxTopk) distinct nonzero composites at list[0 .. n) sorted descending; thread t
// returns positions t and t + kThreads of the result (0 past n). Every thread calls it.
__device__ inline void sort_descending(uint64_t* list, int n, uint64_t (&v)[2]) {
  const int t = threadIdx.x;
  int size = 64;
  while (size < n) size <<= 1;
#pragma unroll
  for (int e = 0; e < 2; ++e) v[e] = t + kThreads * e < n ? list[t + kThreads * e] : 0;
  __syncthreads();  // every read of the list done before the first exchange writes it
  for (int span = 2; span <= size; span <<= 1)
    for (int stride = span / 2; stride > 0; stride >>= 1) {
      uint64_t other[2];
      if (stride < 32) {
#pragma unroll
        for (int e = 0; e < 2; ++e) other[e] = __shfl_xor_sync(kFull, v[e], stride);
      } else if (stride == kThreads) {
        other[0] = v[1];
        other[1] = v[0];
      } else {
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (t + kThreads * e < size) list[t + kThreads * e] = v[e];
        __syncthreads();
#pragma unroll
        for (int e = 0; e < 2; ++e) other[e] = t + kThreads * e < size ? list[(t + kThreads * e) ^ stride] : 0;
        __syncthreads();
      }
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const uint64_t hi = v[e] > other[e] ? v[e] : other[e], lo = v[e] > other[e] ? other[e] : v[e];
        v[e] = bitonic_keeps_max(t + kThreads * e, stride, span) ? hi : lo;
      }
    }
}

__global__ void __launch_bounds__(kThreads, 1) topk_v3_kernel(const TopkArgs a) {
  extern __shared__ __align__(16) uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_raw);
  cg::cluster_group cluster = cg::this_cluster();
  const int c = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const unsigned below = (1u << lane) - 1;  // the lanes before this one
  const int64_t row = blockIdx.x / c;
  const float* x = a.scores + row * a.stride;
  const int64_t len = a.lengths[row];
  const Slice s = slice_of(len, c, rank);
  const bool resident = slice_part(len, c) <= kResident;
  if (resident) {
    for (int64_t i = s.lo + t; i < s.hi; i += kThreads) copy4_async(&sm.x[i - s.lo], x + i);
    copies_wait_all();
  }
  if (rank == 0 && t == 0) sm.n_picks = 0;
  __syncthreads();
  auto key_at = [&](int64_t i) { return order_key(resident ? sm.x[i - s.lo] : x[i]); };
  const int64_t w_lo = warp_begin(s, warp), w_hi = warp_end(s, warp);

  uint32_t prefix = 0, mask = 0;  // the digits of the k-th key found so far
  int need = a.k;                 // keys with this prefix still to pick
  bool take_all = false;          // at most k visible keys: every one is picked
  int digit = 0;
  for (int p = 0; p < kPasses; ++p) {
    const int shift = digit_shift(p), bins = digit_bins(p);
    unsigned* hist = sm.hist[p % 2];
    for (int b = t; b < bins; b += kThreads) hist[b] = 0;
    __syncthreads();
    for (int64_t base = w_lo; base < w_hi; base += 32) {
      const int64_t i = base + lane;
      const uint32_t key = i < w_hi ? key_at(i) : 0;
      hist_add(hist, (key >> shift) & static_cast<uint32_t>(bins - 1), key != 0 && (key & mask) == prefix);
    }
    // Every CTA's counts complete. hist[p % 2] was last read by the other CTAs in pass p - 2, before
    // they arrived at pass p - 1's barrier, so clearing it above raced with nobody.
    cluster.sync();
    unsigned count_hi = 0, count_lo = 0;  // the cluster's counts of this thread's 2 bins
    const int top = high_bin(bins, t);
    if (top > 0)
      for (int r = 0; r < c; ++r) {
        const uint2 pair = *reinterpret_cast<const uint2*>(cluster.map_shared_rank(hist, r) + top - 1);
        count_lo += pair.x;
        count_hi += pair.y;
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
  // Unless take_all: prefix is the k-th key K; pick every key > K and the `need` lowest-indexed
  // keys == K. This CTA's keys == K: bin `digit` of its last histogram; the lower ranks' ones come
  // first. Nobody writes a histogram after the last pass.
  int tie_take = 0, tie_mine = 0;
  if (!take_all) {
    unsigned* last = sm.hist[(kPasses - 1) % 2];
    int before = 0;
    for (int r = 0; r < rank; ++r) before += static_cast<int>(cluster.map_shared_rank(last, r)[digit]);
    tie_mine = static_cast<int>(last[digit]);
    tie_take = need - before < 0 ? 0 : (need - before > tie_mine ? tie_mine : need - before);
  }
  const bool ties_partial = tie_take > 0 && tie_take < tie_mine;  // uniform in the CTA
  int tie_rank = 0;  // keys == K before this lane's chunk in this CTA (partial only)
  if (ties_partial) {
    int mine = 0;
    for (int64_t base = w_lo; base < w_hi; base += 32) {
      const int64_t i = base + lane;
      mine += __popc(__ballot_sync(kFull, i < w_hi && key_at(i) == prefix));
    }
    if (lane == 0) sm.warp_ties[warp] = mine;
    __syncthreads();
    for (int w = 0; w < warp; ++w) tie_rank += sm.warp_ties[w];
  }
  int* count0 = cluster.map_shared_rank(&sm.n_picks, 0);
  uint64_t* picks0 = cluster.map_shared_rank(sm.picks, 0);
  for (int64_t base = w_lo; base < w_hi; base += 32) {
    const int64_t i = base + lane;
    const uint32_t key = i < w_hi ? key_at(i) : 0;
    bool pick = take_all ? key != 0 : key > prefix;
    const bool tie = !take_all && key == prefix && key != 0;
    const unsigned ties = __ballot_sync(kFull, tie);
    if (tie) pick = tie_take == tie_mine || (ties_partial && tie_rank + __popc(ties & below) < tie_take);
    tie_rank += __popc(ties);
    const unsigned picked = __ballot_sync(kFull, pick);
    if (picked == 0) continue;
    int slot = 0;
    if (lane == 0) slot = atomicAdd(count0, __popc(picked));
    slot = __shfl_sync(kFull, slot, 0);
    if (pick) picks0[slot + __popc(picked & below)] = composite(key, static_cast<uint32_t>(i));
  }
  cluster.sync();  // every pick is in CTA 0's list; no CTA touches another's memory after this
  if (rank != 0) return;
  const int n = sm.n_picks;
  uint64_t sorted[2];
  sort_descending(sm.picks, n, sorted);
  int32_t* out = a.out + row * a.k;
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int col = t + kThreads * e;
    if (col < a.k) out[col] = col < n ? static_cast<int32_t>(composite_index(sorted[e])) + a.offset : -1;
  }
}

// Once per device: the shared-memory size and the largest cluster the GPU schedules (16 needs the
// non-portable attribute and a GPC with 16 free SMs; else the portable 8).
int max_cluster_for_device() {
  static std::atomic<int> cached[64] = {};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device < 64 && cached[device].load() != 0) return cached[device].load();
  const int smem = static_cast<int>(sizeof(Smem));
  CUDA_CHECK(cudaFuncSetAttribute(topk_v3_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int best = 8;
  if (cudaFuncSetAttribute(topk_v3_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(16);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = static_cast<size_t>(smem);
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeClusterDimension;
    attribute[0].val.clusterDim.x = 16;
    attribute[0].val.clusterDim.y = 1;
    attribute[0].val.clusterDim.z = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, topk_v3_kernel, &config) == cudaSuccess && clusters >= 1) best = 16;
  }
  (void)cudaGetLastError();  // a refused query is an answer (8), not an error of a later call
  if (device < 64) cached[device].store(best);
  return best;
}

}  // namespace

namespace detail {

void topk_v3(const TopkArgs& a, cudaStream_t stream) {
  const int c = cluster_size(a.max_length, max_cluster_for_device());
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(grid_blocks(a.rows * c, 1, "topk v3"));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = sizeof(Smem);
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(c);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, topk_v3_kernel, a));
  CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace dsv4::cuda
