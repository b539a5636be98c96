#include "verify/compare/rounding_grid.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>

#include "reference/numerics/bf16.h"
#include "reference/numerics/fp4_e2m1.h"
#include "reference/numerics/fp8_e4m3.h"

namespace dsv4::verify {

namespace {

double qmax(ref::Element e) { return e == ref::Element::e4m3 ? ref::kFp8E4m3Max : ref::kFp4E2m1Max; }

// The spacing of the element grid at magnitude a (a <= qmax).
double element_quantum(ref::Element e, double a) {
  if (e == ref::Element::e2m1) return a < 2 ? 0.5 : (a < 4 ? 1.0 : 2.0);
  int exponent = 0;
  std::frexp(a, &exponent);                                   // a = m * 2^exponent, m in [0.5, 1)
  const int lead = a == 0 ? -6 : std::max(exponent - 1, -6);  // subnormals share the 2^-6 binade's spacing
  return std::ldexp(1.0, lead - 3);
}

}  // namespace

std::string RoundingFormat::name() const {
  if (!block) return "bf16";
  return block->name() + (block_dims > 0 ? " on dims [0," + std::to_string(block_dims) + "), bf16 after" : "");
}

void RoundingFormat::check(int64_t row_length) const {
  if (!block) return;
  const int64_t dims = quantized_dims(row_length);
  if (block->block <= 0 || block_dims < 0 || dims > row_length || dims % block->block != 0)
    throw std::invalid_argument("rounding format " + name() + ": the block dims must be a positive multiple of " +
                                std::to_string(block->block) + " within rows of " + std::to_string(row_length));
  if (block->scale != ref::ScaleRule::ue8m0_ceil && block->scale != ref::ScaleRule::e8m0_floor)
    throw std::invalid_argument("rounding format " + name() +
                                ": only power-of-two block scales (ue8m0, e8m0-floor) have a grid to judge flips on");
}

double Grid::round(double x) const {
  if (!element_) return static_cast<double>(ref::bf16_round(static_cast<float>(x)));
  const double m = qmax(*element_);
  return ref::round_element(*element_, std::clamp(x / scale_, -m, m)) * scale_;  // x / scale exact: a power of two
}

bool Grid::contains(double v) const {
  if (!std::isfinite(v)) return false;
  if (!element_) {
    const float f = static_cast<float>(v);
    return static_cast<double>(f) == v && ref::bf16_round(f) == f;
  }
  const double q = v / scale_;
  return std::fabs(q) <= qmax(*element_) && ref::round_element(*element_, q) == q;
}

int64_t Grid::ordinal(double v) const {
  if (!element_) {
    const uint16_t bits = ref::bf16_encode(static_cast<float>(v));
    const int64_t magnitude = bits & 0x7fff;
    return (bits & 0x8000) ? -magnitude : magnitude;
  }
  const double q = v / scale_;
  const int64_t magnitude =
      *element_ == ref::Element::e4m3 ? (ref::fp8_e4m3_encode(q) & 0x7f) : (ref::fp4_e2m1_encode(q) & 0x7);
  return std::signbit(q) ? -magnitude : magnitude;
}

double Grid::at(int64_t ordinal) const {
  const auto magnitude = static_cast<uint64_t>(ordinal < 0 ? -ordinal : ordinal);
  double v = 0;
  if (!element_)
    v = ref::bf16_decode(static_cast<uint16_t>(magnitude & 0x7fff));
  else if (*element_ == ref::Element::e4m3)
    v = ref::fp8_e4m3_decode(static_cast<uint8_t>(magnitude & 0x7f)) * scale_;
  else
    v = ref::fp4_e2m1_decode(static_cast<uint8_t>(magnitude & 0x7)) * scale_;
  return ordinal < 0 ? -v : v;
}

bool Grid::is_tie(double x) const {
  if (!std::isfinite(x)) return false;
  if (!element_) {
    // The bf16 rounding reads the fp32 value: a tie is an fp32 value whose dropped half is 0x8000.
    const uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(x));
    return (bits & 0x7f800000u) != 0x7f800000u && (bits & 0xffffu) == 0x8000u;
  }
  const double a = std::fabs(x / scale_);
  if (a >= qmax(*element_)) return false;                           // saturates: no neighbour above
  const double half_steps = 2 * a / element_quantum(*element_, a);  // exact: quantum and 2 are powers of two
  return half_steps == std::floor(half_steps) && std::fmod(half_steps, 2.0) == 1.0;
}

}  // namespace dsv4::verify
