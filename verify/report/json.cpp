#include "verify/report/json.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "verify/report/atomic_file.h"
#include "verify/report/text_cells.h"

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

json to_json(const GroupMetrics& g) {
  return {{"grouping", g.grouping},
          {"groups", g.groups},
          {"group_size", g.group_size},
          {"cos_diff", json_number(g.cos_diff)},
          {"cos_diff_at", g.cos_diff_at},
          {"nmse", json_number(g.nmse)},
          {"nmse_at", g.nmse_at},
          {"max_abs_over_rms", json_number(g.max_abs_over_rms)},
          {"max_abs_over_rms_at", element_json(g.max_abs_over_rms_at)}};
}

json to_json(const FlipAt& f) {
  if (!f.found()) return nullptr;
  return {{"index", f.index},
          {"coord", f.coord},
          {"ref", json_number(f.ref)},
          {"got", json_number(f.got)},
          {"pre_rounding", json_number(f.pre_rounding)},
          {"bound", json_number(f.bound)},
          {"scale", json_number(f.scale)},
          {"steps", f.steps},
          {"why", f.why}};
}

json to_json(const FlipCensus& c) {
  const json first = to_json(c.first_unexplained);
  json scale = nullptr;
  if (c.first_unexplained_scale.found()) {
    const BlockScaleAt& b = c.first_unexplained_scale;
    scale = {{"row", b.row},
             {"row_coord", b.row_coord},
             {"block", b.block},
             {"ref_scale", json_number(b.ref_scale)},
             {"got_scale", json_number(b.got_scale)},
             {"amax", json_number(b.amax)},
             {"amax_bound", json_number(b.amax_bound)}};
  }
  return {{"format", c.format},
          {"elements", c.elements},
          {"differing", c.differing},
          {"flips", c.flips},
          {"flips_explained", c.flips_explained},
          {"multi_step", c.multi_step},
          {"multi_step_explained", c.multi_step_explained},
          {"off_grid", c.off_grid},
          {"unexplained", c.unexplained},
          {"ties", c.ties},
          {"tie_flips", c.tie_flips},
          {"up", c.up},
          {"down", c.down},
          {"toward_zero", c.toward_zero},
          {"away_from_zero", c.away_from_zero},
          {"bias_p_value", json_number(c.bias_p_value)},
          {"bias_direction", c.bias_direction},
          {"bias_share", json_number(c.bias_share)},
          {"blocks", c.blocks},
          {"block_scales_differ", c.block_scales_differ},
          {"block_scales_unexplained", c.block_scales_unexplained},
          {"max_reach", json_number(c.max_reach)},
          {"max_reach_at", to_json(c.max_reach_at)},
          {"first_unexplained", first},
          {"first_unexplained_scale", scale}};
}

json counts_json(const StatusCounts& c) {
  return {{"passed", c.passed},
          {"failed", c.failed},
          {"vacuous", c.vacuous},
          {"missing", c.missing},
          {"skipped", c.skipped}};
}

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

namespace {

json bound_json(const std::optional<ErrorBound>& b) {
  if (!b) return nullptr;
  return {{"atol", json_number(b->atol)},
          {"atol_rms", json_number(b->atol_rms)},
          {"rtol", json_number(b->rtol)},
          {"reason", b->reason}};
}

}  // namespace

json to_json(const Tolerance& t) {
  return {{"atol", json_number(t.atol)},
          {"atol_rms", json_number(t.atol_rms)},
          {"rtol", json_number(t.rtol)},
          {"max_cos_diff", optional_number(t.max_cos_diff)},
          {"max_nmse", optional_number(t.max_nmse)},
          {"bitwise", t.bitwise},
          {"pre_rounding", bound_json(t.pre_rounding)},
          {"pre_rounding_tail", bound_json(t.pre_rounding_tail)},
          {"reason", t.reason}};
}

json to_json(const DenseMetrics& m) {
  return {{"n", m.n},
          {"n_finite", m.n_finite},
          {"nonfinite_allowed", m.nonfinite_rule.describe()},
          {"nonfinite_matched", m.nonfinite_matched},
          {"nonfinite_mismatches", m.nonfinite_mismatches},
          {"nonfinite_not_allowed", m.nonfinite_not_allowed},
          {"first_nonfinite_mismatch", element_json(m.first_nonfinite_mismatch)},
          {"max_abs", json_number(m.max_abs)},
          {"max_abs_at", element_json(m.max_abs_at)},
          {"max_rel", json_number(m.max_rel)},
          {"max_rel_at", element_json(m.max_rel_at)},
          {"mean_abs", json_number(m.mean_abs)},
          {"ref_rms", json_number(m.ref_rms)},
          {"nmse", json_number(m.nmse)},
          {"cos_diff", json_number(m.cos_diff)},
          {"rows", to_json(m.rows)},
          {"tokens", m.tokens ? to_json(*m.tokens) : json(nullptr)},
          {"atol", json_number(m.atol)},
          {"rtol", json_number(m.rtol)},
          {"elements_failed", m.elements_failed},
          {"pass_fraction", json_number(m.pass_fraction)},
          {"min_atol_to_pass", json_number(m.min_atol_to_pass)},
          {"min_rtol_to_pass", json_number(m.min_rtol_to_pass)},
          {"bitwise_mismatches", m.bitwise_mismatches},
          {"first_bitwise_mismatch", element_json(m.first_bitwise_mismatch)},
          {"worst_ratio", json_number(m.worst_ratio)},
          {"worst_ratio_gate", m.worst_ratio_gate},
          {"worst_ratio_at", element_json(m.worst_ratio_at)},
          {"rounding", m.rounding ? to_json(*m.rounding) : json(nullptr)},
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
          {"worst_ratio", json_number(m.worst_ratio)},
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
  if (r.diagnosis) {
    const Diagnosis& d = *r.diagnosis;
    json trials = json::array();
    for (const VariantTrial& t : d.trials)
      trials.push_back({{"mutation", t.mutation},
                        {"describe", t.describe},
                        {"explained", t.explained},
                        {"introduced", t.introduced},
                        {"differing", t.differing},
                        {"reproduces", t.reproduces()}});
    j["diagnosis"] = {{"call", d.call},         {"unit", d.unit},
                      {"compared", d.compared}, {"oracle_differing", d.oracle_differing},
                      {"summary", d.summary()}, {"trials", trials}};
  }
  const auto metrics_json = [](const Metrics& m) -> json {
    if (const auto* d = std::get_if<DenseMetrics>(&m)) return to_json(*d);
    if (const auto* i = std::get_if<IndexSetMetrics>(&m)) return to_json(*i);
    return nullptr;
  };
  if (const auto* d = std::get_if<DenseMetrics>(&r.metrics))
    j["comparator"] = d->rounding ? "rounded" : "dense";
  else if (std::holds_alternative<IndexSetMetrics>(r.metrics))
    j["comparator"] = "index_set";
  j["metrics"] = metrics_json(r.metrics);
  j["verdict_metrics"] = r.verdict ? metrics_json(*r.verdict) : json(nullptr);
  return j;
}

json to_json(const Report& report) {
  const StatusCounts c = report.counts();
  json records = json::array();
  for (const Record& r : report.records) records.push_back(to_json(r));
  json first = nullptr;
  if (const std::optional<StageId> f = report.first_failure()) {
    first = {{"layer", f->layer}, {"call", f->call}, {"stage", f->stage}, {"replay", replay_command(report, *f)}};
  }
  json stages = json::array();
  json vacuous_everywhere = json::array();
  for (const StageSummary& s : report.stages()) {
    json worst = nullptr;
    if (s.worst) {
      worst = {{"layer", s.worst->layer},
               {"call", s.worst->call},
               {"status", to_string(s.worst->status)},
               {"worst_ratio", json_number(worst_ratio(*s.worst))}};
    }
    stages.push_back({{"stage", s.stage}, {"counts", counts_json(s.counts)}, {"layers", s.layers}, {"worst", worst}});
    if (s.vacuous_everywhere()) vacuous_everywhere.push_back({{"stage", s.stage}, {"layers", s.layers}});
  }
  return {{"file", report.file},
          {"mode", report.mode},
          {"precision", report.precision},
          {"backend", report.backend},
          {"tolerances", report.tolerances},
          {"command", report.command},
          {"summary", counts_json(c)},
          {"first_failure", first},
          {"stages", stages},
          {"vacuous_everywhere", vacuous_everywhere},
          {"records", records}};
}

void write_json_file(const std::filesystem::path& path, const Report& report) {
  // A file name or note that is not valid UTF-8 gets U+FFFD for its bad bytes rather than no report.
  write_file_atomically(path, to_json(report).dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

}  // namespace dsv4::verify
