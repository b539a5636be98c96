#pragma once
// Block-wide pieces of the top-k kernels: a prefix sum over the threads of a block, the radix digit
// that holds the k-th largest key, and a bitonic sort of the picks (descending composites).
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda::topk_block {

// Exclusive prefix sum of one int per thread over the block (blockDim.x a multiple of 32, at most
// 1024); total receives the block's sum. scratch: 33 ints of shared memory. Every thread calls it.
__device__ inline int exclusive_scan(int v, int* scratch, int& total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  int x = v;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, off);
    if (lane >= off) x += y;
  }
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < warps ? scratch[lane] : 0;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, off);
      if (lane >= off) w += y;
    }
    if (lane < warps) scratch[lane] = w;  // inclusive sums of the warps
    if (lane == 31) scratch[32] = w;
  }
  __syncthreads();
  const int before = (warp > 0 ? scratch[warp - 1] : 0) + x - v;
  total = scratch[32];
  __syncthreads();  // scratch is reused by the next call
  return before;
}

// The digit (0..255) whose bin holds the need-th largest key among the counted ones (bins counted
// from 255 down), and how many counted keys lie in higher bins. Threads 0..255 read hist; every
// thread calls it; the result lands in *digit, *above (shared memory).
__device__ inline void select_digit(const unsigned* hist, int need, int* scratch, int* digit, int* above) {
  const int t = threadIdx.x;
  const int count = t < 256 ? static_cast<int>(hist[255 - t]) : 0;
  int total = 0;
  const int higher = exclusive_scan(count, scratch, total);  // keys in bins above 255 - t
  if (t < 256 && higher < need && need <= higher + count) {
    *digit = 255 - t;
    *above = higher;
  }
  __syncthreads();
}

// Sorts n composites at list[0 .. n) descending; list has room for the next power of two >= n
// (at most 2048), padded here with 0 (below every pick).
__device__ inline void sort_descending(uint64_t* list, int n) {
  int size = 1;
  while (size < n) size <<= 1;
  for (int i = n + threadIdx.x; i < size; i += blockDim.x) list[i] = 0;
  __syncthreads();
  for (int span = 2; span <= size; span <<= 1)
    for (int stride = span / 2; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < size / 2; i += blockDim.x) {
        const int lo = 2 * i - (i & (stride - 1));
        const int hi = lo + stride;
        const bool descending = (lo & span) == 0;
        const uint64_t a = list[lo], b = list[hi];
        if (descending ? a < b : a > b) {
          list[lo] = b;
          list[hi] = a;
        }
      }
      __syncthreads();
    }
}

}  // namespace dsv4::cuda::topk_block
