#include "verify/precision/report_markdown.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <cmath>

#include "verify/report/atomic_file.h"

namespace dsv4::verify {

namespace {

void table_header(std::ostream& out, const std::string& first, const PrecisionReport& r) {
  fmt::print(out, "| {} |", first);
  for (const PolicyResult& p : r.policies) fmt::print(out, " {} |", p.policy.name);
  fmt::print(out, "\n|---|");
  for (size_t i = 0; i < r.policies.size(); ++i) fmt::print(out, "---:|");
  fmt::print(out, "\n");
}

std::string recall_cell(const RecallSummary& s) {
  return s.rows == 0 ? "-" : format_figure(s.mean);
}

void end_to_end_table(std::ostream& out, const PrecisionReport& r, size_t l) {
  fmt::print(out,
             "| policy | recall mean | recall mean (rows with a choice) | worst row | attn/core NMSE | attn/core "
             "cos-diff | out NMSE | out cos-diff | out max rel | seconds |\n"
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
  for (const PolicyResult& p : r.policies) {
    const LayerResult& layer = p.layers[l];
    std::string mean = "-", mean_choice = "-", worst = "-";
    if (layer.recall) {
      const RecallSummary s = layer.recall->summary();
      const RecallRow& w = layer.recall->worst_row();
      mean = recall_cell(s);
      mean_choice = s.rows_with_choice ? fmt::format("{} ({} rows)", format_figure(s.mean_with_choice), s.rows_with_choice)
                                       : "- (no row has a choice)";
      if (w.call >= 0)
        worst = fmt::format("{} (call {}, seq {}, position {})", format_figure(w.recall), w.call, w.seq, w.position);
    }
    const ErrorStats& attn = layer.stage(kAttentionOutputStage).error;
    const ErrorStats& o = layer.stage(kLayerOutputStage).error;
    fmt::print(out, "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1f} |\n", p.policy.name, mean, mean_choice,
               worst, format_figure(attn.nmse()), format_figure(attn.cos_diff()), format_figure(o.nmse()),
               format_figure(o.cos_diff()), format_figure(o.max_rel()), p.seconds);
  }
}

void recall_by_position_table(std::ostream& out, const PrecisionReport& r, size_t l) {
  const RecallStats& first = *r.policies.front().layers[l].recall;
  if (first.buckets().empty()) return;
  fmt::print(out, "\nMean top-k recall by query position (rows with a choice / rows in the bucket):\n\n");
  table_header(out, "positions (choice/rows)", r);
  const std::vector<RecallBucket> reference = first.buckets();
  for (size_t b = 0; b < reference.size(); ++b) {
    fmt::print(out, "| {}-{} ({}/{}) |", reference[b].first_position, reference[b].last_position,
               reference[b].summary.rows_with_choice, reference[b].summary.rows);
    for (const PolicyResult& p : r.policies)
      fmt::print(out, " {} |", recall_cell(p.layers[l].recall->buckets()[b].summary));
    fmt::print(out, "\n");
  }
}

template <class Figure>
void stage_table(std::ostream& out, const PrecisionReport& r, size_t l, const std::string& title, Figure figure) {
  fmt::print(out, "\n{}:\n\n", title);
  table_header(out, "stage", r);
  const LayerResult& first = r.policies.front().layers[l];
  for (size_t s = 0; s < first.stages.size(); ++s) {
    fmt::print(out, "| {} |", first.stages[s].stage);
    for (const PolicyResult& p : r.policies) fmt::print(out, " {} |", format_figure(figure(p.layers[l].stages[s].error)));
    fmt::print(out, "\n");
  }
}

void stage_notes(std::ostream& out, const PrecisionReport& r, size_t l) {
  bool any = false;
  for (const PolicyResult& p : r.policies)
    for (const StageError& s : p.layers[l].stages) {
      if (s.note.empty() && s.error.nonfinite_mismatches() == 0) continue;
      if (!any) fmt::print(out, "\nNotes:\n\n");
      any = true;
      fmt::print(out, "- {} {}: {}{}\n", p.policy.name, s.stage, s.note,
                 s.error.nonfinite_mismatches()
                     ? fmt::format("{}{} non-finite mismatches", s.note.empty() ? "" : "; ", s.error.nonfinite_mismatches())
                     : std::string());
    }
}

}  // namespace

std::string format_figure(double v) {
  if (v == 0.0) return "0";
  if (!std::isfinite(v)) return fmt::format("{}", v);
  const double a = std::abs(v);
  if (a >= 1e-3 && a < 1e4) return fmt::format("{:.3g}", v);
  return fmt::format("{:.2e}", v);
}

void write_precision_markdown(std::ostream& out, const PrecisionReport& r) {
  const InputInfo& in = r.input;
  fmt::print(out, "# Precision report\n\n");
  fmt::print(out, "- Input: **{}**{}\n", in.kind, in.file.empty() ? "" : fmt::format(" `{}`", in.file));
  fmt::print(out, "- Producer: {}\n", in.producer.empty() ? "(not stated)" : in.producer);
  if (!in.model.empty()) fmt::print(out, "- Model: {}\n", in.model);
  fmt::print(out, "- Shape: {}\n", in.description);
  fmt::print(out, "- Weights: **{}** ({})\n", to_string(in.weights), in.weights_reason);
  fmt::print(out, "- Every figure is against the `{}` policy run on the same x and weights; each policy runs the layer "
                  "chained (every stage from its own earlier results, its own cache).\n",
             r.reference);
  if (!r.command.empty()) fmt::print(out, "- Command: `{}`\n", r.command);
  fmt::print(out, "\n> {}\n", fidelity_note(in));

  fmt::print(out, "\n## Policies\n\n| policy | settings |\n|---|---|\n");
  for (const PolicyResult& p : r.policies) fmt::print(out, "| {} | `{}` |\n", p.policy.name, p.policy.describe());

  fmt::print(out,
             "\nRecall: |exact top-k ∩ policy top-k| / |exact top-k| per query row of the indexer (CSA layers). A row "
             "has a choice when more entries are visible than top-k keeps; elsewhere every visible entry is kept and "
             "recall is 1 by construction. NMSE = sum (policy - exact)^2 / sum exact^2; cos-diff = 1 - cos(policy, "
             "exact); max rel = max |policy - exact| / |exact| over exact != 0.\n");

  const std::vector<LayerResult>& layers = r.policies.front().layers;
  for (size_t l = 0; l < layers.size(); ++l) {
    fmt::print(out, "\n## Layer {} (compress ratio {})\n\n", layers[l].layer, layers[l].compress_ratio);
    end_to_end_table(out, r, l);
    if (layers[l].recall) recall_by_position_table(out, r, l);
    stage_table(out, r, l, "NMSE per stage", [](const ErrorStats& e) { return e.nmse(); });
    stage_table(out, r, l, "cos-diff per stage", [](const ErrorStats& e) { return e.cos_diff(); });
    stage_table(out, r, l, "Max relative error per stage", [](const ErrorStats& e) { return e.max_rel(); });
    stage_notes(out, r, l);
  }
}

void write_precision_markdown_file(const std::filesystem::path& path, const PrecisionReport& report) {
  write_file_atomically(path, [&](std::ostream& out) { write_precision_markdown(out, report); });
}

}  // namespace dsv4::verify
