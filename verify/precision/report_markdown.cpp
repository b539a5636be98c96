#include "verify/precision/report_markdown.h"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "verify/precision/precision_report.h"
#include "verify/report/atomic_file.h"

namespace dsv4::verify {

namespace {

// The policies compared with the reference (whose own figures are zero error by definition).
std::vector<const PolicyOverSeeds*> compared(const SeededReport& r) {
  std::vector<const PolicyOverSeeds*> out;
  for (const PolicyOverSeeds& p : r.policies)
    if (p.policy.name != r.reference) out.push_back(&p);
  return out;
}

void table_header(std::ostream& out, const std::string& first, const SeededReport& r) {
  fmt::print(out, "| {} |", first);
  for (const PolicyOverSeeds& p : r.policies) fmt::print(out, " {} |", p.policy.name);
  fmt::print(out, "\n|---|");
  for (size_t i = 0; i < r.policies.size(); ++i) fmt::print(out, "---:|");
  fmt::print(out, "\n");
}

void end_to_end_table(std::ostream& out, const SeededReport& r, size_t l) {
  fmt::print(out,
             "| policy | recall (rows with a choice) | recall (all rows) | worst row | attn/core NMSE | "
             "out NMSE | out cos-diff | out max rel |\n"
             "|---|---:|---:|---|---:|---:|---:|---:|\n");
  for (const PolicyOverSeeds& p : r.policies) {
    const LayerOverSeeds& layer = p.layers[l];
    std::string mean = "-", mean_choice = "-", worst = "-";
    if (layer.recall && layer.recall->rows > 0) {
      const RecallOverSeeds& rc = *layer.recall;
      mean = format_interval(rc.mean, format_recall);
      mean_choice =
          rc.rows_with_choice ? format_interval(rc.mean_with_choice, format_recall) : "- (no row has a choice)";
      const RecallRow& w = rc.worst_row;
      if (w.call >= 0)
        worst =
            fmt::format("{} ({}call {}, seq {}, position {})", format_recall(w.recall),
                        r.seed_count() > 1 ? fmt::format("seed {}, ", rc.worst_seed) : "", w.call, w.seq, w.position);
    }
    const StageOverSeeds& attn = layer.stage(kAttentionOutputStage);
    const StageOverSeeds& o = layer.stage(kLayerOutputStage);
    fmt::print(out, "| {} | {} | {} | {} | {} | {} | {} | {} |\n", p.policy.name, mean_choice, mean, worst,
               format_interval(attn.nmse), format_interval(o.nmse), format_interval(o.cos_diff),
               format_interval(o.max_rel));
  }
  const PolicyOverSeeds& first = r.policies.front();
  if (first.layers[l].recall) {
    const auto seeds = static_cast<int64_t>(r.seed_count());
    fmt::print(out, "\nRows with a choice: {} of {} rows{}.\n", first.layers[l].recall->rows_with_choice / seeds,
               first.layers[l].recall->rows / seeds, seeds > 1 ? fmt::format(" per seed ({} seeds)", seeds) : "");
  }
}

void rankings(std::ostream& out, const SeededReport& r, size_t l) {
  if (r.seed_count() < 2) return;
  std::vector<RankedPolicy> recall, out_nmse, attn_nmse;
  for (const PolicyOverSeeds* p : compared(r)) {
    const LayerOverSeeds& layer = p->layers[l];
    if (layer.recall && layer.recall->rows_with_choice > 0)
      recall.push_back({p->policy.name, &layer.recall->mean_with_choice});
    attn_nmse.push_back({p->policy.name, &layer.stage(kAttentionOutputStage).nmse});
    out_nmse.push_back({p->policy.name, &layer.stage(kLayerOutputStage).nmse});
  }
  fmt::print(out,
             "\nRankings the 95% intervals support (`>`/`<`: the neighbours' intervals separate; `~`: they "
             "overlap, no ranking):\n\n");
  if (!recall.empty()) fmt::print(out, "- recall (rows with a choice), highest first: {}\n", ranking(recall, true));
  fmt::print(out, "- attn/core NMSE, lowest first: {}\n", ranking(attn_nmse, false));
  fmt::print(out, "- out NMSE, lowest first: {}\n", ranking(out_nmse, false));
}

std::string signed_recall(double v) { return fmt::format("{}{}", v > 0 ? "+" : "", format_recall(v)); }

// Each policy against official on the same seeds: the paired intervals of the recall difference and
// of the output-NMSE ratio (narrower than comparing two unpaired intervals).
void paired_table(std::ostream& out, const SeededReport& r, size_t l) {
  if (r.seed_count() < 2) return;
  const auto official = std::find_if(r.policies.begin(), r.policies.end(),
                                     [](const PolicyOverSeeds& p) { return p.policy.name == "official"; });
  if (official == r.policies.end()) return;
  const LayerOverSeeds& base = official->layers[l];
  const bool recall = base.recall && base.recall->rows_with_choice > 0;
  fmt::print(out,
             "\nAgainst official, seed by seed (each seed's difference or ratio, then its mean and 95% interval: "
             "the same weights and inputs on both sides):\n\n| policy | {}attn/core NMSE / official's | out NMSE / "
             "official's |\n|---|{}---:|---:|\n",
             recall ? "recall (rows with a choice) - official's | " : "", recall ? "---:|" : "");
  for (const PolicyOverSeeds* p : compared(r)) {
    if (p == &*official) continue;
    const LayerOverSeeds& layer = p->layers[l];
    const std::string recall_cell =
        recall ? format_interval(paired_difference(layer.recall->mean_with_choice, base.recall->mean_with_choice),
                                 signed_recall) +
                     " | "
               : "";
    fmt::print(
        out, "| {} | {}{} | {} |\n", p->policy.name, recall_cell,
        format_interval(paired_ratio(layer.stage(kAttentionOutputStage).nmse, base.stage(kAttentionOutputStage).nmse)),
        format_interval(paired_ratio(layer.stage(kLayerOutputStage).nmse, base.stage(kLayerOutputStage).nmse)));
  }
}

void pooled_recall_table(std::ostream& out, const SeededReport& r, size_t l) {
  fmt::print(out,
             "\nPer-row recall pooled over {} (rows with a choice; the interval counts each seed as one cluster, "
             "its rows not being independent):\n\n| policy | rows | pooled recall | rows below 0.9 | rows below 0.8 |\n"
             "|---|---:|---:|---:|---:|\n",
             r.seed_count() > 1 ? fmt::format("{} seeds", r.seed_count()) : "the run");
  for (const PolicyOverSeeds& p : r.policies) {
    const RecallOverSeeds& rc = *p.layers[l].recall;
    if (rc.rows_with_choice == 0) continue;
    // Bins of width 1/kRecallBins: recall < 0.9 is the bins below 0.9 * kRecallBins.
    const auto below = [&](double edge) {
      int64_t n = 0;
      for (int b = 0; b < static_cast<int>(std::lround(edge * kRecallBins)); ++b)
        n += rc.histogram[static_cast<size_t>(b)];
      return fmt::format("{:.2f}%", 100.0 * static_cast<double>(n) / static_cast<double>(rc.rows_with_choice));
    };
    fmt::print(out, "| {} | {} | {} | {} | {} |\n", p.policy.name, rc.rows_with_choice,
               format_interval(rc.pooled_with_choice, format_recall), below(0.9), below(0.8));
  }
}

void recall_by_position_table(std::ostream& out, const SeededReport& r, size_t l) {
  const RecallOverSeeds& first = *r.policies.front().layers[l].recall;
  if (first.by_position.empty()) return;
  fmt::print(out, "\nMean top-k recall by query position (rows with a choice / rows in the bucket{}):\n\n",
             r.seed_count() > 1 ? ", per seed" : "");
  table_header(out, "positions (choice/rows)", r);
  for (size_t b = 0; b < first.by_position.size(); ++b) {
    const RecallBucketOverSeeds& bucket = first.by_position[b];
    const auto seeds = static_cast<int64_t>(r.seed_count());
    fmt::print(out, "| {}-{} ({}/{}) |", bucket.first_position, bucket.last_position, bucket.rows_with_choice / seeds,
               bucket.rows / seeds);
    for (const PolicyOverSeeds& p : r.policies)
      fmt::print(out, " {} |", format_interval(p.layers[l].recall->by_position[b].mean, format_recall));
    fmt::print(out, "\n");
  }
}

void output_by_position_table(std::ostream& out, const SeededReport& r, size_t l) {
  const LayerOverSeeds& first = r.policies.front().layers[l];
  if (first.output_by_position.size() < 2) return;
  fmt::print(out, "\nLayer-output (out) NMSE by query position:\n\n");
  table_header(out, "positions", r);
  for (size_t b = 0; b < first.output_by_position.size(); ++b) {
    fmt::print(out, "| {}-{} |", first.output_by_position[b].first_position, first.output_by_position[b].last_position);
    for (const PolicyOverSeeds& p : r.policies)
      fmt::print(out, " {} |", format_interval(p.layers[l].output_by_position[b].layer_nmse));
    fmt::print(out, "\n");
  }
}

template <class Figure>
void stage_table(std::ostream& out, const SeededReport& r, size_t l, const std::string& title, Figure figure) {
  fmt::print(out, "\n{}:\n\n", title);
  table_header(out, "stage", r);
  const LayerOverSeeds& first = r.policies.front().layers[l];
  for (size_t s = 0; s < first.stages.size(); ++s) {
    fmt::print(out, "| {} |", first.stages[s].stage);
    for (const PolicyOverSeeds& p : r.policies)
      fmt::print(out, " {} |", format_interval(figure(p.layers[l].stages[s])));
    fmt::print(out, "\n");
  }
}

void stage_notes(std::ostream& out, const SeededReport& r, size_t l) {
  bool any = false;
  for (const PolicyOverSeeds& p : r.policies)
    for (const StageOverSeeds& s : p.layers[l].stages) {
      if (s.note.empty() && s.nonfinite_mismatches == 0) continue;
      if (!any) fmt::print(out, "\nNotes:\n\n");
      any = true;
      fmt::print(out, "- {} {}: {}{}\n", p.policy.name, s.stage, s.note,
                 s.nonfinite_mismatches
                     ? fmt::format("{}{} non-finite mismatches", s.note.empty() ? "" : "; ", s.nonfinite_mismatches)
                     : std::string());
    }
}

void policies_table(std::ostream& out, const SeededReport& r) {
  fmt::print(out,
             "\n## Policies\n\n| policy | what differs from official | oracle CPU seconds | oracle wall seconds |\n"
             "|---|---|---:|---:|\n");
  fmt::print(out, "| {} (reference) | {} | {} | {} |\n", r.reference,
             ref::PrecisionPolicy::by_name(r.reference).differences_from(ref::PrecisionPolicy::official()),
             format_interval(r.reference_cpu_seconds), format_interval(r.reference_wall_seconds));
  for (const PolicyOverSeeds& p : r.policies)
    fmt::print(out, "| {} | {} | {} | {} |\n", p.policy.name, p.differences, format_interval(p.cpu_seconds),
               format_interval(p.wall_seconds));
  fmt::print(out,
             "\nOracle seconds: the forward passes of one run of the policy{} (CPU: every thread of the "
             "process; the comparisons not included).\n\n| policy | settings |\n|---|---|\n",
             r.seed_count() > 1 ? ", per seed" : "");
  for (const PolicyOverSeeds& p : r.policies) fmt::print(out, "| {} | `{}` |\n", p.policy.name, p.policy.describe());
}

}  // namespace

std::string format_figure(double v) {
  if (v == 0.0) return "0";
  if (!std::isfinite(v)) return fmt::format("{}", v);
  const double a = std::abs(v);
  if (a >= 1e-3 && a < 1e4) return fmt::format("{:.3g}", v);
  return fmt::format("{:.2e}", v);
}

std::string format_recall(double v) {
  if (v == 1.0) return "1";
  if (!std::isfinite(v)) return fmt::format("{}", v);
  return fmt::format("{:.4f}", v);
}

std::string format_interval(const Interval& i, std::string (*format)(double)) {
  if (!i.has_interval()) return format(i.mean);
  return fmt::format("{} [{}, {}]", format(i.mean), format(i.low), format(i.high));
}

std::string ranking(std::vector<RankedPolicy> policies, bool higher_is_better) {
  if (policies.empty() || !policies.front().figure->has_interval()) return "";
  std::stable_sort(policies.begin(), policies.end(), [&](const RankedPolicy& a, const RankedPolicy& b) {
    return higher_is_better ? a.figure->mean > b.figure->mean : a.figure->mean < b.figure->mean;
  });
  std::string text = "`" + policies.front().name + "`";
  for (size_t i = 1; i < policies.size(); ++i) {
    const Interval& before = *policies[i - 1].figure;
    const Interval& here = *policies[i].figure;
    const bool separated = higher_is_better ? here.separated_below(before) : before.separated_below(here);
    text += fmt::format(" {} `{}`", separated ? (higher_is_better ? ">" : "<") : "~", policies[i].name);
  }
  return text;
}

void write_precision_markdown(std::ostream& out, const SeededReport& r) {
  const InputInfo& in = r.input;
  fmt::print(out, "# Precision report\n\n");
  fmt::print(out, "- Input: **{}**{}\n", in.kind, in.file.empty() ? "" : fmt::format(" `{}`", in.file));
  fmt::print(out, "- Producer: {}\n", in.producer.empty() ? "(not stated)" : in.producer);
  if (!in.model.empty()) fmt::print(out, "- Model: {}\n", in.model);
  fmt::print(out, "- Shape: {}\n", in.description);
  fmt::print(out, "- Weights: **{}** ({})\n", to_string(in.weights), in.weights_reason);
  if (in.activation_model && !in.activation_model->plain())
    fmt::print(out,
               "- Activations: **a model with outliers, not a capture**: {}. It has the kind of outliers real "
               "activations carry, at sizes chosen here, not those of a trained model.\n",
               in.activation_model->describe());
  if (r.seed_count() > 1)
    fmt::print(out,
               "- Seeds: {} (each draws its own weights and inputs). Every figure is the mean over the seeds with its "
               "95% interval [low, high] (Student t over the seeds' values); row counts and histograms are summed.\n",
               fmt::join(in.seeds, ", "));
  else
    fmt::print(out, "- One {}: figures without intervals; differences between policies are not ranked.\n",
               in.seeds.empty() ? "input" : fmt::format("seed ({})", in.seeds.front()));
  fmt::print(out,
             "- Every figure is against the `{}` policy run on the same x and weights; each policy runs the layer "
             "chained (every stage from its own earlier results, its own cache).\n",
             r.reference);
  if (!r.command.empty()) fmt::print(out, "- Command: `{}`\n", r.command);
  fmt::print(out, "\n> {}\n", fidelity_note(in));

  policies_table(out, r);

  fmt::print(out,
             "\nRecall: |exact top-k ∩ policy top-k| / |exact top-k| per query row of the indexer (CSA layers). A row "
             "has a choice when more entries are visible than top-k keeps; elsewhere every visible entry is kept and "
             "recall is 1 by construction. NMSE = sum (policy - exact)^2 / sum exact^2; cos-diff = 1 - cos(policy, "
             "exact); max rel = max |policy - exact| / |exact| over exact != 0.\n");

  const std::vector<LayerOverSeeds>& layers = r.policies.front().layers;
  for (size_t l = 0; l < layers.size(); ++l) {
    fmt::print(out, "\n## Layer {} (compress ratio {})\n\n", layers[l].layer, layers[l].compress_ratio);
    end_to_end_table(out, r, l);
    rankings(out, r, l);
    paired_table(out, r, l);
    if (layers[l].recall) {
      pooled_recall_table(out, r, l);
      recall_by_position_table(out, r, l);
    }
    output_by_position_table(out, r, l);
    stage_table(out, r, l, "NMSE per stage", [](const StageOverSeeds& e) -> const Interval& { return e.nmse; });
    stage_table(out, r, l, "cos-diff per stage", [](const StageOverSeeds& e) -> const Interval& { return e.cos_diff; });
    stage_table(out, r, l, "Max relative error per stage",
                [](const StageOverSeeds& e) -> const Interval& { return e.max_rel; });
    stage_notes(out, r, l);
  }
}

void write_precision_markdown_file(const std::filesystem::path& path, const SeededReport& report) {
  write_file_atomically(path, [&](std::ostream& out) { write_precision_markdown(out, report); });
}

}  // namespace dsv4::verify
