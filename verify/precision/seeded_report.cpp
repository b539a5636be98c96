#include "verify/precision/seeded_report.h"

#include <fmt/format.h>

#include <stdexcept>

namespace dsv4::verify {

std::vector<uint64_t> seeds_of(const SeededReportOptions& o) {
  std::vector<uint64_t> seeds;
  for (int i = 0; i < o.seeds; ++i) seeds.push_back(o.input.seed + static_cast<uint64_t>(i));
  return seeds;
}

SeededReport run_seeded_report(const SeededReportOptions& o,
                               const std::function<void(const PrecisionProgress&)>& progress) {
  if (o.seeds < 1) throw std::invalid_argument(fmt::format("--seeds: expected at least 1, found {}", o.seeds));
  const std::vector<ref::PrecisionPolicy> policies = resolve_policies(o.report.policies);
  const std::vector<uint64_t> seeds = seeds_of(o);
  const InputInfo input = synthetic_input_info(o.input, seeds);  // also checks the options
  const int64_t bucket = position_bucket_for(o.input.prefill + o.input.decode, o.report.position_bucket);
  std::optional<CheckpointDir> checkpoint;
  if (o.checkpoint) checkpoint.emplace(*o.checkpoint);

  std::vector<std::vector<PolicyFigures>> per_seed;
  for (size_t i = 0; i < seeds.size(); ++i) {
    SyntheticInputOptions seed_options = o.input;
    seed_options.seed = seeds[i];
    const InputInfo seed_input = synthetic_input_info(seed_options);

    std::vector<std::optional<PolicyFigures>> found;
    std::vector<std::string> missing;
    for (const ref::PrecisionPolicy& p : policies) {
      found.push_back(checkpoint ? checkpoint->load(seeds[i], p, seed_input, bucket) : std::nullopt);
      if (!found.back()) missing.push_back(p.name);
    }
    if (!missing.empty()) {
      PrecisionReportOptions options = o.report;
      options.policies = missing;
      options.position_bucket = bucket;
      const auto seed_progress = [&](const PrecisionProgress& p) {
        if (!progress) return;
        PrecisionProgress q = p;
        q.seed = seeds[i];
        q.seed_index = static_cast<int>(i);
        q.seeds = static_cast<int>(seeds.size());
        progress(q);
      };
      const PrecisionReport report =
          run_precision_report(synthetic_input(seed_options), seed_input, options, seed_progress);
      std::vector<PolicyFigures> ran = figures_of(report, seeds[i]);
      size_t next = 0;
      for (std::optional<PolicyFigures>& f : found)
        if (!f) {
          if (checkpoint) checkpoint->store(ran[next], seed_input, bucket);
          f = std::move(ran[next++]);
        }
    }
    std::vector<PolicyFigures> figures;
    for (std::optional<PolicyFigures>& f : found) figures.push_back(std::move(*f));
    per_seed.push_back(std::move(figures));
  }
  return over_seeds(input, bucket, per_seed);
}

SeededReport single_report(const PrecisionReport& report) {
  const uint64_t seed = report.input.seeds.empty() ? 0 : report.input.seeds.front();
  SeededReport r = over_seeds(report.input, report.position_bucket, {figures_of(report, seed)});
  r.reference = report.reference;
  r.command = report.command;
  return r;
}

}  // namespace dsv4::verify
