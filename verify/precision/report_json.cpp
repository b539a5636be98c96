#include "verify/precision/report_json.h"

#include "verify/report/atomic_file.h"
#include "verify/report/json.h"

namespace dsv4::verify {

using nlohmann::json;

namespace {

json format_json(const std::optional<ref::BlockFormat>& f) { return f ? json(f->name()) : json(nullptr); }

std::string linear_kind(ref::LinearKind k) {
  return k == ref::LinearKind::fp8_block128 ? "fp8_block128" : "exact";
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

json input_json(const InputInfo& in) {
  return {{"kind", in.kind},
          {"file", in.file},
          {"producer", in.producer},
          {"model", in.model},
          {"description", in.description},
          {"weights", to_string(in.weights)},
          {"weights_reason", in.weights_reason},
          {"config", config_json(in.config)}};
}

json error_json(const ErrorStats& e) {
  return {{"nmse", json_number(e.nmse())},
          {"cos_diff", json_number(e.cos_diff())},
          {"max_rel", json_number(e.max_rel())},
          {"max_abs", json_number(e.max_abs())},
          {"ref_rms", json_number(e.ref_rms())}};
}

json stage_json(const StageError& s) {
  const ErrorStats& e = s.error;
  const ErrorHistogram& h = e.histogram();
  json j = {{"stage", s.stage},
            {"note", s.note},
            {"n", e.n()},
            {"n_finite", e.n_finite()},
            {"nonfinite_matched", e.nonfinite_matched()},
            {"nonfinite_mismatches", e.nonfinite_mismatches()}};
  j.update(error_json(e));
  j["histogram"] = {{"counts", h.bins}, {"zero", h.zero}, {"below", h.below}, {"above", h.above},
                    {"no_scale", h.no_scale}};
  return j;
}

json summary_json(const RecallSummary& s) {
  return {{"rows", s.rows},
          {"rows_with_choice", s.rows_with_choice},
          {"mean", json_number(s.mean)},
          {"mean_with_choice", json_number(s.mean_with_choice)},
          {"worst", json_number(s.worst)}};
}

json recall_json(const std::optional<RecallStats>& r) {
  if (!r) return nullptr;
  json j = summary_json(r->summary());
  const RecallRow& w = r->worst_row();
  j["worst_row"] = w.call < 0 ? json(nullptr)
                              : json{{"call", w.call}, {"seq", w.seq}, {"position", w.position},
                                     {"recall", json_number(w.recall)}};
  json buckets = json::array();
  for (const RecallBucket& b : r->buckets()) {
    json bj = summary_json(b.summary);
    bj["first_position"] = b.first_position;
    bj["last_position"] = b.last_position;
    buckets.push_back(bj);
  }
  j["by_position"] = buckets;
  j["histogram"] = r->histogram();
  return j;
}

json end_to_end_json(const LayerResult& l, const char* stage) {
  json j = {{"stage", stage}};
  j.update(error_json(l.stage(stage).error));
  return j;
}

json layer_json(const LayerResult& l) {
  json stages = json::array();
  for (const StageError& s : l.stages) stages.push_back(stage_json(s));
  return {{"layer", l.layer},
          {"compress_ratio", l.compress_ratio},
          {"stages", stages},
          {"end_to_end",
           {{"topk_recall", recall_json(l.recall)},
            {"attention_output", end_to_end_json(l, kAttentionOutputStage)},
            {"layer_output", end_to_end_json(l, kLayerOutputStage)}}}};
}

}  // namespace

json settings_json(const ref::PrecisionPolicy& p) {
  return {{"activations", ref::to_string(p.activations)},
          {"fp32_tensors", ref::to_string(p.fp32_tensors)},
          {"fp8_linears", linear_kind(p.fp8_linears)},
          {"kv_nope", format_json(p.kv_nope)},
          {"indexer_qk", format_json(p.indexer_qk)},
          {"indexer_hadamard", p.indexer_hadamard},
          {"indexer_scores", ref::to_string(p.indexer_scores)},
          {"attn_probs", ref::to_string(p.attn_probs)},
          {"attn_online_blocks", p.attn_online_blocks}};
}

json to_json(const PrecisionReport& r) {
  json policies = json::array();
  for (const PolicyResult& p : r.policies) {
    json layers = json::array();
    for (const LayerResult& l : p.layers) layers.push_back(layer_json(l));
    policies.push_back({{"name", p.policy.name},
                        {"description", p.policy.describe()},
                        {"settings", settings_json(p.policy)},
                        {"seconds", p.seconds},
                        {"layers", layers}});
  }
  return {{"format", kPrecisionReportFormat},
          {"format_version", kPrecisionReportVersion},
          {"command", r.command},
          {"input", input_json(r.input)},
          {"reference", r.reference},
          {"position_bucket", r.position_bucket},
          {"error_histogram",
           {{"quantity", "log10(|policy - exact| / rms of the exact token row)"},
            {"low", kHistLow},
            {"step", kHistStep},
            {"bins", kHistBins}}},
          {"recall_histogram", {{"bins", kRecallBins}, {"rows", "rows with a choice"}}},
          {"policies", policies}};
}

void write_precision_json_file(const std::filesystem::path& path, const PrecisionReport& report) {
  write_file_atomically(path, [&](std::ostream& out) { out << to_json(report).dump() << '\n'; });
}

}  // namespace dsv4::verify
