#include "verify/replay/stage_table.h"

namespace dsv4::verify {

namespace {

constexpr auto dense = Comparison::dense;
constexpr auto state = Comparison::dense_state;
constexpr auto index_set = Comparison::index_set;

// Stage-local inputs as in docs/capture-format.md "Replay"; "before" = the cache/ dataset of the
// call, or the state the replay of the earlier calls left when the capture has none.
const ReplayStage kReplayStages[] = {
    {"q_latent", dense, "x", "q_latent", ""},
    {"q", dense, "q_latent", "q", ""},
    {"kv", dense, "x", "kv", ""},
    {"compressor/entries", dense, "x, compressor state before", "compress(main)", ""},
    {"compressor/state_kv", state, "x, compressor state before", "compress(main)", ""},
    {"compressor/state_score", state, "x, compressor state before", "compress(main)", ""},
    {"indexer/q", dense, "q_latent", "indexer_q", ""},
    {"indexer/weights", dense, "x", "indexer_weights", ""},
    {"indexer/compressor/entries", dense, "x, indexer compressor state before", "compress(indexer)", ""},
    {"indexer/compressor/state_kv", state, "x, indexer compressor state before", "compress(indexer)", ""},
    {"indexer/compressor/state_score", state, "x, indexer compressor state before", "compress(indexer)", ""},
    {"indexer/scores", dense, "indexer/q, indexer/weights, indexer keys before + indexer/compressor/entries",
     "indexer_scores", ""},
    {"indexer/topk", index_set, "indexer/scores", "indexer_topk", "indexer/scores"},
    {"topk_idxs", index_set, "start_pos and s (window), indexer/topk (ratio 4) or the geometry (ratio 128)",
     "topk_idxs", "indexer/scores"},
    {"attn/core", dense, "q, kv, window ring before, entries before + compressor/entries, topk_idxs", "attn_core", ""},
    {"attn/out_heads", dense, "attn/core", "attn_out_heads", ""},
    {"attn/wo_a", dense, "attn/out_heads", "attn_wo_a", ""},
    {"out", dense, "attn/wo_a", "out", ""},
};

}  // namespace

std::span<const ReplayStage> replay_stages() { return kReplayStages; }

const ReplayStage* find_replay_stage(std::string_view name) {
  for (const ReplayStage& s : kReplayStages) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string_view comparison_name(Comparison c) {
  switch (c) {
    case Comparison::dense: return "dense";
    case Comparison::dense_state: return "dense (meaningful rows)";
    case Comparison::index_set: return "index set";
  }
  return "";
}

}  // namespace dsv4::verify
