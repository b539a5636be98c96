#pragma once
// Block scales. A block of values x is quantized as q = Q(clamp(x / s, -qmax, qmax)) and
// dequantized as q * s; the rules below choose s from the block's amax.
#include <bit>
#include <cmath>
#include <cstdint>

namespace dsv4::ref {

// DeepSeek's UE8M0 rule (kernel.py act_quant / fp4_act_quant with scale_fmt "ue8m0"):
//   amax' = max(amax, floor) in fp32;  t = fp32(amax' * fp32(1 / qmax));
//   s = 2^ceil(log2 t), the ceiling taken on the IEEE bits: exponent + (mantissa != 0).
// floor = 1e-4 for FP8 (qmax 448) and 6 * 2^-126 for FP4 (qmax 6); t is then always a normal fp32.
// A NaN amax counts as the floor (fmax); block_quant skips NaN when it takes the amax.
inline int ue8m0_ceil_exponent(float amax, float floor, float qmax) {
  const float a = std::fmax(amax, floor);
  const float t = a * (1.0f / qmax);
  const uint32_t bits = std::bit_cast<uint32_t>(t);
  const int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127;
  return exponent + ((bits & 0x7fffffu) != 0 ? 1 : 0);
}

// The floor variant of the same rule (a bug class: docs/math.md "Numerics variants"): the exponent
// of t without the ceiling, so x / s can exceed qmax and the block's top saturates.
inline int ue8m0_floor_exponent(float amax, float floor, float qmax) {
  const float t = std::fmax(amax, floor) * (1.0f / qmax);
  return static_cast<int>((std::bit_cast<uint32_t>(t) >> 23) & 0xffu) - 127;
}

// OCP MX rule (MX v1.0 section 6.3): X = 2^(floor(log2 amax) - emax_elem), emax_elem = 2 for
// E2M1 and 8 for E4M3; amax = 0 gives the smallest scale 2^-127. The top of a block may clip.
inline int e8m0_floor_exponent(double amax, int emax_elem) {
  if (!(amax > 0)) return -127;
  int e = 0;
  std::frexp(amax, &e);  // amax = m * 2^e, m in [0.5, 1)
  const int x = (e - 1) - emax_elem;
  return x < -127 ? -127 : (x > 127 ? 127 : x);
}

}  // namespace dsv4::ref
