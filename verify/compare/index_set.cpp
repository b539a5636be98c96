#include "verify/compare/index_set.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

namespace dsv4::verify {

namespace {

void check_size(const std::string& what, size_t size, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0 || static_cast<int64_t>(size) != rows * cols) {
    throw std::invalid_argument("compare_index_sets: " + what + " holds " + std::to_string(size) +
                                " values, expected rows x cols = " + std::to_string(rows) + " x " +
                                std::to_string(cols));
  }
}

// The valid (>= 0) entries of one row, ascending, and how many entries break the rules: negative
// but not -1, or repeated.
struct RowSet {
  std::vector<int64_t> valid;
  int64_t invalid = 0;
};

RowSet row_set(std::span<const int64_t> row) {
  RowSet set;
  for (int64_t v : row) {
    if (v >= 0) {
      set.valid.push_back(v);
    } else if (v != -1) {
      ++set.invalid;
    }
  }
  std::sort(set.valid.begin(), set.valid.end());
  const auto repeated = std::unique(set.valid.begin(), set.valid.end());
  set.invalid += set.valid.end() - repeated;
  set.valid.erase(repeated, set.valid.end());
  return set;
}

// The k-th largest score of a row (k >= 1), NaN ordered below every number.
double kth_largest(std::span<const double> row, int64_t k) {
  std::vector<double> sorted(row.begin(), row.end());
  for (double& s : sorted) {
    if (std::isnan(s)) s = -std::numeric_limits<double>::infinity();
  }
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<>());
  return sorted[static_cast<size_t>(k - 1)];
}

bool at_threshold(double score, double threshold, const ScoreTolerance& tol) {
  if (std::isnan(score)) return false;
  return score == threshold || std::fabs(score - threshold) <= tol.atol + tol.rtol * std::fabs(threshold);
}

// How far a swapped index's score is from the threshold, in units of the tie window (<= 1: a tie).
double window_ratio(double score, double threshold, const ScoreTolerance& tol) {
  if (score == threshold) return 0.0;
  const double distance = std::fabs(score - threshold), window = tol.atol + tol.rtol * std::fabs(threshold);
  if (std::isnan(distance)) return std::numeric_limits<double>::infinity();
  return window > 0 ? distance / window : std::numeric_limits<double>::infinity();
}

}  // namespace

IndexSetMetrics compare_index_sets(const IndexRows& ref, const IndexRows& got, const ScoreRows& ref_scores,
                                   const ScoreTolerance& tolerance, int64_t offset) {
  check_size("the reference", ref.values.size(), ref.rows, ref.cols);
  check_size("the tested indices", got.values.size(), got.rows, got.cols);
  check_size("the reference scores", ref_scores.values.size(), ref_scores.rows, ref_scores.cols);
  if (got.rows != ref.rows) {
    throw std::invalid_argument("compare_index_sets: the reference has " + std::to_string(ref.rows) +
                                " rows, the tested indices " + std::to_string(got.rows));
  }
  const bool scored = !ref_scores.values.empty();
  if (scored && ref_scores.rows != ref.rows) {
    throw std::invalid_argument("compare_index_sets: the reference has " + std::to_string(ref.rows) +
                                " rows, its scores " + std::to_string(ref_scores.rows));
  }

  IndexSetMetrics m;
  m.rows = ref.rows;
  if (ref.values.empty() && got.values.empty()) {
    m.status = Status::vacuous;  // nothing to compare: no row, or rows of width 0 on both sides
    return m;
  }
  double recall_sum = 0.0;
  for (int64_t r = 0; r < ref.rows; ++r) {
    const RowSet want = row_set(ref.values.subspan(r * ref.cols, ref.cols));
    if (want.invalid > 0) {
      throw std::invalid_argument("compare_index_sets: reference row " + std::to_string(r) +
                                  " has an entry below -1 or a repeated index");
    }
    const RowSet have = row_set(got.values.subspan(r * got.cols, got.cols));

    RowDifference diff;
    diff.row = r;
    diff.ref_valid = static_cast<int64_t>(want.valid.size());
    diff.got_valid = static_cast<int64_t>(have.valid.size());
    std::set_difference(want.valid.begin(), want.valid.end(), have.valid.begin(), have.valid.end(),
                        std::back_inserter(diff.missing));
    std::set_difference(have.valid.begin(), have.valid.end(), want.valid.begin(), want.valid.end(),
                        std::back_inserter(diff.extra));

    const double recall = want.valid.empty()
                              ? 1.0
                              : static_cast<double>(diff.ref_valid - static_cast<int64_t>(diff.missing.size())) /
                                    static_cast<double>(diff.ref_valid);
    recall_sum += recall;
    if (recall < m.worst_recall) {
      m.worst_recall = recall;
      m.worst_recall_row = r;
    }

    if (scored) {
      const std::span<const double> scores = ref_scores.values.subspan(r * ref_scores.cols, ref_scores.cols);
      const auto in_columns = [&](int64_t index) { return index - offset >= 0 && index - offset < ref_scores.cols; };
      const auto score_of = [&](int64_t index) {
        return in_columns(index) ? scores[static_cast<size_t>(index - offset)]
                                 : std::numeric_limits<double>::quiet_NaN();
      };
      for (int64_t i : diff.missing) diff.missing_scores.push_back(score_of(i));
      for (int64_t i : diff.extra) diff.extra_scores.push_back(score_of(i));
      const int64_t scored_picks = std::count_if(want.valid.begin(), want.valid.end(), in_columns);
      if (scored_picks > 0) diff.threshold = kth_largest(scores, scored_picks);
    }

    m.invalid_entries += have.invalid;
    if (diff.ref_valid != diff.got_valid) ++m.padding_mismatches;
    if (have.invalid > 0) {
      diff.reason = std::to_string(have.invalid) + " tested entr" + (have.invalid == 1 ? "y is" : "ies are") +
                    " below -1 or repeated";
    } else if (diff.ref_valid != diff.got_valid) {
      diff.reason = "valid count " + std::to_string(diff.ref_valid) + " vs " + std::to_string(diff.got_valid);
    } else if (diff.missing.empty()) {
      ++m.rows_exact;
      continue;
    } else if (!scored) {
      diff.reason = "sets differ and there are no scores to call it a tie";
    } else {
      const auto at_thr = [&](double s) { return at_threshold(s, diff.threshold, tolerance); };
      for (const std::vector<double>* scores : {&diff.missing_scores, &diff.extra_scores})
        for (double s : *scores) m.worst_ratio = std::max(m.worst_ratio, window_ratio(s, diff.threshold, tolerance));
      if (std::all_of(diff.missing_scores.begin(), diff.missing_scores.end(), at_thr) &&
          std::all_of(diff.extra_scores.begin(), diff.extra_scores.end(), at_thr)) {
        ++m.rows_tie_equivalent;
        continue;
      }
      diff.reason = "swap outside the tie window around the threshold";
    }
    if (diff.reason != "swap outside the tie window around the threshold")
      m.worst_ratio = std::numeric_limits<double>::infinity();
    if (m.rows_failed++ == 0) m.first_failure = std::move(diff);
  }
  if (m.rows > 0) m.mean_recall = recall_sum / static_cast<double>(m.rows);
  m.status = m.rows_failed == 0 ? Status::pass : Status::fail;
  return m;
}

}  // namespace dsv4::verify
