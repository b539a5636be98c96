#pragma once
// Rounded stages judged by what rounding allows, element by element (docs/tolerances.md section
// 3). A stage whose values are rounded last to a grid (bf16; FP8 e4m3 or FP4 e2m1 blocks with
// power-of-two scales) is compared with the reference's value BEFORE that rounding, p, and the
// error bound e of p (what upstream differences and accumulation order can move it by):
//   - a tested value may differ from the reference only by landing on another grid value that
//     some real within e of p rounds to: a grid step only where p lies within e of a rounding
//     boundary; with e = 0, an exact tie must round as the format's rule says (to nearest even);
//   - a block's scale must be the reference's, unless the block amax is within e (of its element)
//     of a power-of-two boundary of the scale rule, where the neighbouring scale is allowed too;
//   - flips that go one way far more often than chance allows (a rounding mode that is not
//     round-to-nearest-even, or every value one step high) fail even where each is in reach.
// The census of the differences (flips, flips explained by a nearby boundary, unexplained, ties,
// direction) is added to the dense metrics of the same pair.
#include <span>

#include "verify/compare/dense.h"
#include "verify/compare/rounding_grid.h"

namespace dsv4::verify {

// The reference's side of a rounded stage. Shapes are the compared shape.
struct RoundedReference {
  std::span<const double> pre_rounding;  // the reference's value before the final rounding
  RoundingFormat format;                 // the final rounding
  // The error bound of each pre-rounding value; empty: the tolerance row's pre_rounding bound,
  // atol + atol_rms * rms(pre_rounding over the row) + rtol * |p| (pre_rounding_tail on the bf16
  // dims after a row's blocks, where the row has one).
  std::span<const double> bound;
};

// Flips going one way are a bias when the binomial probability of a split at least as uneven is
// below 2^-20 and the minority direction holds less than a quarter of them (docs/tolerances.md
// section 3, "Rounding direction").
inline constexpr double kFlipBiasMaxPValue = 0x1p-20;
inline constexpr double kFlipBiasMaxMinorityShare = 0.25;

// ref: the reference (the rounding of reference.pre_rounding: checked); got: the tested values.
// Everything compare_dense reports and gates (with `tolerance`), plus the census in
// DenseMetrics::rounding and the gates "rounding" (an unexplained difference or block scale)
// and "rounding bias". Throws std::invalid_argument when a size differs from the shape, the
// format cannot be judged (RoundingFormat::check), neither a bound nor tolerance.pre_rounding is
// given, or ref is not the format's rounding of pre_rounding (naming the first element).
DenseMetrics compare_rounded(std::span<const double> ref, std::span<const double> got, std::span<const int64_t> shape,
                             const RoundedReference& reference, const Tolerance& tolerance,
                             const NonFiniteRule& nonfinite = {});

// The tested side's quantizer checked on its own input: `quantized` must be, value for value,
// the format's rounding of `pre_quantization` (round to nearest even, the format's scale rule and
// amax floor), as the oracle computes it (reference/numerics/). For captures that hold the tested
// value before quantization. Gates: elementwise with atol = rtol = 0 (so +0 and -0 are the same
// value), non-finite positions, and the rounding census with a zero bound (every difference
// unexplained; a tie rounded the other way is named as such). Throws as compare_rounded does.
DenseMetrics check_quantizer(std::span<const double> pre_quantization, std::span<const double> quantized,
                             std::span<const int64_t> shape, const RoundingFormat& format,
                             const NonFiniteRule& nonfinite = {});

// The two-sided probability that n fair coin flips split at least as unevenly as `minority`
// against n - minority: min(1, 2 P[Binomial(n, 1/2) <= minority]).
double two_sided_binomial_p(int64_t n, int64_t minority);

}  // namespace dsv4::verify
