#include "verify/report/json.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "verify/report/atomic_file.h"

namespace dsv4::verify {

using nlohmann::json;

namespace {

json element_json(const ElementAt& e) {
  if (!e.found()) return nullptr;
  return {{"index", e.index}, {"coord", e.coord}, {"ref", json_number(e.ref)}, {"got", json_number(e.got)}};
}

json numbers(const std::vector<double>& values) {
  json a = json::array();
  for (double v : values) a.push_back(json_number(v));
  return a;
}

json optional_number(const std::optional<double>& v) { return v ? json_number(*v) : json(nullptr); }

}  // namespace

json json_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double json_number(const json& j) {
  if (j.is_number()) return j.get<double>();
  if (j == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (j == "inf") return std::numeric_limits<double>::infinity();
  if (j == "-inf") return -std::numeric_limits<double>::infinity();
  throw std::invalid_argument("json_number: expected a number or \"nan\", \"inf\", \"-inf\", got " + j.dump());
}

json to_json(const Tolerance& t) {
  return {{"atol", json_number(t.atol)},
          {"atol_rms", json_number(t.atol_rms)},
          {"rtol", json_number(t.rtol)},
          {"max_cos_diff", optional_number(t.max_cos_diff)},
          {"max_nmse", optional_number(t.max_nmse)},
          {"bitwise", t.bitwise},
          {"reason", t.reason}};
}

json to_json(const DenseMetrics& m) {
  return {{"n", m.n},
          {"n_finite", m.n_finite},
          {"nonfinite_matched", m.nonfinite_matched},
          {"nonfinite_mismatches", m.nonfinite_mismatches},
          {"first_nonfinite_mismatch", element_json(m.first_nonfinite_mismatch)},
          {"max_abs", json_number(m.max_abs)},
          {"max_abs_at", element_json(m.max_abs_at)},
          {"max_rel", json_number(m.max_rel)},
          {"max_rel_at", element_json(m.max_rel_at)},
          {"mean_abs", json_number(m.mean_abs)},
          {"ref_rms", json_number(m.ref_rms)},
          {"nmse", json_number(m.nmse)},
          {"cos_diff", json_number(m.cos_diff)},
          {"atol", json_number(m.atol)},
          {"rtol", json_number(m.rtol)},
          {"elements_failed", m.elements_failed},
          {"pass_fraction", json_number(m.pass_fraction)},
          {"min_atol_to_pass", json_number(m.min_atol_to_pass)},
          {"min_rtol_to_pass", json_number(m.min_rtol_to_pass)},
          {"bitwise_mismatches", m.bitwise_mismatches},
          {"first_bitwise_mismatch", element_json(m.first_bitwise_mismatch)},
          {"failed_gates", m.failed_gates}};
}

json to_json(const IndexSetMetrics& m) {
  const RowDifference& d = m.first_failure;
  json first = nullptr;
  if (d.row >= 0) {
    first = {{"row", d.row},
             {"reason", d.reason},
             {"ref_valid", d.ref_valid},
             {"got_valid", d.got_valid},
             {"missing", d.missing},
             {"extra", d.extra},
             {"missing_scores", numbers(d.missing_scores)},
             {"extra_scores", numbers(d.extra_scores)},
             {"threshold", json_number(d.threshold)}};
  }
  return {{"rows", m.rows},
          {"rows_exact", m.rows_exact},
          {"rows_tie_equivalent", m.rows_tie_equivalent},
          {"rows_failed", m.rows_failed},
          {"padding_mismatches", m.padding_mismatches},
          {"invalid_entries", m.invalid_entries},
          {"mean_recall", json_number(m.mean_recall)},
          {"worst_recall", json_number(m.worst_recall)},
          {"worst_recall_row", m.worst_recall_row},
          {"first_failure", first}};
}

json to_json(const Record& r) {
  json j = {{"layer", r.layer},
            {"call", r.call},
            {"stage", r.stage},
            {"status", to_string(r.status)},
            {"shape", r.shape},
            {"dtype", r.dtype},
            {"note", r.note},
            {"comparator", nullptr},
            {"tolerance", r.tolerance ? to_json(*r.tolerance) : json(nullptr)},
            {"metrics", nullptr}};
  if (const auto* d = std::get_if<DenseMetrics>(&r.metrics)) {
    j["comparator"] = "dense";
    j["metrics"] = to_json(*d);
  } else if (const auto* i = std::get_if<IndexSetMetrics>(&r.metrics)) {
    j["comparator"] = "index_set";
    j["metrics"] = to_json(*i);
  }
  return j;
}

json to_json(const Report& report) {
  const StatusCounts c = report.counts();
  json records = json::array();
  for (const Record& r : report.records) records.push_back(to_json(r));
  json first = nullptr;
  if (const std::optional<StageId> f = report.first_failure()) {
    first = {{"layer", f->layer}, {"call", f->call}, {"stage", f->stage}};
  }
  return {{"file", report.file},
          {"mode", report.mode},
          {"precision", report.precision},
          {"backend", report.backend},
          {"tolerances", report.tolerances},
          {"command", report.command},
          {"summary", {{"passed", c.passed}, {"failed", c.failed}, {"missing", c.missing}, {"skipped", c.skipped}}},
          {"first_failure", first},
          {"records", records}};
}

void write_json_file(const std::filesystem::path& path, const Report& report) {
  // A file name or note that is not valid UTF-8 gets U+FFFD for its bad bytes rather than no report.
  write_file_atomically(path, to_json(report).dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

}  // namespace dsv4::verify
