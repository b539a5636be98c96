#include "verify/replay/diagnose.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <set>
#include <stdexcept>
#include <utility>

#include "reference/mutation.h"
#include "verify/replay/layer_replay.h"

namespace dsv4::verify {

namespace {

// Call k can be replayed on its own when it starts a sequence or has every cache/ dataset of its
// ratio; otherwise the calls before it give its state.
bool self_contained(const CallCapture& call, int ratio) {
  if (call.start_pos == 0) return true;
  for (const ref::StageDef& s : ref::stages())
    if (s.is_cache() && ref::in_scope(s.scope, ratio) && !call.has(std::string(s.name))) return false;
  return true;
}

// Stage s of call k, replayed stage-locally by `oracle` (the layer, its weights shared) with `stages`.
StageValue replayed(const Capture& capture, const LayerCapture& layer, int k, const ref::StageDef& s,
                    const ref::AttentionLayer& oracle, const ref::StageProvider& stages) {
  LayerReplay replay(capture, layer, oracle, stages, ReplayMode::stage_local);
  const int first = self_contained(layer.calls.at(k), layer.compress_ratio) ? k : 0;
  CallValues values;
  for (int i = first; i <= k; ++i) values = replay.replay_call(layer.calls.at(i)).values;
  return std::move(values.at(std::string(s.name)));
}

bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

// Which units of the replayed value differ from the captured dataset: the elements of a dense
// stage (a state's meaningful rows only), the rows of an index set (compared as multisets).
std::vector<bool> differing_units(const ref::StageDef& s, const StageValue& v, const Tensor& captured) {
  std::vector<bool> differ;
  if (s.comparison == ref::Comparison::index_set) {
    const int64_t width = captured.shape.at(2);
    int64_t row = 0;
    for (const ref::IndexMat& m : v.indices)
      for (ref::Index i = 0; i < m.rows(); ++i, ++row) {
        std::multiset<int64_t> ours, theirs;
        for (ref::Index c = 0; c < m.cols(); ++c)
          if (m(i, c) != -1) ours.insert(m(i, c));
        for (int64_t c = 0; c < width; ++c) {
          const auto value = static_cast<int64_t>(captured.values[static_cast<size_t>(row * width + c)]);
          if (value != -1) theirs.insert(value);
        }
        differ.push_back(ours != theirs);
      }
    return differ;
  }
  size_t at = 0;
  for (const ref::Mat& m : v.dense) {
    for (ref::Index i = 0; i < m.rows(); ++i) {
      const bool kept = s.comparison != ref::Comparison::dense_state ||
                        std::find(v.rows.begin(), v.rows.end(), static_cast<int>(i)) != v.rows.end();
      for (ref::Index c = 0; c < m.cols(); ++c, ++at)
        if (kept) differ.push_back(!same_bits(m(i, c), captured.values.at(at)));
    }
  }
  return differ;
}

}  // namespace

Diagnosis diagnose_stage(const Capture& capture, int layer_index, int call, ref::Stage stage,
                         const ref::PrecisionPolicy& policy) {
  const ref::StageDef& s = ref::stage(stage);
  const LayerCapture& layer = capture.layers.at(layer_index);
  if (!s.is_compared() || !ref::in_scope(s.scope, layer.compress_ratio) || call < 0 ||
      call >= static_cast<int>(layer.calls.size()) || !layer.calls[call].has(std::string(s.name)))
    throw std::invalid_argument(
        fmt::format("diagnose_stage: layer {} call {} has no compared dataset {}", layer_index, call, s.name));
  const Tensor& captured = layer.calls[call].stage(std::string(s.name));

  const ref::AttentionLayer oracle_layer = replay_layer(capture, layer, policy);
  const std::vector<bool> oracle =
      differing_units(s, replayed(capture, layer, call, s, oracle_layer, ref::oracle_stages()), captured);
  Diagnosis d;
  d.call = call;
  d.unit = s.comparison == ref::Comparison::index_set ? "rows" : "values";
  d.compared = static_cast<int64_t>(oracle.size());
  d.oracle_differing = std::count(oracle.begin(), oracle.end(), true);
  if (d.oracle_differing == 0) return d;

  for (const ref::Mutation& m : ref::mutations_of(stage, policy, capture.config)) {
    const ref::MutatedStages mutated(ref::oracle_stages(), m);
    const std::vector<bool> variant =
        differing_units(s, replayed(capture, layer, call, s, oracle_layer, mutated), captured);
    VariantTrial t{m.name(), m.describe(), 0, 0, 0};
    for (size_t i = 0; i < oracle.size(); ++i) {
      t.explained += oracle[i] && !variant[i];
      t.introduced += !oracle[i] && variant[i];
      t.differing += variant[i];
    }
    d.trials.push_back(std::move(t));
  }
  std::stable_sort(d.trials.begin(), d.trials.end(), [](const VariantTrial& a, const VariantTrial& b) {
    return a.differing != b.differing ? a.differing < b.differing : a.explained > b.explained;
  });
  return d;
}

namespace {

// A passing record whose values are not all bitwise the oracle's.
bool differs(const Record& r) {
  if (const auto* d = std::get_if<DenseMetrics>(&r.metrics)) return d->bitwise_mismatches + d->nonfinite_mismatches > 0;
  if (const auto* s = std::get_if<IndexSetMetrics>(&r.metrics)) return s->rows_exact < s->rows;
  return false;
}

}  // namespace

void diagnose_records(const Capture& capture, const ref::PrecisionPolicy& policy, DiagnoseScope scope, Report& report) {
  if (scope == DiagnoseScope::none) return;
  std::set<std::pair<int, std::string>> done;
  for (Record& r : report.records) {
    const bool wanted =
        r.status == Status::fail || (scope == DiagnoseScope::differing && r.status == Status::pass && differs(r));
    if (!wanted || !done.insert({r.layer, r.stage}).second) continue;
    const ref::StageDef* s = ref::find_stage(r.stage);
    if (s == nullptr || !s->is_compared()) continue;
    r.diagnosis = diagnose_stage(capture, r.layer, r.call, s->id, policy);
  }
}

}  // namespace dsv4::verify
