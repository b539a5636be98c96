// Block quantization: the scale rules of block_quant.h applied block by block along a row.
#include "reference/numerics/block_quant.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "reference/numerics/fp4_e2m1.h"
#include "reference/numerics/fp8_e4m3.h"
#include "reference/numerics/scale_rules.h"

namespace dsv4::ref {

namespace {

float fp32(double x) { return static_cast<float>(x); }

// "1e-04": a floor's value, short and exact enough to tell the variants apart.
std::string fmt_float(float v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", static_cast<double>(v));
  return text;
}

std::string rule_name(ScaleRule r) {
  switch (r) {
    case ScaleRule::ue8m0_ceil: return "ue8m0";
    case ScaleRule::ue8m0_floor: return "ue8m0-floor";
    case ScaleRule::e8m0_floor: return "e8m0-floor";
    case ScaleRule::nvfp4_e4m3: return "nvfp4-e4m3";
    case ScaleRule::fp32_amax: return "fp32";
  }
  throw std::invalid_argument("unknown ScaleRule " + std::to_string(static_cast<int>(r)));
}

// max |x| over the values; NaN is skipped (it never compares greater).
double amax_of(std::span<const double> xs) {
  double a = 0;
  for (double x : xs)
    if (std::fabs(x) > a) a = std::fabs(x);
  return a;
}

void check_row(const BlockFormat& f, size_t n, const char* who) {
  if (f.block <= 0)
    throw std::invalid_argument(std::string(who) + ": block size must be positive, got " + std::to_string(f.block));
  if (n % static_cast<size_t>(f.block) != 0)
    throw std::invalid_argument(std::string(who) + ": row length " + std::to_string(n) +
                                " is not a multiple of the block " + std::to_string(f.block) + " of " + f.name());
}

// The element of x in a block with stored scale `scale` (tensor scale g): clamp(x / S) rounded.
double quantize_element(const BlockFormat& f, double x, double scale, double g) {
  if (std::isnan(x)) return x;
  double scaled = 0;
  switch (f.scale) {
    case ScaleRule::ue8m0_ceil:
    case ScaleRule::ue8m0_floor:
    case ScaleRule::e8m0_floor:
      scaled = x / scale;  // exact: scale is a power of two
      break;
    case ScaleRule::fp32_amax:
      scaled = fp32(x) / fp32(scale);  // fp32 division
      break;
    case ScaleRule::nvfp4_e4m3: {
      const float s = fp32(scale) * fp32(g);  // the fp32 block scale S, as ModelOpt forms it
      // S = 0 only when the row is zero in fp32 (g = 0): the element is then a signed zero.
      scaled = s == 0 ? std::copysign(0.0, x) : fp32(x) / s;
      break;
    }
  }
  return round_element(f.element, f.rounding, std::clamp(scaled, -f.qmax(), f.qmax()));
}

}  // namespace

double BlockFormat::qmax() const { return element == Element::e4m3 ? kFp8E4m3Max : kFp4E2m1Max; }

float BlockFormat::amax_floor() const {
  if (custom_amax_floor) return *custom_amax_floor;
  return element == Element::e4m3 ? 1e-4f : 6.0f * 0x1p-126f;
}

int BlockFormat::emax_elem() const { return element == Element::e4m3 ? 8 : 2; }

std::string BlockFormat::name() const {
  std::string n =
      std::string(element == Element::e4m3 ? "e4m3" : "e2m1") + "/b" + std::to_string(block) + "/" + rule_name(scale);
  if (rounding == ElementRounding::toward_zero) n += "/rz";
  if (rounding == ElementRounding::nearest_ties_toward_zero) n += "/rn-tz";
  if (custom_amax_floor) n += "/floor=" + fmt_float(*custom_amax_floor);
  return n;
}

double round_element(Element e, double scaled) {
  return e == Element::e4m3 ? fp8_e4m3_round(scaled) : fp4_e2m1_round(scaled);
}

double round_element(Element e, ElementRounding rounding, double scaled) {
  switch (rounding) {
    case ElementRounding::nearest_even: return round_element(e, scaled);
    case ElementRounding::toward_zero:
      return e == Element::e4m3 ? fp8_e4m3_round_toward_zero(scaled) : fp4_e2m1_round_toward_zero(scaled);
    case ElementRounding::nearest_ties_toward_zero:
      return e == Element::e4m3 ? fp8_e4m3_round_ties_toward_zero(scaled) : fp4_e2m1_round_ties_toward_zero(scaled);
  }
  throw std::invalid_argument("round_element: unknown ElementRounding " + std::to_string(static_cast<int>(rounding)));
}

double tensor_scale(const BlockFormat& f, double row_amax) {
  if (f.scale != ScaleRule::nvfp4_e4m3) return 1.0;
  return fp32(row_amax) / fp32(f.qmax() * kFp8E4m3Max);  // fp32 division; qmax * 448 is exact
}

double block_scale(const BlockFormat& f, double amax, double row_amax) {
  switch (f.scale) {
    case ScaleRule::ue8m0_ceil: return std::ldexp(1.0, ue8m0_ceil_exponent(fp32(amax), f.amax_floor(), fp32(f.qmax())));
    case ScaleRule::ue8m0_floor:
      return std::ldexp(1.0, ue8m0_floor_exponent(fp32(amax), f.amax_floor(), fp32(f.qmax())));
    case ScaleRule::e8m0_floor: return std::ldexp(1.0, e8m0_floor_exponent(amax, f.emax_elem()));
    case ScaleRule::nvfp4_e4m3: {
      const float denominator = fp32(f.qmax()) * fp32(tensor_scale(f, row_amax));
      if (denominator == 0) return 1.0;  // the row is zero in fp32
      const double s = fp8_e4m3_round(fp32(amax) / denominator);
      return s == 0 ? 1.0 : s;
    }
    case ScaleRule::fp32_amax: return std::max(fp32(amax), f.amax_floor()) / fp32(f.qmax());  // fp32 division
  }
  throw std::invalid_argument("block_scale: unknown ScaleRule " + std::to_string(static_cast<int>(f.scale)));
}

double dequantize(const BlockFormat& f, double q, double scale, double g) {
  switch (f.scale) {
    case ScaleRule::ue8m0_ceil:
    case ScaleRule::ue8m0_floor:
    case ScaleRule::e8m0_floor: return q * scale;  // exact: a short element times a power of two
    case ScaleRule::fp32_amax: return fp32(q) * fp32(scale);
    case ScaleRule::nvfp4_e4m3: return fp32(q) * (fp32(scale) * fp32(g));
  }
  throw std::invalid_argument("dequantize: unknown ScaleRule " + std::to_string(static_cast<int>(f.scale)));
}

// row [n] -> q [n], scales [n / block]
QuantizedRow quantize_row(const BlockFormat& f, std::span<const double> row) {
  check_row(f, row.size(), "quantize_row");
  const size_t block = static_cast<size_t>(f.block);
  const double row_amax = amax_of(row);
  QuantizedRow out;
  out.q.resize(row.size());
  out.scales.resize(row.size() / block);
  out.tensor_scale = tensor_scale(f, row_amax);
  for (size_t b = 0; b < out.scales.size(); ++b) {
    const std::span<const double> xs = row.subspan(b * block, block);
    const double s = block_scale(f, amax_of(xs), row_amax);
    out.scales[b] = s;
    for (size_t i = 0; i < block; ++i) out.q[b * block + i] = quantize_element(f, xs[i], s, out.tensor_scale);
  }
  return out;
}

// row [n] -> row [n], in place
void fake_quant_row(const BlockFormat& f, std::span<double> row) {
  check_row(f, row.size(), "fake_quant_row");
  const QuantizedRow qr = quantize_row(f, row);
  const size_t block = static_cast<size_t>(f.block);
  for (size_t i = 0; i < row.size(); ++i) row[i] = dequantize(f, qr.q[i], qr.scales[i / block], qr.tensor_scale);
}

}  // namespace dsv4::ref
