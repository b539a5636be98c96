#include "verify/capture/weight_names.h"

namespace dsv4::verify {

namespace {

using S = std::vector<int64_t>;
using C = ref::ModelConfig;
constexpr auto all = ref::StageScope::all_layers;
constexpr auto compressed = ref::StageScope::compressed;
constexpr auto csa = ref::StageScope::csa;
int64_t coff(int ratio) { return ratio == 4 ? 2 : 1; }

// Shapes of capture-format.md (the checkpoint's). FP8 projections are those DeepSeek runs through
// fp8_gemm; wo_a and the indexer's weights_proj are bf16; the compressors' wkv/wgate are fp32.
const WeightName kWeights[] = {
    {"wq_a", all, "fp8", "[q_lora_rank,dim]",
     [](const C& c, int) {
       return S{c.q_lora_rank, c.dim};
     }},
    {"q_norm", all, "", "[q_lora_rank]", [](const C& c, int) { return S{c.q_lora_rank}; }},
    {"wq_b", all, "fp8", "[H*d,q_lora_rank]",
     [](const C& c, int) {
       return S{int64_t{c.n_heads} * c.head_dim, c.q_lora_rank};
     }},
    {"wkv", all, "fp8", "[d,dim]",
     [](const C& c, int) {
       return S{c.head_dim, c.dim};
     }},
    {"kv_norm", all, "", "[d]", [](const C& c, int) { return S{c.head_dim}; }},
    {"attn_sink", all, "", "[H]", [](const C& c, int) { return S{c.n_heads}; }},
    {"wo_a", all, "bf16", "[G*o_lora_rank,H*d/G]",
     [](const C& c, int) {
       return S{int64_t{c.o_groups} * c.o_lora_rank, int64_t{c.n_heads} * c.head_dim / c.o_groups};
     }},
    {"wo_b", all, "fp8", "[dim,G*o_lora_rank]",
     [](const C& c, int) {
       return S{c.dim, int64_t{c.o_groups} * c.o_lora_rank};
     }},
    {"compressor/wkv", compressed, "fp32", "[coff*d,dim]",
     [](const C& c, int r) {
       return S{coff(r) * c.head_dim, c.dim};
     }},
    {"compressor/wgate", compressed, "fp32", "[coff*d,dim]",
     [](const C& c, int r) {
       return S{coff(r) * c.head_dim, c.dim};
     }},
    {"compressor/ape", compressed, "", "[r,coff*d]",
     [](const C& c, int r) {
       return S{r, coff(r) * c.head_dim};
     }},
    {"compressor/norm", compressed, "", "[d]", [](const C& c, int) { return S{c.head_dim}; }},
    {"indexer/wq_b", csa, "fp8", "[IH*ID,q_lora_rank]",
     [](const C& c, int) {
       return S{int64_t{c.index_n_heads} * c.index_head_dim, c.q_lora_rank};
     }},
    {"indexer/weights_proj", csa, "bf16", "[IH,dim]",
     [](const C& c, int) {
       return S{c.index_n_heads, c.dim};
     }},
    {"indexer/compressor/wkv", csa, "fp32", "[2*ID,dim]",
     [](const C& c, int) {
       return S{2 * int64_t{c.index_head_dim}, c.dim};
     }},
    {"indexer/compressor/wgate", csa, "fp32", "[2*ID,dim]",
     [](const C& c, int) {
       return S{2 * int64_t{c.index_head_dim}, c.dim};
     }},
    {"indexer/compressor/ape", csa, "", "[4,2*ID]",
     [](const C& c, int) {
       return S{4, 2 * int64_t{c.index_head_dim}};
     }},
    {"indexer/compressor/norm", csa, "", "[ID]", [](const C& c, int) { return S{c.index_head_dim}; }},
};

}  // namespace

std::span<const WeightName> weight_names() { return kWeights; }

const WeightName* find_weight(std::string_view name) {
  for (const WeightName& w : kWeights) {
    if (w.name == name) return &w;
  }
  return nullptr;
}

bool is_weight_group(std::string_view path) {
  for (const WeightName& w : kWeights) {
    if (w.name.size() > path.size() && w.name.starts_with(path) && w.name[path.size()] == '/') return true;
  }
  return false;
}

}  // namespace dsv4::verify
