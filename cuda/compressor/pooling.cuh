#pragma once
// Per-channel softmax pooling shared by the prefill and decode kernels, so that both compute
// bitwise the same function of the same rows (prefill == decode one by one == chunked, on the GPU).
// fp32 throughout; exp is CUDA's expf (max 2 ulp error), never __expf.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/vec4.cuh"

namespace dsv4::cuda {

// One channel: max first, then the sums in row order; out = sum(kv e) / sum(e), kv e added with one
// fused multiply-add (the library builds with -fmad=false: every fma is written). A -inf logit
// (ratio 4's block 0 "previous" rows) gets e = 0.
template <int N>
__device__ inline float pool_channel(const float (&kv)[N], const float (&s)[N]) {
  float m = s[0];
#pragma unroll
  for (int i = 1; i < N; ++i) m = fmaxf(m, s[i]);
  float den = 0, num = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float e = expf(s[i] - m);
    den += e;
    num = fmaf(kv[i], e, num);
  }
  return num / den;
}

// Four channels of N rows held as float4.
template <int N>
__device__ inline float4 pool_rows(const float4 (&kv)[N], const float4 (&s)[N]) {
  float out[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    float kc[N], sc[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      kc[i] = comp(kv[i], k);
      sc[i] = comp(s[i], k);
    }
    out[k] = pool_channel<N>(kc, sc);
  }
  return make_float4(out[0], out[1], out[2], out[3]);
}

// A running softmax over rows (the v3 ratio-128 kernels): (max, sum of e, sum of kv e) per channel, fed in
// chunks; add_chunk rescales the running sums to the new max with expf(old - new).
struct RunningPool {
  float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  float den[4] = {0, 0, 0, 0};
  float num[4] = {0, 0, 0, 0};

  template <int N>
  __device__ void add_chunk(const float4 (&kv)[N], const float4 (&s)[N]) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float mc = comp(s[0], k);
#pragma unroll
      for (int i = 1; i < N; ++i) mc = fmaxf(mc, comp(s[i], k));
      const float m_new = fmaxf(m[k], mc);
      const float keep = expf(m[k] - m_new);  // 0 while m is -inf
      float d = den[k] * keep, n = num[k] * keep;
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const float e = expf(comp(s[i], k) - m_new);
        d += e;
        n = fmaf(comp(kv[i], k), e, n);
      }
      m[k] = m_new;
      den[k] = d;
      num[k] = n;
    }
  }
};

// The online C128 step of one channel (sglang's state-saving form; the oracle's
// compress_online_c128 computes the same in double): at slot 0 the state becomes the token alone.
__device__ inline void online_step(float& m, float& l, float& mean, float s, float kv, bool first) {
  if (first) {
    m = s;
    l = 1.0f;
    mean = kv;
    return;
  }
  const float m_new = fmaxf(m, s);
  const float keep = expf(m - m_new);
  const float add = expf(s - m_new);
  const float l_new = l * keep + add;
  mean = (mean * l * keep + kv * add) / l_new;
  m = m_new;
  l = l_new;
}

}  // namespace dsv4::cuda
