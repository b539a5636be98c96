#pragma once
// Dense comparison of a tested tensor against the reference (the oracle): every metric of
// docs/tolerances.md section 1 (ggml NMSE, Polygraphy minimum tolerance, torch's elementwise
// rule, FlashMLA/DeepGEMM cos-diff and non-finite positions, bitwise equality), over the whole
// tensor and over each row and token, where the worst row decides, and the verdict of one
// tolerance row. Stages rounded to a grid (bf16, FP8, FP4) are judged element by element by what
// that rounding allows in verify/compare/rounded.h, which adds its census to these metrics.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "verify/compare/flip_census.h"
#include "verify/compare/nonfinite.h"
#include "verify/compare/shape.h"
#include "verify/compare/status.h"
#include "verify/tolerance/tolerance.h"

namespace dsv4::verify {

// One element of the compared pair. index = -1: no such element (e.g. no mismatch).
struct ElementAt {
  int64_t index = -1;          // flat, row-major
  std::vector<int64_t> coord;  // the same element as a coordinate in the compared shape
  double ref = 0.0;
  double got = 0.0;
  bool found() const { return index >= 0; }
};

// The worst group of elements by each metric, for one way of grouping the tensor: "row" (every
// axis but the last: one head of [b,s,H,d], one token of [b,s,d]) or "token" (the first two axes
// of a tensor with four or more: all heads of one token). Groups with no finite pair are left out;
// cos_diff and nmse are the worst over groups of at least kMinGroupForCeilings finite values (the
// groups the ceilings gate), max_abs_over_rms over every group.
struct GroupMetrics {
  std::string grouping;              // "row" or "token"
  int64_t groups = 0;                // groups compared
  int64_t gated_groups = 0;          // ... of them with at least kMinGroupForCeilings finite values
  int64_t group_size = 0;            // elements per group
  double cos_diff = 0.0;             // the largest cos_diff of a group ...
  std::vector<int64_t> cos_diff_at;  // ... and that group's coordinate (its leading axes); empty: none
  double nmse = 0.0;                 // the largest nmse of a group
  std::vector<int64_t> nmse_at;
  double max_abs_over_rms = 0.0;  // the largest |got - ref| / rms(the reference over its group);
  ElementAt max_abs_over_rms_at;  // +inf where a group's reference is all zero and got is not
};

struct DenseMetrics {
  int64_t n = 0;                       // elements compared (rows the mask keeps); 0: VACUOUS
  int64_t n_finite = 0;                // pairs with both values finite: the error metrics are over these
  NonFiniteRule nonfinite_rule;        // which non-finite values the stage may hold
  int64_t nonfinite_matched = 0;       // the same allowed non-finite value on both sides: excluded, and pass
  int64_t nonfinite_mismatches = 0;    // a position where the classes differ (NaN vs 1, -inf vs +inf, ...)
  int64_t nonfinite_not_allowed = 0;   // the same non-finite value on both sides, but one the stage cannot
                                       // hold (NaN in DeepSeek's tensors): a failure, not a match
  ElementAt first_nonfinite_mismatch;  // the first of either kind

  double max_abs = 0.0;                // max |got - ref|
  ElementAt max_abs_at;                // first element reaching it
  double max_rel = 0.0;                // max |got - ref| / |ref| over pairs with ref != 0 (relative error
  ElementAt max_rel_at;                // is undefined at ref == 0; those elements are judged by atol)
  double mean_abs = 0.0;               // mean |got - ref|
  double ref_rms = 0.0;                // sqrt(mean ref^2) over the whole tensor
  double nmse = 0.0;                   // sum (got - ref)^2 / sum ref^2; 0/0 = 0, x/0 = +inf
  double cos_diff = 0.0;               // 1 - 2 sum(ref got) / sum(ref^2 + got^2); 0 when both are all zero
  GroupMetrics rows;                   // per row (every axis but the last)
  std::optional<GroupMetrics> tokens;  // per token (first two axes), for tensors of four or more axes

  double atol = 0.0;  // the effective atol of the element that set worst_ratio:
                      // tolerance.atol + tolerance.atol_rms * rms(reference over its row)
  double rtol = 0.0;
  int64_t elements_failed = 0;  // finite pairs outside atol + rtol |ref|, plus non-finite failures
  double pass_fraction = 1.0;   // (n - elements_failed) / n; 1 when n == 0
  // The minimum tolerance to pass, each term alone as Polygraphy reports it: the smallest atol
  // with which every finite pair passes |got - ref| <= atol (rtol 0), and the smallest rtol with
  // which every finite pair passes |got - ref| <= rtol |ref| (atol 0; +inf when a pair with
  // ref == 0 differs). The next smaller double fails.
  double min_atol_to_pass = 0.0;
  double min_rtol_to_pass = 0.0;

  int64_t bitwise_mismatches = 0;  // finite pairs whose bits differ (+0 vs -0 differ)
  ElementAt first_bitwise_mismatch;

  // measured / allowed of the closest gate (<= 1 passes that gate): the elementwise rule per
  // element, cos_diff and nmse over the tensor, its rows and its tokens; +inf for a failed
  // non-finite, bitwise or rounding gate. How close a passing record came to failing.
  double worst_ratio = 0.0;
  std::string worst_ratio_gate;  // the gate that set it ("elementwise", "row cos_diff", ...)
  ElementAt worst_ratio_at;      // for the elementwise gate: the element

  std::optional<FlipCensus> rounding;  // set by compare_rounded (verify/compare/rounded.h)

  Status status = Status::pass;
  // In order: "nonfinite", "bitwise", "elementwise", "cos_diff", "row cos_diff", "token cos_diff",
  // "nmse", "row nmse", "token nmse", then compare_rounded's "rounding", "rounding bias".
  std::vector<std::string> failed_gates;
};

// The cos_diff and nmse ceilings of a tolerance row hold for the whole tensor and for every row and
// token of at least this many finite values (docs/tolerances.md section 3: a ceiling assumes flips
// are rare among the values it covers); smaller groups are reported, and judged by their elements.
inline constexpr int64_t kMinGroupForCeilings = 64;

// ref, got: the same `shape`, row-major. Non-finite values may match only where `nonfinite`
// allows them (default: none may). Throws std::invalid_argument when a size differs from the
// shape's element count. A comparison of zero elements is VACUOUS.
DenseMetrics compare_dense(std::span<const double> ref, std::span<const double> got, std::span<const int64_t> shape,
                           const Tolerance& tolerance, const NonFiniteRule& nonfinite = {});

// As compare_dense, over the rows whose row_mask entry is nonzero only; a row is all axes but the
// last (shape [b, r, c] has b*r rows of c values), and coordinates stay those of the full shape.
// For state tensors where some rows are don't-care (e.g. compressor slots that the next call
// overwrites). Throws std::invalid_argument when shape is a scalar or row_mask has the wrong size.
DenseMetrics compare_dense_masked(std::span<const double> ref, std::span<const double> got,
                                  std::span<const int64_t> shape, std::span<const uint8_t> row_mask,
                                  const Tolerance& tolerance, const NonFiniteRule& nonfinite = {});

// The elementwise rule: |got - ref| <= atol + rtol * |ref|, evaluated in double as written.
inline bool within_tolerance(double abs_diff, double abs_ref, double atol, double rtol) {
  return abs_diff <= atol + rtol * abs_ref;
}

}  // namespace dsv4::verify
