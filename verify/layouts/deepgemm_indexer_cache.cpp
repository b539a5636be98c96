// DeepGEMM's paged indexer cache (deepgemm_indexer_cache.h) as an entry of the layout table.
#include "verify/layouts/deepgemm_indexer_cache.h"

#include "verify/layouts/layout_table.h"

namespace dsv4::layouts {

namespace {
PagedLayout paged(const DeepGemmIndexerLayout& layout) {
  return layout.element == IndexerCacheElement::fp8_e4m3 ? deepgemm_indexer_fp8(layout.block_kv, layout.head_dim)
                                                         : deepgemm_indexer_fp4(layout.block_kv, layout.head_dim);
}
}  // namespace

std::vector<uint8_t> encode_deepgemm_indexer(const std::vector<ref::QuantizedRow>& keys,
                                             const DeepGemmIndexerLayout& layout) {
  StoredTokens tokens;
  tokens.quant = keys;
  tokens.bf16.resize(static_cast<ref::Index>(keys.size()), 0);
  return encode(paged(layout), tokens);
}

ref::Mat decode_deepgemm_indexer(std::span<const uint8_t> pool, int64_t n_tokens, const DeepGemmIndexerLayout& layout) {
  return decode(paged(layout), pool, n_tokens);
}

}  // namespace dsv4::layouts
