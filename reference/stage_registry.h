#pragma once
// The stage registry: every dataset of one call of a layer (docs/capture-format.md), defined once,
// one row per stage: its name (the capture's dataset path, the tolerance key, the report's name),
// which layers have it, what its values may be, its shape, how the verifier compares it, the stage
// whose scores decide its ties, which StageProvider entry computes it and where the oracle's result
// lives in StageOutputs. The capture reader and writer, the replay, synth, the precision report,
// the CUDA backend's coverage and the tolerance-table checks all read this table; adding a stage
// is one row here plus its function (docs/architecture.md "Add a stage").
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "reference/call_geometry.h"
#include "reference/numerics/storage.h"
#include "reference/precision.h"
#include "reference/stage_outputs.h"
#include "reference/tensor.h"

namespace dsv4::ref {

// Every dataset of calls/<k>/, in the order of docs/capture-format.md: the input, the results in
// computation order, then the cache before the call.
enum class Stage {
  x,
  q_latent,
  q,
  kv,
  compressor_entries,
  compressor_state_kv,
  compressor_state_score,
  indexer_q,
  indexer_weights,
  indexer_compressor_entries,
  indexer_compressor_state_kv,
  indexer_compressor_state_score,
  indexer_scores,
  indexer_topk,
  topk_idxs,
  attn_core,
  attn_out_heads,
  attn_wo_a,
  out,
  cache_window_kv,
  cache_compressed_kv,
  cache_indexer_kv,
  cache_compressor_state_kv,
  cache_compressor_state_score,
  cache_indexer_compressor_state_kv,
  cache_indexer_compressor_state_score,
};

// Which layers have a stage (or a weight): every layer, compressed layers (ratio 4 or 128), or CSA
// layers (ratio 4, which have the indexer).
enum class StageScope { all_layers, compressed, csa };
bool in_scope(StageScope scope, int ratio);
std::string_view scope_text(StageScope scope);  // "every layer", "compress_ratio 4 or 128", ...

enum class StageValues {
  finite,               // every value finite
  finite_or_minus_inf,  // -inf allowed (masked scores, empty state slots), never NaN or +inf
  index,                // integers: -1 (unused slot) or a row of the call's kv matrix
};

// How the verifier compares a stage with the captured one.
enum class Comparison {
  none,         // x (the input) and cache/... (the state before the call): inputs, not results
  dense,        // every element
  dense_state,  // a compressor state: only the rows DeepSeek's code relies on
                // (CompressorState::meaningful_rows)
  index_set,    // per row as sets, ties decided by the scores of the row's `tie_scores` stage
};
std::string_view comparison_name(Comparison c);  // "dense", "dense (meaningful rows)", "index set"

// The StageProvider function (reference/stage_provider.h) that computes a stage.
enum class StageEntry {
  none,  // x and cache/...: not computed
  q_latent,
  q_heads,
  window_kv,
  compress,  // main and indexer compressor: entries and state
  indexer_q,
  indexer_weights,
  indexer_scores,
  topk_indices,
  attention_indices,
  sparse_mqa,
  inverse_rope_heads,
  grouped_wo_a,
  wo_b,
};
std::string_view entry_name(StageEntry e);  // "q_heads", "sparse_mqa", ...

// Which of the precision policy's storages a producer holds the stage in (the capture's `dtype`).
enum class Held { activations, fp32_tensors, indexer_scores, index };

struct StageDef {
  Stage id;
  std::string_view name;  // dataset path under calls/<k>/
  StageScope scope;
  StageValues values;
  Comparison comparison;
  Held held;
  std::string_view shape_doc;  // "[b,s,H,d]"
  std::vector<int64_t> (*shape)(const CallGeometry& g);
  std::optional<Stage> tie_scores;  // index_set: the scores the selection was made from
  StageEntry entry;
  bool hadamard_basis;  // values live in the indexer's Hadamard-rotated basis (when the policy rotates)
  // The oracle's result of this stage for one sequence ([rows, cols] of the dataset's [b, rows,
  // ...] less b); exactly one is set for a computed stage, neither for x and cache/.
  const Mat* (*dense_result)(const StageOutputs&);
  const IndexMat* (*index_result)(const StageOutputs&);

  bool is_index() const { return values == StageValues::index; }
  bool is_cache() const { return name.starts_with("cache/"); }  // state before the call, not a result
  bool is_compared() const { return comparison != Comparison::none; }
  // The storage a producer running policy p holds the stage in (index stages: not a float storage).
  Storage storage(const PrecisionPolicy& p) const;
};

// All 26 rows, in the order of enum Stage.
std::span<const StageDef> stages();
const StageDef& stage(Stage id);
// nullptr when `name` is not a stage.
const StageDef* find_stage(std::string_view name);
// True when `path` (e.g. "indexer" or "indexer/compressor") is a group holding stage datasets.
bool is_stage_group(std::string_view path);

}  // namespace dsv4::ref
