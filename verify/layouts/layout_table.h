#pragma once
// The engines' paged cache layouts, one entry each (docs/engine-layouts.md). A new layout (V4.1's
// 528-B all-FP8 or 288-B FP4 token, say) is one more entry: its element, dims, scale block and
// encoding, placement and page alignment.
#include <string>
#include <vector>

#include "verify/layouts/paged_layout.h"

namespace dsv4::layouts {

// FlashMLA V4 ("MODEL1"): 448 e4m3 + 64 bf16 per token (576 B), then per token 7 UE8M0 + 1 pad
// (8 B), page padded to a multiple of 576 B. Page sizes used: 256 (window), 64 (C4), 2 (C128).
PagedLayout flashmla_model1(int page_size = 64);
// FlashMLA V3.2 ("V32", vLLM's fp8_ds_mla): 656 B per token, [512 e4m3 | 4 fp32 scales, one per
// 128 | 64 bf16].
PagedLayout flashmla_v32(int page_size = 64);
// DeepGEMM's paged indexer cache: per block of block_kv tokens all tokens' data, then all scales.
// FP8: D e4m3 + one fp32 scale per token (D + 4 B). FP4: D/2 bytes of e2m1 pairs + D/32 UE8M0
// bytes in an int32 (D/2 + 4 B).
PagedLayout deepgemm_indexer_fp8(int block_kv = 64, int head_dim = 128);
PagedLayout deepgemm_indexer_fp4(int block_kv = 64, int head_dim = 128);

// The names of the table, and an entry by name with its page size (block_kv). Throws
// std::invalid_argument listing the known names otherwise.
std::vector<std::string> layout_names();
PagedLayout layout_by_name(const std::string& name, int page_size);

}  // namespace dsv4::layouts
