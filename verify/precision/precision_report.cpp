#include "verify/precision/precision_report.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <stdexcept>

#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/primitives/hadamard.h"
#include "reference/stage_registry.h"
#include "verify/capture/tensor_convert.h"

namespace dsv4::verify {

namespace {

// The stages the report measures: the registry's dense stages of the layer's ratio (the index
// sets are measured as top-k recall, the compressor states are internal to the compressor).
bool measured(const ref::StageDef& s, int ratio) {
  return s.comparison == ref::Comparison::dense && ref::in_scope(s.scope, ratio);
}

// The exact policy rotates the indexer's q and k; a policy that does not is compared in its own
// basis: the exact values rotated back (the normalised Hadamard matrix is its own inverse).
bool needs_unrotation(const ref::StageDef& s, const ref::PrecisionPolicy& p, const ref::PrecisionPolicy& exact) {
  return s.hadamard_basis && p.indexer_hadamard != exact.indexer_hadamard;
}

LayerResult empty_result(int layer, int ratio, const ref::PrecisionPolicy& p, const ref::PrecisionPolicy& exact,
                         int64_t bucket) {
  LayerResult r;
  r.layer = layer;
  r.compress_ratio = ratio;
  for (const ref::StageDef& s : ref::stages()) {
    if (!measured(s, ratio)) continue;
    StageError e;
    e.stage = s.name;
    if (needs_unrotation(s, p, exact))
      e.note = "compared without the Hadamard rotation: the exact values rotated back into the policy's basis";
    r.stages.push_back(std::move(e));
  }
  if (ratio == 4) r.recall.emplace(bucket);
  return r;
}

// One call of every sequence of one policy against the exact policy's.
void accumulate(LayerResult& r, const std::vector<ref::StageOutputs>& exact, const std::vector<ref::StageOutputs>& got,
                const ref::PrecisionPolicy& p, const ref::PrecisionPolicy& exact_policy, int index_head_dim,
                const CallCapture& call) {
  for (size_t b = 0; b < exact.size(); ++b) {
    size_t k = 0;
    for (const ref::StageDef& s : ref::stages()) {
      if (!measured(s, r.compress_ratio)) continue;
      const ref::Mat& want = *s.dense_result(exact[b]);
      if (needs_unrotation(s, p, exact_policy))
        r.stages[k].error.add(ref::hadamard_rows(want, index_head_dim, exact_policy), *s.dense_result(got[b]));
      else
        r.stages[k].error.add(want, *s.dense_result(got[b]));
      ++k;
    }
    if (r.recall)
      r.recall->add(exact[b].indexer_topk, got[b].indexer_topk, exact[b].indexer_scores, call.index,
                    static_cast<int>(b), call.start_pos);
  }
}

int64_t longest_sequence(const Capture& c) {
  int64_t longest = 0;
  for (const auto& [index, layer] : c.layers)
    for (const CallCapture& call : layer.calls) longest = std::max(longest, call.start_pos + call.seqlen);
  return longest;
}

}  // namespace

const StageError& LayerResult::stage(const std::string& name) const {
  for (const StageError& s : stages)
    if (s.stage == name) return s;
  throw std::out_of_range("layer " + std::to_string(layer) + " (ratio " + std::to_string(compress_ratio) +
                          ") has no stage " + name + " in the precision report");
}

std::vector<ref::PrecisionPolicy> resolve_policies(const std::vector<std::string>& names) {
  if (names.empty()) return ref::PrecisionPolicy::all_named();
  std::vector<ref::PrecisionPolicy> policies;
  std::set<std::string> seen;
  for (const std::string& name : names) {
    if (!seen.insert(name).second)
      throw std::invalid_argument("precision policy '" + name + "' is listed twice");
    policies.push_back(ref::PrecisionPolicy::by_name(name));
  }
  return policies;
}

PrecisionReport run_precision_report(const Capture& capture, const InputInfo& input,
                                     const PrecisionReportOptions& options,
                                     const std::function<void(const PrecisionProgress&)>& progress) {
  const std::vector<ref::PrecisionPolicy> policies = resolve_policies(options.policies);
  if (capture.layers.empty()) throw std::invalid_argument("the capture has no layers");
  if (options.position_bucket < 0)
    throw std::invalid_argument("position bucket: expected >= 1 (or 0 for automatic), found " +
                                std::to_string(options.position_bucket));
  const ref::PrecisionPolicy exact = ref::PrecisionPolicy::exact();
  const ref::ModelConfig& cfg = capture.config;

  PrecisionReport report;
  report.input = input;
  report.reference = exact.name;
  report.position_bucket =
      options.position_bucket > 0 ? options.position_bucket : std::max<int64_t>(1, (longest_sequence(capture) + 15) / 16);
  for (const ref::PrecisionPolicy& p : policies) report.policies.push_back({p, {}, 0.0});

  for (const auto& [index, layer] : capture.layers) {
    const int ratio = layer.compress_ratio;
    const int batch = layer.calls.empty() ? 1 : layer.calls.front().batch;
    for (PolicyResult& pr : report.policies)
      pr.layers.push_back(empty_result(index, ratio, pr.policy, exact, report.position_bucket));

    const ref::AttentionLayer exact_layer(cfg, layer.weights, exact);
    auto exact_cache = ref::make_ring_cache(cfg, ratio, batch);
    std::vector<std::unique_ptr<ref::KvCache>> caches;
    for (size_t i = 0; i < policies.size(); ++i) caches.push_back(ref::make_ring_cache(cfg, ratio, batch));

    const int calls = static_cast<int>(layer.calls.size());
    for (const CallCapture& call : layer.calls) {
      const std::vector<ref::Mat> xs = to_mats(call.stage("x"));
      if (progress) progress({index, call.index, calls, exact.name + " (reference)"});
      const std::vector<ref::StageOutputs> want = exact_layer.forward_batch(xs, call.start_pos, *exact_cache);
      for (size_t i = 0; i < policies.size(); ++i) {
        PolicyResult& pr = report.policies[i];
        if (progress) progress({index, call.index, calls, pr.policy.name});
        // One policy's layer at a time: a Flash layer's weights are about 1 GB in double.
        const ref::AttentionLayer attention(cfg, layer.weights, pr.policy);
        const auto start = std::chrono::steady_clock::now();
        const std::vector<ref::StageOutputs> got = attention.forward_batch(xs, call.start_pos, *caches[i]);
        pr.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        accumulate(pr.layers.back(), want, got, pr.policy, exact, cfg.index_head_dim, call);
      }
    }
  }
  return report;
}

}  // namespace dsv4::verify
