// v1 of the top-k (topk_api.h): one 1024-thread CTA per row, the row read from global memory in
// every pass. Radix select of the k-th largest visible key, 8 bits a pass from the top; then the keys
// above it and, of the keys equal to it, the lowest-indexed ones (an ordered block scan); then a
// bitonic sort of the picks.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/topk/topk_api.h"
#include "cuda/topk/topk_block.cuh"
#include "cuda/topk/topk_keys.cuh"
#include "cuda/topk/topk_launch.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 1024;

__global__ void __launch_bounds__(kThreads) topk_v1_kernel(const TopkArgs a) {
  __shared__ unsigned hist[256];
  __shared__ int scratch[33];
  __shared__ int digit, above, n_picks;
  __shared__ uint64_t picks[kMaxTopk];
  const int t = threadIdx.x;
  const int64_t row = blockIdx.x;
  const float* x = a.scores + row * a.stride;
  const int64_t len = a.lengths[row];

  uint32_t prefix = 0, mask = 0;  // the top digits of the k-th key found so far
  int need = a.k;                 // how many keys with this prefix still to pick
  bool take_all = false;          // fewer visible keys than k: every one is picked
  for (int d = 3; d >= 0; --d) {
    for (int i = t; i < 256; i += kThreads) hist[i] = 0;
    __syncthreads();
    for (int64_t i = t; i < len; i += kThreads) {
      const uint32_t key = order_key(x[i]);
      if (key != 0 && (key & mask) == prefix) atomicAdd(&hist[(key >> (8 * d)) & 0xffu], 1u);
    }
    __syncthreads();
    if (d == 3) {
      int visible = 0;
      (void)topk_block::exclusive_scan(t < 256 ? static_cast<int>(hist[t]) : 0, scratch, visible);
      if (visible <= a.k) {
        take_all = true;
        break;
      }
    }
    topk_block::select_digit(hist, need, scratch, &digit, &above);
    need -= above;
    prefix |= static_cast<uint32_t>(digit) << (8 * d);
    mask |= 0xffu << (8 * d);
  }
  // prefix is now the k-th key K (unless take_all); pick every key > K and `need` keys == K.
  if (t == 0) n_picks = 0;
  __syncthreads();
  for (int64_t i = t; i < len; i += kThreads) {
    const uint32_t key = order_key(x[i]);
    if (take_all ? key != 0 : key > prefix) picks[atomicAdd(&n_picks, 1)] = composite(key, static_cast<uint32_t>(i));
  }
  if (!take_all) {
    int taken = 0;  // equal keys before this chunk (the same in every thread)
    for (int64_t base = 0; base < len && taken < need; base += kThreads) {
      const int64_t i = base + t;
      const bool equal = i < len && order_key(x[i]) == prefix;
      int chunk_total = 0;
      const int rank = taken + topk_block::exclusive_scan(equal ? 1 : 0, scratch, chunk_total);
      if (equal && rank < need) picks[atomicAdd(&n_picks, 1)] = composite(prefix, static_cast<uint32_t>(i));
      taken += chunk_total;
    }
  }
  __syncthreads();
  const int n = n_picks;
  topk_block::sort_descending(picks, n);
  int32_t* out = a.out + row * a.k;
  for (int c = t; c < a.k; c += kThreads)
    out[c] = c < n ? static_cast<int32_t>(composite_index(picks[c])) + a.offset : -1;
}

}  // namespace

namespace detail {

void topk_v1(const TopkArgs& a, cudaStream_t stream) {
  topk_v1_kernel<<<grid_blocks(a.rows, 1, "topk v1"), kThreads, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace dsv4::cuda
