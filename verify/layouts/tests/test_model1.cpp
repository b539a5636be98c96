// FlashMLA's MODEL1 cache: page geometry, golden bytes derived by hand from the layout's definition
// (docs/engine-layouts.md), refusal of values off the grid, and bit-for-bit round trips.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/numerics/bf16.h"
#include "reference/numerics/block_quant.h"
#include "verify/layouts/flashmla_model1.h"
#include "verify/layouts/layout_table.h"

using namespace dsv4;
using layouts::Model1Layout;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Same bits, or both NaN (a decoded NaN's payload is not part of the contract; its bytes are).
bool same_value(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// Random rows [n, 512] whose 7 nope blocks have magnitudes from 2^-20 to 2^6 (some below the 1e-4
// amax floor), some all-zero blocks, and rope dims of any sign.
ref::Mat random_rows(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> magnitude(-20, 6), pick(0, 9);
  ref::Mat rows(n, 512);
  for (int r = 0; r < n; ++r) {
    for (int b = 0; b < 7; ++b) {
      const double m = std::ldexp(1.0, magnitude(rng));
      const bool zero = pick(rng) == 0;
      for (int d = 64 * b; d < 64 * b + 64; ++d) rows(r, d) = zero ? 0.0 : m * normal(rng);
    }
    for (int d = 448; d < 512; ++d) rows(r, d) = normal(rng);
  }
  return rows;
}

}  // namespace

TEST_CASE("MODEL1 page bytes are ceil(584 P / 576) * 576, and the table entry has the same offsets") {
  // 584 P rounded up to a multiple of 576, by hand: P=1: 584 -> 1152; P=2: 1168 -> 1728;
  // P=64: 37376 -> 65 * 576 = 37440; P=256: 149504 -> 260 * 576 = 149760.
  CHECK(Model1Layout{.page_size = 1}.page_bytes() == 1152);
  CHECK(Model1Layout{.page_size = 2}.page_bytes() == 1728);
  CHECK(Model1Layout{.page_size = 64}.page_bytes() == 37440);
  CHECK(Model1Layout{.page_size = 256}.page_bytes() == 149760);
  for (int p : {1, 2, 53, 64, 69, 256}) {
    const Model1Layout m{.page_size = p};
    const layouts::PagedLayout l = layouts::flashmla_model1(p);
    CHECK(l.page_bytes() == m.page_bytes());
    CHECK(l.token_bytes() == 584);
    for (int64_t t = 0; t < 3 * p; ++t) {
      CHECK(l.code_offset(t) == m.data_offset(t));
      CHECK(l.scale_offset(t) == m.scale_offset(t));
      CHECK(l.bf16_offset(t) == m.data_offset(t) + 448);
    }
  }
}

TEST_CASE("MODEL1 golden bytes: 336 tile, zero tile, 448 saturation, amax 1, little-endian bf16") {
  const Model1Layout layout{.page_size = 2};
  ref::Mat row = ref::Mat::Zero(1, 512);
  for (int d = 0; d < 64; ++d) row(0, d) = 336.0;  // block 0
  // block 1 stays 0
  for (int d = 128; d < 192; ++d) row(0, d) = d % 2 ? -448.0 : 448.0;  // block 2
  for (int d = 192; d < 256; ++d) row(0, d) = d == 192 ? 1.0 : 0.5;    // block 3
  for (int d = 256; d < 448; ++d) row(0, d) = 0.25;                    // blocks 4..6
  row(0, 448) = 1.0;
  row(0, 449) = -2.5;

  const std::vector<uint8_t> pool = layouts::quantize_model1(row, layout);
  REQUIRE(pool.size() == 1728);
  const uint8_t* scales = pool.data() + 2 * 576;
  // 336: amax 336, 336 / 448 = 0.75 -> scale 2^0 (byte 127). 336 is halfway between the e4m3
  // values 320 (1.010b * 2^8) and 352 (1.011b * 2^8): ties to even -> 320 = field 15, mantissa 2.
  CHECK(scales[0] == 127);
  CHECK(pool[0] == 0x7A);
  CHECK(pool[63] == 0x7A);
  // Zero tile: amax floor 1e-4, 1e-4 / 448 = 2^-22.1 -> 2^-22 (byte -22 + 127 = 105), codes 0.
  CHECK(scales[1] == 105);
  CHECK(pool[64] == 0x00);
  // +-448: amax 448 -> scale 1, codes 448 = 0x7E and -448 = 0xFE (the largest finite e4m3).
  CHECK(scales[2] == 127);
  CHECK(pool[128] == 0x7E);
  CHECK(pool[129] == 0xFE);
  // amax 1: 1 / 448 = 2^-8.8 -> 2^-8 (byte 119); 1.0 -> code 256 = 0x78, 0.5 -> 128 = 0x70.
  CHECK(scales[3] == 119);
  CHECK(pool[192] == 0x78);
  CHECK(pool[193] == 0x70);
  // 0.25: 0.25 / 448 = 2^-10.8 -> 2^-10 (byte 117); 0.25 -> 256 = 0x78.
  CHECK(scales[4] == 117);
  CHECK(pool[256] == 0x78);
  // The pad byte, and the second (unused) token of the page, are 0.
  CHECK(scales[7] == 0);
  for (int i = 8; i < 16; ++i) CHECK(scales[i] == 0);
  for (int i = 576; i < 1152; ++i) CHECK(pool[static_cast<size_t>(i)] == 0);
  // Rope dims, bf16 little-endian: 1.0 = 0x3F80, -2.5 = 0xC020.
  CHECK(pool[448] == 0x80);
  CHECK(pool[449] == 0x3F);
  CHECK(pool[450] == 0x20);
  CHECK(pool[451] == 0xC0);
  // Bytes 1728 - 1168 = 560 of page padding follow the scales, all 0.
  for (size_t i = 1168; i < 1728; ++i) CHECK(pool[i] == 0);

  // The decoded row is the row on the grid (336 -> 320); encoding it gives the same bytes.
  const ref::Mat decoded = layouts::decode_model1(pool, 1, layout);
  CHECK(decoded(0, 0) == 320.0);
  CHECK(decoded(0, 64) == 0.0);
  CHECK(decoded(0, 129) == -448.0);
  CHECK(decoded(0, 449) == -2.5);
  CHECK(layouts::encode_model1(decoded, layout) == pool);
}

TEST_CASE("MODEL1 refuses values off the grid, naming the row and dim") {
  const Model1Layout layout{.page_size = 64};
  ref::Mat rows = ref::Mat::Zero(3, 512);
  rows(1, 70) = 336.0;  // amax 336 -> scale 1; 336 is not an e4m3 value
  std::string e = error_of([&] { layouts::encode_model1(rows, layout); });
  CHECK(e.find("row 1, dim 70") != std::string::npos);
  CHECK(e.find("336") != std::string::npos);

  rows(1, 70) = 320.0;
  CHECK(error_of([&] { layouts::encode_model1(rows, layout); }).empty());
  rows(2, 500) = 1.0 + 0x1p-10;  // not a bf16 (8 significant bits)
  e = error_of([&] { layouts::encode_model1(rows, layout); });
  CHECK(e.find("row 2, dim 500") != std::string::npos);
  CHECK(e.find("bf16") != std::string::npos);

  rows(2, 500) = 0;
  rows(0, 3) = std::numeric_limits<double>::infinity();
  CHECK(error_of([&] { layouts::encode_model1(rows, layout); }).find("row 0, dim 3") != std::string::npos);

  CHECK(error_of([&] { layouts::encode_model1(ref::Mat::Zero(1, 511), layout); }).find("511") != std::string::npos);
  // A pool too short for the tokens asked for.
  const std::vector<uint8_t> one_page(static_cast<size_t>(layout.page_bytes()), 0);
  CHECK(error_of([&] { layouts::decode_model1(one_page, 65, layout); }).find("too short") != std::string::npos);
}

TEST_CASE("MODEL1 round trip bit for bit: quantize -> decode -> encode -> decode -> encode") {
  for (int page : {2, 61, 64, 256}) {
    const Model1Layout layout{.page_size = page};
    ref::Mat rows = random_rows(150, 17 + page);
    // NaN-poisoned tokens, as FlashMLA's tests fill unreferenced slots: whole rows and single dims.
    rows.row(3).setConstant(kNaN);
    rows(7, 100) = kNaN;
    rows(7, 470) = kNaN;
    const std::vector<uint8_t> written = layouts::quantize_model1(rows, layout);
    CHECK(static_cast<int64_t>(written.size()) == (150 + page - 1) / page * layout.page_bytes());
    const ref::Mat values = layouts::decode_model1(written, 150, layout);
    const std::vector<uint8_t> bytes = layouts::encode_model1(values, layout);
    const ref::Mat values_again = layouts::decode_model1(bytes, 150, layout);
    bool same = true;
    for (ref::Index r = 0; r < values.rows(); ++r)
      for (ref::Index d = 0; d < 512; ++d) same = same && same_value(values(r, d), values_again(r, d));
    CHECK(same);
    CHECK(layouts::encode_model1(values_again, layout) == bytes);
    // NaN stays where it was, codes 0x7f, and poisons nothing else of its block.
    CHECK(bytes[static_cast<size_t>(layout.data_offset(7) + 100)] == 0x7f);
    CHECK(std::isnan(values(7, 100)));
    CHECK(!std::isnan(values(7, 101)));
    CHECK(std::isnan(values(7, 470)));
    CHECK(std::isnan(values(3, 0)));
    // One token alone decodes to its row.
    for (int64_t t : {int64_t{0}, int64_t{std::min(page, 150) - 1}, int64_t{149}}) {
      const Eigen::RowVectorXd token = layouts::decode_model1_token(bytes, t, layout);
      bool token_same = true;
      for (int d = 0; d < 512; ++d) token_same = token_same && same_value(token(d), values(t, d));
      CHECK_MESSAGE(token_same, "token ", t, " page ", page);
    }
  }
}

TEST_CASE("MODEL1 values do not determine the writer's bytes when a block's top code is 224") {
  // amax 450: scale 2^ceil(log2(450 / 448)) = 2, 450 / 2 = 225 -> e4m3 224 (1.11b * 2^7 = 0x76).
  // The value 448 is also code 448 (0x7E) times scale 1, which is what the rule gives for amax
  // 448: encoding values picks that pair (the writer's bytes for its own output), and both decode
  // to the same 448.
  const Model1Layout layout{.page_size = 1};
  ref::Mat row = ref::Mat::Zero(1, 512);
  row(0, 0) = 450.0;
  const std::vector<uint8_t> written = layouts::quantize_model1(row, layout);
  CHECK(written[0] == 0x76);
  CHECK(written[576] == 128);
  const ref::Mat values = layouts::decode_model1(written, 1, layout);
  CHECK(values(0, 0) == 448.0);
  const std::vector<uint8_t> canonical = layouts::encode_model1(values, layout);
  CHECK(canonical[0] == 0x7E);
  CHECK(canonical[576] == 127);
  CHECK(layouts::decode_model1(canonical, 1, layout) == values);
}

TEST_CASE("MODEL1 decoded values are the oracle's fake-quantized kv (BlockFormat::fp8_kv, bf16 rope)") {
  const Model1Layout layout{.page_size = 64};
  const ref::Mat rows = random_rows(40, 5);
  const ref::Mat values = layouts::decode_model1(layouts::quantize_model1(rows, layout), 40, layout);
  for (ref::Index r = 0; r < rows.rows(); ++r) {
    std::vector<double> nope(rows.row(r).data(), rows.row(r).data() + 448);
    ref::fake_quant_row(ref::BlockFormat::fp8_kv(), nope);
    bool same = true;
    for (int d = 0; d < 448; ++d) same = same && same_value(nope[static_cast<size_t>(d)], values(r, d));
    for (int d = 448; d < 512; ++d)
      same = same && values(r, d) == static_cast<double>(ref::bf16_round(static_cast<float>(rows(r, d))));
    CHECK(same);
  }
}
