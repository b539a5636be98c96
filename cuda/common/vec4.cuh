#pragma once
// float4 helpers of the kernels that give each thread 4 consecutive channels (16-byte accesses).
#include <cuda_runtime.h>

namespace dsv4::cuda {

// Read-only data (weights, tables, rows read more than once): the non-coherent path.
__device__ inline float4 load4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
// Inputs read exactly once (the projections): streamed, evict-first in L2.
__device__ inline float4 load4_stream(const float* p) { return __ldcs(reinterpret_cast<const float4*>(p)); }
// A plain load, for memory the same launch may have written (decode state rows).
__device__ inline float4 load4_plain(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ inline void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ inline float4 add4(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
__device__ inline float comp(const float4& v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }
__device__ inline void to_array(const float4& v, float (&out)[4]) {
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
  out[3] = v.w;
}

}  // namespace dsv4::cuda
