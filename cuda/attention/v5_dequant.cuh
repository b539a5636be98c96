#pragma once
// The integer half of v5's packed FP8 -> bf16 dequantization (v5_producer.cuh), host-visible so that
// the host test runs it for every e4m3 code and UE8M0 byte (test_cuda_attention_host, with the two
// hardware conversions emulated). Per pair of codes the producer runs:
//   h = cvt.rn.f16x2.e4m3x2(codes)            exact: every e4m3 value is a normal f16 or zero
//   b = f16x2_to_bf16x2_scaled(h)             bf16 bits of value * 2^-112 (below)
//   d = mul.rn.bf16x2(b, factor)              exact: value * 2^(e - 127), a 4-bit significand times
//                                             a power of two (once more by slow_factor for e > 142)
// f16 S.EEEEE.MMM0000000 -> bf16 S.000EEEEE.MMM0000: the exponent field E16 (bias 15) read with bf16's
// bias 127 is the value times 2^-112; the 3 mantissa bits keep their place below it. Zero stays zero.
#include <cstdint>

#include "cuda/common/numerics.cuh"

namespace dsv4::cuda::attention::v5 {

DSV4_HD constexpr uint32_t f16x2_to_bf16x2_scaled(uint32_t h) { return ((h >> 3) & 0x0FFF0FFFu) | (h & 0x80008000u); }

// Scale bytes e <= 142: one factor 2^(e - 15) = 2^112 * 2^(e - 127) (bf16 exponent field e + 112 <= 254).
DSV4_HD constexpr bool fast_scale(uint32_t e) { return e <= 142u; }
// The first factor, in both bf16 halves: 2^(e - 15) on the fast path, else 2^112.
DSV4_HD constexpr uint32_t first_factor(uint32_t e) {
  const uint32_t f = fast_scale(e) ? (e + 112u) << 7 : 239u << 7;
  return f | (f << 16);
}
// The second factor (slow path only, e >= 143): 2^(e - 127), NaN for e = 255 (UE8M0's NaN).
DSV4_HD constexpr uint32_t slow_factor(uint32_t e) {
  const uint32_t g = e == 255u ? 0x7FC0u : e << 7;
  return g | (g << 16);
}

}  // namespace dsv4::cuda::attention::v5
