#include "verify/report/text_cells.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dsv4::verify {

namespace {

std::string join_indices(const std::vector<int64_t>& indices, const std::vector<double>& scores) {
  std::string s;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(indices[i]);
    if (i < scores.size()) s += fmt::format(" (score {})", format_value(scores[i]));
  }
  return fmt::format("{{{}}}", s);
}

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string s;
  for (const std::string& p : parts) {
    if (!s.empty()) s += separator;
    s += p;
  }
  return s;
}

std::vector<std::string> dense_cells(const DenseMetrics& m) {
  return {
      fmt::format("max_abs {} {}", format_metric(m.max_abs), format_element(m.max_abs_at)),
      fmt::format("max_rel {}", format_metric(m.max_rel)),
      fmt::format("mean_abs {}", format_metric(m.mean_abs)),
      fmt::format("nmse {}", format_metric(m.nmse)),
      fmt::format("cos_diff {}", format_metric(m.cos_diff)),
      fmt::format("pass {}/{}", m.n - m.elements_failed, m.n),
      fmt::format("min atol {} | min rtol {}", format_metric(m.min_atol_to_pass), format_metric(m.min_rtol_to_pass)),
      fmt::format("nonfinite {}", m.nonfinite_mismatches + m.nonfinite_not_allowed),
  };
}

std::vector<std::string> index_cells(const IndexSetMetrics& m) {
  std::string worst = fmt::format("recall mean {:.6f} worst {:.6f}", m.mean_recall, m.worst_recall);
  if (m.worst_recall_row >= 0) worst += fmt::format(" @row {}", m.worst_recall_row);
  return {
      fmt::format("rows {}: exact {}, ties {}, failed {}", m.rows, m.rows_exact, m.rows_tie_equivalent, m.rows_failed),
      worst,
      fmt::format("padding mismatches {}", m.padding_mismatches),
      fmt::format("invalid entries {}", m.invalid_entries),
  };
}

std::string group_text(const GroupMetrics& g) {
  std::string s = fmt::format("{} cos_diff {}", g.grouping, format_metric(g.cos_diff));
  if (g.cos_diff > 0) s += fmt::format(" @{}", format_shape(g.cos_diff_at));
  s += fmt::format(" nmse {}", format_metric(g.nmse));
  if (g.nmse > 0) s += fmt::format(" @{}", format_shape(g.nmse_at));
  s += fmt::format(" max_abs/rms {}", format_metric(g.max_abs_over_rms));
  if (g.max_abs_over_rms_at.found()) s += fmt::format(" @{}", format_shape(g.max_abs_over_rms_at.coord));
  return s;
}

std::string flip_text(const FlipAt& f) {
  return fmt::format("@{} ref {} got {} ({} step{}), pre-rounding {} bound {}{}: {}", format_shape(f.coord),
                     format_value(f.ref), format_value(f.got), f.steps, std::llabs(f.steps) == 1 ? "" : "s",
                     format_value(f.pre_rounding), format_metric(f.bound),
                     f.scale != 1.0 ? fmt::format(" scale {}", format_value(f.scale)) : "", f.why);
}

std::string dense_failure(const DenseMetrics& m, const Tolerance* tol) {
  std::string s = fmt::format("failed {}:", join(m.failed_gates, ","));
  if (m.nonfinite_mismatches + m.nonfinite_not_allowed > 0) {
    const std::string holds = m.nonfinite_rule.describe() == "none"
                                  ? "finite values only"
                                  : "finite values and " + m.nonfinite_rule.describe();
    s += fmt::format(
        " non-finite: {} positions differ, {} pairs hold on both sides a value the stage cannot hold "
        "({}), first {};",
        m.nonfinite_mismatches, m.nonfinite_not_allowed, holds, format_element(m.first_nonfinite_mismatch));
  }
  if (tol && tol->bitwise) {
    s += fmt::format(" {} values differ in bits, first {};", m.bitwise_mismatches,
                     format_element(m.first_bitwise_mismatch));
  } else {
    s += fmt::format(" limits atol {} rtol {}", format_metric(m.atol), format_metric(m.rtol));
    if (tol && tol->max_cos_diff) s += fmt::format(" cos_diff {}", format_metric(*tol->max_cos_diff));
    if (tol && tol->max_nmse) s += fmt::format(" nmse {}", format_metric(*tol->max_nmse));
    if (m.worst_ratio_at.found()) s += fmt::format("; worst element {}", format_element(m.worst_ratio_at));
  }
  if (m.rounding) {
    const FlipCensus& c = *m.rounding;
    if (c.first_unexplained.found()) s += "; first unexplained " + flip_text(c.first_unexplained);
    if (c.first_unexplained_scale.found()) {
      const BlockScaleAt& b = c.first_unexplained_scale;
      s +=
          fmt::format("; block {} of row @{}: scale {} where the reference's is {} (amax {} within {} allows no other)",
                      b.block, format_shape(b.row_coord), format_value(b.got_scale), format_value(b.ref_scale),
                      format_value(b.amax), format_metric(b.amax_bound));
    }
    const bool signed_split = c.bias_direction == "up" || c.bias_direction == "down";
    const int64_t n = signed_split ? c.up + c.down : c.toward_zero + c.away_from_zero;
    const int64_t majority = signed_split ? std::max(c.up, c.down) : std::max(c.toward_zero, c.away_from_zero);
    if (std::find(m.failed_gates.begin(), m.failed_gates.end(), "rounding bias") != m.failed_gates.end())
      s += fmt::format("; {} of {} differences go {} (p {} that a fair rounding splits so unevenly)", majority, n,
                       c.bias_direction, format_metric(c.bias_p_value));
  }
  return s;
}

std::string index_failure(const IndexSetMetrics& m) {
  const RowDifference& d = m.first_failure;
  std::string s = fmt::format("failed: {} rows; first row {}: {}; missing {} extra {}", m.rows_failed, d.row, d.reason,
                              join_indices(d.missing, d.missing_scores), join_indices(d.extra, d.extra_scores));
  if (!std::isnan(d.threshold)) s += fmt::format("; threshold {}", format_value(d.threshold));
  return s;
}

// A shell word: quoted when the shell would split or expand it.
std::string shell_word(const std::string& a) {
  const bool plain = !a.empty() && a.find_first_not_of(
                                       "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                       "0123456789-_./=:,+@%") == std::string::npos;
  if (plain) return a;
  std::string q(1, '\'');
  for (char c : a) {
    if (c == '\'')
      q.append("'\\''");  // close, an escaped quote, reopen
    else
      q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

}  // namespace

std::string format_metric(double v) { return std::isfinite(v) ? fmt::format("{:.3e}", v) : fmt::format("{}", v); }

std::string format_value(double v) { return fmt::format("{}", v); }

std::string format_ratio(double ratio) {
  if (!std::isfinite(ratio)) return fmt::format("{}", ratio);
  return ratio < 1000 ? fmt::format("{:.3g}", ratio) : fmt::format("{:.1e}", ratio);
}

std::string format_element(const ElementAt& e) {
  if (!e.found()) return "-";
  return fmt::format("@{} (ref {}, got {})", format_shape(e.coord), format_value(e.ref), format_value(e.got));
}

std::string stage_label(const StageId& id) { return fmt::format("L{} c{} {}", id.layer, id.call, id.stage); }

std::string stage_label(const Record& r) { return stage_label(r.id()); }

std::vector<std::string> metric_cells(const Record& r) {
  if (const auto* d = std::get_if<DenseMetrics>(&r.metrics)) return dense_cells(*d);
  if (const auto* i = std::get_if<IndexSetMetrics>(&r.metrics)) return index_cells(*i);
  return {};
}

std::string rounding_cell(const Record& r) {
  const auto* d = std::get_if<DenseMetrics>(&r.verdict_metrics());
  if (!d || !d->rounding) return "";
  const FlipCensus& c = *d->rounding;
  std::string s = fmt::format("rounding {}: {} of {} differ, flips {} ({} explained)", c.format, c.differing,
                              c.elements, c.flips, c.flips_explained);
  if (c.multi_step) s += fmt::format(", multi-step {} ({} explained)", c.multi_step, c.multi_step_explained);
  if (c.off_grid) s += fmt::format(", off grid {}", c.off_grid);
  s += fmt::format(", {} unexplained, ties {} ({} flipped)", c.unexplained, c.ties, c.tie_flips);
  s += fmt::format(", up {} / down {}, toward zero {} / away {}", c.up, c.down, c.toward_zero, c.away_from_zero);
  if (c.bias_p_value < 1.0) s += fmt::format(" (p {})", format_metric(c.bias_p_value));
  if (c.max_reach_at.found())
    s += fmt::format(", farthest boundary needed {} of the bound @{}", format_metric(c.max_reach),
                     format_shape(c.max_reach_at.coord));
  if (c.blocks) {
    s += fmt::format(", blocks {}", c.blocks);
    if (c.block_scales_differ) s += fmt::format(" ({} on a neighbouring scale)", c.block_scales_differ);
    if (c.block_scales_unexplained) s += fmt::format(", {} on a scale not allowed", c.block_scales_unexplained);
  }
  return s;
}

std::string group_cell(const Record& r) {
  const auto* d = std::get_if<DenseMetrics>(&r.metrics);
  if (!d || d->status == Status::vacuous) return "";
  std::string s = group_text(d->rows);
  if (d->tokens) s += "; " + group_text(*d->tokens);
  return s;
}

std::string margin_cell(const Record& r) {
  if (r.status != Status::pass && r.status != Status::fail) return "-";
  const double ratio = worst_ratio(r);
  const std::string own = r.verdict ? " (own error)" : "";
  if (const auto* d = std::get_if<DenseMetrics>(&r.verdict_metrics())) {
    if (d->worst_ratio_gate.empty()) return "0" + own;
    return fmt::format("{} of {}{}", format_ratio(ratio), d->worst_ratio_gate, own);
  }
  if (std::holds_alternative<IndexSetMetrics>(r.verdict_metrics()))
    return fmt::format("{} of tie window{}", format_ratio(ratio), own);
  return "-";
}

std::string failure_detail(const Record& r) {
  if (r.status != Status::fail) return "";
  const Tolerance* tol = r.tolerance ? &*r.tolerance : nullptr;
  const std::string own = r.verdict ? "on the stage's own error: " : "";
  if (const auto* d = std::get_if<DenseMetrics>(&r.verdict_metrics())) return own + dense_failure(*d, tol);
  if (const auto* i = std::get_if<IndexSetMetrics>(&r.verdict_metrics())) return own + index_failure(*i);
  return "failed";
}

std::string replay_command(const Report& report, const StageId& id) {
  std::string s = "dsv4-verify replay";
  s.append(" ").append(shell_word(report.file));
  for (const std::string& option : report.record_options) s.append(" ").append(shell_word(option));
  return s + fmt::format(" --layer {} --call {} --stage {}", id.layer, id.call, shell_word(id.stage));
}

std::string summary_line(const StatusCounts& c) {
  return fmt::format("summary: {} passed, {} failed, {} skipped", c.passed, c.failed,
                     c.missing + c.skipped + c.vacuous);
}

std::string first_failure_line(const Report& report) {
  const std::optional<StageId> first = report.first_failure();
  if (!first) return "first failure: none";
  return fmt::format("first failure: layer {}, call {}, {}", first->layer, first->call, first->stage);
}

std::string vacuous_everywhere_line(const Report& report) {
  std::vector<std::string> names;
  for (const StageSummary& s : report.stages()) {
    if (!s.vacuous_everywhere()) continue;
    std::vector<std::string> layers;
    for (int l : s.layers) layers.push_back(std::to_string(l));
    names.push_back(fmt::format("{} (layer{} {})", s.stage, layers.size() == 1 ? "" : "s", join(layers, ", ")));
  }
  if (names.empty()) return "";
  return "vacuous in every call (nothing was compared): " + join(names, "; ");
}

}  // namespace dsv4::verify
