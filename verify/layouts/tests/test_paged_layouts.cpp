// The other entries of the layout table: DeepGEMM's paged indexer cache (FP8 and FP4) and FlashMLA's
// V3.2 656-B layout. Golden bytes derived by hand, round trips bit for bit, refusals.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/numerics/block_quant.h"
#include "verify/layouts/deepgemm_indexer_cache.h"
#include "verify/layouts/layout_table.h"

using namespace dsv4;
using layouts::DeepGemmIndexerLayout;
using layouts::IndexerCacheElement;

namespace {

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

std::vector<double> random_row(std::mt19937_64& rng, int n, double magnitude) {
  std::normal_distribution<double> normal;
  std::vector<double> row(static_cast<size_t>(n));
  for (double& x : row) x = magnitude * normal(rng);
  return row;
}

uint32_t le32(const std::vector<uint8_t>& b, int64_t at) {
  return uint32_t{b[static_cast<size_t>(at)]} | (uint32_t{b[static_cast<size_t>(at + 1)]} << 8) |
         (uint32_t{b[static_cast<size_t>(at + 2)]} << 16) | (uint32_t{b[static_cast<size_t>(at + 3)]} << 24);
}

}  // namespace

TEST_CASE("DeepGEMM FP8 indexer cache: block of 64 x 128 codes, then 64 fp32 scales") {
  const DeepGemmIndexerLayout layout{.element = IndexerCacheElement::fp8_e4m3, .head_dim = 128, .block_kv = 64};
  CHECK(layout.block_bytes() == 64 * 132);
  // sglang's FP8 indexer key: one fp32 scale max(amax, 1e-4) / 448 per token (not a power of two).
  const ref::BlockFormat fmt{ref::Element::e4m3, 128, ref::ScaleRule::fp32_amax};
  std::vector<double> ones(128, 1.0);
  std::vector<ref::QuantizedRow> keys(70, ref::quantize_row(fmt, ones));
  std::mt19937_64 rng(3);
  for (size_t i = 1; i < keys.size(); ++i)
    keys[i] = ref::quantize_row(fmt, random_row(rng, 128, 0.1 * static_cast<double>(i)));

  const std::vector<uint8_t> pool = layouts::encode_deepgemm_indexer(keys, layout);
  CHECK(pool.size() == 2 * 64 * 132);
  // Key 0 = all ones: scale fp32(1 / 448) = 2^-9 * 1.001001...b, rounded up in the 23rd mantissa
  // bit: 0x3B124925 (little-endian at 64 * 128); codes 1 / scale -> 448 = 0x7E at 0..127.
  CHECK(le32(pool, 64 * 128) == 0x3B124925u);
  CHECK(pool[0] == 0x7E);
  CHECK(pool[127] == 0x7E);
  // Key 65 lives in block 1, slot 1: codes at 64 * 132 + 128, scale at 64 * 132 + 64 * 128 + 4.
  CHECK(layout.data_offset(65) == 64 * 132 + 128);
  CHECK(layout.scale_offset(65) == 64 * 132 + 64 * 128 + 4);
  CHECK(std::bit_cast<float>(le32(pool, layout.scale_offset(65))) == static_cast<float>(keys[65].scales[0]));

  // Values are fp32(code * scale), as code.float() * scale computes them; the round trip through
  // the stored form gives the same bytes.
  const ref::Mat values = layouts::decode_deepgemm_indexer(pool, 70, layout);
  CHECK(values(0, 0) == static_cast<double>(448.0f * static_cast<float>(keys[0].scales[0])));
  const layouts::PagedLayout l = layouts::deepgemm_indexer_fp8();
  CHECK(layouts::encode(l, layouts::decode_stored(l, pool, 70)) == pool);
  // Unused slots of the last block are 0.
  for (int64_t t = 70; t < 128; ++t) CHECK(pool[static_cast<size_t>(layout.data_offset(t))] == 0);
}

TEST_CASE("DeepGEMM FP4 indexer cache: e2m1 pairs low nibble first, 4 UE8M0 bytes per token") {
  const DeepGemmIndexerLayout layout{.element = IndexerCacheElement::fp4_e2m1, .head_dim = 128, .block_kv = 64};
  CHECK(layout.block_bytes() == 64 * 68);
  std::vector<double> key(128, 0.0);
  key[0] = 0.5;
  key[1] = -1.0;
  key[2] = 6.0;     // block 0 amax 6 -> scale 2^ceil(log2(6 / 6)) = 1 (byte 127)
  key[32] = 3.0;    // block 1 amax 3 -> 2^ceil(log2(0.5)) = 2^-1 (byte 126)
  key[33] = -0.75;  // -0.75 / 0.5 = -1.5: e2m1 code 0xB
  // block 2 all zero: amax floor 6 * 2^-126 -> 2^-126 (byte 1)
  key[96] = 0.0625;  // block 3 amax 2^-4 -> 2^ceil(log2(2^-4 / 6)) = 2^-6 (byte 121); code 4 = 0x6
  std::vector<ref::QuantizedRow> keys{ref::quantize_row(ref::BlockFormat::fp4_indexer(), key)};
  const std::vector<uint8_t> pool = layouts::encode_deepgemm_indexer(keys, layout);
  CHECK(pool.size() == 64 * 68);
  CHECK(pool[0] == 0xA1);   // element 0 = 0.5 (0x1) low, element 1 = -1.0 (0xA) high
  CHECK(pool[1] == 0x07);   // element 2 = 6 (0x7), element 3 = 0
  CHECK(pool[16] == 0xB7);  // element 32 = 3 / 0.5 = 6 (0x7) low, element 33 = -1.5 (0xB) high
  CHECK(pool[48] == 0x06);  // element 96 = 2^-4 / 2^-6 = 4 (0x6)
  CHECK(le32(pool, 64 * 64) == (127u | 126u << 8 | 1u << 16 | 121u << 24));
  const ref::Mat values = layouts::decode_deepgemm_indexer(pool, 1, layout);
  CHECK(values(0, 1) == -1.0);
  CHECK(values(0, 32) == 3.0);
  CHECK(values(0, 33) == -0.75);
  CHECK(values(0, 96) == 0.0625);
  const layouts::PagedLayout l = layouts::deepgemm_indexer_fp4();
  CHECK(layouts::encode_values(l, values) == pool);
}

TEST_CASE("FlashMLA V3.2: 656 B per token, (512 e4m3 | 4 fp32 scales | 64 bf16) interleaved") {
  const layouts::PagedLayout l = layouts::flashmla_v32(64);
  CHECK(l.token_bytes() == 656);
  CHECK(l.page_bytes() == 64 * 656);
  CHECK(l.code_offset(5) == 5 * 656);
  CHECK(l.scale_offset(5) == 5 * 656 + 512);
  CHECK(l.bf16_offset(5) == 5 * 656 + 528);
  CHECK(l.code_offset(64) == 64 * 656);
  ref::Mat rows = ref::Mat::Zero(2, 576);
  for (int d = 0; d < 128; ++d) rows(0, d) = 336.0;  // tile 0: scale 1, codes 320 = 0x7A
  rows(0, 512) = 1.0;
  const std::vector<uint8_t> pool = layouts::encode(l, layouts::quantize(l, rows));
  CHECK(pool[0] == 0x7A);
  CHECK(le32(pool, 512) == 0x3F800000u);  // fp32 1.0
  CHECK(le32(pool, 516) == 0x34800000u);  // zero tile: 2^-22 = fp32 0x34800000
  CHECK(pool[528] == 0x80);
  CHECK(pool[529] == 0x3F);
  CHECK(layouts::encode_values(l, layouts::decode(l, pool, 2)) == pool);
}

TEST_CASE("every table entry round-trips random tokens bit for bit, at irregular page sizes") {
  CHECK(layouts::layout_names() ==
        std::vector<std::string>{"flashmla_model1", "flashmla_v32", "deepgemm_indexer_fp8", "deepgemm_indexer_fp4"});
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> magnitude(-12, 4);
  for (const std::string& name : layouts::layout_names()) {
    for (int page : {1, 2, 53, 64, 69}) {
      const layouts::PagedLayout l = layouts::layout_by_name(name, page);
      ref::Mat rows(130, l.head_dim());
      for (ref::Index r = 0; r < rows.rows(); ++r) {
        const std::vector<double> v = random_row(rng, l.head_dim(), std::ldexp(1.0, magnitude(rng)));
        for (int d = 0; d < l.head_dim(); ++d) rows(r, d) = v[static_cast<size_t>(d)];
      }
      // bytes -> stored form -> bytes is the identity for any bytes the writer produced.
      const std::vector<uint8_t> written = layouts::encode(l, layouts::quantize(l, rows));
      CHECK(static_cast<int64_t>(written.size()) == l.pages_for(130) * l.page_bytes());
      CHECK_MESSAGE(layouts::encode(l, layouts::decode_stored(l, written, 130)) == written, name, " page ", page);
      // values -> bytes -> values is the identity, and bytes -> values -> bytes is for the
      // canonical bytes encode_values writes, which are the writer's bytes for its own values.
      const ref::Mat values = layouts::decode(l, written, 130);
      const std::vector<uint8_t> bytes = layouts::encode_values(l, values);
      CHECK(layouts::decode(l, bytes, 130) == values);
      CHECK_MESSAGE(layouts::encode_values(l, layouts::decode(l, bytes, 130)) == bytes, name, " page ", page);
      CHECK(layouts::encode(l, layouts::quantize(l, values)) == bytes);
    }
  }
  CHECK(error_of([] { layouts::layout_by_name("flashmla_v41", 64); }).find("known: flashmla_model1") !=
        std::string::npos);
}

TEST_CASE("stored-form refusals name the token and dim or block") {
  const layouts::PagedLayout l = layouts::deepgemm_indexer_fp4(64, 128);
  ref::QuantizedRow row{std::vector<double>(128, 0.0), std::vector<double>(4, 1.0), 1.0};
  row.q[77] = 0.75;  // not an e2m1 value
  layouts::StoredTokens t;
  t.quant = {row, row};
  t.bf16.resize(2, 0);
  CHECK(error_of([&] { layouts::encode(l, t); }).find("token 0, dim 77") != std::string::npos);
  t.quant[0].q[77] = 0.5;
  t.quant[1].q[77] = 0.5;
  t.quant[1].scales[2] = 3.0;  // UE8M0 holds powers of two only
  CHECK(error_of([&] { layouts::encode(l, t); }).find("token 1, block 2") != std::string::npos);
  // The FP8 cache holds fp32 scales: 0.1 (a double) is not one.
  const layouts::PagedLayout f = layouts::deepgemm_indexer_fp8(64, 128);
  ref::QuantizedRow fp8{std::vector<double>(128, 1.0), {0.1}, 1.0};
  layouts::StoredTokens u;
  u.quant = {fp8};
  u.bf16.resize(1, 0);
  CHECK(error_of([&] { layouts::encode(f, u); }).find("not an fp32") != std::string::npos);
  u.quant[0].scales[0] = static_cast<double>(0.1f);
  CHECK(error_of([&] { layouts::encode(f, u); }).empty());
  // e2m1 has no NaN code.
  ref::Mat nan_row = ref::Mat::Zero(1, 128);
  nan_row(0, 9) = std::nan("");
  CHECK(error_of([&] { layouts::from_values(l, nan_row); }).find("row 0, dim 9") != std::string::npos);
}
