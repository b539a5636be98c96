#pragma once
// bfloat16: 1 sign, 8 exponent, 7 mantissa bits; the upper half of an fp32.
// Rounding is round-to-nearest-even from fp32, as torch's .to(bfloat16) and CUDA's
// __float2bfloat16 do; NaN stays a (quiet) NaN, overflow rounds to inf.
#include <bit>
#include <cstdint>

namespace dsv4::ref {

inline uint16_t bf16_encode(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // add half an ulp, plus one when the kept lsb is odd: ties to even
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_decode(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// The bf16 value nearest to x (ties to even), as a float.
inline float bf16_round(float x) { return bf16_decode(bf16_encode(x)); }

}  // namespace dsv4::ref
