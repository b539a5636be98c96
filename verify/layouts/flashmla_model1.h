#pragma once
// FlashMLA's V4 FP8 KV cache ("MODEL1"), the byte layout FlashMLA's sparse decode and the project's
// CUDA sparse-MQA kernels read (docs/engine-layouts.md). A cache is a pool of pages of P tokens:
//
//   page bytes   = ceil(584 * P / 576) * 576           (padded to a multiple of 576 B)
//   token t of a page, data  at t * 576:  448 e4m3 codes (the nope dims, d 0..447)
//                                         then 64 bf16 little-endian (the rope dims, d 448..511)
//   token t of a page, scales at P * 576 + t * 8:  7 UE8M0 bytes (one per 64 nope dims, the
//                                         biased exponent e + 127 of the power-of-two scale 2^e)
//                                         then 1 pad byte (0)
//
// A row of 512 values is stored exactly when it is what DeepSeek's window / compressed kv holds:
// the nope dims s_b * e4m3 code with s_b = 2^ceil(log2(max(amax_b, 1e-4) / 448)) per block b of 64
// (reference/numerics/block_quant.h, BlockFormat::fp8_kv()), the rope dims bf16. Encoding takes
// s_b = the rule's scale of the values' own amax and codes = values / s_b: the bytes DeepSeek's
// writer gives those values, decoding to them bit for bit; a row that is not on that grid is
// refused. Values do not always determine the bytes a writer produced from other inputs: a block
// whose top code came out 224 under scale s holds the same values as code 448 under s / 2, and
// encoding picks the latter (compare written bytes with quantize_model1 of the writer's input).
// A NaN nope dim is stored as the e4m3 NaN code 0x7f (its block's scale is taken over the other
// dims), a NaN rope dim as a bf16 NaN: unreferenced slots can be poisoned, as FlashMLA's tests do.
// An all-zero block stores 2^-22 (UE8M0 byte 105), the rule's scale at the 1e-4 amax floor.
// Token index in a pool: page * P + t (FlashMLA's `block * page_size + offset`). The general form
// of this layout (any page size, the other engines' layouts) is layout_table.h.
#include <cstdint>
#include <span>
#include <vector>

#include "reference/tensor.h"

namespace dsv4::layouts {

struct Model1Layout {
  static constexpr int kHeadDim = 512;
  static constexpr int kNopeDims = 448;
  static constexpr int kRopeDims = 64;
  static constexpr int kScaleBlock = 64;
  static constexpr int kTokenDataBytes = 576;  // 448 + 64 * 2
  static constexpr int kTokenScaleBytes = 8;   // 7 UE8M0 + 1 pad
  int page_size = 64;                          // P tokens per page (FlashMLA: 256 window, 64 C4, 2 C128)

  int64_t page_bytes() const { return (int64_t{584} * page_size + 575) / 576 * 576; }
  int64_t data_offset(int64_t token) const {  // byte of token's first e4m3 code
    return token / page_size * page_bytes() + token % page_size * kTokenDataBytes;
  }
  int64_t scale_offset(int64_t token) const {  // byte of token's first UE8M0 scale
    return token / page_size * page_bytes() + int64_t{page_size} * kTokenDataBytes +
           token % page_size * kTokenScaleBytes;
  }
  int64_t pool_bytes(int64_t pages) const { return pages * page_bytes(); }
};

// rows [n, 512] (values on the MODEL1 grid, see above) -> a pool of ceil(n / P) pages, row i at
// token index i; the bytes of unused tokens of the last page are 0. Throws std::invalid_argument
// naming the row and dim of the first value off the grid, or for a width other than 512.
std::vector<uint8_t> encode_model1(const ref::Mat& rows, const Model1Layout& layout);

// The cache writer: any rows [n, 512] -> the same pool, the nope dims quantized with DeepSeek's
// rule (BlockFormat::fp8_kv(): amax floor 1e-4, UE8M0 ceil, e4m3 RNE), the rope dims rounded to
// bf16. encode_model1(decode_model1(quantize_model1(x))) == quantize_model1(x) byte for byte.
std::vector<uint8_t> quantize_model1(const ref::Mat& rows, const Model1Layout& layout);

// One token of a pool -> its 512 values (codes times scales, rope dims from bf16).
Eigen::RowVectorXd decode_model1_token(std::span<const uint8_t> pool, int64_t token, const Model1Layout& layout);
// Tokens 0..n-1 of a pool -> [n, 512].
ref::Mat decode_model1(std::span<const uint8_t> pool, int64_t n_tokens, const Model1Layout& layout);

}  // namespace dsv4::layouts
