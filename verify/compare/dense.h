#pragma once
// Dense comparison of a tested tensor against the reference (the oracle): every metric of
// verification-practice.md section 1.6 (ggml NMSE, Polygraphy minimum tolerance, torch's
// elementwise rule, FlashMLA/DeepGEMM cos-diff and non-finite positions, bitwise equality), and the
// verdict of one tolerance row.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

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

struct DenseMetrics {
  int64_t n = 0;                      // elements compared (rows the mask keeps)
  int64_t n_finite = 0;               // pairs with both values finite: the error metrics are over these
  int64_t nonfinite_matched = 0;      // the same NaN / +inf / -inf on both sides: excluded, and pass
  int64_t nonfinite_mismatches = 0;   // a position where the classes differ (NaN vs 1, -inf vs +inf, ...)
  ElementAt first_nonfinite_mismatch;

  double max_abs = 0.0;               // max |got - ref|
  ElementAt max_abs_at;               // first element reaching it
  double max_rel = 0.0;               // max |got - ref| / |ref| over pairs with ref != 0 (relative error
  ElementAt max_rel_at;               // is undefined at ref == 0; those elements are judged by atol)
  double mean_abs = 0.0;              // mean |got - ref|
  double ref_rms = 0.0;               // sqrt(mean ref^2)
  double nmse = 0.0;                  // sum (got - ref)^2 / sum ref^2; 0/0 = 0, x/0 = +inf
  double cos_diff = 0.0;              // 1 - 2 sum(ref got) / sum(ref^2 + got^2); 0 when both are all zero

  double atol = 0.0;                  // the effective atol: tolerance.atol + tolerance.atol_rms * ref_rms
  double rtol = 0.0;
  int64_t elements_failed = 0;        // finite pairs outside atol + rtol |ref|, plus nonfinite mismatches
  double pass_fraction = 1.0;         // (n - elements_failed) / n; 1 when n == 0
  double min_atol_to_pass = 0.0;      // smallest atol with which every finite pair passes, given rtol
  double min_rtol_to_pass = 0.0;      // smallest rtol with which every finite pair passes, given atol;
                                      // +inf when a pair with ref == 0 is off by more than atol

  int64_t bitwise_mismatches = 0;     // finite pairs whose bits differ (+0 vs -0 differ)
  ElementAt first_bitwise_mismatch;

  Status status = Status::pass;
  std::vector<std::string> failed_gates;  // in order: "nonfinite", "bitwise", "elementwise", "cos_diff", "nmse"
};

// ref, got: the same `shape`, row-major. Throws std::invalid_argument when a size differs from
// the shape's element count.
DenseMetrics compare_dense(std::span<const double> ref, std::span<const double> got, std::span<const int64_t> shape,
                           const Tolerance& tolerance);

// As compare_dense, over the rows whose row_mask entry is nonzero only; a row is all axes but the
// last (shape [b, r, c] has b*r rows of c values), and coordinates stay those of the full shape.
// For state tensors where some rows are don't-care (e.g. compressor slots that the next call
// overwrites). Throws std::invalid_argument when shape is a scalar or row_mask has the wrong size.
DenseMetrics compare_dense_masked(std::span<const double> ref, std::span<const double> got,
                                  std::span<const int64_t> shape, std::span<const uint8_t> row_mask,
                                  const Tolerance& tolerance);

// The elementwise rule: |got - ref| <= atol + rtol * |ref|, evaluated in double as written.
inline bool within_tolerance(double abs_diff, double abs_ref, double atol, double rtol) {
  return abs_diff <= atol + rtol * abs_ref;
}

}  // namespace dsv4::verify
