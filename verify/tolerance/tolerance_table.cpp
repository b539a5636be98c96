#include "verify/tolerance/tolerance_table.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "reference/stage_registry.h"
#include "verify/paths/data_dir.h"

namespace dsv4::verify {

namespace {

using nlohmann::json;

// A stage a replay compares: a dataset of capture-format.md other than the input x and the
// cache/... inputs of stage-local replay; nullptr for any other name.
const ref::StageDef* compared_stage(std::string_view name) {
  const ref::StageDef* s = ref::find_stage(name);
  return s && s->is_compared() ? s : nullptr;
}

[[noreturn]] void refuse(const std::string& source, const std::string& key, const std::string& problem) {
  throw std::invalid_argument("tolerance table " + source + (key.empty() ? "" : ": " + key) + ": " + problem);
}

double non_negative(const json& row, const char* name, const std::string& source, const std::string& key) {
  const json& v = row.at(name);
  if (!v.is_number()) refuse(source, key + "." + name, "must be a number, got " + v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0.0) refuse(source, key + "." + name, "must be finite and >= 0, got " + v.dump());
  return x;
}

std::string non_empty_reason(const json& row, const std::string& source, const std::string& key) {
  if (!row.contains("reason")) refuse(source, key, "missing \"reason\"");
  if (!row["reason"].is_string() || row["reason"].get<std::string>().empty()) {
    refuse(source, key + ".reason", "must be a non-empty string");
  }
  return row["reason"].get<std::string>();
}

// "pre_rounding": {"atol", "atol_rms", "rtol", "reason"}: the bound of the value before the stage's
// final rounding (atol, atol_rms and rtol each optional, 0 when absent; reason required).
ErrorBound parse_bound(const json& bound, const std::string& source, const std::string& key) {
  if (!bound.is_object()) refuse(source, key, "must be an object, got " + bound.dump());
  static const std::set<std::string> keys{"atol", "atol_rms", "rtol", "reason"};
  for (const auto& [name, value] : bound.items()) {
    if (!keys.count(name)) refuse(source, key + "." + name, "unknown key (a bound takes atol, atol_rms, rtol, reason)");
  }
  ErrorBound b;
  b.reason = non_empty_reason(bound, source, key);
  if (bound.contains("atol")) b.atol = non_negative(bound, "atol", source, key);
  if (bound.contains("atol_rms")) b.atol_rms = non_negative(bound, "atol_rms", source, key);
  if (bound.contains("rtol")) b.rtol = non_negative(bound, "rtol", source, key);
  return b;
}

Tolerance parse_row(const json& row, const std::string& source, const std::string& key, bool index_set) {
  if (!row.is_object()) refuse(source, key, "a row must be an object, got " + row.dump());
  static const std::set<std::string> dense_keys{
      "atol", "atol_rms", "rtol", "max_cos_diff", "max_nmse", "bitwise", "pre_rounding", "pre_rounding_tail", "reason"};
  static const std::set<std::string> index_keys{"atol", "rtol", "reason"};
  const std::set<std::string>& allowed = index_set ? index_keys : dense_keys;
  for (const auto& [name, value] : row.items()) {
    if (!allowed.count(name)) {
      refuse(source, key + "." + name,
             index_set ? "an index-set stage takes atol, rtol (the tie window of its scores) and reason only"
                       : "unknown key (a row takes atol, atol_rms, rtol, max_cos_diff, max_nmse, bitwise, "
                         "pre_rounding, pre_rounding_tail, reason)");
    }
  }
  for (const char* required : {"reason", "atol", "rtol"}) {
    if (!row.contains(required)) refuse(source, key, std::string("missing \"") + required + "\"");
  }
  Tolerance t;
  t.reason = non_empty_reason(row, source, key);
  t.atol = non_negative(row, "atol", source, key);
  t.rtol = non_negative(row, "rtol", source, key);
  if (row.contains("atol_rms")) t.atol_rms = non_negative(row, "atol_rms", source, key);
  if (row.contains("max_cos_diff")) t.max_cos_diff = non_negative(row, "max_cos_diff", source, key);
  if (row.contains("max_nmse")) t.max_nmse = non_negative(row, "max_nmse", source, key);
  if (row.contains("bitwise")) {
    if (!row["bitwise"].is_boolean()) refuse(source, key + ".bitwise", "must be true or false");
    t.bitwise = row["bitwise"].get<bool>();
  }
  if (row.contains("pre_rounding")) t.pre_rounding = parse_bound(row["pre_rounding"], source, key + ".pre_rounding");
  if (row.contains("pre_rounding_tail")) {
    if (!t.pre_rounding)
      refuse(source, key + ".pre_rounding_tail", "needs \"pre_rounding\" (the bound of the rest of the row)");
    t.pre_rounding_tail = parse_bound(row["pre_rounding_tail"], source, key + ".pre_rounding_tail");
  }
  return t;
}

}  // namespace

std::filesystem::path default_tolerance_dir() { return data_dir() / "tolerances"; }

ToleranceTable ToleranceTable::parse(std::string_view json_text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::parse_error& e) {
    refuse(source, "", std::string("not valid JSON: ") + e.what());
  }
  if (!doc.is_object()) refuse(source, "", "the document must be an object");
  static const std::set<std::string> top_keys{"precision", "description", "default", "stages"};
  for (const auto& [name, value] : doc.items()) {
    if (!top_keys.count(name))
      refuse(source, name, "unknown key (the document takes precision, description, default, stages)");
  }
  if (!doc.contains("precision") || !doc["precision"].is_string() || doc["precision"].get<std::string>().empty()) {
    refuse(source, "precision", "missing, or not a non-empty string");
  }
  if (!doc.contains("stages") || !doc["stages"].is_object()) refuse(source, "stages", "missing, or not an object");

  ToleranceTable table;
  table.precision_ = doc["precision"].get<std::string>();
  table.source_ = source;
  if (doc.contains("default")) table.default_ = parse_row(doc["default"], source, "default", false);
  for (const auto& [stage, row] : doc["stages"].items()) {
    const std::string key = "stages." + stage;
    const ref::StageDef* compared = compared_stage(stage);
    if (!compared) refuse(source, key, "not a compared stage (a dataset of calls/<k>/ other than x and cache/...)");
    table.rows_.emplace(stage, parse_row(row, source, key, compared->is_index()));
  }
  return table;
}

ToleranceTable ToleranceTable::load(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) refuse(file.string(), "", "cannot be opened");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) refuse(file.string(), "", "cannot be read");
  ToleranceTable table = parse(text.str(), file.string());
  if (table.precision_ != file.stem().string()) {
    refuse(file.string(), "precision",
           "is \"" + table.precision_ + "\" but the file is named for \"" + file.stem().string() + "\"");
  }
  return table;
}

ToleranceTable ToleranceTable::for_precision(const std::string& precision, const std::filesystem::path& dir) {
  const bool plain_name = !precision.empty() && std::all_of(precision.begin(), precision.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
  if (!plain_name) {
    throw std::invalid_argument("tolerance table: precision '" + precision +
                                "' is not a policy name (lower-case letters, digits, '-', '_')");
  }
  const std::filesystem::path own = dir / (precision + ".json");
  if (precision == "exact" || precision == "official" || std::filesystem::exists(own)) return load(own);
  return load(dir / "lowp.json");
}

const Tolerance& ToleranceTable::at(std::string_view stage) const {
  const ref::StageDef* compared = compared_stage(stage);
  if (!compared)
    throw std::invalid_argument("tolerance table " + source_ + ": '" + std::string(stage) +
                                "' is not a compared stage");
  if (const auto row = rows_.find(stage); row != rows_.end()) return row->second;
  if (!compared->is_index() && default_) return *default_;
  throw std::out_of_range("tolerance table " + source_ + ": no row for stage '" + std::string(stage) + "'" +
                          (compared->is_index() ? " (index-set stages take no default)" : " and no default row"));
}

}  // namespace dsv4::verify
