#include "verify/capture/stage_names.h"

namespace dsv4::verify {

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

namespace {

using S = std::vector<int64_t>;
using G = CallGeometry;
constexpr auto all = StageScope::all_layers;
constexpr auto compressed = StageScope::compressed;
constexpr auto csa = StageScope::csa;
constexpr auto finite = StageValues::finite;
constexpr auto minus_inf = StageValues::finite_or_minus_inf;
constexpr auto index = StageValues::index;

// Shapes of capture-format.md. H heads, d head_dim, G o_groups, W window_size, IH/ID indexer heads
// and head dim; coff*r rows and coff*d columns for a compressor state (the indexer's: 8 x 2*ID).
const StageName kStages[] = {
    {"x", all, finite, "[b,s,dim]", [](const G& g) { return S{g.batch, g.seqlen, g.cfg->dim}; }},
    {"q_latent", all, finite, "[b,s,q_lora_rank]", [](const G& g) { return S{g.batch, g.seqlen, g.cfg->q_lora_rank}; }},
    {"q", all, finite, "[b,s,H,d]", [](const G& g) { return S{g.batch, g.seqlen, g.cfg->n_heads, g.cfg->head_dim}; }},
    {"kv", all, finite, "[b,s,d]", [](const G& g) { return S{g.batch, g.seqlen, g.cfg->head_dim}; }},
    {"compressor/entries", compressed, finite, "[b,n_new,d]",
     [](const G& g) { return S{g.batch, g.new_entries(g.ratio), g.cfg->head_dim}; }},
    {"compressor/state_kv", compressed, finite, "[b,coff*r,coff*d]",
     [](const G& g) { return S{g.batch, g.coff() * g.ratio, int64_t{g.coff()} * g.cfg->head_dim}; }},
    {"compressor/state_score", compressed, minus_inf, "[b,coff*r,coff*d]",
     [](const G& g) { return S{g.batch, g.coff() * g.ratio, int64_t{g.coff()} * g.cfg->head_dim}; }},
    {"indexer/q", csa, finite, "[b,s,IH,ID]",
     [](const G& g) { return S{g.batch, g.seqlen, g.cfg->index_n_heads, g.cfg->index_head_dim}; }},
    {"indexer/weights", csa, finite, "[b,s,IH]", [](const G& g) { return S{g.batch, g.seqlen, g.cfg->index_n_heads}; }},
    {"indexer/compressor/entries", csa, finite, "[b,n_new,ID]",
     [](const G& g) { return S{g.batch, g.new_entries(4), g.cfg->index_head_dim}; }},
    {"indexer/compressor/state_kv", csa, finite, "[b,8,2*ID]",
     [](const G& g) { return S{g.batch, 8, 2 * int64_t{g.cfg->index_head_dim}}; }},
    {"indexer/compressor/state_score", csa, minus_inf, "[b,8,2*ID]",
     [](const G& g) { return S{g.batch, 8, 2 * int64_t{g.cfg->index_head_dim}}; }},
    {"indexer/scores", csa, minus_inf, "[b,s,n_visible]", [](const G& g) { return S{g.batch, g.seqlen, g.indexer_visible()}; }},
    {"indexer/topk", csa, index, "[b,s,k]", [](const G& g) { return S{g.batch, g.seqlen, g.indexer_topk()}; }},
    {"topk_idxs", all, index, "[b,s,K]", [](const G& g) { return S{g.batch, g.seqlen, g.topk_width()}; }},
    {"attn/core", all, finite, "[b,s,H,d]", [](const G& g) { return S{g.batch, g.seqlen, g.cfg->n_heads, g.cfg->head_dim}; }},
    {"attn/out_heads", all, finite, "[b,s,H,d]",
     [](const G& g) { return S{g.batch, g.seqlen, g.cfg->n_heads, g.cfg->head_dim}; }},
    {"attn/wo_a", all, finite, "[b,s,G,o_lora_rank]",
     [](const G& g) { return S{g.batch, g.seqlen, g.cfg->o_groups, g.cfg->o_lora_rank}; }},
    {"out", all, finite, "[b,s,dim]", [](const G& g) { return S{g.batch, g.seqlen, g.cfg->dim}; }},
    {"cache/window_kv", all, finite, "[b,W,d]", [](const G& g) { return S{g.batch, g.cfg->window_size, g.cfg->head_dim}; }},
    {"cache/compressed_kv", compressed, finite, "[b,n_before,d]",
     [](const G& g) { return S{g.batch, g.entries_before(g.ratio), g.cfg->head_dim}; }},
    {"cache/indexer_kv", csa, finite, "[b,n_before,ID]",
     [](const G& g) { return S{g.batch, g.entries_before(4), g.cfg->index_head_dim}; }},
    {"cache/compressor_state_kv", compressed, finite, "[b,coff*r,coff*d]",
     [](const G& g) { return S{g.batch, g.coff() * g.ratio, int64_t{g.coff()} * g.cfg->head_dim}; }},
    {"cache/compressor_state_score", compressed, minus_inf, "[b,coff*r,coff*d]",
     [](const G& g) { return S{g.batch, g.coff() * g.ratio, int64_t{g.coff()} * g.cfg->head_dim}; }},
    {"cache/indexer_compressor_state_kv", csa, finite, "[b,8,2*ID]",
     [](const G& g) { return S{g.batch, 8, 2 * int64_t{g.cfg->index_head_dim}}; }},
    {"cache/indexer_compressor_state_score", csa, minus_inf, "[b,8,2*ID]",
     [](const G& g) { return S{g.batch, 8, 2 * int64_t{g.cfg->index_head_dim}}; }},
};

}  // namespace

std::span<const StageName> stage_names() { return kStages; }

const StageName* find_stage(std::string_view name) {
  for (const StageName& s : kStages) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool is_stage_group(std::string_view path) {
  for (const StageName& s : kStages) {
    if (s.name.size() > path.size() && s.name.starts_with(path) && s.name[path.size()] == '/') return true;
  }
  return false;
}

}  // namespace dsv4::verify
