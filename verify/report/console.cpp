#include "verify/report/console.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "verify/report/text_cells.h"

namespace dsv4::verify {

namespace {

enum class Kind { dense, index_set, not_compared };

Kind kind_of(const Record& r) {
  if (std::holds_alternative<DenseMetrics>(r.metrics)) return Kind::dense;
  if (std::holds_alternative<IndexSetMetrics>(r.metrics)) return Kind::index_set;
  return Kind::not_compared;
}

std::vector<std::string> record_cells(const Record& r) {
  std::vector<std::string> cells{to_string(r.status), stage_label(r), format_shape(r.shape),
                                 r.dtype.empty() ? "-" : r.dtype};
  for (std::string& c : metric_cells(r)) cells.push_back(std::move(c));
  for (std::string c : {group_cell(r), rounding_cell(r), r.note})
    if (!c.empty()) cells.push_back(std::move(c));
  return cells;
}

// Lines of cells, each column as wide as its widest cell among the lines of the same group.
void write_aligned(std::ostream& out, const std::vector<std::vector<std::string>>& lines, const std::vector<int>& group,
                   const std::vector<std::string>& after) {
  std::vector<std::vector<size_t>> widths;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (widths.size() <= static_cast<size_t>(group[i])) widths.resize(group[i] + 1);
    std::vector<size_t>& w = widths[group[i]];
    if (w.size() < lines[i].size()) w.resize(lines[i].size(), 0);
    for (size_t c = 0; c < lines[i].size(); ++c) w[c] = std::max(w[c], lines[i][c].size());
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<size_t>& w = widths[group[i]];
    std::string line;
    for (size_t c = 0; c < lines[i].size(); ++c) {
      line += lines[i][c];
      if (c + 1 < lines[i].size()) line += std::string(w[c] - lines[i][c].size() + 2, ' ');
    }
    out << line << "\n";
    if (!after[i].empty()) out << "    " << after[i] << "\n";
  }
}

std::string stage_status(const StatusCounts& c) {
  if (c.failed) return to_string(Status::fail);
  if (c.passed) return to_string(Status::pass);
  if (c.vacuous) return to_string(Status::vacuous);
  if (c.missing) return to_string(Status::missing);
  return to_string(Status::skipped);
}

// The key metrics of a stage's worst record (of the comparison its verdict comes from), shorter
// than its full record line.
std::string key_metrics(const Record& r) {
  if (const auto* d = std::get_if<DenseMetrics>(&r.verdict_metrics())) {
    std::string s =
        fmt::format("max_abs {} {}  cos_diff {}  worst row cos_diff {}", format_metric(d->max_abs),
                    format_element(d->max_abs_at), format_metric(d->cos_diff), format_metric(d->rows.cos_diff));
    if (d->rounding) {
      const FlipCensus& c = *d->rounding;
      s += fmt::format("  flips {} ({} explained), {} unexplained", c.flips + c.multi_step,
                       c.flips_explained + c.multi_step_explained, c.unexplained);
    }
    return s;
  }
  if (const auto* i = std::get_if<IndexSetMetrics>(&r.verdict_metrics())) {
    return fmt::format("rows {}: exact {}, ties {}, failed {}", i->rows, i->rows_exact, i->rows_tie_equivalent,
                       i->rows_failed);
  }
  return "";
}

std::vector<std::string> stage_cells(const StageSummary& s) {
  const StatusCounts& c = s.counts;
  const int64_t records = c.passed + c.failed + c.vacuous + c.missing + c.skipped;
  std::string tally = fmt::format("{} record{}: {} passed, {} failed, {} vacuous", records, records == 1 ? "" : "s",
                                  c.passed, c.failed, c.vacuous);
  if (c.missing) tally += fmt::format(", {} missing", c.missing);
  if (c.skipped) tally += fmt::format(", {} skipped", c.skipped);
  std::vector<std::string> cells{stage_status(c), s.stage, tally};
  if (s.worst) {
    cells.push_back(fmt::format("worst L{} c{}: {}", s.worst->layer, s.worst->call, margin_cell(*s.worst)));
    cells.push_back(key_metrics(*s.worst));
  }
  return cells;
}

}  // namespace

std::string record_lines(const Record& r) {
  std::ostringstream out;
  write_aligned(out, {record_cells(r)}, {0}, {failure_detail(r)});
  std::string text = out.str();
  text.pop_back();  // the last line's newline
  return text;
}

void write_console(std::ostream& out, const Report& report, const ConsoleOptions& options) {
  out << fmt::format("dsv4-verify: {}  mode {}  precision {}  backend {}\n", report.file, report.mode, report.precision,
                     report.backend);
  if (!report.tolerances.empty()) out << "tolerances: " << report.tolerances << "\n";
  if (!report.command.empty()) out << "reproduce: " << report.command << "\n";
  out << first_failure_line(report) << "\n";

  if (options.verbose) {
    // Columns line up among records of the same kind (dense, index-set, not compared).
    std::vector<std::vector<std::string>> lines;
    std::vector<int> group;
    std::vector<std::string> after;
    for (const Record& r : report.records) {
      lines.push_back(record_cells(r));
      group.push_back(static_cast<int>(kind_of(r)));
      std::string detail = failure_detail(r);
      if (r.diagnosis) detail += (detail.empty() ? "" : "\n    ") + ("diagnosis: " + r.diagnosis->summary());
      after.push_back(detail);
    }
    write_aligned(out, lines, group, after);
    out << "\n";
  }

  const std::vector<StageSummary> stages = report.stages();
  std::vector<std::vector<std::string>> lines;
  for (const StageSummary& s : stages) lines.push_back(stage_cells(s));
  write_aligned(out, lines, std::vector<int>(lines.size(), 0), std::vector<std::string>(lines.size()));

  out << first_failure_line(report) << "\n";
  if (const std::optional<StageId> first = report.first_failure()) {
    for (const Record& r : report.records) {
      if (r.id() != *first) continue;
      out << "    " << failure_detail(r) << "\n";
      if (const std::string census = rounding_cell(r); !census.empty()) out << "    " << census << "\n";
      if (r.diagnosis) out << "    diagnosis: " << r.diagnosis->summary() << "\n";
      break;
    }
    out << "    replay it: " << replay_command(report, *first) << "\n";
  }
  if (const std::string vacuous = vacuous_everywhere_line(report); !vacuous.empty()) out << vacuous << "\n";
  const StatusCounts counts = report.counts();
  if (counts.missing + counts.skipped + counts.vacuous > 0) {
    out << fmt::format("skipped: {} missing from the capture, {} not replayed, {} vacuous (nothing to compare)\n",
                       counts.missing, counts.skipped, counts.vacuous);
  }
  out << summary_line(counts) << "\n";
}

}  // namespace dsv4::verify
