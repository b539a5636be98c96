// Comparators: dense metrics on hand-made tensors with hand-computed values, the non-finite and
// bitwise rules, row masks, and index-set comparison with ties.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "verify/compare/dense.h"
#include "verify/compare/index_set.h"

using namespace dsv4::verify;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tolerance tol(double atol, double rtol) {
  Tolerance t;
  t.atol = atol;
  t.rtol = rtol;
  t.reason = "test";
  return t;
}

Tolerance bitwise() {
  Tolerance t;
  t.bitwise = true;
  t.reason = "test";
  return t;
}

DenseMetrics compare1d(const std::vector<double>& ref, const std::vector<double>& got, const Tolerance& t) {
  const std::vector<int64_t> shape{static_cast<int64_t>(ref.size())};
  return compare_dense(ref, got, shape, t);
}

}  // namespace

TEST_CASE("dense: max_abs and max_rel name their coordinate in a 3-D shape, with both values") {
  // ref[i] = i/2 over shape [2,3,4]; three elements perturbed by hand.
  const std::vector<int64_t> shape{2, 3, 4};
  std::vector<double> ref(24), got(24);
  for (int i = 0; i < 24; ++i) ref[i] = got[i] = 0.5 * i;
  got[23] += 0.25;   // [1,2,3]: the largest absolute error, relative 0.25/11.5
  got[6] += 0.125;   // [0,1,2]: relative 0.125/3, the largest relative error
  got[0] += 0.0625;  // [0,0,0]: ref 0, so no relative error; judged by atol only
  const DenseMetrics m = compare_dense(ref, got, shape, tol(1.0, 0.0));
  CHECK(m.n == 24);
  CHECK(m.max_abs == 0.25);
  CHECK(m.max_abs_at.index == 23);
  CHECK(m.max_abs_at.coord == std::vector<int64_t>{1, 2, 3});
  CHECK(m.max_abs_at.ref == 11.5);
  CHECK(m.max_abs_at.got == 11.75);
  CHECK(m.max_rel == 0.125 / 3.0);  // one division, as the comparator does it
  CHECK(m.max_rel_at.coord == std::vector<int64_t>{0, 1, 2});
  CHECK(m.max_rel_at.ref == 3.0);
  CHECK(m.max_rel_at.got == 3.125);
  // Every sum below is of dyadic numbers with few bits: exact in long double and in double, so
  // the only rounding is the final division (hence the 1e-15 relative margin).
  CHECK(m.mean_abs == doctest::Approx((0.25 + 0.125 + 0.0625) / 24).epsilon(1e-15));
  const double sum_ref2 = 0.25 * (23.0 * 24.0 * 47.0 / 6.0);  // sum of (i/2)^2, i < 24 = 1081
  const double sum_diff2 = 0.25 * 0.25 + 0.125 * 0.125 + 0.0625 * 0.0625;
  CHECK(m.nmse == doctest::Approx(sum_diff2 / sum_ref2).epsilon(1e-15));
  CHECK(m.status == Status::pass);
  CHECK(m.pass_fraction == 1.0);
}

TEST_CASE("dense: cos_diff is DeepGEMM's 1 - 2 sum(ab) / sum(a^2 + b^2)") {
  // (3,4) vs (4,3): sum ab = 24, sum a^2+b^2 = 50, so 1 - 48/50 = 0.04; nmse = 2 / 25.
  DenseMetrics m = compare1d({3, 4}, {4, 3}, tol(10, 0));
  CHECK(m.cos_diff == doctest::Approx(0.04).epsilon(1e-15));  // one correctly rounded quotient
  CHECK(m.nmse == doctest::Approx(0.08).epsilon(1e-15));
  // Orthogonal vectors: 1 - 0 = 1. Identical vectors: exactly 0. Both all zero: 0 by definition.
  CHECK(compare1d({1, 0}, {0, 1}, tol(10, 0)).cos_diff == 1.0);
  CHECK(compare1d({0.1, -7, 3e5}, {0.1, -7, 3e5}, tol(0, 0)).cos_diff == 0.0);
  m = compare1d({0, 0}, {0, 0}, tol(0, 0));
  CHECK(m.cos_diff == 0.0);
  CHECK(m.nmse == 0.0);
  // A zero reference against a nonzero result: nmse has no scale to divide by and is infinite.
  m = compare1d({0, 0}, {0, 1}, tol(10, 0));
  CHECK(std::isinf(m.nmse));
  CHECK(m.cos_diff == 1.0);
  // The brief's formula computed independently, on a vector with nothing special about it.
  const std::vector<double> a{0.3, -1.7, 2.25, 0.001, -0.5}, b{0.31, -1.69, 2.2, 0.0, -0.52};
  long double ab = 0, aabb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += static_cast<long double>(a[i]) * b[i];
    aabb += static_cast<long double>(a[i]) * a[i] + static_cast<long double>(b[i]) * b[i];
  }
  const double expected = static_cast<double>(1.0L - 2.0L * ab / aabb);
  // 1 - x with x within 1e-3 of 1: the long double cancellation loses about 10 of 64 bits, far
  // below the 1e-12 relative margin.
  CHECK(compare1d(a, b, tol(10, 0)).cos_diff == doctest::Approx(expected).epsilon(1e-12));
}

TEST_CASE("dense: the elementwise rule |got - ref| <= atol + rtol |ref| and the pass fraction") {
  // Element 1: |2.5 - 2| = 0.5 > 0.1 + 0.1 * 2 = 0.3, the only failure.
  const DenseMetrics m = compare1d({1, 2, 3, 4}, {1, 2.5, 3, 4.25}, tol(0.1, 0.1));
  CHECK(m.elements_failed == 1);
  CHECK(m.pass_fraction == 0.75);
  CHECK(m.status == Status::fail);
  CHECK(m.failed_gates == std::vector<std::string>{"elementwise"});
  // The rule is asymmetric, as torch's: rtol scales the reference. |1 - 2| = 1 <= 0.5 * 2 passes with
  // ref 2, but not with ref 1.
  CHECK(compare1d({2}, {1}, tol(0, 0.5)).status == Status::pass);
  CHECK(compare1d({1}, {2}, tol(0, 0.5)).status == Status::fail);
}

TEST_CASE("dense: atol_rms adds an absolute tolerance in units of the reference's RMS") {
  // ref (3, 4, 0, 0): rms = sqrt(25 / 4) = 2.5. atol_rms 0.1 gives atol 0.25.
  Tolerance t = tol(0, 0);
  t.atol_rms = 0.1;
  DenseMetrics m = compare1d({3, 4, 0, 0}, {3, 4, 0.25, 0}, t);
  CHECK(m.ref_rms == 2.5);
  CHECK(m.atol == 0.25);
  CHECK(m.status == Status::pass);
  m = compare1d({3, 4, 0, 0}, {3, 4, 0.2500001, 0}, t);
  CHECK(m.status == Status::fail);
}

TEST_CASE("dense: the minimum tolerance to pass, each term alone, passes and the next smaller double fails") {
  // Polygraphy's "minimum required tolerance": atol with rtol 0, rtol with atol 0, whatever the
  // row's own terms are. |d| = 0.25, 0.5, 0, 0.0625: min atol = 0.5. The ref-0 element is off, so
  // no rtol alone passes it: +inf.
  const std::vector<double> ref{1, -2, 0.5, 0}, got{1.25, -2.5, 0.5, 0.0625};
  DenseMetrics m = compare1d(ref, got, tol(0.0625, 0.1));
  CHECK(m.min_atol_to_pass == 0.5);
  CHECK(compare1d(ref, got, tol(m.min_atol_to_pass, 0)).status == Status::pass);
  CHECK(compare1d(ref, got, tol(std::nextafter(m.min_atol_to_pass, 0.0), 0)).status == Status::fail);
  CHECK(std::isinf(m.min_rtol_to_pass));
  // Without it: |d| / |ref| = 0.25, 0.25, 0, so min rtol = 0.25 (dyadic: exact).
  const std::vector<double> ref3{1, -2, 0.5}, got3{1.25, -2.5, 0.5};
  m = compare1d(ref3, got3, tol(0.0625, 0.1));
  CHECK(m.min_rtol_to_pass == 0.25);
  CHECK(compare1d(ref3, got3, tol(0, m.min_rtol_to_pass)).status == Status::pass);
  CHECK(compare1d(ref3, got3, tol(0, std::nextafter(m.min_rtol_to_pass, 0.0))).status == Status::fail);

  // The same on values that are not dyadic, where the arithmetic of the rule rounds.
  std::vector<double> r(200), g(200);
  uint64_t state = 12345;
  const auto uniform = [&] {  // a fixed LCG: the same numbers on every host
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  };
  for (size_t i = 0; i < r.size(); ++i) {
    r[i] = (uniform() - 0.5) * 10.0;
    g[i] = r[i] * (1.0 + (uniform() - 0.5) * 1e-3) + (uniform() - 0.5) * 1e-6;
  }
  const std::vector<int64_t> shape{200};
  m = compare_dense(r, g, shape, tol(1e-7, 1.0 / 3.0e4));
  CHECK(m.min_atol_to_pass == m.max_abs);  // atol alone: the largest difference itself
  CHECK(compare_dense(r, g, shape, tol(m.min_atol_to_pass, 0)).status == Status::pass);
  CHECK(compare_dense(r, g, shape, tol(std::nextafter(m.min_atol_to_pass, 0.0), 0)).status == Status::fail);
  CHECK(compare_dense(r, g, shape, tol(0, m.min_rtol_to_pass)).status == Status::pass);
  CHECK(compare_dense(r, g, shape, tol(0, std::nextafter(m.min_rtol_to_pass, 0.0))).status == Status::fail);
}

TEST_CASE("dense: the minimum rtol is found when it is far from the first estimate") {
  // |ref| 1e-20 and |d| = 1 + 2^-52: rtol near 1e20, where the product rtol * 1e-20 rounds; the
  // search bisects over the doubles, so it ends however far the estimate is.
  const double one_up = 1.0 + 0x1p-52;
  DenseMetrics m = compare1d({1e-20}, {1e-20 + one_up}, tol(1.0, 0));
  CHECK(compare1d({1e-20}, {1e-20 + one_up}, tol(0, m.min_rtol_to_pass)).status == Status::pass);
  CHECK(compare1d({1e-20}, {1e-20 + one_up}, tol(0, std::nextafter(m.min_rtol_to_pass, 0.0))).status == Status::fail);
  // atol alone is the difference itself, exactly: 1.5 + 2^-52 - 0.5 = 1 + 2^-52.
  const double got = 1.5 + 0x1p-52;
  m = compare1d({0.5}, {got}, tol(0, 2.0));
  CHECK(m.min_atol_to_pass == one_up);
  CHECK(compare1d({0.5}, {got}, tol(m.min_atol_to_pass, 0)).status == Status::pass);
  CHECK(compare1d({0.5}, {got}, tol(std::nextafter(m.min_atol_to_pass, 0.0), 0)).status == Status::fail);
}

TEST_CASE("dense: non-finite values must sit at the same positions, and only the stage's own may match") {
  // NaN against NaN at the same place: DeepSeek's tensors never hold NaN, so by default the pair is
  // a failure, not a match (an all-NaN pair proves nothing).
  DenseMetrics m = compare1d({kNaN, 1.0}, {kNaN, 1.0}, tol(0, 0));
  CHECK(m.status == Status::fail);
  CHECK(m.nonfinite_not_allowed == 1);
  CHECK(m.nonfinite_matched == 0);
  CHECK(m.failed_gates == std::vector<std::string>{"nonfinite"});
  CHECK(m.first_nonfinite_mismatch.coord == std::vector<int64_t>{0});
  CHECK(compare1d({kNaN, kNaN}, {kNaN, kNaN}, tol(0, 0)).status == Status::fail);
  // Where a format holds NaN, the pair matches, is left out of the metrics, and passes.
  const NonFiniteRule nan_allowed{false, false, true};
  const std::vector<double> a{kNaN, 1.0};
  const std::vector<int64_t> two{2};
  m = compare_dense(a, a, two, tol(0, 0), nan_allowed);
  CHECK(m.status == Status::pass);
  CHECK(m.nonfinite_matched == 1);
  CHECK(m.n_finite == 1);
  CHECK(m.max_abs == 0.0);
  // NaN against a number fails, whatever the tolerance.
  m = compare1d({1.0, kNaN}, {1.0, 1.0}, tol(1e300, 1e300));
  CHECK(m.status == Status::fail);
  CHECK(m.nonfinite_mismatches == 1);
  CHECK(m.failed_gates == std::vector<std::string>{"nonfinite"});
  CHECK(m.first_nonfinite_mismatch.coord == std::vector<int64_t>{1});
  CHECK(std::isnan(m.first_nonfinite_mismatch.ref));
  CHECK(m.first_nonfinite_mismatch.got == 1.0);
  CHECK(m.pass_fraction == 0.5);
  // A -inf mask that moved: both positions mismatch, even where -inf is allowed.
  const NonFiniteRule masks = NonFiniteRule::of(dsv4::ref::StageValues::finite_or_minus_inf);
  const std::vector<double> moved_ref{-kInf, 0.5, 0.25}, moved_got{0.5, -kInf, 0.25};
  const std::vector<int64_t> three{3};
  m = compare_dense(moved_ref, moved_got, three, tol(1e300, 0), masks);
  CHECK(m.nonfinite_mismatches == 2);
  CHECK(m.first_nonfinite_mismatch.index == 0);
  // -inf against +inf is a mismatch; -inf against -inf matches where the stage holds -inf (masked
  // scores, empty state slots), and nowhere else.
  CHECK(compare1d({-kInf}, {kInf}, tol(0, 0)).nonfinite_mismatches == 1);
  const std::vector<double> masked{-kInf, 2.0};
  const std::vector<int64_t> pair{2};
  CHECK(compare_dense(masked, masked, pair, bitwise(), masks).status == Status::pass);
  CHECK(compare_dense(masked, masked, pair, bitwise()).status == Status::fail);
  CHECK(compare_dense(masked, masked, pair, bitwise()).nonfinite_not_allowed == 1);
  // +inf is never a value of DeepSeek's stages, even of those that hold -inf.
  const std::vector<double> plus{kInf, 2.0};
  CHECK(compare_dense(plus, plus, pair, tol(0, 0), masks).status == Status::fail);
  CHECK(NonFiniteRule::of(dsv4::ref::StageValues::finite).describe() == "none");
  CHECK(masks.describe() == "-inf");
}

TEST_CASE("dense: the bitwise gate detects a one-ulp change and names it") {
  const double bf16_one_ulp_up = 1.0 + 1.0 / 128.0;  // the bf16 neighbour of 1 above it
  DenseMetrics m = compare1d({0.5, 1.0, 2.0}, {0.5, bf16_one_ulp_up, 2.0}, bitwise());
  CHECK(m.status == Status::fail);
  CHECK(m.failed_gates == std::vector<std::string>{"bitwise"});
  CHECK(m.bitwise_mismatches == 1);
  CHECK(m.first_bitwise_mismatch.coord == std::vector<int64_t>{1});
  CHECK(m.first_bitwise_mismatch.got == bf16_one_ulp_up);
  // The same change passes a one-bf16-ulp relative tolerance (2^-7 of the reference).
  CHECK(compare1d({0.5, 1.0, 2.0}, {0.5, bf16_one_ulp_up, 2.0}, tol(0, 1.0 / 128.0)).status == Status::pass);
  // One double ulp is caught too, and so is the sign of zero; equal bits pass.
  CHECK(compare1d({2.0}, {std::nextafter(2.0, 3.0)}, bitwise()).status == Status::fail);
  CHECK(compare1d({0.0}, {-0.0}, bitwise()).status == Status::fail);
  CHECK(compare1d({0.0}, {-0.0}, tol(0, 0)).status == Status::pass);
  CHECK(compare1d({0.1, -3.0}, {0.1, -3.0}, bitwise()).status == Status::pass);
}

TEST_CASE("dense: cos_diff and nmse gates apply when the row sets them") {
  Tolerance t = tol(2, 0);  // every element of (3,4) vs (4,3) is within atol 2
  t.max_cos_diff = 0.03;    // cos_diff is 0.04
  DenseMetrics m = compare1d({3, 4}, {4, 3}, t);
  CHECK(m.failed_gates == std::vector<std::string>{"cos_diff"});
  t.max_cos_diff = 0.04;  // the limit is inclusive; 2/50 rounds to the double nearest 0.04
  CHECK(compare1d({3, 4}, {4, 3}, t).status == Status::pass);
  t.max_nmse = 0.07;  // nmse is 0.08
  CHECK(compare1d({3, 4}, {4, 3}, t).failed_gates == std::vector<std::string>{"nmse"});
}

TEST_CASE("dense masked: rows outside the mask are not compared and coordinates stay in the full shape") {
  // shape [2,2,3]: 4 rows of 3. Rows 1 and 3 are don't-care and hold garbage.
  const std::vector<int64_t> shape{2, 2, 3};
  std::vector<double> ref(12, 1.0), got(12, 1.0);
  got[3] = kNaN;    // row 1
  got[10] = 100.0;  // row 3
  got[8] = 1.5;     // row 2, element [1,0,2]: compared
  const std::vector<uint8_t> mask{1, 0, 1, 0};
  const DenseMetrics m = compare_dense_masked(ref, got, shape, mask, tol(0, 0.25));
  CHECK(m.n == 6);
  CHECK(m.nonfinite_mismatches == 0);
  CHECK(m.max_abs == 0.5);
  CHECK(m.max_abs_at.coord == std::vector<int64_t>{1, 0, 2});
  CHECK(m.status == Status::fail);
  const std::vector<uint8_t> all{1, 1, 1, 1};
  CHECK(compare_dense_masked(ref, got, shape, all, tol(0, 0.25)).nonfinite_mismatches == 1);
  const std::vector<uint8_t> wrong{1, 0, 1};
  CHECK_THROWS_AS(compare_dense_masked(ref, got, shape, wrong, tol(0, 0)), std::invalid_argument);
}

TEST_CASE("dense: sizes that do not match the shape are refused") {
  const std::vector<int64_t> shape{2, 2};
  const std::vector<double> four(4, 0.0), three(3, 0.0);
  CHECK_THROWS_AS(compare_dense(four, three, shape, tol(0, 0)), std::invalid_argument);
  CHECK_THROWS_AS(compare_dense(three, three, shape, tol(0, 0)), std::invalid_argument);
  const std::vector<int64_t> negative{-1, 2};
  CHECK_THROWS_AS(compare_dense(four, four, negative, tol(0, 0)), std::invalid_argument);
}

namespace {

IndexRows rows_of(const std::vector<int64_t>& v, int64_t rows) {
  return {v, rows, rows ? static_cast<int64_t>(v.size()) / rows : 0};
}

ScoreRows scores_of(const std::vector<double>& v, int64_t rows) {
  return {v, rows, rows ? static_cast<int64_t>(v.size()) / rows : 0};
}

}  // namespace

TEST_CASE("index sets: order does not matter") {
  const std::vector<int64_t> ref{3, 1, 2, -1}, got{2, -1, 3, 1};
  const IndexSetMetrics m = compare_index_sets(rows_of(ref, 1), rows_of(got, 1), {}, {}, 0);
  CHECK(m.status == Status::pass);
  CHECK(m.rows_exact == 1);
  CHECK(m.mean_recall == 1.0);
}

TEST_CASE("index sets: a swap at an exact tie passes, a swap far from the threshold fails") {
  // Scores of one row; k = 2 picks. The 2nd largest score (the threshold) is 0.5, held by 1 and 2.
  const std::vector<double> scores{0.9, 0.5, 0.5, 0.1};
  const std::vector<int64_t> ref{0, 1};
  const std::vector<int64_t> tie_swap{2, 0};
  IndexSetMetrics m = compare_index_sets(rows_of(ref, 1), rows_of(tie_swap, 1), scores_of(scores, 1), {}, 0);
  CHECK(m.status == Status::pass);
  CHECK(m.rows_tie_equivalent == 1);
  CHECK(m.mean_recall == 0.5);  // recall counts indices, ties or not

  const std::vector<int64_t> far_swap{0, 3};  // index 3 scores 0.1, 0.4 below the threshold
  m = compare_index_sets(rows_of(ref, 1), rows_of(far_swap, 1), scores_of(scores, 1), {1e-3, 1.0 / 128}, 0);
  CHECK(m.status == Status::fail);
  CHECK(m.rows_failed == 1);
  CHECK(m.first_failure.row == 0);
  CHECK(m.first_failure.missing == std::vector<int64_t>{1});
  CHECK(m.first_failure.extra == std::vector<int64_t>{3});
  CHECK(m.first_failure.missing_scores == std::vector<double>{0.5});
  CHECK(m.first_failure.extra_scores == std::vector<double>{0.1});
  CHECK(m.first_failure.threshold == 0.5);
}

TEST_CASE("index sets: a near-tie counts only inside the score tolerance, with the offset applied") {
  // Indices carry offset 128 (decode: compressed rows after the 128 ring slots): column = index - 128.
  const std::vector<double> scores{0.9, 0.5, 0.498, 0.1};
  const std::vector<int64_t> ref{128, 129}, got{128, 130};
  // |0.498 - 0.5| = 0.002 <= 2^-7 * 0.5 = 0.0039: inside one bf16 ulp of the threshold.
  CHECK(compare_index_sets(rows_of(ref, 1), rows_of(got, 1), scores_of(scores, 1), {0, 1.0 / 128}, 128).status ==
        Status::pass);
  CHECK(compare_index_sets(rows_of(ref, 1), rows_of(got, 1), scores_of(scores, 1), {0, 0}, 128).status == Status::fail);
  // Indices below the offset (window entries of topk_idxs) have no score and must match exactly.
  const std::vector<int64_t> ref_w{5, 128}, got_w{6, 128};
  const IndexSetMetrics m =
      compare_index_sets(rows_of(ref_w, 1), rows_of(got_w, 1), scores_of(scores, 1), {1e9, 1e9}, 128);
  CHECK(m.status == Status::fail);
  CHECK(std::isnan(m.first_failure.missing_scores[0]));
}

TEST_CASE("index sets: the count of -1 padding must match") {
  const std::vector<int64_t> ref{0, 1, -1}, got{0, 1, 2};
  const IndexSetMetrics m = compare_index_sets(rows_of(ref, 1), rows_of(got, 1), {}, {}, 0);
  CHECK(m.status == Status::fail);
  CHECK(m.padding_mismatches == 1);
  CHECK(m.first_failure.ref_valid == 2);
  CHECK(m.first_failure.got_valid == 3);
  CHECK(m.first_failure.reason == "valid count 2 vs 3");
}

TEST_CASE("index sets: recall per row, mean and worst, and without scores a difference fails") {
  // Row 0 exact (recall 1); row 1 misses one of 4 (recall 3/4). Mean 7/8, worst 3/4 at row 1.
  const std::vector<int64_t> ref{0, 1, 2, 3, 4, 5, 6, 7}, got{3, 2, 1, 0, 4, 5, 6, 9};
  const IndexSetMetrics m = compare_index_sets(rows_of(ref, 2), rows_of(got, 2), {}, {}, 0);
  CHECK(m.mean_recall == 0.875);
  CHECK(m.worst_recall == 0.75);
  CHECK(m.worst_recall_row == 1);
  CHECK(m.rows_exact == 1);
  CHECK(m.rows_failed == 1);
  CHECK(m.first_failure.row == 1);
}

TEST_CASE("index sets: bad tested entries fail the row and a bad reference is refused") {
  const std::vector<int64_t> ref{0, 1, -1};
  const std::vector<int64_t> repeated{0, 0, 1}, below{0, 1, -2};
  IndexSetMetrics m = compare_index_sets(rows_of(ref, 1), rows_of(repeated, 1), {}, {}, 0);
  CHECK(m.status == Status::fail);
  CHECK(m.invalid_entries == 1);
  m = compare_index_sets(rows_of(ref, 1), rows_of(below, 1), {}, {}, 0);
  CHECK(m.status == Status::fail);
  CHECK(m.invalid_entries == 1);
  CHECK_THROWS_AS(compare_index_sets(rows_of(repeated, 1), rows_of(ref, 1), {}, {}, 0), std::invalid_argument);
  // Rows must agree; widths may differ (k' != k) as long as the valid entries match.
  const std::vector<int64_t> wider{1, 0, -1, -1};
  CHECK(compare_index_sets(rows_of(ref, 1), rows_of(wider, 1), {}, {}, 0).status == Status::pass);
  CHECK_THROWS_AS(compare_index_sets(rows_of(ref, 1), rows_of(wider, 2), {}, {}, 0), std::invalid_argument);
}

TEST_CASE("dense: per-row and per-token metrics name the worst group, and the worst row decides") {
  // [2,3,64]: 6 rows of 64 repeating (1, 1.25, 1.5, 1.75). Row [1,2] is scaled by 1.5; every other
  // row is exact. Over the whole tensor the error is diluted by the other five rows; in its row it
  // is not.
  const std::vector<int64_t> shape{2, 3, 64};
  std::vector<double> ref(384), got(384);
  for (int i = 0; i < 384; ++i) ref[i] = got[i] = 1.0 + 0.25 * (i % 4);
  for (int i = 320; i < 384; ++i) got[i] = 1.5 * ref[i];
  Tolerance t = tol(10, 0);  // every element passes the elementwise rule
  t.max_cos_diff = 0.02;
  DenseMetrics m = compare_dense(ref, got, shape, t);
  // The row's cos_diff: sum (0.5 r)^2 / sum (r^2 + 2.25 r^2) = 0.25 / 3.25 = 1/13.
  CHECK(m.rows.grouping == "row");
  CHECK(m.rows.groups == 6);
  CHECK(m.rows.gated_groups == 6);
  CHECK(m.rows.group_size == 64);
  CHECK(m.rows.cos_diff == doctest::Approx(1.0 / 13).epsilon(1e-15));
  CHECK(m.rows.cos_diff_at == std::vector<int64_t>{1, 2});
  CHECK(m.rows.nmse == doctest::Approx(0.25).epsilon(1e-15));
  CHECK(m.rows.nmse_at == std::vector<int64_t>{1, 2});
  // Over the tensor: 0.25 / (5 * 2 + 3.25), about 1/53.
  CHECK(m.cos_diff == doctest::Approx(0.25 / 13.25).epsilon(1e-15));
  CHECK(m.failed_gates == std::vector<std::string>{"row cos_diff"});
  // The largest error relative to its row's RMS: 0.5 * 1.75 / rms(1, 1.25, 1.5, 1.75).
  const double row_rms = std::sqrt((1.0 + 1.5625 + 2.25 + 3.0625) / 4);
  CHECK(m.rows.max_abs_over_rms == doctest::Approx(0.875 / row_rms).epsilon(1e-15));
  CHECK(m.rows.max_abs_over_rms_at.coord == std::vector<int64_t>{1, 2, 3});
  CHECK_FALSE(m.tokens.has_value());  // three axes: a row is a token
  CHECK(m.worst_ratio_gate == "row cos_diff");
  CHECK(m.worst_ratio == doctest::Approx((1.0 / 13) / 0.02).epsilon(1e-12));
  // Rows of fewer than 64 values are reported but not gated: the ceiling assumes rare flips.
  const std::vector<int64_t> short_rows{2, 3, 4};
  const std::vector<double> r24(ref.begin(), ref.begin() + 24);
  std::vector<double> g24 = r24;
  for (int i = 20; i < 24; ++i) g24[i] *= 1.5;
  m = compare_dense(r24, g24, short_rows, t);
  CHECK(m.rows.gated_groups == 0);
  CHECK(m.rows.cos_diff == 0.0);  // no group large enough to be gated
  CHECK(m.rows.max_abs_over_rms > 0.4);
  CHECK(m.failed_gates.empty());

  // Four axes [b, s, H, d]: rows are heads, tokens are (b, s). One head of token [0,1] corrupted.
  const std::vector<int64_t> heads{1, 2, 3, 64};  // 2 tokens of 3 heads of 64
  std::vector<double> r4(384, 1.0), g4(384, 1.0);
  for (int i = 256; i < 320; ++i) g4[i] = 2.0;  // token [0,1], head 1
  t.max_cos_diff = 1.0;
  t.max_nmse = 0.5;
  const DenseMetrics h = compare_dense(r4, g4, heads, t);
  REQUIRE(h.tokens.has_value());
  CHECK(h.tokens->groups == 2);
  CHECK(h.tokens->nmse_at == std::vector<int64_t>{0, 1});
  CHECK(h.tokens->nmse == doctest::Approx(1.0 / 3).epsilon(1e-15));  // 64 of 192 elements off by 1
  CHECK(h.rows.nmse_at == std::vector<int64_t>{0, 1, 1});
  CHECK(h.rows.nmse == 1.0);
  CHECK(h.failed_gates == std::vector<std::string>{"row nmse"});  // the head; token 1/3 and tensor 1/6 pass
}

TEST_CASE("dense: atol_rms is in units of the row's RMS, so a small row keeps a small tolerance") {
  // Two rows: (100, -100, 100, -100) and (0.01, -0.01, 0.01, -0.01). The small row zeroed is off
  // by 0.01 per element: far inside atol_rms times the tensor's RMS (~70), far outside the row's.
  const std::vector<int64_t> shape{2, 4};
  const std::vector<double> ref{100, -100, 100, -100, 0.01, -0.01, 0.01, -0.01};
  std::vector<double> got = ref;
  for (int i = 4; i < 8; ++i) got[i] = 0;
  Tolerance t = tol(0, 0);
  t.atol_rms = 0.0625;
  const DenseMetrics m = compare_dense(ref, got, shape, t);
  CHECK(m.status == Status::fail);
  CHECK(m.elements_failed == 4);
  CHECK(m.worst_ratio_at.coord == std::vector<int64_t>{1, 0});
  CHECK(m.atol == doctest::Approx(0.0625 * 0.01).epsilon(1e-12));  // the atol of that element's row
  CHECK(m.worst_ratio == doctest::Approx(16.0).epsilon(1e-12));
  // The same change within atol_rms of the small row's own scale passes.
  for (int i = 4; i < 8; ++i) got[i] = ref[i] * (1 + 0.05);
  CHECK(compare_dense(ref, got, shape, t).status == Status::pass);
}

TEST_CASE("dense: worst_ratio is measured / allowed of the closest gate") {
  // |d| = 0.05 against atol 0.1: half way to failing, elementwise.
  DenseMetrics m = compare1d({1, 2}, {1.05, 2}, tol(0.1, 0));
  CHECK(m.status == Status::pass);
  CHECK(m.worst_ratio == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(m.worst_ratio_gate == "elementwise");
  CHECK(m.worst_ratio_at.coord == std::vector<int64_t>{0});
  // A non-finite failure is infinitely far.
  m = compare1d({1, kNaN}, {1, 1}, tol(1, 0));
  CHECK(std::isinf(m.worst_ratio));
  CHECK(m.worst_ratio_gate == "nonfinite");
  // Equal tensors: 0.
  CHECK(compare1d({1, 2}, {1, 2}, tol(0, 0)).worst_ratio == 0.0);
}

TEST_CASE("dense and index sets: a comparison of nothing is VACUOUS, never PASS") {
  const std::vector<int64_t> empty_rows{2, 0, 4};
  const std::vector<double> none;
  DenseMetrics m = compare_dense(none, none, empty_rows, tol(0, 0));
  CHECK(m.status == Status::vacuous);
  CHECK(m.n == 0);
  CHECK(m.failed_gates.empty());
  CHECK(to_string(m.status) == "VACUOUS");
  // Every row masked out: nothing compared either.
  const std::vector<int64_t> shape{2, 2};
  const std::vector<double> four{1, 2, 3, 4}, other{9, 9, 9, 9};
  const std::vector<uint8_t> no_rows{0, 0};
  CHECK(compare_dense_masked(four, other, shape, no_rows, tol(0, 0)).status == Status::vacuous);
  // Index sets with no entries on either side.
  const std::vector<int64_t> no_indices;
  CHECK(compare_index_sets({no_indices, 0, 0}, {no_indices, 0, 0}, {}, {}, 0).status == Status::vacuous);
  CHECK(compare_index_sets({no_indices, 3, 0}, {no_indices, 3, 0}, {}, {}, 0).status == Status::vacuous);
  // All -1 padding is a comparison (the counts of valid entries must agree), not a vacuous one.
  const std::vector<int64_t> padding{-1, -1};
  CHECK(compare_index_sets({padding, 1, 2}, {padding, 1, 2}, {}, {}, 0).status == Status::pass);
}

TEST_CASE("index sets: worst_ratio is the farthest swap's distance from the threshold in tie windows") {
  // Threshold 0.5 (k = 2 of 0.9, 0.5, 0.498, 0.1); swapping 1 for 2 moves by 0.002 against a window
  // of 2^-7 * 0.5: ratio 0.002 / 0.00390625 = 0.512.
  const std::vector<double> scores{0.9, 0.5, 0.498, 0.1};
  const std::vector<int64_t> ref{0, 1}, got{0, 2};
  IndexSetMetrics m = compare_index_sets(rows_of(ref, 1), rows_of(got, 1), scores_of(scores, 1), {0, 1.0 / 128}, 0);
  CHECK(m.status == Status::pass);
  CHECK(m.worst_ratio == doctest::Approx(0.002 / (0.5 / 128)).epsilon(1e-12));
  // A failing row of another kind (valid counts differ) is infinitely far.
  const std::vector<int64_t> fewer{0, -1};
  m = compare_index_sets(rows_of(ref, 1), rows_of(fewer, 1), scores_of(scores, 1), {0, 1.0 / 128}, 0);
  CHECK(std::isinf(m.worst_ratio));
}
