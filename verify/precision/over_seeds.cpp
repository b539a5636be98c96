#include "verify/precision/over_seeds.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

namespace dsv4::verify {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void require_aligned(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("precision report over seeds: the seeds' figures differ in " + what);
}

// One figure of every seed: values[i] = figure(per_seed[i]).
template <class Source, class Figure>
Interval over(const std::vector<const Source*>& per_seed, Figure figure) {
  std::vector<double> values;
  for (const Source* s : per_seed) values.push_back(figure(*s));
  return interval_over(values);
}

ErrorHistogram pooled(const std::vector<const ErrorHistogram*>& hs) {
  ErrorHistogram sum;
  for (const ErrorHistogram* h : hs) {
    for (size_t i = 0; i < sum.bins.size(); ++i) sum.bins[i] += h->bins[i];
    sum.zero += h->zero;
    sum.below += h->below;
    sum.above += h->above;
    sum.no_scale += h->no_scale;
  }
  return sum;
}

StageOverSeeds stage_over(const std::vector<const StageFigures*>& s) {
  StageOverSeeds r;
  r.stage = s.front()->stage;
  r.note = s.front()->note;
  std::vector<const ErrorHistogram*> hs;
  for (const StageFigures* f : s) {
    require_aligned(f->stage == r.stage, "stages (" + f->stage + " vs " + r.stage + ")");
    r.n += f->n;
    r.n_finite += f->n_finite;
    r.nonfinite_matched += f->nonfinite_matched;
    r.nonfinite_mismatches += f->nonfinite_mismatches;
    hs.push_back(&f->histogram);
  }
  r.nmse = over(s, [](const StageFigures& f) { return f.nmse; });
  r.cos_diff = over(s, [](const StageFigures& f) { return f.cos_diff; });
  r.max_rel = over(s, [](const StageFigures& f) { return f.max_rel; });
  r.max_abs = over(s, [](const StageFigures& f) { return f.max_abs; });
  r.ref_rms = over(s, [](const StageFigures& f) { return f.ref_rms; });
  r.histogram = pooled(hs);
  return r;
}

RecallOverSeeds recall_over(const std::vector<const RecallFigures*>& r, const std::vector<uint64_t>& seeds) {
  RecallOverSeeds out;
  std::vector<double> sums;
  std::vector<int64_t> counts;
  out.histogram.assign(kRecallBins, 0);
  for (size_t i = 0; i < r.size(); ++i) {
    const RecallFigures& f = *r[i];
    out.rows += f.summary.rows;
    out.rows_with_choice += f.summary.rows_with_choice;
    sums.push_back(f.summary.mean_with_choice * static_cast<double>(f.summary.rows_with_choice));
    counts.push_back(f.summary.rows_with_choice);
    require_aligned(f.histogram.size() == out.histogram.size(), "recall histogram bins");
    for (size_t b = 0; b < out.histogram.size(); ++b) out.histogram[b] += f.histogram[b];
    if (f.worst_row.call >= 0 && (out.worst_row.call < 0 || f.worst_row.recall < out.worst_row.recall)) {
      out.worst_row = f.worst_row;
      out.worst_seed = seeds[i];
    }
  }
  out.mean = over(r, [](const RecallFigures& f) { return f.summary.mean; });
  out.mean_with_choice = over(r, [](const RecallFigures& f) { return f.summary.mean_with_choice; });
  out.worst = over(r, [](const RecallFigures& f) { return f.summary.worst; });
  out.pooled_with_choice = pooled_over_rows(sums, counts, 1.0);

  const std::vector<RecallBucket>& first = r.front()->by_position;
  for (size_t b = 0; b < first.size(); ++b) {
    RecallBucketOverSeeds bucket;
    bucket.first_position = first[b].first_position;
    bucket.last_position = first[b].last_position;
    std::vector<const RecallSummary*> summaries;
    for (const RecallFigures* f : r) {
      require_aligned(
          f->by_position.size() == first.size() && f->by_position[b].first_position == bucket.first_position,
          "recall position buckets");
      summaries.push_back(&f->by_position[b].summary);
      bucket.rows += f->by_position[b].summary.rows;
      bucket.rows_with_choice += f->by_position[b].summary.rows_with_choice;
    }
    bucket.mean = over(summaries, [](const RecallSummary& s) { return s.mean; });
    bucket.mean_with_choice = over(summaries, [](const RecallSummary& s) { return s.mean_with_choice; });
    bucket.worst = over(summaries, [](const RecallSummary& s) { return s.worst; });
    out.by_position.push_back(std::move(bucket));
  }
  return out;
}

LayerOverSeeds layer_over(const std::vector<const LayerFigures*>& l, const std::vector<uint64_t>& seeds) {
  LayerOverSeeds out;
  const LayerFigures& first = *l.front();
  out.layer = first.layer;
  out.compress_ratio = first.compress_ratio;
  for (const LayerFigures* f : l)
    require_aligned(f->layer == first.layer && f->stages.size() == first.stages.size() &&
                        f->recall.has_value() == first.recall.has_value() &&
                        f->output_by_position.size() == first.output_by_position.size(),
                    fmt::format("layer {}", first.layer));
  for (size_t s = 0; s < first.stages.size(); ++s) {
    std::vector<const StageFigures*> stages;
    for (const LayerFigures* f : l) stages.push_back(&f->stages[s]);
    out.stages.push_back(stage_over(stages));
  }
  if (first.recall) {
    std::vector<const RecallFigures*> recalls;
    for (const LayerFigures* f : l) recalls.push_back(&*f->recall);
    out.recall = recall_over(recalls, seeds);
  }
  for (size_t b = 0; b < first.output_by_position.size(); ++b) {
    std::vector<const OutputErrorFigures*> buckets;
    for (const LayerFigures* f : l) {
      require_aligned(f->output_by_position[b].first_position == first.output_by_position[b].first_position,
                      "output-error position buckets");
      buckets.push_back(&f->output_by_position[b]);
    }
    out.output_by_position.push_back({first.output_by_position[b].first_position,
                                      first.output_by_position[b].last_position,
                                      over(buckets, [](const OutputErrorFigures& e) { return e.attention_nmse; }),
                                      over(buckets, [](const OutputErrorFigures& e) { return e.layer_nmse; })});
  }
  return out;
}

}  // namespace

double t_quantile_975(int dof) {
  if (dof < 1)
    throw std::invalid_argument("t_quantile_975: degrees of freedom must be >= 1, found " + std::to_string(dof));
  // Student's t, two-sided 95%: dof 1 .. 30.
  static constexpr double kTable[] = {12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
                                      2.2010,  2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
                                      2.0796,  2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423};
  if (dof <= 30) return kTable[dof - 1];
  if (dof < 40) return kTable[29];
  if (dof < 60) return 2.0211;
  if (dof < 120) return 2.0003;
  return 1.9799;
}

bool Interval::has_interval() const { return std::isfinite(low) && std::isfinite(high); }

bool Interval::separated_below(const Interval& other) const {
  return has_interval() && other.has_interval() && high < other.low;
}

Interval interval_over(const std::vector<double>& values) {
  if (values.empty()) throw std::invalid_argument("interval_over: no values");
  Interval r;
  r.values = values;
  double sum = 0.0;
  for (double v : values) sum += v;
  const double n = static_cast<double>(values.size());
  r.mean = sum / n;
  const bool finite = std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
  if (values.size() < 2 || !finite) {
    r.low = r.high = kNaN;
    return r;
  }
  double squares = 0.0;
  for (double v : values) squares += (v - r.mean) * (v - r.mean);
  const double half = t_quantile_975(static_cast<int>(values.size()) - 1) * std::sqrt(squares / (n - 1.0) / n);
  r.low = r.mean - half;
  r.high = r.mean + half;
  return r;
}

Interval pooled_over_rows(const std::vector<double>& sums, const std::vector<int64_t>& counts, double if_empty) {
  if (sums.size() != counts.size())
    throw std::invalid_argument("pooled_over_rows: " + std::to_string(sums.size()) + " sums, " +
                                std::to_string(counts.size()) + " counts");
  double total = 0.0, rows = 0.0;
  std::vector<size_t> clusters;
  for (size_t i = 0; i < sums.size(); ++i)
    if (counts[i] > 0) {
      total += sums[i];
      rows += static_cast<double>(counts[i]);
      clusters.push_back(i);
    }
  Interval r;
  for (size_t i : clusters) r.values.push_back(sums[i] / static_cast<double>(counts[i]));
  if (clusters.empty()) {
    r.mean = if_empty;
    r.low = r.high = kNaN;
    return r;
  }
  r.mean = total / rows;
  if (clusters.size() < 2 || !std::isfinite(r.mean)) {
    r.low = r.high = kNaN;
    return r;
  }
  // The ratio estimator's cluster variance: G/(G-1) * sum_i (sum_i - mean * count_i)^2 / rows^2.
  const double g = static_cast<double>(clusters.size());
  double squares = 0.0;
  for (size_t i : clusters) {
    const double residual = sums[i] - r.mean * static_cast<double>(counts[i]);
    squares += residual * residual;
  }
  const double half = t_quantile_975(static_cast<int>(clusters.size()) - 1) * std::sqrt(g / (g - 1.0) * squares) / rows;
  r.low = r.mean - half;
  r.high = r.mean + half;
  return r;
}

namespace {

Interval paired(const Interval& a, const Interval& b, const std::function<double(double, double)>& combine) {
  if (a.values.size() != b.values.size())
    throw std::invalid_argument(fmt::format("paired interval: {} values against {}", a.values.size(), b.values.size()));
  std::vector<double> values;
  for (size_t i = 0; i < a.values.size(); ++i) values.push_back(combine(a.values[i], b.values[i]));
  return interval_over(values);
}

}  // namespace

Interval paired_difference(const Interval& a, const Interval& b) {
  return paired(a, b, [](double x, double y) { return x - y; });
}

Interval paired_ratio(const Interval& a, const Interval& b) {
  return paired(a, b, [](double x, double y) { return x / y; });
}

const StageOverSeeds& LayerOverSeeds::stage(const std::string& name) const {
  for (const StageOverSeeds& s : stages)
    if (s.stage == name) return s;
  throw std::out_of_range("layer " + std::to_string(layer) + " (ratio " + std::to_string(compress_ratio) +
                          ") has no stage " + name + " in the precision report");
}

SeededReport over_seeds(const InputInfo& input, int64_t position_bucket,
                        const std::vector<std::vector<PolicyFigures>>& per_seed) {
  if (per_seed.empty()) throw std::invalid_argument("precision report over seeds: no seed");
  const std::vector<uint64_t> seeds = input.seeds.empty() ? std::vector<uint64_t>{0} : input.seeds;
  if (per_seed.size() != seeds.size())
    throw std::invalid_argument(
        fmt::format("precision report over seeds: {} seeds' figures for {} seeds", per_seed.size(), seeds.size()));
  const ref::PrecisionPolicy official = ref::PrecisionPolicy::official();
  SeededReport r;
  r.input = input;
  r.position_bucket = position_bucket;
  const std::vector<PolicyFigures>& first = per_seed.front();
  for (const std::vector<PolicyFigures>& seed : per_seed) require_aligned(seed.size() == first.size(), "policies");

  std::vector<const PolicyFigures*> reference_runs;
  for (const std::vector<PolicyFigures>& seed : per_seed)
    if (!seed.empty()) reference_runs.push_back(&seed.front());
  if (!reference_runs.empty()) {
    r.reference_wall_seconds =
        over(reference_runs, [](const PolicyFigures& f) { return f.reference_time.wall_seconds; });
    r.reference_cpu_seconds = over(reference_runs, [](const PolicyFigures& f) { return f.reference_time.cpu_seconds; });
  }
  for (size_t p = 0; p < first.size(); ++p) {
    std::vector<const PolicyFigures*> runs;
    for (size_t i = 0; i < per_seed.size(); ++i) {
      const PolicyFigures& f = per_seed[i][p];
      require_aligned(f.policy.describe() == first[p].policy.describe() && f.layers.size() == first[p].layers.size(),
                      "policy " + f.policy.name + " vs " + first[p].policy.name);
      runs.push_back(&f);
    }
    PolicyOverSeeds out;
    out.policy = first[p].policy;
    out.differences = out.policy.differences_from(official);
    out.wall_seconds = over(runs, [](const PolicyFigures& f) { return f.time.wall_seconds; });
    out.cpu_seconds = over(runs, [](const PolicyFigures& f) { return f.time.cpu_seconds; });
    for (size_t l = 0; l < first[p].layers.size(); ++l) {
      std::vector<const LayerFigures*> layers;
      for (const PolicyFigures* f : runs) layers.push_back(&f->layers[l]);
      out.layers.push_back(layer_over(layers, seeds));
    }
    r.policies.push_back(std::move(out));
  }
  return r;
}

}  // namespace dsv4::verify
