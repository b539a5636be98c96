#pragma once
// Index-set comparison for top-k style stages (indexer/topk, topk_idxs): per row, the selected
// indices are compared as sets (order does not matter, -1 marks an unused slot), and a difference
// is accepted only as a swap among (near-)ties at the selection threshold, as ggml's top_k error,
// FlashInfer's tie-robust check do (docs/tolerances.md, the index-set rows).
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "verify/compare/status.h"
#include "verify/tolerance/tolerance.h"

namespace dsv4::verify {

// rows x cols indices, row-major (one row per query token: [b, s, k] flattens to b*s rows).
struct IndexRows {
  std::span<const int64_t> values;
  int64_t rows = 0;
  int64_t cols = 0;
};

// rows x cols scores, row-major; empty (rows = cols = 0) when there are none.
struct ScoreRows {
  std::span<const double> values;
  int64_t rows = 0;
  int64_t cols = 0;
};

// What differs in one row.
struct RowDifference {
  int64_t row = -1;                    // -1: no failing row
  std::string reason;                  // e.g. "valid count 4 vs 5", "swap outside the tie window"
  int64_t ref_valid = 0;               // entries != -1 in the reference row
  int64_t got_valid = 0;               // entries != -1 in the tested row
  std::vector<int64_t> missing;        // in the reference, not in the tested row (ascending)
  std::vector<int64_t> extra;          // in the tested row, not in the reference (ascending)
  std::vector<double> missing_scores;  // reference score of each, NaN where the index has no score column
  std::vector<double> extra_scores;
  // The k-th largest reference score of the row, k = the reference entries that have a score
  // column; NaN without scores or without such entries.
  double threshold = std::numeric_limits<double>::quiet_NaN();
};

struct IndexSetMetrics {
  int64_t rows = 0;
  int64_t rows_exact = 0;           // the same set
  int64_t rows_tie_equivalent = 0;  // different sets, every missing/extra index inside the tie window
  int64_t rows_failed = 0;
  int64_t padding_mismatches = 0;  // rows whose number of valid entries differs (their -1 counts differ
                                   // whenever the two widths are equal)
  int64_t invalid_entries = 0;     // tested entries that are neither -1 nor >= 0, and repeated indices
  double mean_recall = 1.0;        // mean over rows of |ref ∩ got| / |ref valid| (1 for a row with none)
  double worst_recall = 1.0;
  int64_t worst_recall_row = -1;  // first row with the worst recall; -1 when every row recalls all
  RowDifference first_failure;
  // measured / allowed: the farthest swapped index's distance from the threshold in units of the
  // tie window (<= 1 passes), +inf for a row that fails otherwise (count, invalid entries, no scores).
  double worst_ratio = 0.0;
  Status status = Status::pass;  // VACUOUS when both sides hold no entry at all
};

// ref [rows, k], got [rows, k'] (k' may differ from k), ref_scores [rows, n] or empty, with score
// column = index - offset (indices below offset, e.g. window entries of topk_idxs, or past the last
// column, have no score). Per row:
//   1. a tested entry that is negative but not -1, or an index listed twice, fails the row;
//   2. the numbers of valid (>= 0) entries must be equal;
//   3. equal sets: exact;
//   4. otherwise, with scores, the row is tie-equivalent iff every missing and every extra index
//      has a score s with s == thr or |s - thr| <= atol + rtol |thr|, where thr is the k-th largest
//      score of the reference row and k the number of its valid entries that have a score column
//      (NaN scores sort lowest and are never inside the window; an index without a score column
//      is never a tie); without scores the row fails.
// The stage passes iff no row fails; it is VACUOUS when both index tensors are empty. Throws
// std::invalid_argument when the shapes disagree
// (rows, score rows), a size is not rows x cols, or the reference itself has an entry < -1 or a
// repeated index.
IndexSetMetrics compare_index_sets(const IndexRows& ref, const IndexRows& got, const ScoreRows& ref_scores,
                                   const ScoreTolerance& tolerance, int64_t offset);

}  // namespace dsv4::verify
