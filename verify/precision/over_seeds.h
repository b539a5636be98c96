#pragma once
// A precision report over seeds: every figure as its mean over the seeds (each seed draws its own
// weights and inputs) with a 95% confidence interval, so that two policies are ranked only where
// their intervals separate. One seed gives the figures themselves, without intervals.
//   over seeds    mean +- t(0.975, n - 1) * s / sqrt(n), s the sample standard deviation of the n
//                 seeds' values (Student t: the seeds are independent draws, their figures roughly
//                 normal, and n is small);
//   pooled rows   per-row recall pooled over every row with a choice of every seed, sum / count, with
//                 an interval that counts each seed as one cluster: the rows of one seed share its
//                 weights and inputs and are far from independent, so an interval over rows would be
//                 too narrow. (Seeds with equal row counts give the over-seeds interval.)
// Histograms are pooled (summed over seeds); the worst recall row is the worst of every seed.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reference/precision.h"
#include "verify/precision/error_stats.h"
#include "verify/precision/input_info.h"
#include "verify/precision/report_figures.h"
#include "verify/precision/topk_recall.h"

namespace dsv4::verify {

inline constexpr double kIntervalLevel = 0.95;

// The 0.975 quantile of Student's t with `dof` degrees of freedom (>= 1): tabulated to 30, then the
// table's value for the largest tabulated dof below (40, 60, 120), which is slightly wider than exact.
double t_quantile_975(int dof);

struct Interval {
  double mean = 0.0;
  double low = 0.0;  // NaN with fewer than two values, or a non-finite one
  double high = 0.0;
  std::vector<double> values;  // one per seed, in seed order (pooled: the per-seed means)

  bool has_interval() const;
  // The intervals do not overlap: every value of this one lies below every value of the other.
  bool separated_below(const Interval& other) const;
};

// Mean and 95% interval of independent values (at least one; std::invalid_argument otherwise).
Interval interval_over(const std::vector<double>& values);
// sum(sums) / sum(counts) with the cluster interval above; sums[i] and counts[i] are seed i's (counts
// of 0 are left out; no rows at all: mean `if_empty`, no interval).
Interval pooled_over_rows(const std::vector<double>& sums, const std::vector<int64_t>& counts, double if_empty);

// Seed by seed, a's value minus b's (or over b's), with the interval of those differences (ratios):
// policies compared on the same seeds share their weights and inputs, so the paired interval is
// the one for the difference between them. std::invalid_argument when the seed counts differ.
Interval paired_difference(const Interval& a, const Interval& b);
Interval paired_ratio(const Interval& a, const Interval& b);

struct StageOverSeeds {
  std::string stage;
  std::string note;
  int64_t n = 0;  // summed over seeds, as the three counts below
  int64_t n_finite = 0;
  int64_t nonfinite_matched = 0;
  int64_t nonfinite_mismatches = 0;
  Interval nmse, cos_diff, max_rel, max_abs, ref_rms;
  ErrorHistogram histogram;  // pooled
};

struct RecallBucketOverSeeds {
  int64_t first_position = 0;
  int64_t last_position = 0;
  int64_t rows = 0;  // summed over seeds
  int64_t rows_with_choice = 0;
  Interval mean, mean_with_choice, worst;
};

struct RecallOverSeeds {
  int64_t rows = 0;  // summed over seeds
  int64_t rows_with_choice = 0;
  Interval mean, mean_with_choice, worst;  // each seed's figure, over seeds
  Interval pooled_with_choice;             // every row with a choice of every seed (cluster interval)
  uint64_t worst_seed = 0;                 // where the worst row of every seed is
  RecallRow worst_row;
  std::vector<RecallBucketOverSeeds> by_position;
  std::vector<int64_t> histogram;  // pooled
};

struct OutputErrorOverSeeds {
  int64_t first_position = 0;
  int64_t last_position = 0;
  Interval attention_nmse, layer_nmse;
};

struct LayerOverSeeds {
  int layer = 0;
  int compress_ratio = 0;
  std::vector<StageOverSeeds> stages;
  std::optional<RecallOverSeeds> recall;
  std::vector<OutputErrorOverSeeds> output_by_position;

  const StageOverSeeds& stage(const std::string& name) const;  // throws std::out_of_range naming it
};

struct PolicyOverSeeds {
  ref::PrecisionPolicy policy;
  std::string differences;             // what differs from official (ref::PrecisionPolicy::differences_from)
  Interval wall_seconds, cpu_seconds;  // the oracle's forward passes of this policy, per seed
  std::vector<LayerOverSeeds> layers;
};

struct SeededReport {
  InputInfo input;  // input.seeds: the seeds, in the order of every Interval's values
  std::string reference = "exact";
  int64_t position_bucket = 0;
  Interval reference_wall_seconds, reference_cpu_seconds;  // the exact policy's forward passes
  std::vector<PolicyOverSeeds> policies;
  std::string command;

  // The runs every figure is over: the seeds, or 1 for a capture (which has no seed).
  size_t seed_count() const { return input.seeds.empty() ? 1 : input.seeds.size(); }
};

// per_seed[i]: the figures of every policy, in report order, for seed input.seeds[i] (a capture:
// one entry, input.seeds empty or one seed). Throws std::invalid_argument when the seeds' figures do
// not line up (other policies, layers, stages or position buckets) or their count differs from
// input.seeds'.
SeededReport over_seeds(const InputInfo& input, int64_t position_bucket,
                        const std::vector<std::vector<PolicyFigures>>& per_seed);

}  // namespace dsv4::verify
