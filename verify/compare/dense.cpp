#include "verify/compare/dense.h"

#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace dsv4::verify {

namespace {

enum class ValueClass { finite, nan, pos_inf, neg_inf };

ValueClass classify(double v) {
  if (std::isnan(v)) return ValueClass::nan;
  if (std::isinf(v)) return v > 0 ? ValueClass::pos_inf : ValueClass::neg_inf;
  return ValueClass::finite;
}

ElementAt element_at(int64_t flat, std::span<const int64_t> shape, double ref, double got) {
  return {flat, unravel(flat, shape), ref, got};
}

// The smallest double x >= 0 with passes(x), for a predicate that is monotone in x and false at 0
// (the callers check): find an upper end that passes by doubling from the guess, then bisect over
// the bit patterns of the non-negative doubles, which are ordered as the values are. The rule is
// evaluated exactly as the gate evaluates it, so the result passes and its predecessor does not,
// in at most about 64 + 2100 evaluations however the rounding of the rule behaves.
template <class Passes>
double smallest_passing(double guess, Passes passes) {
  double hi = guess > 0.0 ? guess : std::numeric_limits<double>::denorm_min();
  while (!passes(hi)) {
    if (std::isinf(hi)) return hi;
    hi *= 2.0;
  }
  uint64_t fails = 0, holds = std::bit_cast<uint64_t>(hi);
  while (holds - fails > 1) {
    const uint64_t mid = fails + (holds - fails) / 2;
    (passes(std::bit_cast<double>(mid)) ? holds : fails) = mid;
  }
  return std::bit_cast<double>(holds);
}

// Each element's own minimum, maximised over elements: the rule is monotone in atol and in rtol,
// so the maximum passes every element and the predecessor fails the element that set it.
double min_atol_for(double abs_diff, double abs_ref, double rtol) {
  if (within_tolerance(abs_diff, abs_ref, 0.0, rtol)) return 0.0;
  return smallest_passing(abs_diff - rtol * abs_ref,
                          [&](double atol) { return within_tolerance(abs_diff, abs_ref, atol, rtol); });
}

double min_rtol_for(double abs_diff, double abs_ref, double atol) {
  if (within_tolerance(abs_diff, abs_ref, atol, 0.0)) return 0.0;
  if (abs_ref == 0.0) return std::numeric_limits<double>::infinity();
  return smallest_passing((abs_diff - atol) / abs_ref,
                          [&](double rtol) { return within_tolerance(abs_diff, abs_ref, atol, rtol); });
}

// A row (all axes but the last) is compared iff the mask is empty or its entry is nonzero.
struct Rows {
  std::span<const uint8_t> mask;
  int64_t length = 1;
  bool kept(int64_t flat) const { return mask.empty() || mask[static_cast<size_t>(flat / length)] != 0; }
};

DenseMetrics compare(std::span<const double> ref, std::span<const double> got, std::span<const int64_t> shape,
                     const Rows& rows, const Tolerance& tol) {
  const int64_t count = element_count(shape, "compare_dense");
  if (static_cast<int64_t>(ref.size()) != count || static_cast<int64_t>(got.size()) != count) {
    throw std::invalid_argument("compare_dense: shape " + format_shape(shape) + " has " + std::to_string(count) +
                                " elements, the reference has " + std::to_string(ref.size()) +
                                " and the tested tensor " + std::to_string(got.size()));
  }
  DenseMetrics m;
  m.rtol = tol.rtol;

  // Pass 1: the reference's scale, which sets the effective atol.
  long double sum_ref2 = 0.0L;
  for (int64_t i = 0; i < count; ++i) {
    if (!rows.kept(i)) continue;
    ++m.n;
    if (std::isfinite(ref[i]) && std::isfinite(got[i])) {
      ++m.n_finite;
      sum_ref2 += static_cast<long double>(ref[i]) * ref[i];
    }
  }
  m.ref_rms = m.n_finite ? static_cast<double>(std::sqrt(sum_ref2 / m.n_finite)) : 0.0;
  m.atol = tol.atol + tol.atol_rms * m.ref_rms;

  // Pass 2: every metric.
  long double sum_abs = 0.0L, sum_diff2 = 0.0L, sum_both2 = 0.0L;
  int64_t finite_failed = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (!rows.kept(i)) continue;
    const double r = ref[i], g = got[i];
    const ValueClass rc = classify(r), gc = classify(g);
    if (rc != ValueClass::finite || gc != ValueClass::finite) {
      if (rc == gc) {
        ++m.nonfinite_matched;
      } else if (m.nonfinite_mismatches++ == 0) {
        m.first_nonfinite_mismatch = element_at(i, shape, r, g);
      }
      continue;
    }
    const double abs_diff = std::fabs(g - r), abs_ref = std::fabs(r);
    if (abs_diff > m.max_abs) {
      m.max_abs = abs_diff;
      m.max_abs_at = element_at(i, shape, r, g);
    }
    if (abs_ref != 0.0 && abs_diff / abs_ref > m.max_rel) {
      m.max_rel = abs_diff / abs_ref;
      m.max_rel_at = element_at(i, shape, r, g);
    }
    const long double d = static_cast<long double>(g) - r;
    sum_abs += std::fabs(d);
    sum_diff2 += d * d;
    sum_both2 += static_cast<long double>(r) * r + static_cast<long double>(g) * g;
    if (!within_tolerance(abs_diff, abs_ref, m.atol, m.rtol)) ++finite_failed;
    m.min_atol_to_pass = std::max(m.min_atol_to_pass, min_atol_for(abs_diff, abs_ref, m.rtol));
    m.min_rtol_to_pass = std::max(m.min_rtol_to_pass, min_rtol_for(abs_diff, abs_ref, m.atol));
    if (std::bit_cast<uint64_t>(r) != std::bit_cast<uint64_t>(g) && m.bitwise_mismatches++ == 0) {
      m.first_bitwise_mismatch = element_at(i, shape, r, g);
    }
  }
  if (m.n_finite > 0) m.mean_abs = static_cast<double>(sum_abs / m.n_finite);
  if (sum_ref2 > 0.0L) {
    m.nmse = static_cast<double>(sum_diff2 / sum_ref2);
  } else if (sum_diff2 > 0.0L) {
    m.nmse = std::numeric_limits<double>::infinity();
  }
  // 1 - 2 sum(rg) / sum(r^2 + g^2) = sum (r - g)^2 / sum(r^2 + g^2): the same number, computed without
  // the cancellation of 1 - (something close to 1).
  if (sum_both2 > 0.0L) m.cos_diff = static_cast<double>(sum_diff2 / sum_both2);
  m.elements_failed = finite_failed + m.nonfinite_mismatches;
  if (m.n > 0) m.pass_fraction = static_cast<double>(m.n - m.elements_failed) / static_cast<double>(m.n);

  if (m.nonfinite_mismatches > 0) m.failed_gates.push_back("nonfinite");
  if (tol.bitwise) {
    if (m.bitwise_mismatches > 0) m.failed_gates.push_back("bitwise");
  } else {
    if (finite_failed > 0) m.failed_gates.push_back("elementwise");
    if (tol.max_cos_diff && !(m.cos_diff <= *tol.max_cos_diff)) m.failed_gates.push_back("cos_diff");
    if (tol.max_nmse && !(m.nmse <= *tol.max_nmse)) m.failed_gates.push_back("nmse");
  }
  m.status = m.failed_gates.empty() ? Status::pass : Status::fail;
  return m;
}

}  // namespace

DenseMetrics compare_dense(std::span<const double> ref, std::span<const double> got, std::span<const int64_t> shape,
                           const Tolerance& tolerance) {
  return compare(ref, got, shape, Rows{}, tolerance);
}

DenseMetrics compare_dense_masked(std::span<const double> ref, std::span<const double> got,
                                  std::span<const int64_t> shape, std::span<const uint8_t> row_mask,
                                  const Tolerance& tolerance) {
  if (shape.empty()) throw std::invalid_argument("compare_dense_masked: a scalar has no rows to mask");
  const int64_t row_count = element_count(shape.first(shape.size() - 1), "compare_dense_masked");
  if (static_cast<int64_t>(row_mask.size()) != row_count) {
    throw std::invalid_argument("compare_dense_masked: shape " + format_shape(shape) + " has " +
                                std::to_string(row_count) + " rows, the row mask has " +
                                std::to_string(row_mask.size()) + " entries");
  }
  return compare(ref, got, shape, Rows{row_mask, shape.back()}, tolerance);
}

}  // namespace dsv4::verify
