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
  got[23] += 0.25;    // [1,2,3]: the largest absolute error, relative 0.25/11.5
  got[6] += 0.125;    // [0,1,2]: relative 0.125/3, the largest relative error
  got[0] += 0.0625;   // [0,0,0]: ref 0, so no relative error; judged by atol only
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

TEST_CASE("dense: the minimum tolerance to pass passes, and the next smaller double fails") {
  // rtol 0.1: per element |d| - 0.1 |ref| = 0.15, 0.3, 0, 0.0625, so min atol = 0.3.
  const std::vector<double> ref{1, -2, 0.5, 0}, got{1.25, -2.5, 0.5, 0.0625};
  DenseMetrics m = compare1d(ref, got, tol(0, 0.1));
  CHECK(m.min_atol_to_pass == doctest::Approx(0.3).epsilon(1e-15));
  CHECK(compare1d(ref, got, tol(m.min_atol_to_pass, 0.1)).status == Status::pass);
  CHECK(compare1d(ref, got, tol(std::nextafter(m.min_atol_to_pass, 0.0), 0.1)).status == Status::fail);
  // atol 0.0625: the ref-0 element needs 0.0625 <= atol (it passes); the others need rtol
  // (0.25 - 0.0625) / 1 = 0.1875 and (0.5 - 0.0625) / 2 = 0.21875.
  m = compare1d(ref, got, tol(0.0625, 0));
  CHECK(m.min_rtol_to_pass == 0.21875);  // dyadic: exact
  CHECK(compare1d(ref, got, tol(0.0625, m.min_rtol_to_pass)).status == Status::pass);
  CHECK(compare1d(ref, got, tol(0.0625, std::nextafter(m.min_rtol_to_pass, 0.0))).status == Status::fail);
  // With atol 0.05 the ref-0 element (off by 0.0625) fails for every rtol.
  CHECK(std::isinf(compare1d(ref, got, tol(0.05, 0)).min_rtol_to_pass));

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
  m = compare_dense(r, g, shape, tol(0, 1.0 / 3.0e4));
  CHECK(compare_dense(r, g, shape, tol(m.min_atol_to_pass, 1.0 / 3.0e4)).status == Status::pass);
  CHECK(compare_dense(r, g, shape, tol(std::nextafter(m.min_atol_to_pass, 0.0), 1.0 / 3.0e4)).status ==
        Status::fail);
  m = compare_dense(r, g, shape, tol(1e-7, 0));
  CHECK(compare_dense(r, g, shape, tol(1e-7, m.min_rtol_to_pass)).status == Status::pass);
  CHECK(compare_dense(r, g, shape, tol(1e-7, std::nextafter(m.min_rtol_to_pass, 0.0))).status == Status::fail);
}

TEST_CASE("dense: the minimum tolerance is found when one term of atol + rtol |ref| swamps the other") {
  // atol 1 and |ref| 1e-20: rtol * 1e-20 must exceed 2^-53 for 1 + rtol * 1e-20 to round up to
  // 1 + 2^-52; about 2^40 doubles lie between the first estimate and the answer, so a search that
  // steps one double at a time would not end.
  const double one_up = 1.0 + 0x1p-52;
  DenseMetrics m = compare1d({1e-20}, {1e-20 + one_up}, tol(1.0, 0));
  CHECK(compare1d({1e-20}, {1e-20 + one_up}, tol(1.0, m.min_rtol_to_pass)).status == Status::pass);
  CHECK(compare1d({1e-20}, {1e-20 + one_up}, tol(1.0, std::nextafter(m.min_rtol_to_pass, 0.0))).status ==
        Status::fail);
  // rtol * |ref| = 2 * 0.5 = 1 and |got - ref| = 1 + 2^-52 (1.5 + 2^-52 is a double): atol must
  // exceed 2^-53, and the first estimate is 2^-52, 2^52 doubles above it.
  const double got = 1.5 + 0x1p-52;
  m = compare1d({0.5}, {got}, tol(0, 2.0));
  CHECK(m.min_atol_to_pass == std::nextafter(0x1p-53, 1.0));  // 1 + 2^-53 ties to even, down to 1
  CHECK(compare1d({0.5}, {got}, tol(m.min_atol_to_pass, 2.0)).status == Status::pass);
  CHECK(compare1d({0.5}, {got}, tol(std::nextafter(m.min_atol_to_pass, 0.0), 2.0)).status == Status::fail);
}

TEST_CASE("dense: non-finite values must sit at the same positions, and are then left out") {
  // NaN against NaN at the same place: matched, excluded from the metrics, the stage passes.
  DenseMetrics m = compare1d({kNaN, 1.0}, {kNaN, 1.0}, tol(0, 0));
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
  // A -inf mask that moved: both positions mismatch.
  m = compare1d({-kInf, 0.5, 0.25}, {0.5, -kInf, 0.25}, tol(1e300, 0));
  CHECK(m.nonfinite_mismatches == 2);
  CHECK(m.first_nonfinite_mismatch.index == 0);
  // -inf against +inf is a mismatch; -inf against -inf is not.
  CHECK(compare1d({-kInf}, {kInf}, tol(0, 0)).nonfinite_mismatches == 1);
  CHECK(compare1d({-kInf, 2.0}, {-kInf, 2.0}, bitwise()).status == Status::pass);
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
  t.max_cos_diff = 0.04;    // the limit is inclusive; 2/50 rounds to the double nearest 0.04
  CHECK(compare1d({3, 4}, {4, 3}, t).status == Status::pass);
  t.max_nmse = 0.07;        // nmse is 0.08
  CHECK(compare1d({3, 4}, {4, 3}, t).failed_gates == std::vector<std::string>{"nmse"});
}

TEST_CASE("dense masked: rows outside the mask are not compared and coordinates stay in the full shape") {
  // shape [2,2,3]: 4 rows of 3. Rows 1 and 3 are don't-care and hold garbage.
  const std::vector<int64_t> shape{2, 2, 3};
  std::vector<double> ref(12, 1.0), got(12, 1.0);
  got[3] = kNaN;     // row 1
  got[10] = 100.0;   // row 3
  got[8] = 1.5;      // row 2, element [1,0,2]: compared
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
  CHECK(compare_index_sets(rows_of(ref, 1), rows_of(got, 1), scores_of(scores, 1), {0, 0}, 128).status ==
        Status::fail);
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
