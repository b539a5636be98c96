// Block tables and pool indices (block_table.h).
#include "verify/layouts/block_table.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace dsv4::layouts {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("block table: " + what); }

void check_rows(const ref::IndexMat& indices, const ref::IndexMat& table, int page_size, int rows_per_sequence) {
  if (page_size <= 0 || rows_per_sequence <= 0)
    fail("page size and rows per sequence must be positive, got " + std::to_string(page_size) + " and " +
         std::to_string(rows_per_sequence));
  if (indices.rows() > table.rows() * rows_per_sequence)
    fail(std::to_string(indices.rows()) + " query rows need " +
         std::to_string((indices.rows() + rows_per_sequence - 1) / rows_per_sequence) + " sequences, the table has " +
         std::to_string(table.rows()));
}

std::string at(ref::Index r, ref::Index c) { return "row " + std::to_string(r) + ", column " + std::to_string(c); }

}  // namespace

ref::IndexMat to_pool_indices(const ref::IndexMat& logical, const ref::IndexMat& table, int page_size,
                              int rows_per_sequence) {
  check_rows(logical, table, page_size, rows_per_sequence);
  ref::IndexMat out(logical.rows(), logical.cols());
  for (ref::Index r = 0; r < logical.rows(); ++r) {
    const ref::Index b = r / rows_per_sequence;
    for (ref::Index c = 0; c < logical.cols(); ++c) {
      const int64_t i = logical(r, c);
      if (i == -1) {
        out(r, c) = -1;
        continue;
      }
      if (i < 0 || i / page_size >= table.cols())
        fail(at(r, c) + ": token " + std::to_string(i) + " is outside sequence " + std::to_string(b) + "'s " +
             std::to_string(table.cols()) + " pages of " + std::to_string(page_size));
      const int64_t block = table(b, static_cast<ref::Index>(i / page_size));
      if (block < 0)
        fail(at(r, c) + ": token " + std::to_string(i) + " is in page " + std::to_string(i / page_size) +
             " of sequence " + std::to_string(b) + ", whose table entry is " + std::to_string(block));
      const int64_t pool = block * page_size + i % page_size;
      if (pool > INT32_MAX) fail(at(r, c) + ": pool index " + std::to_string(pool) + " does not fit an int32");
      out(r, c) = static_cast<int32_t>(pool);
    }
  }
  return out;
}

ref::IndexMat to_logical_indices(const ref::IndexMat& pool, const ref::IndexMat& table, int page_size,
                                 int rows_per_sequence) {
  check_rows(pool, table, page_size, rows_per_sequence);
  ref::IndexMat out(pool.rows(), pool.cols());
  for (ref::Index r = 0; r < pool.rows(); ++r) {
    const ref::Index b = r / rows_per_sequence;
    for (ref::Index c = 0; c < pool.cols(); ++c) {
      const int32_t i = pool(r, c);
      if (i == -1) {
        out(r, c) = -1;
        continue;
      }
      const int32_t block = i < 0 ? -1 : i / page_size;
      ref::Index page = -1;
      for (ref::Index j = 0; j < table.cols() && block >= 0; ++j)
        if (table(b, j) == block) {
          page = j;
          break;
        }
      if (page < 0)
        fail(at(r, c) + ": pool index " + std::to_string(i) + " is in block " + std::to_string(block) +
             ", which is not in sequence " + std::to_string(b) + "'s table");
      out(r, c) = static_cast<int32_t>(page * page_size + i % page_size);
    }
  }
  return out;
}

void scatter_pages(const PagedLayout& l, std::span<const uint8_t> pages, std::span<const int32_t> row,
                   std::span<uint8_t> pool) {
  const int64_t page_bytes = l.page_bytes();
  const int64_t n_pages = static_cast<int64_t>(pages.size()) / page_bytes;
  if (n_pages * page_bytes != static_cast<int64_t>(pages.size()))
    fail(std::to_string(pages.size()) + " bytes are not whole pages of " + std::to_string(page_bytes));
  if (n_pages > static_cast<int64_t>(row.size()))
    fail(std::to_string(n_pages) + " pages, but the table row has " + std::to_string(row.size()) + " entries");
  const int64_t blocks = static_cast<int64_t>(pool.size()) / page_bytes;
  for (int64_t j = 0; j < n_pages; ++j) {
    const int64_t block = row[static_cast<size_t>(j)];
    if (block < 0 || block >= blocks)
      fail("page " + std::to_string(j) + " maps to block " + std::to_string(block) + ", outside the pool's " +
           std::to_string(blocks) + " blocks");
    std::memcpy(pool.data() + block * page_bytes, pages.data() + j * page_bytes, static_cast<size_t>(page_bytes));
  }
}

std::vector<uint8_t> gather_pages(const PagedLayout& l, std::span<const uint8_t> pool, std::span<const int32_t> row,
                                  int64_t n_pages) {
  const int64_t page_bytes = l.page_bytes();
  const int64_t blocks = static_cast<int64_t>(pool.size()) / page_bytes;
  if (n_pages > static_cast<int64_t>(row.size()))
    fail(std::to_string(n_pages) + " pages asked, the table row has " + std::to_string(row.size()) + " entries");
  std::vector<uint8_t> out(static_cast<size_t>(n_pages * page_bytes));
  for (int64_t j = 0; j < n_pages; ++j) {
    const int64_t block = row[static_cast<size_t>(j)];
    if (block < 0 || block >= blocks)
      fail("page " + std::to_string(j) + " maps to block " + std::to_string(block) + ", outside the pool's " +
           std::to_string(blocks) + " blocks");
    std::memcpy(out.data() + j * page_bytes, pool.data() + block * page_bytes, static_cast<size_t>(page_bytes));
  }
  return out;
}

}  // namespace dsv4::layouts
