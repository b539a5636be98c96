#include "verify/report/console.h"

#include <fmt/format.h>

#include <algorithm>

#include "verify/report/text_cells.h"

namespace dsv4::verify {

namespace {

enum class Kind { dense, index_set, not_compared };

Kind kind_of(const Record& r) {
  if (std::holds_alternative<DenseMetrics>(r.metrics)) return Kind::dense;
  if (std::holds_alternative<IndexSetMetrics>(r.metrics)) return Kind::index_set;
  return Kind::not_compared;
}

std::vector<std::string> cells_of(const Record& r) {
  std::vector<std::string> cells{to_string(r.status), stage_label(r), format_shape(r.shape),
                                 r.dtype.empty() ? "-" : r.dtype};
  for (std::string& c : metric_cells(r)) cells.push_back(std::move(c));
  if (!r.note.empty()) cells.push_back(r.note);
  return cells;
}

}  // namespace

void write_console(std::ostream& out, const Report& report) {
  out << fmt::format("dsv4-verify: {}  mode {}  precision {}  backend {}\n", report.file, report.mode,
                     report.precision, report.backend);
  if (!report.tolerances.empty()) out << "tolerances: " << report.tolerances << "\n";
  if (!report.command.empty()) out << "reproduce: " << report.command << "\n";
  out << first_failure_line(report) << "\n";

  // Columns line up among records of the same kind (dense, index-set, not compared).
  std::vector<std::vector<std::string>> rows;
  std::vector<size_t> widths[3];
  for (const Record& r : report.records) {
    rows.push_back(cells_of(r));
    std::vector<size_t>& w = widths[static_cast<int>(kind_of(r))];
    const std::vector<std::string>& cells = rows.back();
    if (w.size() < cells.size()) w.resize(cells.size(), 0);
    for (size_t c = 0; c < cells.size(); ++c) w[c] = std::max(w[c], cells[c].size());
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const Record& r = report.records[i];
    const std::vector<size_t>& w = widths[static_cast<int>(kind_of(r))];
    std::string line;
    for (size_t c = 0; c < rows[i].size(); ++c) {
      line += rows[i][c];
      if (c + 1 < rows[i].size()) line += std::string(w[c] - rows[i][c].size() + 2, ' ');
    }
    out << line << "\n";
    if (r.status == Status::fail) out << "    " << failure_detail(r) << "\n";
  }

  const StatusCounts counts = report.counts();
  out << first_failure_line(report) << "\n";
  if (counts.missing + counts.skipped > 0) {
    out << fmt::format("skipped: {} missing from the capture, {} not replayed\n", counts.missing, counts.skipped);
  }
  out << summary_line(counts) << "\n";
}

}  // namespace dsv4::verify
