#pragma once
// One seed's figures of one policy: the values the report's accumulators (error_stats.h,
// topk_recall.h) hold at the end of a run, without the accumulators. A checkpoint keeps them
// (checkpoint.h), and the figures over seeds are made from them (over_seeds.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reference/precision.h"
#include "verify/precision/error_stats.h"
#include "verify/precision/precision_report.h"
#include "verify/precision/topk_recall.h"

namespace dsv4::verify {

struct StageFigures {
  std::string stage;
  std::string note;
  int64_t n = 0;
  int64_t n_finite = 0;
  int64_t nonfinite_matched = 0;
  int64_t nonfinite_mismatches = 0;
  double nmse = 0.0;
  double cos_diff = 0.0;
  double max_rel = 0.0;
  double max_abs = 0.0;
  double ref_rms = 0.0;
  ErrorHistogram histogram;
};

struct RecallFigures {
  RecallSummary summary;
  RecallRow worst_row;
  std::vector<RecallBucket> by_position;  // ascending, only buckets with rows
  std::vector<int64_t> histogram;         // kRecallBins counts over rows with a choice
};

// The end-to-end errors of the query rows of one position bucket.
struct OutputErrorFigures {
  int64_t first_position = 0;
  int64_t last_position = 0;
  double attention_nmse = 0.0;  // attn/core
  double layer_nmse = 0.0;      // out
};

struct LayerFigures {
  int layer = 0;
  int compress_ratio = 0;
  std::vector<StageFigures> stages;
  std::optional<RecallFigures> recall;
  std::vector<OutputErrorFigures> output_by_position;  // ascending

  const StageFigures& stage(const std::string& name) const;  // throws std::out_of_range naming it
};

struct PolicyFigures {
  ref::PrecisionPolicy policy;
  uint64_t seed = 0;          // the synthetic input's seed (0 for a capture)
  OracleTime time;            // this policy's forward passes
  OracleTime reference_time;  // the exact policy's forward passes of the same run
  std::vector<LayerFigures> layers;
};

StageFigures figures_of(const StageError& stage);
LayerFigures figures_of(const LayerResult& layer);
// Every policy of the report, in its order.
std::vector<PolicyFigures> figures_of(const PrecisionReport& report, uint64_t seed);

}  // namespace dsv4::verify
