#include "verify/precision/error_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace dsv4::verify {

namespace {

bool same_nonfinite_class(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b;  // both infinite here (one was not finite and neither is NaN): same sign
}

// sqrt(mean ref^2) over the finite values of one row; 0 when there are none.
double row_rms(const ref::Mat& m, ref::Index row) {
  long double sum = 0.0L;
  int64_t count = 0;
  for (ref::Index c = 0; c < m.cols(); ++c) {
    const double v = m(row, c);
    if (!std::isfinite(v)) continue;
    sum += static_cast<long double>(v) * v;
    ++count;
  }
  return count ? static_cast<double>(std::sqrt(sum / count)) : 0.0;
}

}  // namespace

// ref, got [rows, cols]
void ErrorStats::add(const ref::Mat& ref, const ref::Mat& got) {
  if (ref.rows() != got.rows() || ref.cols() != got.cols())
    throw std::invalid_argument("ErrorStats::add: reference [" + std::to_string(ref.rows()) + ", " +
                                std::to_string(ref.cols()) + "], tested [" + std::to_string(got.rows()) + ", " +
                                std::to_string(got.cols()) + "]");
  for (ref::Index r = 0; r < ref.rows(); ++r) {
    const double scale = row_rms(ref, r);
    for (ref::Index c = 0; c < ref.cols(); ++c) {
      const double x = ref(r, c), y = got(r, c);
      ++n_;
      if (!std::isfinite(x) || !std::isfinite(y)) {
        ++(same_nonfinite_class(x, y) ? nonfinite_matched_ : nonfinite_mismatches_);
        continue;
      }
      ++n_finite_;
      const double err = std::abs(y - x);
      sum_ref2_ += static_cast<long double>(x) * x;
      sum_got2_ += static_cast<long double>(y) * y;
      sum_err2_ += static_cast<long double>(err) * err;
      max_abs_ = std::max(max_abs_, err);
      if (x != 0.0) max_rel_ = std::max(max_rel_, err / std::abs(x));

      if (scale == 0.0) {
        ++hist_.no_scale;
      } else if (err == 0.0) {
        ++hist_.zero;
      } else {
        const double bin = std::floor((std::log10(err / scale) - kHistLow) / kHistStep);
        if (bin < 0)
          ++hist_.below;
        else if (bin >= kHistBins)
          ++hist_.above;
        else
          ++hist_.bins[static_cast<size_t>(bin)];
      }
    }
  }
}

double ErrorStats::nmse() const {
  if (sum_err2_ == 0.0L) return 0.0;
  if (sum_ref2_ == 0.0L) return std::numeric_limits<double>::infinity();
  return static_cast<double>(sum_err2_ / sum_ref2_);
}

double ErrorStats::cos_diff() const {
  const long double both = sum_ref2_ + sum_got2_;
  return both > 0.0L ? static_cast<double>(sum_err2_ / both) : 0.0;
}

double ErrorStats::ref_rms() const { return n_finite_ ? static_cast<double>(std::sqrt(sum_ref2_ / n_finite_)) : 0.0; }

}  // namespace dsv4::verify
