#pragma once
// One description for every paged, quantized cache an engine reads (docs/engine-layouts.md): a
// token is `quant_dims` element codes with one scale per `scale_block` of them, then `bf16_dims`
// values held as bf16; pages hold `page_size` tokens. Two placements cover the engines seen so far:
//
//   interleaved  token t at t * token_bytes():        [codes | scales | bf16 dims]
//                (FlashMLA's V3.2 656-B layout)
//   split        token t's data at t * data_bytes():  [codes | bf16 dims]
//                its scales at P * data_bytes() + t * scale_bytes():  [scales | pad bytes]
//                (FlashMLA's MODEL1, DeepGEMM's paged indexer cache)
//
// and the page is padded up to a multiple of `page_align` bytes. Codes are one e4m3 byte each, or
// e2m1 nibbles two to a byte (element 2i low, 2i+1 high); a scale is one UE8M0 byte (the biased
// exponent e + 127 of 2^e) or a little-endian fp32; bf16 dims are little-endian. A new layout is
// one more entry of layout_table.h.
//
// A token in stored form is its codes and scales (ref::QuantizedRow) plus its bf16 dims. From
// values, `from_values` recovers the power-of-two scale DeepSeek's rule gives the block
// (2^ceil(log2(max(amax, floor) / qmax)), reference/numerics/scale_rules.h) and the codes; a value
// that is not code * scale for an element code is refused, naming its row and dim.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reference/numerics/block_quant.h"
#include "reference/tensor.h"

namespace dsv4::layouts {

enum class ScaleEncoding {
  ue8m0,  // 1 byte: the biased exponent e + 127 of a power-of-two scale 2^e (e in [-127, 127])
  fp32,   // 4 bytes, little-endian
};

enum class TokenPlacement { interleaved, split };

struct PagedLayout {
  std::string name;
  ref::Element element = ref::Element::e4m3;
  int quant_dims = 0;   // leading dims, stored as element codes
  int scale_block = 0;  // dims per scale
  ScaleEncoding scale_encoding = ScaleEncoding::ue8m0;
  int scale_pad_bytes = 0;  // zero bytes after a token's scales
  int bf16_dims = 0;        // trailing dims, stored as bf16
  TokenPlacement placement = TokenPlacement::split;
  int page_align = 1;  // page bytes are rounded up to a multiple of this
  int page_size = 64;  // tokens per page (P)

  int head_dim() const { return quant_dims + bf16_dims; }
  int scales_per_token() const { return quant_dims / scale_block; }
  int64_t code_bytes() const { return element == ref::Element::e4m3 ? quant_dims : quant_dims / 2; }
  int64_t scale_bytes() const {  // per token, pad bytes included
    return int64_t{scales_per_token()} * (scale_encoding == ScaleEncoding::ue8m0 ? 1 : 4) + scale_pad_bytes;
  }
  int64_t bf16_bytes() const { return int64_t{bf16_dims} * 2; }
  int64_t data_bytes() const { return code_bytes() + bf16_bytes(); }
  int64_t token_bytes() const { return data_bytes() + scale_bytes(); }  // before page padding
  int64_t page_bytes() const {
    const int64_t raw = int64_t{page_size} * token_bytes();
    return (raw + page_align - 1) / page_align * page_align;
  }
  int64_t pool_bytes(int64_t pages) const { return pages * page_bytes(); }
  int64_t pages_for(int64_t tokens) const { return (tokens + page_size - 1) / page_size; }

  // Byte offsets in a pool of token index `token` (= page * P + slot).
  int64_t code_offset(int64_t token) const {
    const int64_t page = token / page_size, slot = token % page_size;
    return page * page_bytes() + slot * (placement == TokenPlacement::split ? data_bytes() : token_bytes());
  }
  int64_t scale_offset(int64_t token) const {
    const int64_t page = token / page_size, slot = token % page_size;
    if (placement == TokenPlacement::interleaved) return code_offset(token) + code_bytes();
    return page * page_bytes() + int64_t{page_size} * data_bytes() + slot * scale_bytes();
  }
  int64_t bf16_offset(int64_t token) const {
    return code_offset(token) + code_bytes() + (placement == TokenPlacement::interleaved ? scale_bytes() : 0);
  }

  // The fake-quant format whose values the layout holds exactly: the element, the block, and
  // DeepSeek's UE8M0 rule (every layout stores that rule's scales; fp32 scales may hold others).
  ref::BlockFormat canonical_format() const { return {element, scale_block, ref::ScaleRule::ue8m0_ceil}; }

  // Throws std::invalid_argument naming the layout and the field that does not fit.
  void validate() const;
};

// A token as a layout stores it.
struct StoredTokens {
  std::vector<ref::QuantizedRow> quant;  // per token: quant_dims codes and their block scales
  ref::Mat bf16;                         // [n, bf16_dims] values (each a bf16)
  int64_t size() const { return static_cast<int64_t>(quant.size()); }
};

// Stored tokens -> a pool of pages_for(n) pages, token i at index i; unused bytes are 0.
// Throws std::invalid_argument naming the token and dim (or block) of the first code off the
// element grid, a scale the encoding cannot hold, or a bf16 dim that is not a bf16.
std::vector<uint8_t> encode(const PagedLayout& layout, const StoredTokens& tokens);

// Tokens 0..n-1 of a pool -> stored form / values [n, head_dim]. Values are code * scale (exact
// for UE8M0; rounded to fp32 for fp32 scales, as a torch dequantization computes it); bf16 dims
// widened. Throws std::invalid_argument when the pool is too short for n tokens.
StoredTokens decode_stored(const PagedLayout& layout, std::span<const uint8_t> pool, int64_t n_tokens);
ref::Mat decode(const PagedLayout& layout, std::span<const uint8_t> pool, int64_t n_tokens);

// Values [n, head_dim] on the layout's grid -> stored form with the canonical (DeepSeek UE8M0)
// scales. NaN in a quant dim becomes the e4m3 NaN code (e2m1 has none: refused); the block's
// scale is taken over its other values. Throws std::invalid_argument naming the row and dim of the
// first value off the grid (or the width).
StoredTokens from_values(const PagedLayout& layout, const ref::Mat& rows);
std::vector<uint8_t> encode_values(const PagedLayout& layout, const ref::Mat& rows);

// The cache writer: any values [n, head_dim] -> stored form, the quant dims quantized with
// `format` (its element and block must be the layout's; default the canonical format), the bf16
// dims rounded to bf16 (through fp32, RNE).
StoredTokens quantize(const PagedLayout& layout, const ref::Mat& rows, const ref::BlockFormat& format);
StoredTokens quantize(const PagedLayout& layout, const ref::Mat& rows);

}  // namespace dsv4::layouts
