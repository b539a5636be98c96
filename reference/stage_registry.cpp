#include "reference/stage_registry.h"

#include <stdexcept>

namespace dsv4::ref {

bool in_scope(StageScope scope, int ratio) {
  switch (scope) {
    case StageScope::all_layers: return true;
    case StageScope::compressed: return ratio != 0;
    case StageScope::csa: return ratio == 4;
  }
  return false;
}

std::string_view scope_text(StageScope scope) {
  switch (scope) {
    case StageScope::all_layers: return "every layer";
    case StageScope::compressed: return "compress_ratio 4 or 128";
    case StageScope::csa: return "compress_ratio 4";
  }
  return "";
}

std::string_view comparison_name(Comparison c) {
  switch (c) {
    case Comparison::none: return "not compared";
    case Comparison::dense: return "dense";
    case Comparison::dense_state: return "dense (meaningful rows)";
    case Comparison::index_set: return "index set";
  }
  return "";
}

std::string_view entry_name(StageEntry e) {
  switch (e) {
    case StageEntry::none: return "none";
    case StageEntry::q_latent: return "q_latent";
    case StageEntry::q_heads: return "q_heads";
    case StageEntry::window_kv: return "window_kv";
    case StageEntry::compress: return "compress";
    case StageEntry::indexer_q: return "indexer_q";
    case StageEntry::indexer_weights: return "indexer_weights";
    case StageEntry::indexer_scores: return "indexer_scores";
    case StageEntry::topk_indices: return "topk_indices";
    case StageEntry::attention_indices: return "attention_indices";
    case StageEntry::sparse_mqa: return "sparse_mqa";
    case StageEntry::inverse_rope_heads: return "inverse_rope_heads";
    case StageEntry::grouped_wo_a: return "grouped_wo_a";
    case StageEntry::wo_b: return "wo_b";
  }
  return "";
}

Storage StageDef::storage(const PrecisionPolicy& p) const {
  switch (held) {
    case Held::activations: return p.activations;
    case Held::fp32_tensors: return p.fp32_tensors;
    case Held::indexer_scores: return p.indexer_scores;
    case Held::index: break;
  }
  throw std::logic_error("stage " + std::string(name) + " holds indices, not a floating-point storage");
}

namespace {

using S = std::vector<int64_t>;
using G = CallGeometry;
using O = StageOutputs;
constexpr auto all = StageScope::all_layers;
constexpr auto compressed = StageScope::compressed;
constexpr auto csa = StageScope::csa;
constexpr auto finite = StageValues::finite;
constexpr auto minus_inf = StageValues::finite_or_minus_inf;
constexpr auto index = StageValues::index;
constexpr auto no_tie = std::optional<Stage>{};
constexpr auto no_dense = static_cast<const Mat* (*)(const O&)>(nullptr);
constexpr auto no_index = static_cast<const IndexMat* (*)(const O&)>(nullptr);

// Shapes of docs/capture-format.md. H heads, d head_dim, G o_groups, W window_size, IH/ID indexer
// heads and head dim; coff*r rows and coff*d columns for a compressor state (the indexer's: 8 x 2*ID).
S state_shape(const G& g) { return S{g.batch, g.coff() * g.ratio, int64_t{g.coff()} * g.cfg->head_dim}; }
S indexer_state_shape(const G& g) { return S{g.batch, 8, 2 * int64_t{g.cfg->index_head_dim}}; }
S heads_shape(const G& g) { return S{g.batch, g.seqlen, g.cfg->n_heads, g.cfg->head_dim}; }

// clang-format off
const StageDef kStages[] = {
    {Stage::x, "x", all, finite, Comparison::none, Held::activations, "[b,s,dim]",
     [](const G& g) { return S{g.batch, g.seqlen, g.cfg->dim}; }, no_tie, StageEntry::none, false, no_dense, no_index},
    {Stage::q_latent, "q_latent", all, finite, Comparison::dense, Held::activations, "[b,s,q_lora_rank]",
     [](const G& g) { return S{g.batch, g.seqlen, g.cfg->q_lora_rank}; }, no_tie, StageEntry::q_latent, false,
     [](const O& o) { return &o.q_latent; }, no_index},
    {Stage::q, "q", all, finite, Comparison::dense, Held::activations, "[b,s,H,d]", heads_shape, no_tie,
     StageEntry::q_heads, false, [](const O& o) { return &o.q; }, no_index},
    {Stage::kv, "kv", all, finite, Comparison::dense, Held::activations, "[b,s,d]",
     [](const G& g) { return S{g.batch, g.seqlen, g.cfg->head_dim}; }, no_tie, StageEntry::window_kv, false,
     [](const O& o) { return &o.kv; }, no_index},
    {Stage::compressor_entries, "compressor/entries", compressed, finite, Comparison::dense, Held::activations,
     "[b,n_new,d]", [](const G& g) { return S{g.batch, g.new_entries(g.ratio), g.cfg->head_dim}; }, no_tie,
     StageEntry::compress, false, [](const O& o) { return &o.compressor_entries; }, no_index},
    {Stage::compressor_state_kv, "compressor/state_kv", compressed, finite, Comparison::dense_state,
     Held::fp32_tensors, "[b,coff*r,coff*d]", state_shape, no_tie, StageEntry::compress, false,
     [](const O& o) { return &o.compressor_state.kv; }, no_index},
    {Stage::compressor_state_score, "compressor/state_score", compressed, minus_inf, Comparison::dense_state,
     Held::fp32_tensors, "[b,coff*r,coff*d]", state_shape, no_tie, StageEntry::compress, false,
     [](const O& o) { return &o.compressor_state.score; }, no_index},
    {Stage::indexer_q, "indexer/q", csa, finite, Comparison::dense, Held::activations, "[b,s,IH,ID]",
     [](const G& g) { return S{g.batch, g.seqlen, g.cfg->index_n_heads, g.cfg->index_head_dim}; }, no_tie,
     StageEntry::indexer_q, true, [](const O& o) { return &o.indexer_q; }, no_index},
    {Stage::indexer_weights, "indexer/weights", csa, finite, Comparison::dense, Held::activations, "[b,s,IH]",
     [](const G& g) { return S{g.batch, g.seqlen, g.cfg->index_n_heads}; }, no_tie, StageEntry::indexer_weights,
     false, [](const O& o) { return &o.indexer_weights; }, no_index},
    {Stage::indexer_compressor_entries, "indexer/compressor/entries", csa, finite, Comparison::dense,
     Held::activations, "[b,n_new,ID]", [](const G& g) { return S{g.batch, g.new_entries(4), g.cfg->index_head_dim}; },
     no_tie, StageEntry::compress, true, [](const O& o) { return &o.indexer_compressor_entries; }, no_index},
    {Stage::indexer_compressor_state_kv, "indexer/compressor/state_kv", csa, finite, Comparison::dense_state,
     Held::fp32_tensors, "[b,8,2*ID]", indexer_state_shape, no_tie, StageEntry::compress, false,
     [](const O& o) { return &o.indexer_compressor_state.kv; }, no_index},
    {Stage::indexer_compressor_state_score, "indexer/compressor/state_score", csa, minus_inf,
     Comparison::dense_state, Held::fp32_tensors, "[b,8,2*ID]", indexer_state_shape, no_tie, StageEntry::compress,
     false, [](const O& o) { return &o.indexer_compressor_state.score; }, no_index},
    {Stage::indexer_scores, "indexer/scores", csa, minus_inf, Comparison::dense, Held::indexer_scores,
     "[b,s,n_visible]", [](const G& g) { return S{g.batch, g.seqlen, g.indexer_visible()}; }, no_tie,
     StageEntry::indexer_scores, false, [](const O& o) { return &o.indexer_scores; }, no_index},
    {Stage::indexer_topk, "indexer/topk", csa, index, Comparison::index_set, Held::index, "[b,s,k]",
     [](const G& g) { return S{g.batch, g.seqlen, g.indexer_topk()}; }, Stage::indexer_scores,
     StageEntry::topk_indices, false, no_dense, [](const O& o) { return &o.indexer_topk; }},
    {Stage::topk_idxs, "topk_idxs", all, index, Comparison::index_set, Held::index, "[b,s,K]",
     [](const G& g) { return S{g.batch, g.seqlen, g.topk_width()}; }, Stage::indexer_scores,
     StageEntry::attention_indices, false, no_dense, [](const O& o) { return &o.topk_idxs; }},
    {Stage::attn_core, "attn/core", all, finite, Comparison::dense, Held::activations, "[b,s,H,d]", heads_shape,
     no_tie, StageEntry::sparse_mqa, false, [](const O& o) { return &o.attn_core; }, no_index},
    {Stage::attn_out_heads, "attn/out_heads", all, finite, Comparison::dense, Held::activations, "[b,s,H,d]",
     heads_shape, no_tie, StageEntry::inverse_rope_heads, false, [](const O& o) { return &o.attn_out_heads; },
     no_index},
    {Stage::attn_wo_a, "attn/wo_a", all, finite, Comparison::dense, Held::activations, "[b,s,G,o_lora_rank]",
     [](const G& g) { return S{g.batch, g.seqlen, g.cfg->o_groups, g.cfg->o_lora_rank}; }, no_tie,
     StageEntry::grouped_wo_a, false, [](const O& o) { return &o.attn_wo_a; }, no_index},
    {Stage::out, "out", all, finite, Comparison::dense, Held::activations, "[b,s,dim]",
     [](const G& g) { return S{g.batch, g.seqlen, g.cfg->dim}; }, no_tie, StageEntry::wo_b, false,
     [](const O& o) { return &o.out; }, no_index},
    {Stage::cache_window_kv, "cache/window_kv", all, finite, Comparison::none, Held::activations, "[b,W,d]",
     [](const G& g) { return S{g.batch, g.cfg->window_size, g.cfg->head_dim}; }, no_tie, StageEntry::none, false,
     no_dense, no_index},
    {Stage::cache_compressed_kv, "cache/compressed_kv", compressed, finite, Comparison::none, Held::activations,
     "[b,n_before,d]", [](const G& g) { return S{g.batch, g.entries_before(g.ratio), g.cfg->head_dim}; }, no_tie,
     StageEntry::none, false, no_dense, no_index},
    {Stage::cache_indexer_kv, "cache/indexer_kv", csa, finite, Comparison::none, Held::activations,
     "[b,n_before,ID]", [](const G& g) { return S{g.batch, g.entries_before(4), g.cfg->index_head_dim}; }, no_tie,
     StageEntry::none, true, no_dense, no_index},
    {Stage::cache_compressor_state_kv, "cache/compressor_state_kv", compressed, finite, Comparison::none,
     Held::fp32_tensors, "[b,coff*r,coff*d]", state_shape, no_tie, StageEntry::none, false, no_dense, no_index},
    {Stage::cache_compressor_state_score, "cache/compressor_state_score", compressed, minus_inf, Comparison::none,
     Held::fp32_tensors, "[b,coff*r,coff*d]", state_shape, no_tie, StageEntry::none, false, no_dense, no_index},
    {Stage::cache_indexer_compressor_state_kv, "cache/indexer_compressor_state_kv", csa, finite, Comparison::none,
     Held::fp32_tensors, "[b,8,2*ID]", indexer_state_shape, no_tie, StageEntry::none, false, no_dense, no_index},
    {Stage::cache_indexer_compressor_state_score, "cache/indexer_compressor_state_score", csa, minus_inf,
     Comparison::none, Held::fp32_tensors, "[b,8,2*ID]", indexer_state_shape, no_tie, StageEntry::none, false,
     no_dense, no_index},
};
// clang-format on

constexpr size_t kStageCount = static_cast<size_t>(Stage::cache_indexer_compressor_state_score) + 1;
static_assert(std::size(kStages) == kStageCount, "one registry row per Stage");

}  // namespace

std::span<const StageDef> stages() { return kStages; }

const StageDef& stage(Stage id) { return kStages[static_cast<size_t>(id)]; }

const StageDef* find_stage(std::string_view name) {
  for (const StageDef& s : kStages) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool is_stage_group(std::string_view path) {
  for (const StageDef& s : kStages) {
    if (s.name.size() > path.size() && s.name.starts_with(path) && s.name[path.size()] == '/') return true;
  }
  return false;
}

}  // namespace dsv4::ref
