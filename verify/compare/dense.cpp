#include "verify/compare/dense.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace dsv4::verify {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

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

// Each element's own minimum with the other term zero (Polygraphy), maximised over elements: the
// rule is monotone in atol and in rtol, so the maximum passes every element and the predecessor
// fails the element that set it.
double min_atol_for(double abs_diff) {
  return abs_diff;  // |d| <= atol + 0 |ref| is |d| <= atol, exactly (|ref| is finite)
}

double min_rtol_for(double abs_diff, double abs_ref) {
  if (within_tolerance(abs_diff, abs_ref, 0.0, 0.0)) return 0.0;
  if (abs_ref == 0.0) return kInf;
  return smallest_passing(abs_diff / abs_ref,
                          [&](double rtol) { return within_tolerance(abs_diff, abs_ref, 0.0, rtol); });
}

// measured / allowed, with 0 / 0 = 0 and x / 0 = +inf.
double ratio(double measured, double allowed) {
  if (measured == 0.0) return 0.0;
  return allowed > 0.0 ? measured / allowed : kInf;
}

// Sums over one group of elements (a row or a token), over its finite pairs.
struct GroupSums {
  long double ref2 = 0.0L, diff2 = 0.0L, both2 = 0.0L;
  int64_t finite = 0;
  double rms() const { return finite ? static_cast<double>(std::sqrt(ref2 / finite)) : 0.0; }
};

double nmse_of(long double diff2, long double ref2) {
  if (ref2 > 0.0L) return static_cast<double>(diff2 / ref2);
  return diff2 > 0.0L ? kInf : 0.0;
}

// 1 - 2 sum(rg) / sum(r^2 + g^2) = sum (r - g)^2 / sum(r^2 + g^2): the same number, computed
// without the cancellation of 1 - (something close to 1).
double cos_diff_of(long double diff2, long double both2) {
  return both2 > 0.0L ? static_cast<double>(diff2 / both2) : 0.0;
}

// The groups of a shape: rows (every axis but the last) and, with four or more axes, tokens (the
// first two axes). A scalar is one row of one element.
struct Grouping {
  int64_t row_length = 1;
  int64_t token_length = 0;  // 0: no token grouping
  int64_t rows = 0, tokens = 0;
};

Grouping grouping_of(std::span<const int64_t> shape, int64_t count) {
  Grouping g;
  g.row_length = shape.empty() ? 1 : shape.back();
  g.rows = g.row_length > 0 ? count / g.row_length : 0;
  if (shape.size() >= 4) {
    g.token_length = element_count(shape.subspan(2), "compare_dense");
    g.tokens = g.token_length > 0 ? count / g.token_length : 0;
  }
  return g;
}

std::vector<int64_t> group_coord(int64_t group, std::span<const int64_t> leading) {
  return leading.empty() ? std::vector<int64_t>{} : unravel(group, leading);
}

// The worst group by each metric. leading: the axes that number the groups.
GroupMetrics worst_groups(const std::string& name, int64_t group_size, const std::vector<GroupSums>& sums,
                          std::span<const int64_t> leading) {
  GroupMetrics m;
  m.grouping = name;
  m.group_size = group_size;
  for (size_t k = 0; k < sums.size(); ++k) {
    const GroupSums& s = sums[k];
    if (s.finite == 0) continue;
    ++m.groups;
    if (s.finite < kMinGroupForCeilings) continue;
    ++m.gated_groups;
    const double cos = cos_diff_of(s.diff2, s.both2), nmse = nmse_of(s.diff2, s.ref2);
    if (cos > m.cos_diff) {
      m.cos_diff = cos;
      m.cos_diff_at = group_coord(static_cast<int64_t>(k), leading);
    }
    if (nmse > m.nmse) {
      m.nmse = nmse;
      m.nmse_at = group_coord(static_cast<int64_t>(k), leading);
    }
  }
  return m;
}

struct Rows {
  std::span<const uint8_t> mask;
  int64_t length = 1;
  bool kept(int64_t flat) const { return mask.empty() || mask[static_cast<size_t>(flat / length)] != 0; }
};

DenseMetrics compare(std::span<const double> ref, std::span<const double> got, std::span<const int64_t> shape,
                     const Rows& kept_rows, const Tolerance& tol, const NonFiniteRule& rule) {
  const int64_t count = element_count(shape, "compare_dense");
  if (static_cast<int64_t>(ref.size()) != count || static_cast<int64_t>(got.size()) != count) {
    throw std::invalid_argument("compare_dense: shape " + format_shape(shape) + " has " + std::to_string(count) +
                                " elements, the reference has " + std::to_string(ref.size()) +
                                " and the tested tensor " + std::to_string(got.size()));
  }
  DenseMetrics m;
  m.rtol = tol.rtol;
  m.nonfinite_rule = rule;
  const Grouping g = grouping_of(shape, count);
  std::vector<GroupSums> row_sums(static_cast<size_t>(g.rows)), token_sums(static_cast<size_t>(g.tokens));

  // Pass 1: the reference's scale, over the tensor, each row and each token.
  GroupSums whole;
  for (int64_t i = 0; i < count; ++i) {
    if (!kept_rows.kept(i)) continue;
    ++m.n;
    if (!std::isfinite(ref[i]) || !std::isfinite(got[i])) continue;
    const long double r2 = static_cast<long double>(ref[i]) * ref[i];
    for (GroupSums* s : {&whole, &row_sums[static_cast<size_t>(i / g.row_length)]}) {
      s->ref2 += r2;
      ++s->finite;
    }
    if (g.token_length) {
      token_sums[static_cast<size_t>(i / g.token_length)].ref2 += r2;
      ++token_sums[static_cast<size_t>(i / g.token_length)].finite;
    }
  }
  m.n_finite = whole.finite;
  m.ref_rms = whole.rms();
  if (m.n == 0) {
    m.status = Status::vacuous;
    m.rows.grouping = "row";
    if (g.token_length) {
      m.tokens.emplace();
      m.tokens->grouping = "token";
    }
    return m;
  }

  // Pass 2: every metric.
  long double sum_abs = 0.0L;
  int64_t finite_failed = 0;
  double worst_elementwise = 0.0;
  ElementAt worst_elementwise_at;
  double worst_atol = tol.atol + tol.atol_rms * (g.rows ? row_sums.front().rms() : 0.0);
  GroupMetrics row_metrics, token_metrics;
  for (int64_t i = 0; i < count; ++i) {
    if (!kept_rows.kept(i)) continue;
    const double r = ref[i], t = got[i];
    const ValueClass rc = classify(r), tc = classify(t);
    if (rc != ValueClass::finite || tc != ValueClass::finite) {
      const bool same = rc == tc;
      if (same && rule.allows(r)) {
        ++m.nonfinite_matched;
        continue;
      }
      if (m.nonfinite_mismatches + m.nonfinite_not_allowed == 0)
        m.first_nonfinite_mismatch = element_at(i, shape, r, t);
      ++(same ? m.nonfinite_not_allowed : m.nonfinite_mismatches);
      continue;
    }
    GroupSums& row = row_sums[static_cast<size_t>(i / g.row_length)];
    const double abs_diff = std::fabs(t - r), abs_ref = std::fabs(r);
    if (abs_diff > m.max_abs) {
      m.max_abs = abs_diff;
      m.max_abs_at = element_at(i, shape, r, t);
    }
    if (abs_ref != 0.0 && abs_diff / abs_ref > m.max_rel) {
      m.max_rel = abs_diff / abs_ref;
      m.max_rel_at = element_at(i, shape, r, t);
    }
    const long double d = static_cast<long double>(t) - r;
    const long double both = static_cast<long double>(r) * r + static_cast<long double>(t) * t;
    sum_abs += std::fabs(d);
    whole.diff2 += d * d;
    whole.both2 += both;
    row.diff2 += d * d;
    row.both2 += both;
    const double over_row_rms = ratio(abs_diff, row.rms());
    if (over_row_rms > row_metrics.max_abs_over_rms) {
      row_metrics.max_abs_over_rms = over_row_rms;
      row_metrics.max_abs_over_rms_at = element_at(i, shape, r, t);
    }
    if (g.token_length) {
      GroupSums& token = token_sums[static_cast<size_t>(i / g.token_length)];
      token.diff2 += d * d;
      token.both2 += both;
      const double over_token_rms = ratio(abs_diff, token.rms());
      if (over_token_rms > token_metrics.max_abs_over_rms) {
        token_metrics.max_abs_over_rms = over_token_rms;
        token_metrics.max_abs_over_rms_at = element_at(i, shape, r, t);
      }
    }
    const double atol = tol.atol + tol.atol_rms * row.rms();
    if (!within_tolerance(abs_diff, abs_ref, atol, m.rtol)) ++finite_failed;
    const double element_ratio = ratio(abs_diff, atol + m.rtol * abs_ref);
    if (element_ratio > worst_elementwise) {
      worst_elementwise = element_ratio;
      worst_elementwise_at = element_at(i, shape, r, t);
      worst_atol = atol;
    }
    m.min_atol_to_pass = std::max(m.min_atol_to_pass, min_atol_for(abs_diff));
    // An element's own minimum rtol is its quotient to within a few ulps (unless the product
    // rtol |ref| is subnormal): search exactly only where it can raise the maximum.
    const double rtol_estimate = abs_ref > 0 ? abs_diff / abs_ref : kInf;
    if (abs_ref < 0x1p-900 || !(rtol_estimate < m.min_rtol_to_pass * (1 - 0x1p-48)))
      m.min_rtol_to_pass = std::max(m.min_rtol_to_pass, min_rtol_for(abs_diff, abs_ref));
    if (std::bit_cast<uint64_t>(r) != std::bit_cast<uint64_t>(t) && m.bitwise_mismatches++ == 0) {
      m.first_bitwise_mismatch = element_at(i, shape, r, t);
    }
  }
  if (m.n_finite > 0) m.mean_abs = static_cast<double>(sum_abs / m.n_finite);
  m.nmse = nmse_of(whole.diff2, whole.ref2);
  m.cos_diff = cos_diff_of(whole.diff2, whole.both2);
  m.atol = worst_atol;

  const std::span<const int64_t> row_axes = shape.empty() ? shape : shape.first(shape.size() - 1);
  m.rows = worst_groups("row", g.row_length, row_sums, row_axes);
  m.rows.max_abs_over_rms = row_metrics.max_abs_over_rms;
  m.rows.max_abs_over_rms_at = row_metrics.max_abs_over_rms_at;
  if (g.token_length) {
    m.tokens = worst_groups("token", g.token_length, token_sums, shape.first(2));
    m.tokens->max_abs_over_rms = token_metrics.max_abs_over_rms;
    m.tokens->max_abs_over_rms_at = token_metrics.max_abs_over_rms_at;
  }
  const int64_t nonfinite_failed = m.nonfinite_mismatches + m.nonfinite_not_allowed;
  m.elements_failed = finite_failed + nonfinite_failed;
  m.pass_fraction = static_cast<double>(m.n - m.elements_failed) / static_cast<double>(m.n);

  // The gates, and how close each came (measured / allowed).
  auto gate = [&](const std::string& name, double gate_ratio, bool failed) {
    if (failed) m.failed_gates.push_back(name);
    if (gate_ratio > m.worst_ratio) {
      m.worst_ratio = gate_ratio;
      m.worst_ratio_gate = name;
    }
  };
  gate("nonfinite", nonfinite_failed ? kInf : 0.0, nonfinite_failed > 0);
  if (tol.bitwise) {
    gate("bitwise", m.bitwise_mismatches ? kInf : 0.0, m.bitwise_mismatches > 0);
  } else {
    gate("elementwise", worst_elementwise, finite_failed > 0);
    if (m.worst_ratio_gate == "elementwise") m.worst_ratio_at = worst_elementwise_at;
    struct Measured {
      const char* name;
      double value;
    };
    // Per group where there is more than one group (one group is the whole tensor) and a group
    // large enough for the ceiling.
    const bool by_row = m.rows.groups > 1 && m.rows.gated_groups > 0;
    const bool by_token = m.tokens && m.tokens->groups > 1 && m.tokens->gated_groups > 0;
    if (tol.max_cos_diff) {
      std::vector<Measured> cos{{"cos_diff", m.cos_diff}};
      if (by_row) cos.push_back({"row cos_diff", m.rows.cos_diff});
      if (by_token) cos.push_back({"token cos_diff", m.tokens->cos_diff});
      for (const Measured& c : cos) gate(c.name, ratio(c.value, *tol.max_cos_diff), !(c.value <= *tol.max_cos_diff));
    }
    if (tol.max_nmse) {
      std::vector<Measured> nmse{{"nmse", m.nmse}};
      if (by_row) nmse.push_back({"row nmse", m.rows.nmse});
      if (by_token) nmse.push_back({"token nmse", m.tokens->nmse});
      for (const Measured& c : nmse) gate(c.name, ratio(c.value, *tol.max_nmse), !(c.value <= *tol.max_nmse));
    }
  }
  m.status = m.failed_gates.empty() ? Status::pass : Status::fail;
  return m;
}

}  // namespace

bool NonFiniteRule::allows(double v) const {
  if (std::isnan(v)) return nan;
  if (std::isinf(v)) return v > 0 ? plus_inf : minus_inf;
  return true;
}

std::string NonFiniteRule::describe() const {
  std::string s;
  for (const auto& [on, name] : {std::pair{minus_inf, "-inf"}, std::pair{plus_inf, "+inf"}, std::pair{nan, "nan"}}) {
    if (!on) continue;
    if (!s.empty()) s += ", ";
    s += name;
  }
  return s.empty() ? "none" : s;
}

DenseMetrics compare_dense(std::span<const double> ref, std::span<const double> got, std::span<const int64_t> shape,
                           const Tolerance& tolerance, const NonFiniteRule& nonfinite) {
  return compare(ref, got, shape, Rows{}, tolerance, nonfinite);
}

DenseMetrics compare_dense_masked(std::span<const double> ref, std::span<const double> got,
                                  std::span<const int64_t> shape, std::span<const uint8_t> row_mask,
                                  const Tolerance& tolerance, const NonFiniteRule& nonfinite) {
  if (shape.empty()) throw std::invalid_argument("compare_dense_masked: a scalar has no rows to mask");
  const int64_t row_count = element_count(shape.first(shape.size() - 1), "compare_dense_masked");
  if (static_cast<int64_t>(row_mask.size()) != row_count) {
    throw std::invalid_argument("compare_dense_masked: shape " + format_shape(shape) + " has " +
                                std::to_string(row_count) + " rows, the row mask has " +
                                std::to_string(row_mask.size()) + " entries");
  }
  return compare(ref, got, shape, Rows{row_mask, shape.back()}, tolerance, nonfinite);
}

}  // namespace dsv4::verify
