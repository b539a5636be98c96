#pragma once
// Paged pools and block tables (docs/engine-layouts.md). Sequence b's token i lives in physical
// page block_table(b, i / P) at slot i % P; its index in the pool is block * P + slot (FlashMLA's
// `block * page_size + offset`, DeepGEMM's and vLLM's slot mapping). -1 stays -1 both ways.
#include <cstdint>
#include <span>
#include <vector>

#include "reference/tensor.h"
#include "verify/layouts/paged_layout.h"

namespace dsv4::layouts {

// logical [R, K] token indices of each query row (row r belongs to sequence r / rows_per_sequence),
// block_table [B, max_pages] -> pool indices [R, K]. Throws std::invalid_argument naming the row
// and column of an index below -1 or past the sequence's table, or a table entry below 0.
ref::IndexMat to_pool_indices(const ref::IndexMat& logical, const ref::IndexMat& block_table, int page_size,
                              int rows_per_sequence = 1);
// The inverse: pool indices -> logical token indices, each page looked up in the row's sequence's
// table. Throws std::invalid_argument naming the row and column of a pool index whose page is not
// in that sequence's table.
ref::IndexMat to_logical_indices(const ref::IndexMat& pool, const ref::IndexMat& block_table, int page_size,
                                 int rows_per_sequence = 1);

// A sequence's pages as encode() wrote them (page j at j * page_bytes) -> the physical pool, page j
// at block_table_row[j]. Throws std::invalid_argument when a page or block is out of range.
void scatter_pages(const PagedLayout& layout, std::span<const uint8_t> sequence_pages,
                   std::span<const int32_t> block_table_row, std::span<uint8_t> pool);
// The inverse: the first n_pages pages of a sequence, gathered from the pool into encode()'s order.
std::vector<uint8_t> gather_pages(const PagedLayout& layout, std::span<const uint8_t> pool,
                                  std::span<const int32_t> block_table_row, int64_t n_pages);

}  // namespace dsv4::layouts
