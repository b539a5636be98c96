#include "verify/precision/report_json.h"

#include "verify/report/atomic_file.h"
#include "verify/report/json.h"

namespace dsv4::verify {

using nlohmann::json;

namespace {

json format_json(const std::optional<ref::BlockFormat>& f) { return f ? json(f->name()) : json(nullptr); }

std::string linear_kind(ref::LinearKind k) { return k == ref::LinearKind::fp8_block128 ? "fp8_block128" : "exact"; }

json activation_model_json(const std::optional<ActivationModel>& m) {
  if (!m) return nullptr;
  return {{"x_heavy_channels", m->x_heavy_channels},
          {"x_heavy_scale", m->x_heavy_scale},
          {"x_tail_dof", m->x_tail_dof},
          {"qk_heavy_channels", m->qk_heavy_channels},
          {"qk_heavy_scale", m->qk_heavy_scale},
          {"description", m->describe()},
          {"note", "a model of activations with outliers, not a capture of a model's activations"}};
}

json input_json(const InputInfo& in) {
  return {{"kind", in.kind},
          {"file", in.file},
          {"producer", in.producer},
          {"model", in.model},
          {"description", in.description},
          {"weights", to_string(in.weights)},
          {"weights_reason", in.weights_reason},
          {"config", config_json(in.config)},
          {"seeds", in.seeds},
          {"activation_model", activation_model_json(in.activation_model)}};
}

json error_json(const StageOverSeeds& e) {
  return {{"nmse", to_json(e.nmse)},
          {"cos_diff", to_json(e.cos_diff)},
          {"max_rel", to_json(e.max_rel)},
          {"max_abs", to_json(e.max_abs)},
          {"ref_rms", to_json(e.ref_rms)}};
}

json stage_json(const StageOverSeeds& s) {
  const ErrorHistogram& h = s.histogram;
  json j = {{"stage", s.stage},
            {"note", s.note},
            {"n", s.n},
            {"n_finite", s.n_finite},
            {"nonfinite_matched", s.nonfinite_matched},
            {"nonfinite_mismatches", s.nonfinite_mismatches}};
  j.update(error_json(s));
  j["histogram"] = {
      {"counts", h.bins}, {"zero", h.zero}, {"below", h.below}, {"above", h.above}, {"no_scale", h.no_scale}};
  return j;
}

json recall_json(const std::optional<RecallOverSeeds>& r) {
  if (!r) return nullptr;
  json j = {{"rows", r->rows},
            {"rows_with_choice", r->rows_with_choice},
            {"mean", to_json(r->mean)},
            {"mean_with_choice", to_json(r->mean_with_choice)},
            {"worst", to_json(r->worst)},
            {"pooled_with_choice", to_json(r->pooled_with_choice)}};
  const RecallRow& w = r->worst_row;
  j["worst_row"] = w.call < 0 ? json(nullptr)
                              : json{{"seed", r->worst_seed},
                                     {"call", w.call},
                                     {"seq", w.seq},
                                     {"position", w.position},
                                     {"recall", json_number(w.recall)}};
  json buckets = json::array();
  for (const RecallBucketOverSeeds& b : r->by_position)
    buckets.push_back({{"first_position", b.first_position},
                       {"last_position", b.last_position},
                       {"rows", b.rows},
                       {"rows_with_choice", b.rows_with_choice},
                       {"mean", to_json(b.mean)},
                       {"mean_with_choice", to_json(b.mean_with_choice)},
                       {"worst", to_json(b.worst)}});
  j["by_position"] = buckets;
  j["histogram"] = r->histogram;
  return j;
}

json end_to_end_json(const LayerOverSeeds& l, const char* stage) {
  json j = {{"stage", stage}};
  j.update(error_json(l.stage(stage)));
  return j;
}

json layer_json(const LayerOverSeeds& l) {
  json stages = json::array();
  for (const StageOverSeeds& s : l.stages) stages.push_back(stage_json(s));
  json by_position = json::array();
  for (const OutputErrorOverSeeds& b : l.output_by_position)
    by_position.push_back({{"first_position", b.first_position},
                           {"last_position", b.last_position},
                           {"attention_nmse", to_json(b.attention_nmse)},
                           {"layer_nmse", to_json(b.layer_nmse)}});
  return {{"layer", l.layer},
          {"compress_ratio", l.compress_ratio},
          {"stages", stages},
          {"end_to_end",
           {{"topk_recall", recall_json(l.recall)},
            {"attention_output", end_to_end_json(l, kAttentionOutputStage)},
            {"layer_output", end_to_end_json(l, kLayerOutputStage)},
            {"output_by_position", by_position}}}};
}

json time_json(const Interval& wall, const Interval& cpu) {
  return {{"wall_seconds", to_json(wall)}, {"cpu_seconds", to_json(cpu)}};
}

}  // namespace

json to_json(const Interval& i) {
  json values = json::array();
  for (double v : i.values) values.push_back(json_number(v));
  return {{"mean", json_number(i.mean)},
          {"low", i.has_interval() ? json_number(i.low) : json(nullptr)},
          {"high", i.has_interval() ? json_number(i.high) : json(nullptr)},
          {"values", values}};
}

json config_json(const ref::ModelConfig& c) {
  return {{"name", c.name},
          {"dim", c.dim},
          {"n_heads", c.n_heads},
          {"head_dim", c.head_dim},
          {"rope_head_dim", c.rope_head_dim},
          {"q_lora_rank", c.q_lora_rank},
          {"o_groups", c.o_groups},
          {"o_lora_rank", c.o_lora_rank},
          {"window_size", c.window_size},
          {"index_n_heads", c.index_n_heads},
          {"index_head_dim", c.index_head_dim},
          {"index_topk", c.index_topk},
          {"max_seq_len", c.max_seq_len}};
}

json settings_json(const ref::PrecisionPolicy& p) {
  return {{"activations", ref::to_string(p.activations)}, {"fp32_tensors", ref::to_string(p.fp32_tensors)},
          {"fp8_linears", linear_kind(p.fp8_linears)},    {"kv_nope", format_json(p.kv_nope)},
          {"indexer_qk", format_json(p.indexer_qk)},      {"indexer_q_quant", p.indexer_q_quant},
          {"indexer_hadamard", p.indexer_hadamard},       {"indexer_scores", ref::to_string(p.indexer_scores)},
          {"attn_probs", ref::to_string(p.attn_probs)},   {"attn_online_blocks", p.attn_online_blocks}};
}

json to_json(const SeededReport& r) {
  json policies = json::array();
  for (const PolicyOverSeeds& p : r.policies) {
    json layers = json::array();
    for (const LayerOverSeeds& l : p.layers) layers.push_back(layer_json(l));
    policies.push_back({{"name", p.policy.name},
                        {"description", p.policy.describe()},
                        {"differences_from_official", p.differences},
                        {"settings", settings_json(p.policy)},
                        {"time", time_json(p.wall_seconds, p.cpu_seconds)},
                        {"layers", layers}});
  }
  return {{"format", kPrecisionReportFormat},
          {"format_version", kPrecisionReportVersion},
          {"command", r.command},
          {"input", input_json(r.input)},
          {"reference", r.reference},
          {"position_bucket", r.position_bucket},
          {"interval",
           {{"level", kIntervalLevel},
            {"over", "seeds (each draws its own weights and inputs)"},
            {"method", "mean +- t(0.975, n - 1) * sample sd / sqrt(n) over the n seeds' values"},
            {"pooled_recall", "every row with a choice of every seed; the interval counts each seed as one cluster"}}},
          {"reference_time", time_json(r.reference_wall_seconds, r.reference_cpu_seconds)},
          {"error_histogram",
           {{"quantity", "log10(|policy - exact| / rms of the exact token row)"},
            {"low", kHistLow},
            {"step", kHistStep},
            {"bins", kHistBins}}},
          {"recall_histogram", {{"bins", kRecallBins}, {"rows", "rows with a choice, summed over seeds"}}},
          {"policies", policies}};
}

void write_precision_json_file(const std::filesystem::path& path, const SeededReport& report) {
  write_file_atomically(path, [&](std::ostream& out) { out << to_json(report).dump() << '\n'; });
}

}  // namespace dsv4::verify
