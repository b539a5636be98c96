#pragma once
// The error of one stage of one policy against the exact policy, accumulated over every call and
// sequence of a layer without keeping the values: running sums for the dense metrics of
// verify/compare/dense.h (the same definitions: NMSE, cos-diff, max relative error) and a histogram
// of each element's error in units of its token's reference RMS, for the error-distribution plots.
#include <array>
#include <cstdint>

#include "reference/tensor.h"

namespace dsv4::verify {

// Bins of log10(|got - ref| / rms(ref row)): [kHistLow + i * kHistStep, ... + kHistStep), i < kHistBins.
inline constexpr double kHistLow = -10.0;
inline constexpr double kHistStep = 0.25;
inline constexpr int kHistBins = 48;  // up to 10^2: an error 100x its token's RMS

struct ErrorHistogram {
  std::array<int64_t, kHistBins> bins{};
  int64_t zero = 0;      // |got - ref| == 0 exactly
  int64_t below = 0;     // nonzero, under 10^kHistLow
  int64_t above = 0;     // at or over the top bin's upper edge
  int64_t no_scale = 0;  // the token's reference RMS is 0 (no relative scale)
};

class ErrorStats {
 public:
  // ref, got [rows, cols] of the same shape (one token or entry per row); throws
  // std::invalid_argument when the shapes differ. Pairs where either value is not finite are not
  // in the metrics: the same class on both sides counts as matched (masked -inf scores), otherwise
  // as a mismatch.
  void add(const ref::Mat& ref, const ref::Mat& got);

  int64_t n() const { return n_; }
  int64_t n_finite() const { return n_finite_; }
  int64_t nonfinite_matched() const { return nonfinite_matched_; }
  int64_t nonfinite_mismatches() const { return nonfinite_mismatches_; }
  double nmse() const;  // sum (got - ref)^2 / sum ref^2; 0/0 = 0, x/0 = +inf
  // 1 - 2 sum(ref got) / sum(ref^2 + got^2), computed as sum (got - ref)^2 / sum(ref^2 + got^2)
  // (the same value without the cancellation); 0 when both are all zero
  double cos_diff() const;
  double max_abs() const { return max_abs_; }
  double max_rel() const { return max_rel_; }  // max |got - ref| / |ref| over ref != 0
  double ref_rms() const;                      // sqrt(mean ref^2) over the finite pairs
  const ErrorHistogram& histogram() const { return hist_; }

 private:
  int64_t n_ = 0;
  int64_t n_finite_ = 0;
  int64_t nonfinite_matched_ = 0;
  int64_t nonfinite_mismatches_ = 0;
  long double sum_ref2_ = 0.0L;
  long double sum_got2_ = 0.0L;
  long double sum_err2_ = 0.0L;
  double max_abs_ = 0.0;
  double max_rel_ = 0.0;
  ErrorHistogram hist_;
};

}  // namespace dsv4::verify
