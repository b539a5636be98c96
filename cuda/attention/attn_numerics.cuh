#pragma once
// Scalar helpers of the attention kernels, written once for the GPU and for host code (the host
// test compiles them with g++): bit casts, bf16 round-to-nearest-even, fp32 rounding of a double.
#include <cstdint>
#include <cstring>

#ifndef DSV4_HD
#ifdef __CUDACC__
#define DSV4_HD __host__ __device__
#else
#define DSV4_HD
#endif
#endif

namespace dsv4::cuda::attention {

DSV4_HD inline float attn_bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}
DSV4_HD inline uint32_t attn_float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

// bf16 code of x, round to nearest even; NaN stays a quiet NaN (reference/numerics/bf16.h).
DSV4_HD inline uint16_t bf16_rne_bits(float x) {
  uint32_t u = attn_float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
DSV4_HD inline float bf16_code_value(uint16_t b) { return attn_bits_float(static_cast<uint32_t>(b) << 16); }
DSV4_HD inline float bf16_rne(float x) { return bf16_code_value(bf16_rne_bits(x)); }

// The oracle's round_to(fp32, x) and round_to(bf16, x) on a double (reference/numerics/storage.h).
DSV4_HD inline double round_f32(double x) { return static_cast<double>(static_cast<float>(x)); }
DSV4_HD inline double round_bf16(double x) { return static_cast<double>(bf16_rne(static_cast<float>(x))); }

// One pair (a, b) of a head's rope dims rotated by the conjugate of (c, s) = (cos, sin) of the
// query position, as reference/primitives/rope.cpp apply_rope(inverse = true) computes it: in
// double with s' = -s, (a c - b s', a s' + b c), each rounded to fp32 and then to bf16. Products of
// bf16 and fp32 values are exact in double, so only the differences round.
DSV4_HD inline void inverse_rope_pair(uint16_t a_code, uint16_t b_code, float c, float s, uint16_t& re, uint16_t& im) {
  const double a = bf16_code_value(a_code), b = bf16_code_value(b_code);
  const double cd = c, sn = -static_cast<double>(s);
  re = bf16_rne_bits(static_cast<float>(a * cd - b * sn));
  im = bf16_rne_bits(static_cast<float>(a * sn + b * cd));
}

}  // namespace dsv4::cuda::attention
