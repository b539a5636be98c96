#pragma once
// FP8 E4M3 "fn" (OCP): bias 7, no inf, NaN = S.1111.111, max finite 448, min normal 2^-6,
// min subnormal 2^-9. Rounding is round-to-nearest-even with saturation to +-448, the semantics of
// CUDA's cvt.rn.satfinite.e4m3x2.f32 (DeepSeek's act_quant clamps to +-448 before casting, so the
// saturation never matters on its path). NaN maps to NaN.
#include <cmath>
#include <cstdint>

namespace dsv4::ref {

inline constexpr double kFp8E4m3Max = 448.0;

// The spacing of the e4m3 grid at magnitude a < 448: 2^(lead - 3), lead the exponent of a's
// leading bit, at least -6 (below 2^-6 the grid is the subnormal one, spacing 2^-9).
inline double fp8_e4m3_quantum(double a) {
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the leading bit is 2^(e-1)
  const int lead = a == 0 ? -6 : (e - 1 < -6 ? -6 : e - 1);
  return std::ldexp(1.0, lead - 3);  // 3 mantissa bits
}

// The e4m3 value nearest to x (ties to even, saturating), as a double.
inline double fp8_e4m3_round(double x) {
  if (std::isnan(x)) return x;
  const double a = std::fabs(x);
  if (a >= kFp8E4m3Max) return std::copysign(kFp8E4m3Max, x);
  const double quantum = fp8_e4m3_quantum(a);
  const double r = std::nearbyint(a / quantum) * quantum;  // exact division by a power of two; RNE
  return std::copysign(r > kFp8E4m3Max ? kFp8E4m3Max : r, x);
}

// Numerics variants (docs/math.md "Numerics variants"): e4m3 rounding toward zero (truncation of
// the mantissa), and to nearest with ties toward zero; both saturate at +-448, NaN stays NaN.
inline double fp8_e4m3_round_toward_zero(double x) {
  if (std::isnan(x)) return x;
  const double a = std::fabs(x);
  if (a >= kFp8E4m3Max) return std::copysign(kFp8E4m3Max, x);
  const double quantum = fp8_e4m3_quantum(a);
  return std::copysign(std::trunc(a / quantum) * quantum, x);
}

inline double fp8_e4m3_round_ties_toward_zero(double x) {
  if (std::isnan(x)) return x;
  const double a = std::fabs(x);
  if (a >= kFp8E4m3Max) return std::copysign(kFp8E4m3Max, x);
  const double quantum = fp8_e4m3_quantum(a);
  const double r = std::ceil(a / quantum - 0.5) * quantum;  // a / quantum - 0.5 is exact (< 2^5)
  return std::copysign(r > kFp8E4m3Max ? kFp8E4m3Max : r, x);
}

// Bit code of fp8_e4m3_round(x). NaN gives 0x7f whatever its sign, as CUDA's float conversion
// does (its double conversion keeps the sign: 0xff).
inline uint8_t fp8_e4m3_encode(double x) {
  if (std::isnan(x)) return 0x7f;
  const double r = fp8_e4m3_round(x);
  const uint8_t sign = std::signbit(r) ? 0x80 : 0x00;
  const double a = std::fabs(r);
  if (a == 0) return sign;
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m * 2^e
  const int exp_field = e - 1 + 7;
  if (exp_field <= 0) return static_cast<uint8_t>(sign | static_cast<uint8_t>(a / std::ldexp(1.0, -9)));
  const int mant = static_cast<int>((m * 2 - 1) * 8);
  return static_cast<uint8_t>(sign | (exp_field << 3) | mant);
}

inline double fp8_e4m3_decode(uint8_t code) {
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  const int exp_field = (code >> 3) & 0xf;
  const int mant = code & 0x7;
  if (exp_field == 0xf && mant == 0x7) return std::nan("");
  if (exp_field == 0) return sign * std::ldexp(mant, -9);
  return sign * std::ldexp(8 + mant, exp_field - 7 - 3);
}

}  // namespace dsv4::ref
