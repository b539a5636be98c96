#pragma once
// How engines spell a list of key indices per query row (docs/engine-layouts.md). The oracle's own
// form (reference/stages/index_lists.h) is -1 anywhere in the row, window first, in the call's index
// space. Every converter names the convention it produces.
#include <cstdint>
#include <vector>

#include "reference/tensor.h"

namespace dsv4::layouts {

// A list with explicit lengths: row r uses indices(r, 0 .. lengths[r] - 1); the rest is -1.
struct LengthIndices {
  ref::IndexMat indices;
  std::vector<int32_t> lengths;
};

// -1 anywhere -> valid entries first in their order, -1 after, with lengths (FlashMLA's
// `topk_length`, vLLM's lengths). Width kept, or rounded up to a multiple of `align` (vLLM: 128).
LengthIndices compact_with_lengths(const ref::IndexMat& indices, int align = 1);
// Lengths -> -1 padding: entries at or past a row's length become -1 (what a kernel that reads only
// the first `length` entries sees, whatever the tail holds). Throws std::invalid_argument for a
// length outside [0, width].
ref::IndexMat pad_after_lengths(const LengthIndices& list);

// vLLM (combine_topk_swa_indices): per row the valid window entries, then the valid top-k entries
// plus `topk_offset` (their place in the combined index space), -1 padded to a multiple of 128,
// with lengths.
LengthIndices combine_window_then_topk(const ref::IndexMat& window, const ref::IndexMat& topk, int32_t topk_offset,
                                       int align = 128);
// FlashInfer (trtllm_batch_decode_sparse_mla_dsv4): columns 0..window_columns-1 hold the window
// (valid entries first, -1 after), the top-k entries follow from column window_columns (valid
// first, -1 after); lengths count window_columns plus the valid top-k entries. Throws
// std::invalid_argument when a row has more valid window entries than window_columns.
LengthIndices window_columns_then_topk(const ref::IndexMat& window, const ref::IndexMat& topk,
                                       int window_columns = 128);

// The oracle's [window | compressed] list (index_lists.h concat_indices, compressed entries offset
// by `compressed_offset`) -> the window part [R, window_width] and the compressed part, offset
// removed: the two scopes of FlashMLA's call (indices, extra_indices_in_kvcache).
struct SplitIndices {
  ref::IndexMat window;
  ref::IndexMat compressed;
};
SplitIndices split_window_compressed(const ref::IndexMat& concat, int window_width, int32_t compressed_offset);

// Ring slots <-> absolute positions for the window cache of DeepSeek's decode (a ring of W slots,
// position p in slot p % W). After the write of position `pos`, slot s holds the latest position
// p <= pos with p % W == s, if p >= 0. -1 stays -1.
ref::IndexMat ring_slots_to_positions(const ref::IndexMat& slots, const std::vector<int64_t>& pos_of_row, int window);
// Throws std::invalid_argument naming row and column of a position no longer in the ring (p <= pos - W)
// or in the future (p > pos).
ref::IndexMat positions_to_ring_slots(const ref::IndexMat& positions, const std::vector<int64_t>& pos_of_row,
                                      int window);

}  // namespace dsv4::layouts
