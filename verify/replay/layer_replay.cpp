// One call of one layer, every sequence of the batch, in the order of model.py Attention.forward
// (as reference/layer.cpp): q path, window kv, the indexer with its compressor (ratio 4), the
// index lists, the main compressor, the call's kv matrix, sparse attention, the output projection.
// Each stage reads its inputs through `input`, which gives the captured value in stage-local mode
// and the replay's own value in chained mode (or when the capture lacks it).
#include "verify/replay/layer_replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "verify/capture/capture_error.h"
#include "verify/capture/tensor_convert.h"

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
  bool has(const std::string& name) const { return call_.has(name); }
  const std::vector<ref::Mat>& dense(const std::string& name) {
    auto it = dense_.find(name);
    if (it == dense_.end()) it = dense_.emplace(name, to_mats(call_.stage(name))).first;
    return it->second;
  }
  const std::vector<ref::IndexMat>& indices(const std::string& name) {
    auto it = indices_.find(name);
    if (it == indices_.end()) it = indices_.emplace(name, to_index_mats(call_.stage(name))).first;
    return it->second;
  }
  // A compressor state from its state_kv / state_score datasets (prefix "compressor/state" or
  // "cache/compressor_state"); nullptr unless both are there.
  const std::vector<ref::CompressorState>* states(const std::string& prefix, int ratio, int head_dim) {
    if (!has(prefix + "_kv") || !has(prefix + "_score")) return nullptr;
    auto it = states_.find(prefix);
    if (it == states_.end())
      it = states_.emplace(prefix, to_compressor_states(call_.stage(prefix + "_kv"), call_.stage(prefix + "_score"),
                                                        ratio, head_dim)).first;
    return &it->second;
  }

 private:
  const CallCapture& call_;
  std::map<std::string, std::vector<ref::Mat>> dense_;
  std::map<std::string, std::vector<ref::IndexMat>> indices_;
  std::map<std::string, std::vector<ref::CompressorState>> states_;
};

}  // namespace

LayerReplay::LayerReplay(const Capture& capture, const LayerCapture& layer, const ref::PrecisionPolicy& policy,
                         const Backend& backend, ReplayMode mode)
    : capture_(capture),
      layer_(layer),
      backend_(backend),
      mode_(mode),
      oracle_layer_(layer_config(capture, layer), layer.weights, policy) {}

CallValues LayerReplay::replay_call(const CallCapture& call) {
  const ref::AttentionLayer& L = oracle_layer_;
  const ref::ModelConfig& cfg = L.config();
  const Backend& B = backend_;
  const int ratio = layer_.compress_ratio;
  const bool local = mode_ == ReplayMode::stage_local;
  const int64_t start = call.start_pos, s = call.seqlen, end = start + s;
  const std::string call_path = fmt::format("/layers/{}/calls/{}", layer_.index, call.index);
  if (carried_.size() != static_cast<size_t>(call.batch)) carried_.assign(call.batch, SequenceState::fresh(cfg, ratio));
  const int64_t carried_end = carried_.front().length;
  if (!local && start != 0 && carried_end != start) {
    throw CaptureError(capture_.path, call_path + ": attribute 'start_pos'",
                       fmt::format("{} (chained replay carries the state from call to call; the replayed calls end there)",
                                   carried_end),
                       fmt::format("{}", start));
  }

  CapturedCall cap(call);
  CallValues values;
  auto note = [&](std::string_view stage, const std::string& text) {
    std::vector<std::string>& notes = values[std::string(stage)].notes;
    if (std::find(notes.begin(), notes.end(), text) == notes.end()) notes.push_back(text);
  };
  // The input `name` of stage `consumer` for sequence b: captured in stage-local mode, else `own`.
  auto input = [&](const std::string& name, const ref::Mat& own, std::string_view consumer, int b) -> const ref::Mat& {
    if (local) {
      if (cap.has(name)) return cap.dense(name)[b];
      note(consumer, "input " + name + " not captured: the replay's own value");
    }
    return own;
  };
  auto input_indices = [&](const std::string& name, const ref::IndexMat& own, std::string_view consumer,
                           int b) -> const ref::IndexMat& {
    if (local) {
      if (cap.has(name)) return cap.indices(name)[b];
      note(consumer, "input " + name + " not captured: the replay's own value");
    }
    return own;
  };
  // The state before the call that `dataset` (cache/...) holds is not captured (or the mode does
  // not read it): the replay of the earlier calls must have left it.
  auto from_earlier_calls = [&](const std::string& dataset, std::initializer_list<std::string_view> consumers) {
    if (carried_end != start) {
      throw CaptureError(capture_.path, call_path + "/" + dataset,
                         fmt::format("a dataset: the state before the call, which the replayed calls (ending at position "
                                     "{}) cannot give to a call starting at {}",
                                     carried_end, start),
                         "nothing");
    }
    if (local)
      for (std::string_view c : consumers) note(c, dataset + " not captured: from the replay of the earlier calls");
  };

  const ref::IndexSpace space = ref::IndexSpace::for_call(start, s, cfg.window_size);
  const int32_t offset = static_cast<int32_t>(space.compressed_offset());
  const int k = static_cast<int>(std::min<int64_t>(cfg.index_topk, end / 4));
  const std::vector<ref::CompressorState>* captured_state_after =
      local && ratio != 0 ? cap.states("compressor/state", ratio, cfg.head_dim) : nullptr;
  const std::vector<ref::CompressorState>* captured_indexer_state_after =
      local && ratio == 4 ? cap.states("indexer/compressor/state", 4, cfg.index_head_dim) : nullptr;

  for (int b = 0; b < call.batch; ++b) {
    // The state before the call.
    SequenceState before = start == 0 ? SequenceState::fresh(cfg, ratio) : carried_[b];
    if (start != 0) {
      if (local && cap.has("cache/window_kv")) before.ring = cap.dense("cache/window_kv")[b];
      else from_earlier_calls("cache/window_kv", {"attn/core"});
      if (ratio != 0) {
        if (local && cap.has("cache/compressed_kv")) before.entries = cap.dense("cache/compressed_kv")[b];
        else from_earlier_calls("cache/compressed_kv", {"attn/core"});
        if (const auto* st = local ? cap.states("cache/compressor_state", ratio, cfg.head_dim) : nullptr)
          before.compressor = (*st)[b];
        else from_earlier_calls("cache/compressor_state_*", {"compressor/entries", "compressor/state_kv", "compressor/state_score"});
      }
      if (ratio == 4) {
        if (local && cap.has("cache/indexer_kv")) before.indexer_entries = cap.dense("cache/indexer_kv")[b];
        else from_earlier_calls("cache/indexer_kv", {"indexer/scores"});
        if (const auto* st = local ? cap.states("cache/indexer_compressor_state", 4, cfg.index_head_dim) : nullptr)
          before.indexer_compressor = (*st)[b];
        else from_earlier_calls("cache/indexer_compressor_state_*", {"indexer/compressor/entries",
                                "indexer/compressor/state_kv", "indexer/compressor/state_score"});
      }
    }
    const ref::Mat& x = cap.dense("x")[b];

    // q path and window kv.
    const ref::Mat q_latent = B.q_latent(L, x);
    const ref::Mat q = B.q(L, input("q_latent", q_latent, "q", b), start);
    const ref::Mat kv = B.kv(L, x, start);
    values["q_latent"].dense.push_back(q_latent);
    values["q"].dense.push_back(q);
    values["kv"].dense.push_back(kv);

    // Index lists: the indexer and its compressor (ratio 4).
    ref::IndexMat indexer_topk;
    ref::Mat tie_scores;
    ref::Mat indexer_keys = before.indexer_entries;
    ref::CompressorState indexer_state = before.indexer_compressor;
    if (ratio == 4) {
      const ref::Mat indexer_q = B.indexer_q(L, input("q_latent", q_latent, "indexer/q", b), start);
      const ref::CompressorOutput keys_new = B.compress(L, ref::CompressorKind::indexer, x, start, indexer_state);
      const ref::Mat indexer_weights = B.indexer_weights(L, x);
      indexer_keys = stack_rows(before.indexer_entries,
                                input("indexer/compressor/entries", keys_new.entries, "indexer/scores", b));
      const ref::Mat scores =
          B.indexer_scores(L, input("indexer/q", indexer_q, "indexer/scores", b),
                           input("indexer/weights", indexer_weights, "indexer/scores", b), indexer_keys, start);
      tie_scores = input("indexer/scores", scores, "indexer/topk", b);
      indexer_topk = B.indexer_topk(L, tie_scores, k, offset);
      values["indexer/q"].dense.push_back(indexer_q);
      values["indexer/weights"].dense.push_back(indexer_weights);
      values["indexer/compressor/entries"].dense.push_back(keys_new.entries);
      values["indexer/compressor/state_kv"].dense.push_back(indexer_state.kv);
      values["indexer/compressor/state_score"].dense.push_back(indexer_state.score);
      values["indexer/scores"].dense.push_back(scores);
      StageValue& topk_value = values["indexer/topk"];
      topk_value.indices.push_back(indexer_topk);
      topk_value.tie_scores.push_back(tie_scores);
      topk_value.tie_offset = offset;
    }
    const ref::IndexMat topk_idxs =
        B.topk_idxs(L, space, ratio == 4 ? input_indices("indexer/topk", indexer_topk, "topk_idxs", b) : indexer_topk);
    StageValue& idxs_value = values["topk_idxs"];
    idxs_value.indices.push_back(topk_idxs);
    if (ratio == 4) idxs_value.tie_scores.push_back(tie_scores);
    idxs_value.tie_offset = offset;

    // The main compressor.
    ref::Mat entries = before.entries;
    ref::CompressorState state = before.compressor;
    if (ratio != 0) {
      const ref::CompressorOutput entries_new = B.compress(L, ref::CompressorKind::main, x, start, state);
      entries = stack_rows(before.entries, input("compressor/entries", entries_new.entries, "attn/core", b));
      values["compressor/entries"].dense.push_back(entries_new.entries);
      values["compressor/state_kv"].dense.push_back(state.kv);
      values["compressor/state_score"].dense.push_back(state.score);
    }

    // Sparse attention over the call's kv matrix, then the output projection.
    const ref::Mat& kv_used = input("kv", kv, "attn/core", b);
    const ref::Mat kv_rows = call_kv_rows(space, before.ring, kv_used, entries);
    const ref::Mat core = B.attn_core(L, input("q", q, "attn/core", b), kv_rows,
                                      input_indices("topk_idxs", topk_idxs, "attn/core", b));
    const ref::Mat out_heads = B.attn_out_heads(L, input("attn/core", core, "attn/out_heads", b), start);
    const ref::Mat wo_a = B.attn_wo_a(L, input("attn/out_heads", out_heads, "attn/wo_a", b));
    const ref::Mat out = B.out(L, input("attn/wo_a", wo_a, "out", b));
    values["attn/core"].dense.push_back(core);
    values["attn/out_heads"].dense.push_back(out_heads);
    values["attn/wo_a"].dense.push_back(wo_a);
    values["out"].dense.push_back(out);

    // What the next call starts from: the inputs this call used (captured in stage-local mode).
    SequenceState after;
    after.length = end;
    after.ring = before.ring;
    write_window(after.ring, kv_used, start);
    after.entries = std::move(entries);
    after.indexer_entries = std::move(indexer_keys);
    after.compressor = captured_state_after ? (*captured_state_after)[b] : state;
    after.indexer_compressor = captured_indexer_state_after ? (*captured_indexer_state_after)[b] : indexer_state;
    carried_[b] = std::move(after);
  }

  if (ratio != 0) {
    const std::vector<int> rows = ref::CompressorState::fresh(ratio, cfg.head_dim).meaningful_rows(end);
    values["compressor/state_kv"].rows = rows;
    values["compressor/state_score"].rows = rows;
  }
  if (ratio == 4) {
    const std::vector<int> rows = ref::CompressorState::fresh(4, cfg.index_head_dim).meaningful_rows(end);
    values["indexer/compressor/state_kv"].rows = rows;
    values["indexer/compressor/state_score"].rows = rows;
  }
  for (auto& [stage, value] : values) value.computed_by = B.computes(stage) ? B.name() : "oracle";
  return values;
}

}  // namespace dsv4::verify
