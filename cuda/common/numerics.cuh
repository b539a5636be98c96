#pragma once
// The number formats every kernel family shares (bf16, FP8 e4m3, FP4 e2m1, UE8M0 scales) and the
// scalar roundings of the post-processing, written once for the GPU kernels and for host code (the
// host test compiles them with g++ and checks them against reference/numerics/). Each function
// follows the oracle's operation order (reference/numerics/*.h, reference/primitives/*.cpp): where
// the oracle computes one op in double and rounds once, so does this code, in double; fp32 products
// and quotients are single IEEE operations. The library builds with -fmad=false (device) and
// -ffp-contract=off (host), so no multiply-add is contracted behind the code's back.
#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define DSV4_HD __host__ __device__
#else
#define DSV4_HD
#endif

namespace dsv4::cuda {

inline constexpr int kRopeDim = 64;                       // V4: RoPE on the last 64 dims, interleaved pairs
inline constexpr float kFp8Max = 448.0f;                  // e4m3fn largest finite
inline constexpr float kFp8AmaxFloor = 1e-4f;             // act_quant: amax = max(amax, 1e-4)
inline constexpr float kFp4Max = 6.0f;                    // e2m1 largest
inline constexpr float kFp4AmaxFloor = 6.0f * 0x1p-126f;  // fp4_act_quant: max(amax, 6 * 2^-126)
inline constexpr int kFp8Block = 64;                      // main kv: FP8 blocks of 64 nope dims
inline constexpr int kFp4Block = 32;                      // indexer q and k: FP4 blocks of 32

DSV4_HD inline uint32_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

DSV4_HD inline float bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// bf16 code of x: round to nearest even; NaN stays a quiet NaN (reference/numerics/bf16.h).
DSV4_HD inline uint16_t bf16_bits(float x) {
  uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

DSV4_HD inline float bf16_value(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

DSV4_HD inline float bf16_round(float x) { return bf16_value(bf16_bits(x)); }

// UE8M0 "ceil" block scale exponent (reference/numerics/scale_rules.h): t = fp32(max(amax, floor) *
// fp32(1 / qmax)), exponent of t rounded up on its IEEE bits. The scale is 2^exponent.
DSV4_HD inline int ue8m0_ceil_exponent(float amax, float floor, float qmax) {
  const float a = fmaxf(amax, floor);
  const float t = a * (1.0f / qmax);
  const uint32_t bits = float_bits(t);
  const int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127;
  return exponent + ((bits & 0x7fffffu) != 0 ? 1 : 0);
}

// 2^e as an fp32 built from its bits, for e in [-126, 127] (every scale and quantum used here).
DSV4_HD inline float pow2f(int e) { return bits_float(static_cast<uint32_t>(e + 127) << 23); }

// e4m3fn rounding of an already scaled value: nearest even, saturating at +-448, NaN stays NaN
// (reference/numerics/fp8_e4m3.h). The grid spacing at a is 2^(lead - 3), lead = the exponent of a
// (read from its bits) but at least -6 (the subnormal grid); a * 2^(3 - lead) and r * 2^(lead - 3)
// are exact, so this is the oracle's rint(a / quantum) * quantum.
DSV4_HD inline float e4m3_round(float x) {
  if (x != x) return x;
  const float a = fabsf(x);
  if (a >= kFp8Max) return copysignf(kFp8Max, x);
  const int e = static_cast<int>((float_bits(a) >> 23) & 0xffu) - 127;  // -127 for 0 and subnormals
  const int lead = e < -6 ? -6 : e;
  const float r = rintf(a * pow2f(3 - lead)) * pow2f(lead - 3);
  return copysignf(r > kFp8Max ? kFp8Max : r, x);
}

// e2m1 rounding of an already scaled value: nearest even on {0, .5, 1, 1.5, 2, 3, 4, 6},
// saturating at +-6 (reference/numerics/fp4_e2m1.h). The caller keeps NaN (fake-quant does).
DSV4_HD inline float e2m1_round(float x) {
  const float a = fabsf(x);
  const float quantum = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
  const float inverse = a < 2.0f ? 2.0f : (a < 4.0f ? 1.0f : 0.5f);
  float r = rintf(a * inverse) * quantum;  // exact scalings: rint(a / quantum) * quantum
  if (r > kFp4Max) r = kFp4Max;
  return copysignf(r, x);
}

// One element of a fake-quantized block with power-of-two scale 2^exponent:
// bf16(s * round(clamp(x / s, +-qmax))), NaN kept (reference/numerics/block_quant.cpp). x / s is
// computed as x * 2^-exponent: the same exact value (exponent in [-126, 126] for both formats:
// the amax floors keep it >= -126).
DSV4_HD inline float fake_quant_fp8(float x, int exponent) {
  if (x != x) return x;
  const float scaled = fminf(fmaxf(x * pow2f(-exponent), -kFp8Max), kFp8Max);
  return bf16_round(e4m3_round(scaled) * pow2f(exponent));
}

DSV4_HD inline float fake_quant_fp4(float x, int exponent) {
  if (x != x) return x;
  const float scaled = fminf(fmaxf(x * pow2f(-exponent), -kFp4Max), kFp4Max);
  return bf16_round(e2m1_round(scaled) * pow2f(exponent));
}

// RMSNorm's scale from the sum of squares (a double): ms = fp32(sum / d), then
// r = fp32(1 / sqrt(fp32(ms + eps))), each op in double and rounded once (primitives/rmsnorm.cpp).
DSV4_HD inline float rms_scale(double sum_squares, int d, double eps) {
  const float ms = static_cast<float>(sum_squares / static_cast<double>(d));
  const float t = static_cast<float>(static_cast<double>(ms) + eps);
  return static_cast<float>(1.0 / sqrt(static_cast<double>(t)));
}

// RMSNorm of one bf16 value x with scale r and weight w: bf16(fp32(w * fp32(x * r))).
DSV4_HD inline float rms_apply(float x, float r, float w) { return bf16_round(w * (x * r)); }

// RoPE of the interleaved pair (a, b) by (cos, sin) = (c, s): (a c - b s, a s + b c), each computed
// in double (products exact: bf16 x fp32), rounded to fp32 and then to bf16 (primitives/rope.cpp).
DSV4_HD inline float rope_re(float a, float b, float c, float s) {
  return bf16_round(static_cast<float>(static_cast<double>(a) * c - static_cast<double>(b) * s));
}
DSV4_HD inline float rope_im(float a, float b, float c, float s) {
  return bf16_round(static_cast<float>(static_cast<double>(a) * s + static_cast<double>(b) * c));
}

// ---- stored codes (cache bytes) -----------------------------------------------------------------
// The byte codes of the formats above, as the caches hold them. Each encoder takes a value that is
// already on its grid (a rounding above produced it) and returns its code exactly; the decoders are
// exact. Codes as reference/numerics/fp8_e4m3.h and fp4_e2m1.h define them (bias 7 and 1, sign in
// the top bit; e4m3 0x7f / 0xff are NaN; e2m1 has no NaN).

// e4m3 code of a value on the e4m3 grid (|v| <= 448) or NaN (0x7f).
DSV4_HD inline uint8_t e4m3_code(float v) {
  if (v != v) return 0x7f;
  const uint8_t sign = (float_bits(v) >> 24) & 0x80u;
  const float a = fabsf(v);
  const int e = static_cast<int>((float_bits(a) >> 23) & 0xffu) - 127;               // -127 for 0
  if (e < -6) return static_cast<uint8_t>(sign | static_cast<uint8_t>(a * 512.0f));  // subnormal: a / 2^-9
  const uint32_t mantissa = (float_bits(a) >> 20) & 0x7u;                            // 3 mantissa bits
  return static_cast<uint8_t>(sign | ((e + 7) << 3) | mantissa);
}

DSV4_HD inline float e4m3_value(uint8_t code) {
  const int exp_field = (code >> 3) & 0xf, mantissa = code & 0x7;
  float a;
  if (exp_field == 0xf && mantissa == 0x7)
    a = bits_float(0x7fc00000u);
  else if (exp_field == 0)
    a = static_cast<float>(mantissa) * 0x1p-9f;
  else
    a = static_cast<float>(8 + mantissa) * pow2f(exp_field - 10);
  return (code & 0x80) ? -a : a;
}

// e2m1 code (4 bits) of a value on the e2m1 grid (|v| <= 6); -0 keeps its sign bit.
DSV4_HD inline uint8_t e2m1_code(float v) {
  const uint8_t sign = (float_bits(v) >> 28) & 0x8u;
  const float a = fabsf(v);
  // {0, .5, 1, 1.5, 2, 3, 4, 6} -> 0..7: twice the value below 2, then 4 + (a - 2) / 2 ... exactly.
  const uint8_t magnitude =
      a < 2.0f ? static_cast<uint8_t>(a * 2.0f) : static_cast<uint8_t>(a < 4.0f ? 2.0f + a : 4.0f + a * 0.5f);
  return static_cast<uint8_t>(sign | magnitude);
}

DSV4_HD inline float e2m1_value(uint8_t code) {
  const uint8_t m = code & 0x7;
  const float a = m < 4 ? 0.5f * static_cast<float>(m) : (m < 6 ? static_cast<float>(m) - 2.0f : 4.0f + 2.0f * (m - 6));
  return (code & 0x8) ? -a : a;
}

// UE8M0: a power-of-two scale 2^e stored as the biased exponent byte e + 127 (e in [-127, 127]).
DSV4_HD inline uint8_t ue8m0_code(int exponent) { return static_cast<uint8_t>(exponent + 127); }
DSV4_HD inline int ue8m0_exponent(uint8_t code) { return static_cast<int>(code) - 127; }
// The scale a code stands for, as an fp32: 2^(code - 127); code 0 is the subnormal 2^-127.
DSV4_HD inline float ue8m0_value(uint8_t code) {
  return code == 0 ? bits_float(0x00400000u) : bits_float(static_cast<uint32_t>(code) << 23);
}

}  // namespace dsv4::cuda
