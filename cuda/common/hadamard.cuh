#pragma once
// The natural-order Walsh-Hadamard butterflies (reference/primitives/hadamard.cpp: stages
// h = 1, 2, 4, ..., pairing index i with i + h, (a, c) -> (a + c, a - c), in double), serially for
// host and device code, and across a warp for a 128-vector held 4 values per lane; both run the
// oracle's stages and pairings, so they are bitwise the oracle's even where a sum is inexact. No
// scale: the callers multiply by n^-1/2 and round as the oracle does. Also the lane-group max the
// block quantizers take.
#ifdef __CUDACC__
#include <cuda_runtime.h>
#endif

#include "cuda/common/numerics.cuh"

namespace dsv4::cuda {

// v[0..n), n a power of two, in place.
DSV4_HD inline void hadamard_serial(double* v, int n) {
  for (int h = 1; h < n; h *= 2)
    for (int i = 0; i < n; i += 2 * h)
      for (int k = i; k < i + h; ++k) {
        const double a = v[k], c = v[k + h];
        v[k] = a + c;
        v[k + h] = a - c;
      }
}

#ifdef __CUDACC__
// Max over the `width` lanes of an aligned lane group (width 8 or 16).
template <int kWidth>
__device__ inline float group_max(float v) {
#pragma unroll
  for (int off = kWidth / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// x[0..3]: this thread's 4 values at channels 4 lane .. 4 lane + 3 of a 128-channel vector held by
// one warp. In-place natural-order Walsh-Hadamard butterflies in double (no scale).
__device__ inline void hadamard128_warp(double (&x)[4]) {
  const int lane = threadIdx.x % 32;
  // h = 1 and h = 2: both partners in this thread.
  double a = x[0], c = x[1];
  x[0] = a + c;
  x[1] = a - c;
  a = x[2], c = x[3];
  x[2] = a + c;
  x[3] = a - c;
  a = x[0], c = x[2];
  x[0] = a + c;
  x[2] = a - c;
  a = x[1], c = x[3];
  x[1] = a + c;
  x[3] = a - c;
  // h = 4 << m: partner lane = lane ^ (1 << m); the lower channel keeps a + c, the upper a - c.
#pragma unroll
  for (int m = 0; m < 5; ++m) {
    const bool upper = (lane >> m) & 1;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const double partner = __shfl_xor_sync(0xffffffffu, x[i], 1 << m);
      x[i] = upper ? partner - x[i] : x[i] + partner;
    }
  }
}
#endif  // __CUDACC__

}  // namespace dsv4::cuda
