#pragma once
// Test-only block quantizers with the bugs production kernels have shipped (docs/tolerances.md
// "The mutations behind every row"): element rounding toward zero at ties or by truncation instead of to nearest even,
// a UE8M0 scale rounded down instead of up, a wrong amax floor. With nearest_even, ceil and the format's floor they are
// DeepSeek's quantizer, written independently of reference/numerics/ (the tests check that they agree with it).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "reference/numerics/bf16.h"

namespace dsv4::verify::testing {

enum class ElementRounding { nearest_even, ties_toward_zero, truncate };
enum class ScaleRounding { ceil, floor };

inline constexpr float kFp8AmaxFloor = 1e-4f;             // DeepSeek's act_quant
inline constexpr float kFp4AmaxFloor = 6.0f * 0x1p-126f;  // DeepSeek's fp4_act_quant

inline double bf16(double x) { return ref::bf16_round(static_cast<float>(x)); }

// The bf16 value one step above v (toward +inf).
inline double bf16_up(double v) {
  const uint16_t b = ref::bf16_encode(static_cast<float>(v));
  if ((b & 0x7fff) == 0) return ref::bf16_decode(0x0001);
  return ref::bf16_decode(static_cast<uint16_t>((b & 0x8000) ? b - 1 : b + 1));
}

// x on the grid of e4m3 (fp4 = false) or e2m1 (fp4 = true), saturating.
inline double round_element(bool fp4, double x, ElementRounding mode) {
  const double a = std::fabs(x);
  double quantum = 0;
  if (fp4) {
    quantum = a < 2 ? 0.5 : (a < 4 ? 1.0 : 2.0);
  } else {
    int e = 0;
    std::frexp(a, &e);
    quantum = std::ldexp(1.0, std::max(e - 1, -6) - 3);
  }
  const double steps = a / quantum, below = std::floor(steps);
  double r = below;
  if (mode == ElementRounding::nearest_even) r = std::nearbyint(steps);
  if (mode == ElementRounding::ties_toward_zero) r = steps - below > 0.5 ? below + 1 : below;
  return std::copysign(std::min(r * quantum, fp4 ? 6.0 : 448.0), x);
}

// One block, in place: s = 2^(ceil or floor)(log2(fp32(max(amax, floor) * fp32(1 / qmax)))),
// x <- s * element(clamp(x / s, +-qmax)).
inline void quantize_block(bool fp4, std::span<double> x, ElementRounding mode, ScaleRounding scale, float amax_floor) {
  const double qmax = fp4 ? 6.0 : 448.0;
  double amax = 0;
  for (double v : x) amax = std::max(amax, std::fabs(v));
  const float t = std::max(static_cast<float>(amax), amax_floor) * (1.0f / static_cast<float>(qmax));
  int e = 0;
  const double m = std::frexp(static_cast<double>(t), &e);  // t = m 2^e, m in [0.5, 1)
  const int exponent = scale == ScaleRounding::floor || m == 0.5 ? e - 1 : e;
  const double s = std::ldexp(1.0, exponent);
  for (double& v : x) v = round_element(fp4, std::clamp(v / s, -qmax, qmax), mode) * s;
}

// Every block of `block` values of each row's first `dims` values (rows of `row_length`), the rest
// of each row rounded to bf16.
inline std::vector<double> quantize_rows(bool fp4, const std::vector<double>& x, int64_t row_length, int64_t dims,
                                         int64_t block, ElementRounding mode = ElementRounding::nearest_even,
                                         ScaleRounding scale = ScaleRounding::ceil, float amax_floor = -1) {
  if (amax_floor < 0) amax_floor = fp4 ? kFp4AmaxFloor : kFp8AmaxFloor;
  std::vector<double> out = x;
  for (size_t start = 0; start < out.size(); start += static_cast<size_t>(row_length)) {
    for (int64_t b = 0; b < dims; b += block)
      quantize_block(fp4, std::span<double>(out).subspan(start + b, block), mode, scale, amax_floor);
    for (int64_t k = dims; k < row_length; ++k) out[start + k] = bf16(out[start + k]);
  }
  return out;
}

}  // namespace dsv4::verify::testing
