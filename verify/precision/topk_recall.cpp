#include "verify/precision/topk_recall.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace dsv4::verify {

namespace {

std::vector<int32_t> valid_sorted(const ref::IndexMat& m, ref::Index row) {
  std::vector<int32_t> v;
  for (ref::Index c = 0; c < m.cols(); ++c)
    if (m(row, c) >= 0) v.push_back(m(row, c));
  std::sort(v.begin(), v.end());
  return v;
}

int64_t finite_count(const ref::Mat& scores, ref::Index row) {
  int64_t n = 0;
  for (ref::Index c = 0; c < scores.cols(); ++c) n += std::isfinite(scores(row, c)) ? 1 : 0;
  return n;
}

}  // namespace

RecallStats::RecallStats(int64_t bucket_width) : bucket_width_(bucket_width) {
  if (bucket_width < 1)
    throw std::invalid_argument("RecallStats: bucket width must be >= 1 position, found " +
                                std::to_string(bucket_width));
}

void RecallStats::add(const ref::IndexMat& exact, const ref::IndexMat& tested, const ref::Mat& exact_scores, int call,
                      int seq, int64_t start_pos) {
  if (tested.rows() != exact.rows() || exact_scores.rows() != exact.rows())
    throw std::invalid_argument("RecallStats::add: exact has " + std::to_string(exact.rows()) + " rows, tested " +
                                std::to_string(tested.rows()) + ", scores " + std::to_string(exact_scores.rows()));
  for (ref::Index i = 0; i < exact.rows(); ++i) {
    const std::vector<int32_t> want = valid_sorted(exact, i);
    if (want.empty()) continue;
    const std::vector<int32_t> have = valid_sorted(tested, i);
    std::vector<int32_t> common;
    std::set_intersection(want.begin(), want.end(), have.begin(), have.end(), std::back_inserter(common));
    const double recall = static_cast<double>(common.size()) / static_cast<double>(want.size());
    const bool choice = finite_count(exact_scores, i) > static_cast<int64_t>(want.size());
    const int64_t position = start_pos + i;

    for (Sums* s : {&all_, &by_bucket_[position / bucket_width_]}) {
      ++s->rows;
      s->sum += recall;
      s->worst = std::min(s->worst, recall);
      if (choice) {
        ++s->rows_with_choice;
        s->sum_with_choice += recall;
      }
    }
    if (choice) ++histogram_[std::min<size_t>(common.size() * kRecallBins / want.size(), kRecallBins - 1)];
    if (worst_row_.call < 0 || recall < worst_row_.recall) worst_row_ = {call, seq, position, recall};
  }
}

RecallSummary RecallStats::summarize(const Sums& s) {
  RecallSummary r;
  r.rows = s.rows;
  r.rows_with_choice = s.rows_with_choice;
  if (s.rows) r.mean = static_cast<double>(s.sum / s.rows);
  if (s.rows_with_choice) r.mean_with_choice = static_cast<double>(s.sum_with_choice / s.rows_with_choice);
  r.worst = s.worst;
  return r;
}

std::vector<RecallBucket> RecallStats::buckets() const {
  std::vector<RecallBucket> out;
  for (const auto& [key, sums] : by_bucket_)
    out.push_back({key * bucket_width_, (key + 1) * bucket_width_ - 1, summarize(sums)});
  return out;
}

}  // namespace dsv4::verify
