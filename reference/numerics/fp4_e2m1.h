#pragma once
// FP4 E2M1 (OCP MX element): bias 1, values {0, 0.5, 1, 1.5, 2, 3, 4, 6} with a sign, no inf, no NaN.
// Rounding is round-to-nearest-even with saturation to +-6 (CUDA cvt.rn.satfinite.e2m1x2.f32):
// ties 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4. NaN maps to +6 as the CUDA
// conversion does. Packing (two per byte) puts the even index in the low nibble.
#include <cmath>
#include <cstdint>

namespace dsv4::ref {

inline constexpr double kFp4E2m1Max = 6.0;

// The spacing of the e2m1 grid at magnitude a.
inline double fp4_e2m1_quantum(double a) { return a < 2 ? 0.5 : (a < 4 ? 1.0 : 2.0); }

inline double fp4_e2m1_round(double x) {
  if (std::isnan(x)) return kFp4E2m1Max;
  const double a = std::fabs(x);
  const double quantum = fp4_e2m1_quantum(a);
  double r = std::nearbyint(a / quantum) * quantum;  // RNE on the grid
  if (r > kFp4E2m1Max) r = kFp4E2m1Max;
  return std::copysign(r, x);
}

// Numerics variants (docs/math.md "Numerics variants"): e2m1 rounding toward zero, and to nearest
// with ties toward zero (0.75 -> 0.5, 1.75 -> 1.5, 3.5 -> 3 where RNE gives 1, 2, 4); both saturate
// at +-6, NaN gives +6 as fp4_e2m1_round.
inline double fp4_e2m1_round_toward_zero(double x) {
  if (std::isnan(x)) return kFp4E2m1Max;
  const double a = std::fabs(x);
  const double r = std::trunc(a / fp4_e2m1_quantum(a)) * fp4_e2m1_quantum(a);
  return std::copysign(r > kFp4E2m1Max ? kFp4E2m1Max : r, x);
}

inline double fp4_e2m1_round_ties_toward_zero(double x) {
  if (std::isnan(x)) return kFp4E2m1Max;
  const double a = std::fabs(x);
  const double quantum = fp4_e2m1_quantum(a);
  const double r = std::ceil(a / quantum - 0.5) * quantum;
  return std::copysign(r > kFp4E2m1Max ? kFp4E2m1Max : r, x);
}

inline uint8_t fp4_e2m1_encode(double x) {
  static constexpr double kValues[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  const double r = fp4_e2m1_round(x);
  const uint8_t sign = std::signbit(r) ? 0x8 : 0x0;
  for (uint8_t c = 0; c < 8; ++c)
    if (kValues[c] == std::fabs(r)) return static_cast<uint8_t>(sign | c);
  return sign | 0x7;  // unreachable: r is on the grid
}

inline double fp4_e2m1_decode(uint8_t code) {
  static constexpr double kValues[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return ((code & 0x8) ? -1.0 : 1.0) * kValues[code & 0x7];
}

}  // namespace dsv4::ref
