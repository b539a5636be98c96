#pragma once
// Reading a token of FlashMLA's MODEL1 KV layout (verify/layouts/flashmla_model1.h) on the GPU:
// byte offsets of a token in its pool, the FP8 e4m3 nope codes times their UE8M0 block scale, the
// bf16 rope dims. Written once for the kernels and for the host test (test_cuda_attention_host
// compiles this file with g++ and checks every code and scale against reference/numerics).
//
// Dequantization without a conversion instruction: an e4m3fn code b = S.EEEE.MMM placed as
// (S << 31) | (EEEEMMM << 20) is the fp32 whose value is value(b) * 2^-120 exactly, for normal
// codes (exponent field E+120 in fp32's bias) and for subnormal ones (m/8 * 2^-6 becomes the fp32
// subnormal m/8 * 2^-126). One multiply by 2^120 * 2^(e-127), the UE8M0 scale with its bias
// folded in, then gives value(b) * scale exactly: the product of a 4-bit significand and a power of
// two, inside fp32's range for every scale byte e <= 134 (scales up to 2^7; DeepSeek's amax floor
// 1e-4 gives e >= 105 and RMS-normed rows stay far below 2^7 * 448). Larger scale bytes take two
// multiplies. The result has at most 4 significant bits, so its bf16 rounding is exact as well
// (down to 2^-133: scale bytes e >= 3). The NaN codes S.1111.111 decode to +-480 * scale here
// (finite): the kernels never read a code no valid index points at.
#include <cstdint>

#include "cuda/common/numerics.cuh"

namespace dsv4::cuda::attention {

inline constexpr int kModel1NopeDims = 448;
inline constexpr int kModel1RopeDims = 64;
inline constexpr int kModel1ScaleBlock = 64;  // one UE8M0 scale per 64 nope dims
inline constexpr int kModel1NopeBlocks = 7;
inline constexpr int kModel1TokenDataBytes = 576;  // 448 e4m3 + 64 bf16
inline constexpr int kModel1TokenScaleBytes = 8;   // 7 UE8M0 + 1 pad

// Bytes of one page of `page_size` tokens: ceil(584 * P / 576) * 576 (verify/layouts Model1Layout).
DSV4_HD inline int64_t model1_page_bytes(int page_size) { return (int64_t{584} * page_size + 575) / 576 * 576; }
// Byte offsets of token `token` (= page * P + t) in its pool: its 576 data bytes, its 8 scale bytes.
DSV4_HD inline int64_t model1_data_offset(int64_t token, int page_size, int64_t page_bytes) {
  return token / page_size * page_bytes + token % page_size * kModel1TokenDataBytes;
}
DSV4_HD inline int64_t model1_scale_offset(int64_t token, int page_size, int64_t page_bytes) {
  return token / page_size * page_bytes + int64_t{page_size} * kModel1TokenDataBytes +
         token % page_size * kModel1TokenScaleBytes;
}

// The fp32 bits of value(code) * 2^-120 (see the file comment).
DSV4_HD inline uint32_t e4m3_scaled_bits(uint32_t code) { return ((code & 0x80u) << 24) | ((code & 0x7Fu) << 20); }

// 2^(e - 7) = 2^120 * 2^(e - 127) for a UE8M0 byte e <= 134: the one factor of the fast path.
DSV4_HD inline float ue8m0_factor(uint32_t e) { return bits_float((e + 120u) << 23); }
DSV4_HD inline bool ue8m0_fast(uint32_t e) { return e <= 134u; }

// 2^(e - 127) for any UE8M0 byte: 2^-127 (an fp32 subnormal) for e = 0, NaN for e = 255.
DSV4_HD inline float ue8m0_scale(uint32_t e) {
  uint32_t bits = e << 23;
  bits = e == 0 ? 0x00400000u : bits;  // selects, not branches: no divergence in the kernels
  bits = e == 255 ? 0x7FC00000u : bits;
  return bits_float(bits);
}

// value(code) * 2^(e - 127) as fp32, exact for every code that is not NaN and every scale byte e
// whose product is below 2^128 (inf above: scale bytes > 247 with the largest codes).
DSV4_HD inline float model1_nope_value(uint32_t code, uint32_t e) {
  const float scaled = bits_float(e4m3_scaled_bits(code));
  if (ue8m0_fast(e)) return scaled * ue8m0_factor(e);
  return scaled * 0x1p120f * ue8m0_scale(e);
}

// bf16 code of an fp32 value that is exactly representable in bf16 (the low 16 bits are zero).
DSV4_HD inline uint16_t exact_bf16_bits(float x) { return static_cast<uint16_t>(float_bits(x) >> 16); }

// 8 consecutive nope dims of a token: codes (little-endian, code k in byte k) times the scale of
// byte e -> 8 bf16 codes packed in 4 words (value 2k in the low half of word k).
DSV4_HD inline void dequant8(uint32_t codes_lo, uint32_t codes_hi, uint32_t e, uint32_t out[4]) {
  float v[8];
  const bool fast = ue8m0_fast(e);
  const float f = fast ? ue8m0_factor(e) : 0x1p120f;
  const float g = fast ? 1.0f : ue8m0_scale(e);
  for (int k = 0; k < 8; ++k) {
    const uint32_t code = ((k < 4 ? codes_lo : codes_hi) >> (8 * (k % 4))) & 0xFFu;
    v[k] = bits_float(e4m3_scaled_bits(code)) * f;
    if (!fast) v[k] = v[k] * g;
  }
  for (int k = 0; k < 4; ++k)
    out[k] =
        static_cast<uint32_t>(exact_bf16_bits(v[2 * k])) | (static_cast<uint32_t>(exact_bf16_bits(v[2 * k + 1])) << 16);
}

}  // namespace dsv4::cuda::attention
