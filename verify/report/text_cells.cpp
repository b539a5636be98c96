#include "verify/report/text_cells.h"

#include <fmt/format.h>

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

std::vector<std::string> dense_cells(const DenseMetrics& m) {
  return {
      fmt::format("max_abs {} {}", format_metric(m.max_abs), format_element(m.max_abs_at)),
      fmt::format("max_rel {}", format_metric(m.max_rel)),
      fmt::format("mean_abs {}", format_metric(m.mean_abs)),
      fmt::format("nmse {}", format_metric(m.nmse)),
      fmt::format("cos_diff {}", format_metric(m.cos_diff)),
      fmt::format("pass {}/{}", m.n - m.elements_failed, m.n),
      fmt::format("min atol {} | rtol {}", format_metric(m.min_atol_to_pass), format_metric(m.min_rtol_to_pass)),
      fmt::format("nonfinite {}", m.nonfinite_mismatches),
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

std::string dense_failure(const DenseMetrics& m, const Tolerance* tol) {
  std::string gates;
  for (const std::string& g : m.failed_gates) {
    if (!gates.empty()) gates += ',';
    gates += g;
  }
  std::string s = fmt::format("failed {}:", gates);
  if (m.nonfinite_mismatches > 0) {
    s += fmt::format(" first non-finite mismatch {};", format_element(m.first_nonfinite_mismatch));
  }
  if (tol && tol->bitwise) {
    s += fmt::format(" {} values differ in bits, first {};", m.bitwise_mismatches, format_element(m.first_bitwise_mismatch));
  } else {
    s += fmt::format(" limits atol {} rtol {}", format_metric(m.atol), format_metric(m.rtol));
    if (tol && tol->max_cos_diff) s += fmt::format(" cos_diff {}", format_metric(*tol->max_cos_diff));
    if (tol && tol->max_nmse) s += fmt::format(" nmse {}", format_metric(*tol->max_nmse));
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

}  // namespace

std::string format_metric(double v) { return std::isfinite(v) ? fmt::format("{:.3e}", v) : fmt::format("{}", v); }

std::string format_value(double v) { return fmt::format("{}", v); }

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

std::string failure_detail(const Record& r) {
  if (r.status != Status::fail) return "";
  const Tolerance* tol = r.tolerance ? &*r.tolerance : nullptr;
  if (const auto* d = std::get_if<DenseMetrics>(&r.metrics)) return dense_failure(*d, tol);
  if (const auto* i = std::get_if<IndexSetMetrics>(&r.metrics)) return index_failure(*i);
  return "failed";
}

std::string summary_line(const StatusCounts& c) {
  return fmt::format("summary: {} passed, {} failed, {} skipped", c.passed, c.failed, c.missing + c.skipped);
}

std::string first_failure_line(const Report& report) {
  const std::optional<StageId> first = report.first_failure();
  if (!first) return "first failure: none";
  return fmt::format("first failure: layer {}, call {}, {}", first->layer, first->call, first->stage);
}

}  // namespace dsv4::verify
