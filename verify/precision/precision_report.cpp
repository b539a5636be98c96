#include "verify/precision/precision_report.h"

#include <algorithm>
#include <chrono>
#include <ctime>
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

// The end-to-end errors of one call of one sequence, split by query-position bucket. exact, got
// [s, cols], row i the query at position start_pos + i.
void add_by_position(std::map<int64_t, OutputErrorBucket>& buckets, int64_t width, int64_t start_pos,
                     const ref::Mat& exact_attention, const ref::Mat& got_attention, const ref::Mat& exact_out,
                     const ref::Mat& got_out) {
  for (ref::Index row = 0; row < exact_out.rows();) {
    const int64_t key = (start_pos + row) / width;
    const ref::Index rows = std::min<ref::Index>(exact_out.rows() - row, (key + 1) * width - (start_pos + row));
    OutputErrorBucket& b = buckets[key];
    b.first_position = key * width;
    b.last_position = (key + 1) * width - 1;
    b.attention.add(exact_attention.middleRows(row, rows), got_attention.middleRows(row, rows));
    b.layer.add(exact_out.middleRows(row, rows), got_out.middleRows(row, rows));
    row += rows;
  }
}

// One call of every sequence of one policy against the exact policy's.
void accumulate(LayerResult& r, const std::vector<ref::StageOutputs>& exact, const std::vector<ref::StageOutputs>& got,
                const ref::PrecisionPolicy& p, const ref::PrecisionPolicy& exact_policy, int index_head_dim,
                const CallCapture& call, int64_t bucket_width) {
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
    add_by_position(r.output_by_position, bucket_width, call.start_pos, exact[b].attn_core, got[b].attn_core,
                    exact[b].out, got[b].out);
  }
}

// Wall and process CPU time of `run`, added to `time`.
template <class Run>
auto timed(OracleTime& time, Run run) {
  timespec cpu0{}, cpu1{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0);
  const auto wall0 = std::chrono::steady_clock::now();
  auto result = run();
  time.wall_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
  time.cpu_seconds +=
      static_cast<double>(cpu1.tv_sec - cpu0.tv_sec) + 1e-9 * static_cast<double>(cpu1.tv_nsec - cpu0.tv_nsec);
  return result;
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

int64_t position_bucket_for(int64_t longest_sequence, int64_t asked) {
  if (asked < 0)
    throw std::invalid_argument("position bucket: expected >= 1 (or 0 for automatic), found " + std::to_string(asked));
  return asked > 0 ? asked : std::max<int64_t>(1, (longest_sequence + 15) / 16);
}

std::vector<ref::PrecisionPolicy> resolve_policies(const std::vector<std::string>& names) {
  if (names.empty()) return ref::PrecisionPolicy::all_named();
  std::vector<ref::PrecisionPolicy> policies;
  std::set<std::string> seen;
  for (const std::string& name : names) {
    if (!seen.insert(name).second) throw std::invalid_argument("precision policy '" + name + "' is listed twice");
    policies.push_back(ref::PrecisionPolicy::by_name(name));
  }
  return policies;
}

PrecisionReport run_precision_report(const Capture& capture, const InputInfo& input,
                                     const PrecisionReportOptions& options,
                                     const std::function<void(const PrecisionProgress&)>& progress) {
  const std::vector<ref::PrecisionPolicy> policies = resolve_policies(options.policies);
  if (capture.layers.empty()) throw std::invalid_argument("the capture has no layers");
  const ref::PrecisionPolicy exact = ref::PrecisionPolicy::exact();
  const ref::ModelConfig& cfg = capture.config;

  PrecisionReport report;
  report.input = input;
  report.reference = exact.name;
  report.position_bucket = position_bucket_for(longest_sequence(capture), options.position_bucket);
  for (const ref::PrecisionPolicy& p : policies) report.policies.push_back({p, {}, {}});

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
      const std::vector<ref::StageOutputs> want =
          timed(report.reference_time, [&] { return exact_layer.forward_batch(xs, call.start_pos, *exact_cache); });
      for (size_t i = 0; i < policies.size(); ++i) {
        PolicyResult& pr = report.policies[i];
        if (progress) progress({index, call.index, calls, pr.policy.name});
        // One policy's layer at a time: a Flash layer's weights are about 1 GB in double.
        const ref::AttentionLayer attention(cfg, layer.weights, pr.policy);
        const std::vector<ref::StageOutputs> got =
            timed(pr.time, [&] { return attention.forward_batch(xs, call.start_pos, *caches[i]); });
        accumulate(pr.layers.back(), want, got, pr.policy, exact, cfg.index_head_dim, call, report.position_bucket);
      }
    }
  }
  return report;
}

}  // namespace dsv4::verify
