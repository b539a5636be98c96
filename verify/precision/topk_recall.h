#pragma once
// Top-k recall of a policy's indexer against the exact policy's, per query row:
//   recall = |exact ∩ tested| / |exact|   (valid entries only; -1 marks an unused slot)
// accumulated over every call and sequence of a layer: the mean, the worst row (where it is), and
// the same by query position bucket. A row whose exact list is empty (no compressed entry is
// visible yet) has no recall and is not counted. A row "has a choice" when the exact indexer left
// some visible entry out (visible > k); in the other rows every visible entry is selected whatever
// the precision, so their recall is 1 by construction.
#include <cstdint>
#include <map>
#include <vector>

#include "reference/tensor.h"

namespace dsv4::verify {

struct RecallRow {
  int call = -1;  // -1: no row yet
  int seq = 0;
  int64_t position = 0;  // the query token's position in its sequence
  double recall = 1.0;
};

// Recall over the rows of one group (a position bucket, or all rows).
struct RecallSummary {
  int64_t rows = 0;               // rows with a nonempty exact list
  int64_t rows_with_choice = 0;   // of those, rows where the exact indexer left a visible entry out
  double mean = 1.0;              // mean recall over `rows` (1 when there are none)
  double mean_with_choice = 1.0;  // mean recall over `rows_with_choice` (1 when there are none)
  double worst = 1.0;             // lowest recall of a row
};

struct RecallBucket {
  int64_t first_position = 0;  // positions [first_position, last_position]
  int64_t last_position = 0;
  RecallSummary summary;
};

// Bins of the per-row recall over rows with a choice: [i / kRecallBins, (i+1) / kRecallBins), the
// last bin closed (recall 1).
inline constexpr int kRecallBins = 20;

class RecallStats {
 public:
  // bucket_width: query positions per bucket (>= 1; std::invalid_argument otherwise).
  explicit RecallStats(int64_t bucket_width);

  // One call of one sequence: exact [s, k] and tested [s, k'] index lists (compressed-entry
  // indices with the call's offset, -1 padding), exact_scores [s, n_visible] the exact indexer's
  // scores (-inf where masked), row i the query at position start_pos + i. Throws
  // std::invalid_argument when the row counts differ.
  void add(const ref::IndexMat& exact, const ref::IndexMat& tested, const ref::Mat& exact_scores, int call, int seq,
           int64_t start_pos);

  RecallSummary summary() const { return summarize(all_); }
  const RecallRow& worst_row() const { return worst_row_; }             // the first row reaching the worst recall
  std::vector<RecallBucket> buckets() const;                            // ascending, only buckets with rows
  const std::vector<int64_t>& histogram() const { return histogram_; }  // kRecallBins counts
  int64_t bucket_width() const { return bucket_width_; }

 private:
  struct Sums {
    int64_t rows = 0, rows_with_choice = 0;
    long double sum = 0.0L, sum_with_choice = 0.0L;
    double worst = 1.0;
  };
  static RecallSummary summarize(const Sums& s);

  int64_t bucket_width_;
  Sums all_;
  std::map<int64_t, Sums> by_bucket_;  // key: position / bucket_width
  RecallRow worst_row_;
  std::vector<int64_t> histogram_ = std::vector<int64_t>(kRecallBins, 0);
};

}  // namespace dsv4::verify
