// One call of one layer, every sequence of the batch: the state before the call put into the
// replay's cache (captured cache/ datasets in stage-local mode, else what the earlier calls left),
// then ref::AttentionLayer::forward with the backend's stages and, in stage-local mode, the captured
// inputs of every stage; then each compared stage of the registry gathered from the outputs.
#include "verify/replay/layer_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <utility>

#include "reference/stage_registry.h"
#include "verify/capture/capture_error.h"
#include "verify/capture/tensor_convert.h"
#include "verify/replay/pre_rounding_recorder.h"

namespace dsv4::verify {

std::string to_string(ReplayMode mode) { return mode == ReplayMode::stage_local ? "stage-local" : "chained"; }

ReplayMode replay_mode_from_string(const std::string& name) {
  if (name == "stage-local") return ReplayMode::stage_local;
  if (name == "chained") return ReplayMode::chained;
  throw std::invalid_argument("replay mode '" + name + "': expected stage-local or chained");
}

namespace {

ref::ModelConfig layer_config(const Capture& capture, const LayerCapture& layer) {
  ref::ModelConfig cfg = capture.config;
  if (static_cast<int>(cfg.compress_ratios.size()) <= layer.index) cfg.compress_ratios.resize(layer.index + 1, 0);
  cfg.compress_ratios[layer.index] = layer.compress_ratio;
  return cfg;
}

// The captured datasets of one call as the oracle's per-sequence matrices, converted on first use.
class CapturedCall {
 public:
  explicit CapturedCall(const CallCapture& call) : call_(call) {}
  bool has(std::string_view name) const { return call_.has(std::string(name)); }
  const std::vector<ref::Mat>& dense(std::string_view name) {
    auto it = dense_.find(name);
    if (it == dense_.end()) it = dense_.emplace(std::string(name), to_mats(call_.stage(std::string(name)))).first;
    return it->second;
  }
  const std::vector<ref::IndexMat>& indices(std::string_view name) {
    auto it = indices_.find(name);
    if (it == indices_.end())
      it = indices_.emplace(std::string(name), to_index_mats(call_.stage(std::string(name)))).first;
    return it->second;
  }
  // A compressor state from its state_kv / state_score datasets (prefix "compressor/state" or
  // "cache/compressor_state"); nullptr unless both are there.
  const std::vector<ref::CompressorState>* states(const std::string& prefix, int ratio, int head_dim) {
    if (!has(prefix + "_kv") || !has(prefix + "_score")) return nullptr;
    auto it = states_.find(prefix);
    if (it == states_.end())
      it = states_
               .emplace(prefix, to_compressor_states(call_.stage(prefix + "_kv"), call_.stage(prefix + "_score"), ratio,
                                                     head_dim))
               .first;
    return &it->second;
  }

 private:
  const CallCapture& call_;
  std::map<std::string, std::vector<ref::Mat>, std::less<>> dense_;
  std::map<std::string, std::vector<ref::IndexMat>, std::less<>> indices_;
  std::map<std::string, std::vector<ref::CompressorState>> states_;
};

using Note = std::function<void(std::string_view consumer, const std::string& text)>;

// What one sequence's stages read in stage-local replay: the captured values of their inputs, and
// the captured compressor states after the call. Asking for an input the capture lacks leaves a
// note on the consumer.
class CapturedInputs final : public ref::StageInputs {
 public:
  CapturedInputs(CapturedCall& call, int seq, const Note& note, const std::vector<ref::CompressorState>* main_after,
                 const std::vector<ref::CompressorState>* indexer_after)
      : call_(call), seq_(seq), note_(note), main_after_(main_after), indexer_after_(indexer_after) {}

  const ref::Mat* dense(ref::Stage input, ref::Stage consumer) const override {
    const std::string_view name = ref::stage(input).name;
    if (call_.has(name)) return &call_.dense(name)[seq_];
    missing(name, consumer);
    return nullptr;
  }
  const ref::IndexMat* indices(ref::Stage input, ref::Stage consumer) const override {
    const std::string_view name = ref::stage(input).name;
    if (call_.has(name)) return &call_.indices(name)[seq_];
    missing(name, consumer);
    return nullptr;
  }
  const ref::CompressorState* state_after(ref::EntryKind kind) const override {
    const auto* states = kind == ref::EntryKind::main ? main_after_ : indexer_after_;
    return states ? &(*states)[seq_] : nullptr;
  }

 private:
  void missing(std::string_view input, ref::Stage consumer) const {
    note_(ref::stage(consumer).name, "input " + std::string(input) + " not captured: the replay's own value");
  }
  CapturedCall& call_;
  int seq_;
  const Note& note_;
  const std::vector<ref::CompressorState>* main_after_;
  const std::vector<ref::CompressorState>* indexer_after_;
};

// The state rows of a compressor-state stage that DeepSeek's code relies on after `end` tokens.
std::vector<int> meaningful_rows(const ref::StageDef& s, const ref::ModelConfig& cfg, int ratio, int64_t end) {
  const bool indexer = s.name.starts_with("indexer/");
  return ref::CompressorState::fresh(indexer ? 4 : ratio, indexer ? cfg.index_head_dim : cfg.head_dim)
      .meaningful_rows(end);
}

}  // namespace

ref::AttentionLayer replay_layer(const Capture& capture, const LayerCapture& layer,
                                 const ref::PrecisionPolicy& policy) {
  return ref::AttentionLayer(layer_config(capture, layer), layer.weights, policy);
}

LayerReplay::LayerReplay(const Capture& capture, const LayerCapture& layer, const ref::PrecisionPolicy& policy,
                         const ref::StageProvider& backend, ReplayMode mode)
    : LayerReplay(capture, layer, replay_layer(capture, layer, policy), backend, mode) {}

LayerReplay::LayerReplay(const Capture& capture, const LayerCapture& layer, ref::AttentionLayer oracle_layer,
                         const ref::StageProvider& backend, ReplayMode mode)
    : capture_(capture), layer_(layer), backend_(backend), mode_(mode), oracle_layer_(std::move(oracle_layer)) {}

ReplayedCall LayerReplay::replay_call(const CallCapture& call) {
  const ref::ModelConfig& cfg = oracle_layer_.config();
  const int ratio = layer_.compress_ratio;
  const bool chained = mode_ == ReplayMode::chained;
  const int64_t start = call.start_pos, end = start + call.seqlen;
  const std::string call_path = fmt::format("/layers/{}/calls/{}", layer_.index, call.index);
  if (!cache_ || cache_->batch() != call.batch) cache_ = ref::make_ring_cache(cfg, ratio, call.batch);
  if (chained && (!local_cache_ || local_cache_->batch() != call.batch))
    local_cache_ = ref::make_ring_cache(cfg, ratio, call.batch);
  if (chained && start != 0 && cache_->length(0) != start) {
    throw CaptureError(
        capture_.path, call_path + ": attribute 'start_pos'",
        fmt::format("{} (chained replay carries the state from call to call; the replayed calls end there)",
                    cache_->length(0)),
        fmt::format("{}", start));
  }
  CapturedCall cap(call);

  // One pass over the batch: stage-local (captured inputs, the state before the call from the
  // cache/ datasets or the earlier calls) or chained (x and the replay's own values), over `cache`.
  auto run_pass = [&](bool local, ref::KvCache& cache) {
    CallValues values;
    const int64_t carried_end = cache.length(0);
    const Note note = [&](std::string_view consumer, const std::string& text) {
      std::vector<std::string>& notes = values[std::string(consumer)].notes;
      if (std::find(notes.begin(), notes.end(), text) == notes.end()) notes.push_back(text);
    };
    // The state before the call that `dataset` (cache/...) holds is not captured (or the pass
    // does not read it): the replay of the earlier calls must have left it.
    auto from_earlier_calls = [&](const std::string& dataset, std::initializer_list<std::string_view> consumers) {
      if (carried_end != start) {
        throw CaptureError(capture_.path, call_path + "/" + dataset,
                           fmt::format("a dataset: the state before the call, which the replayed calls (ending at "
                                       "position {}) cannot give to a call starting at {}",
                                       carried_end, start),
                           "nothing");
      }
      if (local)
        for (std::string_view c : consumers) note(c, dataset + " not captured: from the replay of the earlier calls");
    };
    // The state before the call of sequence b, into the cache.
    auto restore_before = [&](int b) {
      if (local && cap.has("cache/window_kv"))
        cache.restore_window(b, start, cap.dense("cache/window_kv")[b]);
      else
        from_earlier_calls("cache/window_kv", {"attn/core"});
      if (ratio != 0) {
        if (local && cap.has("cache/compressed_kv"))
          cache.restore_entries(b, ref::EntryKind::main, cap.dense("cache/compressed_kv")[b]);
        else
          from_earlier_calls("cache/compressed_kv", {"attn/core"});
        if (const auto* st = local ? cap.states("cache/compressor_state", ratio, cfg.head_dim) : nullptr)
          cache.compressor_state(b, ref::EntryKind::main) = (*st)[b];
        else
          from_earlier_calls("cache/compressor_state_*",
                             {"compressor/entries", "compressor/state_kv", "compressor/state_score"});
      }
      if (ratio == 4) {
        if (local && cap.has("cache/indexer_kv"))
          cache.restore_entries(b, ref::EntryKind::indexer, cap.dense("cache/indexer_kv")[b]);
        else
          from_earlier_calls("cache/indexer_kv", {"indexer/scores"});
        if (const auto* st = local ? cap.states("cache/indexer_compressor_state", 4, cfg.index_head_dim) : nullptr)
          cache.compressor_state(b, ref::EntryKind::indexer) = (*st)[b];
        else
          from_earlier_calls(
              "cache/indexer_compressor_state_*",
              {"indexer/compressor/entries", "indexer/compressor/state_kv", "indexer/compressor/state_score"});
      }
    };

    const std::vector<ref::CompressorState>* main_after =
        local && ratio != 0 ? cap.states("compressor/state", ratio, cfg.head_dim) : nullptr;
    const std::vector<ref::CompressorState>* indexer_after =
        local && ratio == 4 ? cap.states("indexer/compressor/state", 4, cfg.index_head_dim) : nullptr;
    std::vector<ref::StageOutputs> outputs;
    std::vector<ref::Mat> tie_scores;  // per sequence: the scores the indexer's top-k was selected from
    // Where the oracle computes every stage, it keeps its values before each stage's final rounding
    // (bit for bit the same stages: PreRoundingRecorder runs the oracle's own two steps).
    // In a pass that reads the captured inputs it also derives attn/core's per-element bound (the
    // chained pass's inputs carry the replay's own upstream error, which that bound does not model).
    PreRoundingRecorder recorder(/*probability_bounds=*/local);
    const bool record_pre_rounding = backend_.name() == ref::oracle_stages().name();
    const ref::StageProvider& provider = record_pre_rounding ? recorder : backend_;
    for (int b = 0; b < call.batch; ++b) {
      if (start != 0) restore_before(b);
      const CapturedInputs inputs(cap, b, note, main_after, indexer_after);
      outputs.push_back(oracle_layer_.forward(cap.dense("x")[b], start, cache, b, provider, local ? &inputs : nullptr));
      if (ratio == 4)
        tie_scores.push_back(local && cap.has("indexer/scores") ? cap.dense("indexer/scores")[b]
                                                                : outputs.back().indexer_scores);
    }

    const int64_t offset = ref::IndexSpace::for_call(start, call.seqlen, cfg.window_size).compressed_offset();
    for (const ref::StageDef& s : ref::stages()) {
      if (!s.is_compared() || !ref::in_scope(s.scope, ratio)) continue;
      StageValue& value = values[std::string(s.name)];
      for (const ref::StageOutputs& o : outputs) {
        if (s.dense_result)
          value.dense.push_back(*s.dense_result(o));
        else
          value.indices.push_back(*s.index_result(o));
      }
      if (s.comparison == ref::Comparison::index_set) {
        value.tie_offset = offset;
        if (s.tie_scores && ratio == 4) value.tie_scores = tie_scores;
      }
      if (s.comparison == ref::Comparison::dense_state) value.rows = meaningful_rows(s, cfg, ratio, end);
      const std::string declined = backend_.computes(s.entry) ? backend_.declines(s.id, cfg) : "";
      value.computed_by = !backend_.computes(s.entry) ? "oracle"
                          : declined.empty()          ? backend_.name()
                                                      : "oracle (" + backend_.name() + " declines: " + declined + ")";
    }
    for (auto& [stage, mats] : recorder.take())
      if (mats.size() == static_cast<size_t>(call.batch))
        values[std::string(ref::stage(stage).name)].pre_rounding = std::move(mats);
    std::vector<ProbabilityFlipBound> bounds = recorder.take_probability_bounds();
    if (bounds.size() == static_cast<size_t>(call.batch)) {
      StageValue& core = values[std::string(ref::stage(ref::Stage::attn_core).name)];
      for (ProbabilityFlipBound& b : bounds) {
        core.probability_bound.push_back(std::move(b.bound));
        core.probability_counts += b.counts;
      }
    }
    return values;
  };

  ReplayedCall replayed;
  replayed.values = run_pass(!chained, *cache_);
  if (chained) replayed.from_captured_inputs = run_pass(true, *local_cache_);
  return replayed;
}

}  // namespace dsv4::verify
