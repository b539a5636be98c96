#include "verify/compare/rounded.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "reference/numerics/storage.h"

namespace dsv4::verify {

namespace {

// What one tested value is, on one grid, against the pre-rounding value p with bound e.
struct Judgement {
  bool differs = false;    // t is not the grid's rounding of p
  bool explained = false;  // ... but some real within e of p rounds to it
  bool off_grid = false;
  bool tie = false;   // p is exactly on a rounding boundary
  int64_t steps = 0;  // grid steps from the rounding of p to t
  const char* why = "";
};

Judgement judge(const Grid& grid, double p, double e, double t) {
  Judgement j;
  j.tie = grid.is_tie(p);
  const double r = grid.round(p);
  if (t == r) return j;  // +0 and -0 are the same value
  j.differs = true;
  if (!grid.contains(t)) {
    j.off_grid = true;
    j.why = "off the grid";
    return j;
  }
  const int64_t at = grid.ordinal(t);
  j.steps = at - grid.ordinal(r);
  // Rounding is monotone: the values reals within e of p round to are the grid values between
  // the roundings of p - e and p + e.
  j.explained = grid.ordinal(grid.round(p - e)) <= at && at <= grid.ordinal(grid.round(p + e));
  if (!j.explained) {
    if (e == 0 && j.tie)
      j.why = "a tie not rounded as the format's rule (to nearest even)";
    else if (std::llabs(j.steps) == 1)
      j.why = "no rounding boundary within the bound";
    else
      j.why = "more grid steps than the bound reaches";
  }
  return j;
}

// Elements of one row segment judged on one grid.
struct Segment {
  int64_t begin = 0, end = 0;  // flat indices [begin, end)
};

class Census {
 public:
  Census(FlipCensus& c, std::span<const int64_t> shape, std::span<const double> ref, std::span<const double> got,
         std::span<const double> pre, std::span<const double> bound)
      : c_(c), shape_(shape), ref_(ref), got_(got), pre_(pre), bound_(bound) {}

  static bool judged(double r, double t, double p) { return std::isfinite(r) && std::isfinite(t) && std::isfinite(p); }

  // Unexplained differences of the segment on `grid` (nothing recorded).
  int64_t unexplained(const Grid& grid, Segment s) const {
    int64_t n = 0;
    for (int64_t i = s.begin; i < s.end; ++i) {
      if (!judged(ref_[i], got_[i], pre_[i])) continue;
      const Judgement j = judge(grid, pre_[i], bound_[i], got_[i]);
      n += j.differs && !j.explained;
    }
    return n;
  }

  void record(const Grid& grid, Segment s) {
    for (int64_t i = s.begin; i < s.end; ++i) {
      const double r = ref_[i], t = got_[i], p = pre_[i];
      if (!judged(r, t, p)) continue;
      ++c_.elements;
      const Judgement j = judge(grid, p, bound_[i], t);
      c_.ties += j.tie;
      if (!j.differs) continue;
      ++c_.differing;
      c_.tie_flips += j.tie;
      if (j.off_grid) {
        ++c_.off_grid;
      } else {
        const double expected = grid.round(p);
        ++(t > expected ? c_.up : c_.down);
        ++(std::fabs(t) < std::fabs(expected) ? c_.toward_zero : c_.away_from_zero);
        // The boundary t needed: between it and its neighbour toward the reference.
        const double boundary = (t + grid.at(grid.ordinal(t) + (j.steps > 0 ? -1 : 1))) / 2;
        const double needed = std::fabs(boundary - p);
        const double reach = bound_[i] > 0 ? needed / bound_[i] : std::numeric_limits<double>::infinity();
        if (reach > c_.max_reach || !c_.max_reach_at.found()) {
          c_.max_reach = reach;
          c_.max_reach_at = FlipAt{i, unravel(i, shape_), r, t, p, bound_[i], grid.scale(), j.steps, ""};
        }
        if (std::llabs(j.steps) == 1) {
          ++c_.flips;
          c_.flips_explained += j.explained;
        } else {
          ++c_.multi_step;
          c_.multi_step_explained += j.explained;
        }
      }
      if (j.explained) continue;
      if (c_.unexplained++ == 0) {
        c_.first_unexplained = FlipAt{i, unravel(i, shape_), r, t, p, bound_[i], grid.scale(), j.steps, j.why};
      }
    }
  }

  bool fits(const Grid& grid, Segment s) const {
    for (int64_t i = s.begin; i < s.end; ++i)
      if (std::isfinite(got_[i]) && !grid.contains(got_[i])) return false;
    return true;
  }

  bool all_zero(Segment s) const {
    for (int64_t i = s.begin; i < s.end; ++i)
      if (got_[i] != 0) return false;
    return true;
  }

 private:
  FlipCensus& c_;
  std::span<const int64_t> shape_;
  std::span<const double> ref_, got_, pre_, bound_;
};

void check_sizes(std::span<const double> a, const char* what, int64_t count, std::span<const int64_t> shape) {
  if (static_cast<int64_t>(a.size()) != count)
    throw std::invalid_argument(fmt::format("compare_rounded: shape {} has {} elements, {} has {}", format_shape(shape),
                                            count, what, a.size()));
}

// The bound of every element: given, or the row rule atol + atol_rms * rms(row of p) + rtol |p|,
// with the tolerance's tail bound (if any) on the bf16 dims after a row's blocks.
std::vector<double> element_bounds(const RoundedReference& reference, const Tolerance& tolerance, int64_t count,
                                   int64_t row_length) {
  if (!reference.bound.empty()) return {reference.bound.begin(), reference.bound.end()};
  if (!tolerance.pre_rounding)
    throw std::invalid_argument(
        "compare_rounded: no bound of the pre-rounding values: the tolerance row has no "
        "\"pre_rounding\" and none was given");
  const int64_t tail_begin = reference.format.block ? reference.format.quantized_dims(row_length) : row_length;
  std::vector<double> bounds(static_cast<size_t>(count));
  for (int64_t row = 0; row * row_length < count; ++row) {
    const std::span<const double> p = reference.pre_rounding.subspan(row * row_length, row_length);
    long double sum2 = 0.0L;
    int64_t finite = 0;
    for (double v : p) {
      if (!std::isfinite(v)) continue;
      sum2 += static_cast<long double>(v) * v;
      ++finite;
    }
    const double rms = finite ? static_cast<double>(std::sqrt(sum2 / finite)) : 0.0;
    for (int64_t k = 0; k < row_length; ++k) {
      const ErrorBound& b =
          k >= tail_begin && tolerance.pre_rounding_tail ? *tolerance.pre_rounding_tail : *tolerance.pre_rounding;
      bounds[static_cast<size_t>(row * row_length + k)] = b.atol + b.atol_rms * rms + b.rtol * std::fabs(p[k]);
    }
  }
  return bounds;
}

void direction_bias(FlipCensus& c) {
  struct Split {
    int64_t a, b;
    const char* a_name;
    const char* b_name;
  };
  for (const Split& s :
       {Split{c.up, c.down, "up", "down"}, Split{c.toward_zero, c.away_from_zero, "toward zero", "away from zero"}}) {
    const int64_t n = s.a + s.b;
    if (n == 0) continue;
    const int64_t minority = std::min(s.a, s.b);
    const double p = two_sided_binomial_p(n, minority);
    if (p < c.bias_p_value) {
      c.bias_p_value = p;
      c.bias_direction = s.a >= s.b ? s.a_name : s.b_name;
      c.bias_share = static_cast<double>(minority) / static_cast<double>(n);
    }
  }
}

}  // namespace

double two_sided_binomial_p(int64_t n, int64_t minority) {
  if (n <= 0 || 2 * minority >= n) return 1.0;
  // log of C(n, j) 2^-n, summed from j = minority down to 0 in log space (terms shrink going down).
  auto log_term = [n](int64_t j) {
    return std::lgamma(n + 1.0) - std::lgamma(j + 1.0) - std::lgamma(static_cast<double>(n - j) + 1.0) -
           static_cast<double>(n) * std::log(2.0);
  };
  const double top = log_term(minority);
  double sum = 0.0;  // of exp(log_term(j) - top)
  double term = 1.0;
  for (int64_t j = minority; j >= 0; --j) {
    sum += term;
    term *= static_cast<double>(j) / static_cast<double>(n - j + 1);  // C(n, j-1) / C(n, j)
    if (term < 1e-18 * sum) break;
  }
  return std::min(1.0, 2.0 * std::exp(top + std::log(sum)));
}

DenseMetrics compare_rounded(std::span<const double> ref, std::span<const double> got, std::span<const int64_t> shape,
                             const RoundedReference& reference, const Tolerance& tolerance,
                             const NonFiniteRule& nonfinite) {
  DenseMetrics m = compare_dense(ref, got, shape, tolerance, nonfinite);
  const int64_t count = element_count(shape, "compare_rounded");
  check_sizes(reference.pre_rounding, "the pre-rounding values", count, shape);
  if (!reference.bound.empty()) check_sizes(reference.bound, "the bound", count, shape);
  const int64_t row_length = shape.empty() ? 1 : shape.back();
  reference.format.check(row_length);
  const std::vector<double> bounds = element_bounds(reference, tolerance, count, row_length);

  FlipCensus c;
  c.format = reference.format.name();
  Census census(c, shape, ref, got, reference.pre_rounding, bounds);
  const std::span<const double> pre = reference.pre_rounding;

  // The reference must be the rounding of its own pre-rounding values on the reference scale.
  auto check_reference = [&](const Grid& grid, Segment s) {
    for (int64_t i = s.begin; i < s.end; ++i) {
      if (!std::isfinite(pre[i]) || !std::isfinite(ref[i]) || grid.round(pre[i]) == ref[i]) continue;
      throw std::invalid_argument(fmt::format(
          "compare_rounded: the reference at {} is {}, not the {} rounding of its pre-rounding value {} ({})",
          format_shape(unravel(i, shape)), ref[i], reference.format.name(), pre[i], grid.round(pre[i])));
    }
  };

  const int64_t rows = row_length > 0 ? count / row_length : 0;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t start = row * row_length;
    int64_t bf16_begin = start;
    if (const std::optional<ref::BlockFormat>& f = reference.format.block) {
      for (int64_t b = 0; b * f->block < reference.format.quantized_dims(row_length); ++b) {
        const Segment s{start + b * f->block, start + (b + 1) * f->block};
        double amax = 0, amax_lo = 0, amax_hi = 0;
        for (int64_t i = s.begin; i < s.end; ++i) {
          if (!std::isfinite(pre[i])) continue;
          amax = std::max(amax, std::fabs(pre[i]));
          amax_lo = std::max(amax_lo, std::fabs(pre[i]) - bounds[static_cast<size_t>(i)]);
          amax_hi = std::max(amax_hi, std::fabs(pre[i]) + bounds[static_cast<size_t>(i)]);
        }
        const double ref_scale = ref::block_scale(*f, amax, 0);
        check_reference(Grid::block(f->element, ref_scale), s);
        ++c.blocks;
        // The scales the tested amax can give (the rule is monotone in amax), the reference's first.
        std::vector<double> allowed{ref_scale};
        const double lowest = ref::block_scale(*f, amax_lo, 0), highest = ref::block_scale(*f, amax_hi, 0);
        for (double sc = lowest; sc <= highest && allowed.size() < 64; sc *= 2)
          if (sc != ref_scale) allowed.push_back(sc);
        double chosen = ref_scale;
        int64_t fewest = std::numeric_limits<int64_t>::max();
        for (double sc : allowed) {
          const Grid grid = Grid::block(f->element, sc);
          if (!census.fits(grid, s)) continue;
          const int64_t n = census.unexplained(grid, s);
          if (n < fewest) {
            fewest = n;
            chosen = sc;
          }
        }
        if (fewest == std::numeric_limits<int64_t>::max() && !census.all_zero(s)) {
          // No allowed scale fits: name the power of two the tested values do fit, if any.
          for (int k = 1; k <= 16 && fewest == std::numeric_limits<int64_t>::max(); ++k) {
            for (double sc : {std::ldexp(ref_scale, -k), std::ldexp(ref_scale, k)}) {
              if (!census.fits(Grid::block(f->element, sc), s)) continue;
              if (c.block_scales_unexplained++ == 0) {
                c.first_unexplained_scale =
                    BlockScaleAt{row,  unravel(row, shape.first(shape.size() - 1)), b, ref_scale, sc,
                                 amax, std::max(amax_hi - amax, amax - amax_lo)};
              }
              fewest = 0;
              break;
            }
          }
        }
        c.block_scales_differ += chosen != ref_scale;
        census.record(Grid::block(f->element, chosen), s);
      }
      bf16_begin = start + reference.format.quantized_dims(row_length);
    }
    const Segment tail{bf16_begin, start + row_length};
    check_reference(Grid::bf16(), tail);
    census.record(Grid::bf16(), tail);
  }
  direction_bias(c);

  if (m.status != Status::vacuous) {
    const bool unexplained = c.unexplained > 0 || c.block_scales_unexplained > 0;
    const bool biased = c.bias_p_value < kFlipBiasMaxPValue && c.bias_share < kFlipBiasMaxMinorityShare;
    for (const auto& [gate, failed] : {std::pair{"rounding", unexplained}, std::pair{"rounding bias", biased}}) {
      if (!failed) continue;
      m.failed_gates.push_back(gate);
      if (!std::isinf(m.worst_ratio)) {
        m.worst_ratio = std::numeric_limits<double>::infinity();
        m.worst_ratio_gate = gate;
      }
    }
    m.status = m.failed_gates.empty() ? Status::pass : Status::fail;
  }
  m.rounding = std::move(c);
  return m;
}

DenseMetrics check_quantizer(std::span<const double> pre_quantization, std::span<const double> quantized,
                             std::span<const int64_t> shape, const RoundingFormat& format,
                             const NonFiniteRule& nonfinite) {
  const int64_t count = element_count(shape, "check_quantizer");
  check_sizes(pre_quantization, "the pre-quantization values", count, shape);
  const int64_t row_length = shape.empty() ? 1 : shape.back();
  format.check(row_length);
  // The oracle's quantizer (reference/numerics/) on the tested side's own input.
  std::vector<double> expected(pre_quantization.begin(), pre_quantization.end());
  for (int64_t start = 0; row_length > 0 && start < count; start += row_length) {
    const std::span<double> row(expected.data() + start, static_cast<size_t>(row_length));
    int64_t tail = 0;
    if (format.block) {
      tail = format.quantized_dims(row_length);
      ref::fake_quant_row(*format.block, row.first(static_cast<size_t>(tail)));
    }
    for (double& v : row.subspan(static_cast<size_t>(tail))) v = ref::round_to(ref::Storage::bf16, v);
  }
  Tolerance exact;
  exact.pre_rounding = ErrorBound{0, 0, 0, "the tested side's own value before quantization: nothing moves it"};
  exact.reason = "a quantizer is a function of its input: equal values";
  return compare_rounded(expected, quantized, shape, RoundedReference{pre_quantization, format, {}}, exact, nonfinite);
}

}  // namespace dsv4::verify
