#include "verify/precision/checkpoint.h"

#include <fmt/format.h>

#include <fstream>
#include <stdexcept>

#include "verify/precision/report_json.h"
#include "verify/report/atomic_file.h"
#include "verify/report/json.h"

namespace dsv4::verify {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json time_json(const OracleTime& t) { return {{"wall_seconds", t.wall_seconds}, {"cpu_seconds", t.cpu_seconds}}; }

OracleTime time_from(const json& j) { return {j.at("wall_seconds").get<double>(), j.at("cpu_seconds").get<double>()}; }

json histogram_json(const ErrorHistogram& h) {
  return {{"counts", h.bins}, {"zero", h.zero}, {"below", h.below}, {"above", h.above}, {"no_scale", h.no_scale}};
}

ErrorHistogram histogram_from(const json& j) {
  ErrorHistogram h;
  const auto counts = j.at("counts").get<std::vector<int64_t>>();
  if (counts.size() != h.bins.size())
    throw std::invalid_argument(fmt::format("histogram: expected {} bins, found {}", h.bins.size(), counts.size()));
  std::copy(counts.begin(), counts.end(), h.bins.begin());
  h.zero = j.at("zero").get<int64_t>();
  h.below = j.at("below").get<int64_t>();
  h.above = j.at("above").get<int64_t>();
  h.no_scale = j.at("no_scale").get<int64_t>();
  return h;
}

json summary_json(const RecallSummary& s) {
  return {{"rows", s.rows},
          {"rows_with_choice", s.rows_with_choice},
          {"mean", json_number(s.mean)},
          {"mean_with_choice", json_number(s.mean_with_choice)},
          {"worst", json_number(s.worst)}};
}

RecallSummary summary_from(const json& j) {
  return {j.at("rows").get<int64_t>(), j.at("rows_with_choice").get<int64_t>(), json_number(j.at("mean")),
          json_number(j.at("mean_with_choice")), json_number(j.at("worst"))};
}

json figures_json(const PolicyFigures& f) {
  json layers = json::array();
  for (const LayerFigures& l : f.layers) {
    json stages = json::array();
    for (const StageFigures& s : l.stages)
      stages.push_back({{"stage", s.stage},
                        {"note", s.note},
                        {"n", s.n},
                        {"n_finite", s.n_finite},
                        {"nonfinite_matched", s.nonfinite_matched},
                        {"nonfinite_mismatches", s.nonfinite_mismatches},
                        {"nmse", json_number(s.nmse)},
                        {"cos_diff", json_number(s.cos_diff)},
                        {"max_rel", json_number(s.max_rel)},
                        {"max_abs", json_number(s.max_abs)},
                        {"ref_rms", json_number(s.ref_rms)},
                        {"histogram", histogram_json(s.histogram)}});
    json recall = nullptr;
    if (l.recall) {
      json buckets = json::array();
      for (const RecallBucket& b : l.recall->by_position)
        buckets.push_back({{"first_position", b.first_position},
                           {"last_position", b.last_position},
                           {"summary", summary_json(b.summary)}});
      const RecallRow& w = l.recall->worst_row;
      recall = {{"summary", summary_json(l.recall->summary)},
                {"worst_row",
                 {{"call", w.call}, {"seq", w.seq}, {"position", w.position}, {"recall", json_number(w.recall)}}},
                {"by_position", buckets},
                {"histogram", l.recall->histogram}};
    }
    json outputs = json::array();
    for (const OutputErrorFigures& o : l.output_by_position)
      outputs.push_back({{"first_position", o.first_position},
                         {"last_position", o.last_position},
                         {"attention_nmse", json_number(o.attention_nmse)},
                         {"layer_nmse", json_number(o.layer_nmse)}});
    layers.push_back({{"layer", l.layer},
                      {"compress_ratio", l.compress_ratio},
                      {"stages", stages},
                      {"recall", recall},
                      {"output_by_position", outputs}});
  }
  return {{"seed", f.seed},
          {"time", time_json(f.time)},
          {"reference_time", time_json(f.reference_time)},
          {"layers", layers}};
}

PolicyFigures figures_from(const json& j, const ref::PrecisionPolicy& policy) {
  PolicyFigures f;
  f.policy = policy;
  f.seed = j.at("seed").get<uint64_t>();
  f.time = time_from(j.at("time"));
  f.reference_time = time_from(j.at("reference_time"));
  for (const json& lj : j.at("layers")) {
    LayerFigures l;
    l.layer = lj.at("layer").get<int>();
    l.compress_ratio = lj.at("compress_ratio").get<int>();
    for (const json& sj : lj.at("stages")) {
      StageFigures s;
      s.stage = sj.at("stage").get<std::string>();
      s.note = sj.at("note").get<std::string>();
      s.n = sj.at("n").get<int64_t>();
      s.n_finite = sj.at("n_finite").get<int64_t>();
      s.nonfinite_matched = sj.at("nonfinite_matched").get<int64_t>();
      s.nonfinite_mismatches = sj.at("nonfinite_mismatches").get<int64_t>();
      s.nmse = json_number(sj.at("nmse"));
      s.cos_diff = json_number(sj.at("cos_diff"));
      s.max_rel = json_number(sj.at("max_rel"));
      s.max_abs = json_number(sj.at("max_abs"));
      s.ref_rms = json_number(sj.at("ref_rms"));
      s.histogram = histogram_from(sj.at("histogram"));
      l.stages.push_back(std::move(s));
    }
    const json& rj = lj.at("recall");
    if (!rj.is_null()) {
      RecallFigures r;
      r.summary = summary_from(rj.at("summary"));
      const json& w = rj.at("worst_row");
      r.worst_row = {w.at("call").get<int>(), w.at("seq").get<int>(), w.at("position").get<int64_t>(),
                     json_number(w.at("recall"))};
      for (const json& b : rj.at("by_position"))
        r.by_position.push_back({b.at("first_position").get<int64_t>(), b.at("last_position").get<int64_t>(),
                                 summary_from(b.at("summary"))});
      r.histogram = rj.at("histogram").get<std::vector<int64_t>>();
      l.recall = std::move(r);
    }
    for (const json& o : lj.at("output_by_position"))
      l.output_by_position.push_back({o.at("first_position").get<int64_t>(), o.at("last_position").get<int64_t>(),
                                      json_number(o.at("attention_nmse")), json_number(o.at("layer_nmse"))});
    f.layers.push_back(std::move(l));
  }
  return f;
}

// What a checkpoint must match: the seed's input (its description names dims, length, calls,
// activation model and seed; the config holds the rest) and the report's position buckets.
json identity_json(const InputInfo& seed_input, int64_t position_bucket) {
  return {{"input", {{"description", seed_input.description}, {"config", config_json(seed_input.config)}}},
          {"position_bucket", position_bucket}};
}

}  // namespace

CheckpointDir::CheckpointDir(fs::path dir) : dir_(std::move(dir)) {
  if (fs::exists(dir_) && !fs::is_directory(dir_))
    throw std::invalid_argument(fmt::format("--checkpoint {}: expected a folder, found a file", dir_.string()));
  fs::create_directories(dir_);
}

fs::path CheckpointDir::file(uint64_t seed, const std::string& policy) const {
  return dir_ / fmt::format("seed-{}", seed) / (policy + ".json");
}

std::optional<PolicyFigures> CheckpointDir::load(uint64_t seed, const ref::PrecisionPolicy& policy,
                                                 const InputInfo& seed_input, int64_t position_bucket) const {
  const fs::path path = file(seed, policy.name);
  if (!fs::exists(path)) return std::nullopt;
  json j;
  try {
    std::ifstream in(path);
    j = json::parse(in);
  } catch (const std::exception& e) {
    throw std::invalid_argument(fmt::format("checkpoint {}: not JSON ({})", path.string(), e.what()));
  }
  const auto fail = [&](const std::string& what, const std::string& expected, const std::string& found) {
    throw std::invalid_argument(
        fmt::format("checkpoint {}: {}: expected {}, found {} (remove it, or use another "
                    "--checkpoint folder for other options)",
                    path.string(), what, expected, found));
  };
  try {
    if (j.value("format", "") != kCheckpointFormat || j.value("format_version", 0) != kCheckpointVersion)
      fail("format", fmt::format("{} version {}", kCheckpointFormat, kCheckpointVersion),
           fmt::format("{} version {}", j.value("format", "?"), j.value("format_version", 0)));
    const json want = identity_json(seed_input, position_bucket);
    if (j.at("input") != want.at("input")) fail("input", want.at("input").dump(), j.at("input").dump());
    if (j.at("position_bucket") != want.at("position_bucket"))
      fail("position bucket", want.at("position_bucket").dump(), j.at("position_bucket").dump());
    if (j.at("policy").at("description") != policy.describe())
      fail("policy", policy.describe(), j.at("policy").at("description").dump());
    PolicyFigures f = figures_from(j.at("figures"), policy);
    if (f.seed != seed) fail("seed", std::to_string(seed), std::to_string(f.seed));
    return f;
  } catch (const json::exception& e) {
    throw std::invalid_argument(fmt::format("checkpoint {}: {}", path.string(), e.what()));
  }
}

void CheckpointDir::store(const PolicyFigures& f, const InputInfo& seed_input, int64_t position_bucket) const {
  const fs::path path = file(f.seed, f.policy.name);
  fs::create_directories(path.parent_path());
  json j = identity_json(seed_input, position_bucket);
  j["format"] = kCheckpointFormat;
  j["format_version"] = kCheckpointVersion;
  j["policy"] = {{"name", f.policy.name}, {"description", f.policy.describe()}};
  j["figures"] = figures_json(f);
  write_file_atomically(path, [&](std::ostream& out) { out << j.dump() << '\n'; });
}

}  // namespace dsv4::verify
