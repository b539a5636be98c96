// The table of engine layouts (layout_table.h).
#include "verify/layouts/layout_table.h"

#include <stdexcept>

namespace dsv4::layouts {

PagedLayout flashmla_model1(int page_size) {
  return {.name = "flashmla_model1",
          .element = ref::Element::e4m3,
          .quant_dims = 448,
          .scale_block = 64,
          .scale_encoding = ScaleEncoding::ue8m0,
          .scale_pad_bytes = 1,
          .bf16_dims = 64,
          .placement = TokenPlacement::split,
          .page_align = 576,
          .page_size = page_size};
}

PagedLayout flashmla_v32(int page_size) {
  return {.name = "flashmla_v32",
          .element = ref::Element::e4m3,
          .quant_dims = 512,
          .scale_block = 128,
          .scale_encoding = ScaleEncoding::fp32,
          .scale_pad_bytes = 0,
          .bf16_dims = 64,
          .placement = TokenPlacement::interleaved,
          .page_align = 1,
          .page_size = page_size};
}

PagedLayout deepgemm_indexer_fp8(int block_kv, int head_dim) {
  return {.name = "deepgemm_indexer_fp8",
          .element = ref::Element::e4m3,
          .quant_dims = head_dim,
          .scale_block = head_dim,
          .scale_encoding = ScaleEncoding::fp32,
          .scale_pad_bytes = 0,
          .bf16_dims = 0,
          .placement = TokenPlacement::split,
          .page_align = 1,
          .page_size = block_kv};
}

PagedLayout deepgemm_indexer_fp4(int block_kv, int head_dim) {
  // D/32 UE8M0 bytes fill the int32 when D = 128; a smaller D leaves pad bytes in it.
  return {.name = "deepgemm_indexer_fp4",
          .element = ref::Element::e2m1,
          .quant_dims = head_dim,
          .scale_block = 32,
          .scale_encoding = ScaleEncoding::ue8m0,
          .scale_pad_bytes = 4 - head_dim / 32,
          .bf16_dims = 0,
          .placement = TokenPlacement::split,
          .page_align = 1,
          .page_size = block_kv};
}

namespace {
struct Entry {
  const char* name;
  PagedLayout (*make)(int page_size);
};
const Entry kTable[] = {
    {"flashmla_model1", [](int p) { return flashmla_model1(p); }},
    {"flashmla_v32", [](int p) { return flashmla_v32(p); }},
    {"deepgemm_indexer_fp8", [](int p) { return deepgemm_indexer_fp8(p); }},
    {"deepgemm_indexer_fp4", [](int p) { return deepgemm_indexer_fp4(p); }},
};
}  // namespace

std::vector<std::string> layout_names() {
  std::vector<std::string> names;
  for (const Entry& e : kTable) names.emplace_back(e.name);
  return names;
}

PagedLayout layout_by_name(const std::string& name, int page_size) {
  for (const Entry& e : kTable)
    if (name == e.name) return e.make(page_size);
  std::string known;
  for (const Entry& e : kTable) known += std::string(known.empty() ? "" : ", ") + e.name;
  throw std::invalid_argument("unknown cache layout '" + name + "' (known: " + known + ")");
}

}  // namespace dsv4::layouts
