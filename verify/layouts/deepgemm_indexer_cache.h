#pragma once
// DeepGEMM's paged indexer-key cache (fp8_paged_mqa_logits; docs/engine-layouts.md): uint8
// [num_blocks, block_kv, 1, D + 4] in shape, but within a block all tokens' data come first, then
// all tokens' scales (not interleaved per token):
//
//   FP8:  block bytes = block_kv * (D + 4): token t's D e4m3 codes at t * D,
//         its fp32 scale (little-endian) at block_kv * D + t * 4.      value = code * scale
//   FP4:  block bytes = block_kv * (D / 2 + 4): token t's D/2 bytes of packed e2m1 pairs (element
//         2i in the low nibble, 2i+1 in the high nibble) at t * D/2, then its D/32 UE8M0 bytes
//         (one per 32 dims, biased exponent) packed in an int32 at block_kv * D/2 + t * 4.
//
// Token index in a pool: block * block_kv + t. On SM90 block_kv = 64, D = 128.
#include <cstdint>
#include <span>
#include <vector>

#include "reference/numerics/block_quant.h"
#include "reference/tensor.h"

namespace dsv4::layouts {

enum class IndexerCacheElement { fp8_e4m3, fp4_e2m1 };

struct DeepGemmIndexerLayout {
  IndexerCacheElement element = IndexerCacheElement::fp8_e4m3;
  int head_dim = 128;  // D
  int block_kv = 64;

  int64_t token_data_bytes() const { return element == IndexerCacheElement::fp8_e4m3 ? head_dim : head_dim / 2; }
  int64_t block_bytes() const { return int64_t{block_kv} * (token_data_bytes() + 4); }
  int64_t data_offset(int64_t token) const {
    return token / block_kv * block_bytes() + token % block_kv * token_data_bytes();
  }
  int64_t scale_offset(int64_t token) const {
    return token / block_kv * block_bytes() + int64_t{block_kv} * token_data_bytes() + token % block_kv * 4;
  }
};

// keys: one quantized row per key (ref::quantize_row of the key with the layout's format: FP8
// e4m3 with one scale per token, any scale rule whose scale an fp32 holds; FP4
// BlockFormat::fp4_indexer()) -> a pool of ceil(n / block_kv) blocks, key i at token index i
// (unused tokens 0). Throws std::invalid_argument naming the key when its length is not D, its
// scales do not fit the layout (count, not an fp32, not a power of two for UE8M0) or a code is
// off the element grid.
std::vector<uint8_t> encode_deepgemm_indexer(const std::vector<ref::QuantizedRow>& keys,
                                             const DeepGemmIndexerLayout& layout);
// Tokens 0..n-1 -> [n, D] values.
ref::Mat decode_deepgemm_indexer(std::span<const uint8_t> pool, int64_t n_tokens, const DeepGemmIndexerLayout& layout);

}  // namespace dsv4::layouts
