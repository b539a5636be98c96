#include "verify/report/markdown.h"

#include <fmt/format.h>

#include "verify/report/atomic_file.h"
#include "verify/report/text_cells.h"

namespace dsv4::verify {

namespace {

// A table cell: '|' would end the cell, a newline the row.
std::string cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

void write_table(std::ostream& out, const Report& report, bool dense, const std::vector<std::string>& metric_heads) {
  std::string head = "| status | layer | call | stage | shape | dtype |";
  std::string rule = "|---|---:|---:|---|---|---|";
  for (const std::string& h : metric_heads) {
    head += fmt::format(" {} |", h);
    rule += "---|";
  }
  head += " detail |";
  rule += "---|";
  out << head << "\n" << rule << "\n";
  for (const Record& r : report.records) {
    const bool is_dense = std::holds_alternative<DenseMetrics>(r.metrics);
    const bool is_index = std::holds_alternative<IndexSetMetrics>(r.metrics);
    if ((dense ? !is_dense : !is_index) || r.status == Status::vacuous) continue;
    std::string row = fmt::format("| {} | {} | {} | `{}` | {} | {} |", to_string(r.status), r.layer, r.call,
                                  cell(r.stage), format_shape(r.shape), cell(r.dtype));
    for (const std::string& c : metric_cells(r)) row += fmt::format(" {} |", cell(c));
    if (dense) row += fmt::format(" {} | {} |", cell(group_cell(r)), cell(rounding_cell(r)));
    std::string detail = failure_detail(r);
    if (!r.note.empty()) {
      if (!detail.empty()) detail += "; ";
      detail += r.note;
    }
    out << row << " " << cell(detail) << " |\n";
  }
  out << "\n";
}

}  // namespace

void write_markdown(std::ostream& out, const Report& report) {
  out << "# dsv4-verify report\n\n";
  out << "| | |\n|---|---|\n";
  out << "| file | " << cell(report.file) << " |\n";
  out << "| mode | " << cell(report.mode) << " |\n";
  out << "| precision | " << cell(report.precision) << " |\n";
  out << "| backend | " << cell(report.backend) << " |\n";
  if (!report.tolerances.empty()) out << "| tolerances | " << cell(report.tolerances) << " |\n";
  if (!report.command.empty()) out << "| reproduce | `" << cell(report.command) << "` |\n";
  out << "\n**" << first_failure_line(report) << "**\n\n";
  if (const std::optional<StageId> first = report.first_failure())
    out << "Replay that record: `" << cell(replay_command(report, *first)) << "`\n\n";
  if (const std::string vacuous = vacuous_everywhere_line(report); !vacuous.empty()) out << cell(vacuous) << "\n\n";

  out << "## Stages\n\n| stage | passed | failed | vacuous | missing | worst record | measured / allowed |\n"
         "|---|---:|---:|---:|---:|---|---|\n";
  for (const StageSummary& s : report.stages()) {
    out << fmt::format(
        "| `{}` | {} | {} | {} | {} | {} | {} |\n", cell(s.stage), s.counts.passed, s.counts.failed, s.counts.vacuous,
        s.counts.missing,
        s.worst ? fmt::format("L{} c{} {}", s.worst->layer, s.worst->call, to_string(s.worst->status)) : "-",
        s.worst ? cell(margin_cell(*s.worst)) : "-");
  }
  out << "\n";

  bool any_dense = false, any_index = false, any_other = false;
  for (const Record& r : report.records) {
    any_dense |= std::holds_alternative<DenseMetrics>(r.metrics);
    any_index |= std::holds_alternative<IndexSetMetrics>(r.metrics);
    any_other |= std::holds_alternative<std::monostate>(r.metrics) || r.status == Status::vacuous;
  }
  if (any_dense) {
    out << "## Dense stages\n\n";
    write_table(out, report, true,
                {"max_abs @ coord (ref, got)", "max_rel", "mean_abs", "nmse", "cos_diff", "pass",
                 "min tolerance (each alone)", "nonfinite", "worst row / token", "rounding"});
  }
  if (any_index) {
    out << "## Index-set stages\n\n";
    write_table(out, report, false, {"rows", "recall", "padding", "invalid"});
  }
  if (any_other) {
    out << "## Not compared\n\n";
    for (const Record& r : report.records) {
      if (!std::holds_alternative<std::monostate>(r.metrics) && r.status != Status::vacuous) continue;
      out << "- " << to_string(r.status) << " `" << stage_label(r) << "`" << (r.note.empty() ? "" : ": ") << r.note
          << "\n";
    }
    out << "\n";
  }
  bool any_diagnosis = false;
  for (const Record& r : report.records) any_diagnosis |= r.diagnosis.has_value();
  if (any_diagnosis) {
    out << "## Diagnosis\n\nThe oracle replayed under each numerics variant of the failing stage (docs/math.md "
           "\"Numerics variants\"), from the stage-local inputs of its first failing call.\n\n";
    for (const Record& r : report.records) {
      if (!r.diagnosis) continue;
      const Diagnosis& d = *r.diagnosis;
      out << "- `" << cell(stage_label(r)) << "`: " << cell(d.summary()) << "\n";
      if (d.trials.empty()) continue;
      out << "\n  | variant | explained | newly differing | differing " << d.unit << " |\n  |---|---|---|---|\n";
      for (const VariantTrial& t : d.trials)
        out << fmt::format("  | `{}` | {} of {} | {} | {} of {} |\n", cell(t.mutation), t.explained, d.oracle_differing,
                           t.introduced, t.differing, d.compared);
      out << "\n";
    }
    out << "\n";
  }
  out << summary_line(report.counts()) << "\n";
}

void write_markdown_file(const std::filesystem::path& path, const Report& report) {
  write_file_atomically(path, [&](std::ostream& out) { write_markdown(out, report); });
}

}  // namespace dsv4::verify
