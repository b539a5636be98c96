// Block tables, index-list conventions and lse conventions: tables written by hand.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "verify/layouts/block_table.h"
#include "verify/layouts/flashmla_model1.h"
#include "verify/layouts/index_conventions.h"
#include "verify/layouts/layout_table.h"
#include "verify/layouts/lse_conventions.h"

using namespace dsv4;
using ref::IndexMat;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

IndexMat rows_of(std::initializer_list<std::initializer_list<int32_t>> rows) {
  IndexMat m(static_cast<ref::Index>(rows.size()), static_cast<ref::Index>(rows.begin()->size()));
  ref::Index r = 0;
  for (auto row : rows) {
    ref::Index c = 0;
    for (int32_t v : row) m(r, c++) = v;
    ++r;
  }
  return m;
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("block tables: logical token -> block * P + slot and back") {
  const IndexMat table = rows_of({{3, 0}, {1, 2}});  // P = 4
  const IndexMat logical = rows_of({{5, 2, -1}, {7, 0, 4}});
  // seq 0: token 5 = page 1 slot 1 -> block 0 -> 1; token 2 = page 0 slot 2 -> block 3 -> 14.
  // seq 1: token 7 = page 1 slot 3 -> block 2 -> 11; token 0 -> block 1 -> 4; token 4 -> block 2 -> 8.
  const IndexMat pool = layouts::to_pool_indices(logical, table, 4);
  CHECK(pool == rows_of({{1, 14, -1}, {11, 4, 8}}));
  CHECK(layouts::to_logical_indices(pool, table, 4) == logical);
  // Two query rows per sequence (s_q = 2).
  CHECK(layouts::to_pool_indices(rows_of({{5}, {2}, {7}, {0}}), table, 4, 2) == rows_of({{1}, {14}, {11}, {4}}));
  CHECK(error_of([&] { layouts::to_pool_indices(rows_of({{8}}), table, 4); }).find("row 0, column 0") !=
        std::string::npos);
  CHECK(error_of([&] {
          layouts::to_logical_indices(rows_of({{0}, {0}}), table, 4);
        }).find("row 1, column 0") != std::string::npos);
}

TEST_CASE("block tables: scatter a sequence's MODEL1 pages into a pool and gather them back") {
  const layouts::PagedLayout l = layouts::flashmla_model1(2);
  ref::Mat rows = ref::Mat::Zero(5, 512);
  for (int r = 0; r < 5; ++r) rows(r, 448) = r + 1;                    // a bf16 marker per token
  const std::vector<uint8_t> pages = layouts::encode_values(l, rows);  // 3 pages
  std::vector<uint8_t> pool(static_cast<size_t>(l.pool_bytes(6)), 0xAB);
  const std::vector<int32_t> row = {4, 0, 5};
  layouts::scatter_pages(l, pages, row, pool);
  // Token 2 (page 1, slot 0) is pool token 0 * 2 + 0; token 4 (page 2, slot 0) is pool token 10.
  CHECK(layouts::decode(l, pool, 1)(0, 448) == 3.0);
  CHECK(layouts::decode(l, pool, 11)(10, 448) == 5.0);
  CHECK(layouts::gather_pages(l, pool, row, 3) == pages);
  CHECK(error_of([&] {
          layouts::scatter_pages(l, pages, std::vector<int32_t>{0, 1, 6}, pool);
        }).find("block 6") != std::string::npos);
}

TEST_CASE("index lists: -1 padding <-> lengths, vLLM's combined list, FlashInfer's window columns") {
  const IndexMat minus1 = rows_of({{-1, 5, -1, 7}, {-1, -1, -1, -1}, {1, 2, 3, 4}});
  const layouts::LengthIndices compact = layouts::compact_with_lengths(minus1);
  CHECK(compact.indices == rows_of({{5, 7, -1, -1}, {-1, -1, -1, -1}, {1, 2, 3, 4}}));
  CHECK(compact.lengths == std::vector<int32_t>{2, 0, 4});
  CHECK(layouts::compact_with_lengths(minus1, 128).indices.cols() == 128);
  // A kernel reads only the first `length` entries: whatever the tail holds is dropped.
  layouts::LengthIndices garbage{rows_of({{1, 2, 99}}), {2}};
  CHECK(layouts::pad_after_lengths(garbage) == rows_of({{1, 2, -1}}));
  CHECK(error_of([&] {
          layouts::pad_after_lengths({rows_of({{1}}), {2}});
        }).find("row 0: length 2") != std::string::npos);

  const IndexMat window = rows_of({{0, 1, -1}, {-1, -1, -1}});
  const IndexMat topk = rows_of({{-1, 3}, {2, -1}});
  const layouts::LengthIndices vllm = layouts::combine_window_then_topk(window, topk, 128);
  CHECK(vllm.indices.cols() == 128);
  CHECK(vllm.indices.leftCols(4) == rows_of({{0, 1, 131, -1}, {130, -1, -1, -1}}));
  CHECK(vllm.lengths == std::vector<int32_t>{3, 1});
  const layouts::LengthIndices flashinfer = layouts::window_columns_then_topk(window, topk, 4);
  CHECK(flashinfer.indices == rows_of({{0, 1, -1, -1, 3, -1}, {-1, -1, -1, -1, 2, -1}}));
  CHECK(flashinfer.lengths == std::vector<int32_t>{5, 5});
  CHECK(error_of([&] { layouts::window_columns_then_topk(window, topk, 1); }).find("more than the 1") !=
        std::string::npos);

  const layouts::SplitIndices split = layouts::split_window_compressed(rows_of({{0, 1, 16, 18, -1}}), 2, 16);
  CHECK(split.window == rows_of({{0, 1}}));
  CHECK(split.compressed == rows_of({{0, 2, -1}}));
}

TEST_CASE("index lists: ring slots <-> absolute positions (W = 4)") {
  // At position 9 the ring holds slot 0: 8, slot 1: 9, slot 2: 6, slot 3: 7.
  const IndexMat slots = rows_of({{0, 1, 2, 3}, {0, 1, 2, -1}});
  const IndexMat positions = layouts::ring_slots_to_positions(slots, {9, 2}, 4);
  CHECK(positions == rows_of({{8, 9, 6, 7}, {0, 1, 2, -1}}));
  CHECK(layouts::positions_to_ring_slots(positions, {9, 2}, 4) == slots);
  CHECK(error_of([&] { layouts::ring_slots_to_positions(rows_of({{3}}), {2}, 4); }).find("holds no position") !=
        std::string::npos);
  CHECK(error_of([&] { layouts::positions_to_ring_slots(rows_of({{5}}), {9}, 4); }).find("row 0, column 0") !=
        std::string::npos);
}

TEST_CASE("lse conventions: base, sink and empty rows") {
  using layouts::LseConvention;
  const LseConvention mla = LseConvention::flashmla(), vllm = LseConvention::vllm_reference(),
                      fi = LseConvention::flashinfer_reference();
  const double l = 1.5, sink = 0.3;
  // FlashInfer: log2(e^l + e^sink).
  CHECK(layouts::convert_lse(l, sink, mla, fi) ==
        doctest::Approx(std::log2(std::exp(1.5) + std::exp(0.3))).epsilon(1e-15));
  CHECK(layouts::convert_lse(layouts::convert_lse(l, sink, mla, fi), sink, fi, mla) ==
        doctest::Approx(l).epsilon(1e-14));
  CHECK(layouts::convert_lse(l, sink, mla, vllm) == l);
  // Empty rows: FlashMLA +inf, vLLM's reference -inf, FlashInfer the sink alone (in base 2).
  CHECK(layouts::convert_lse(kInf, sink, mla, vllm) == -kInf);
  CHECK(layouts::convert_lse(-kInf, sink, vllm, mla) == kInf);
  CHECK(layouts::convert_lse(kInf, sink, mla, fi) == doctest::Approx(sink / std::log(2.0)).epsilon(1e-15));
  CHECK(layouts::convert_lse(sink / std::log(2.0), sink, fi, mla) == kInf);
  // No sink (-inf): FlashInfer's value is the plain base-2 lse.
  CHECK(layouts::convert_lse(l, -kInf, mla, fi) == doctest::Approx(l / std::log(2.0)).epsilon(1e-15));
  CHECK(error_of([] { LseConvention::by_name("trtllm"); }).find("known: flashmla") != std::string::npos);
}
