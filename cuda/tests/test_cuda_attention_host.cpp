// Host-only tests of the CUDA attention kernels' scalar code and of the checks the GPU test uses
// (no GPU needed, so CI runs them):
//   - the MODEL1 dequantization (model1_codec.cuh, compiled here with g++) for every e4m3 code and
//     every UE8M0 scale byte, against reference/numerics; its byte offsets against the layout
//     contract verify/layouts/flashmla_model1.h;
//   - slot resolution (slot_source.cuh): every kind of invalid entry, lengths, the two lists;
//   - v2's shared-memory addressing (mma_layout.cuh): bijective, in bounds, bank spread;
//   - v3's wgmma operands (v3_layout.cuh): every element each descriptor makes the tensor cores read,
//     by an emulation of the PTX ISA's canonical layouts and 128-byte swizzle, is the element the
//     kernel wrote there; the accumulator fragment map, the producer's share of a block, the plan;
//   - v5's packed dequantization (v5_dequant.cuh, the two hardware conversions emulated) for every
//     e4m3 code and UE8M0 byte; its producer's share of a block, staging-area bank spread, the plan;
//   - the inverse RoPE pair arithmetic against ref::inverse_rope_heads, bitwise;
//   - the tolerances of attention_cases.cpp: the oracle passes against itself and against its
//     fp32-probability variant, and fails against mutated inputs (sink dropped, the heaviest key
//     dropped, a scaled softmax scale, an lse with the sink in it or in base 2).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "cuda/attention/mma_layout.cuh"
#include "cuda/attention/model1_codec.cuh"
#include "cuda/attention/slot_source.cuh"
#include "cuda/attention/sparse_mqa_api.h"
#include "cuda/attention/v3_layout.cuh"
#include "cuda/attention/v5_dequant.cuh"
#include "cuda/attention/v5_layout.cuh"
#include "cuda/common/numerics.cuh"
#include "cuda/tests/attention_cases.h"
#include "reference/config.h"
#include "reference/numerics/bf16.h"
#include "reference/numerics/fp8_e4m3.h"
#include "reference/precision.h"
#include "reference/primitives/rope.h"
#include "reference/stages/output_projection.h"
#include "verify/layouts/flashmla_model1.h"

using namespace dsv4;
using namespace dsv4::cuda;
using namespace dsv4::cuda::attention;
using ref::Index;
using ref::Mat;

namespace {

bool is_nan_code(uint32_t code) { return (code & 0x7F) == 0x7F; }

// cvt.rn.f16x2.e4m3x2 on one code (not NaN): the f16 bits of its value (exact: a normal f16 or 0).
uint32_t e4m3_f16_bits(uint32_t code) {
  const double v = ref::fp8_e4m3_decode(static_cast<uint8_t>(code));
  const uint32_t sign = std::signbit(v) ? 0x8000u : 0u;
  if (v == 0.0) return sign;
  int x = 0;
  const double m = std::frexp(std::fabs(v), &x);  // |v| = m 2^x, m in [0.5, 1): 2^(x - 1) (1 + f / 1024)
  const auto f = static_cast<uint32_t>((2.0 * m - 1.0) * 1024.0);
  REQUIRE(std::ldexp(1.0 + f / 1024.0, x - 1) == std::fabs(v));
  REQUIRE(x - 1 + 15 >= 1);
  return sign | (static_cast<uint32_t>(x - 1 + 15) << 10) | f;
}

// mul.rn.bf16x2 on one half: the product of two bf16 values rounded to bf16 (ties to even).
uint16_t bf16_mul(uint16_t a, uint16_t b) {
  const double prod = static_cast<double>(ref::bf16_decode(a)) * static_cast<double>(ref::bf16_decode(b));
  return ref::bf16_encode(static_cast<float>(prod));  // 8-bit significands: exact in double
}

}  // namespace

TEST_CASE("model1 dequantization: every e4m3 code times every UE8M0 scale byte is exact") {
  for (uint32_t e = 0; e <= 254; ++e)
    for (uint32_t code = 0; code < 256; ++code) {
      if (is_nan_code(code)) continue;
      const double want = std::ldexp(ref::fp8_e4m3_decode(static_cast<uint8_t>(code)), static_cast<int>(e) - 127);
      const float got = model1_nope_value(code, e);
      if (std::fabs(want) > std::numeric_limits<float>::max()) {  // 2^128 and above: no fp32 value
        REQUIRE(std::isinf(got));
        continue;
      }
      REQUIRE_MESSAGE(static_cast<double>(got) == want, "code " << code << " scale byte " << e);
      REQUIRE(std::signbit(got) == std::signbit(want));  // -0 stays -0
      if (e >= 3) {  // every such value is a bf16 value: its code is the fp32's upper half
        CHECK(static_cast<double>(bf16_value(exact_bf16_bits(got))) == want);
      }
    }
}

TEST_CASE("v5 dequantization: cvt to f16, the shift under the sign and the bf16 factors give every code x scale") {
  for (uint32_t e = 0; e <= 255; ++e)
    for (uint32_t code = 0; code < 256; ++code) {
      if (is_nan_code(code)) continue;
      const uint32_t other = code ^ 0xB5u;  // the other half of the pair: the halves must not mix
      if (is_nan_code(other)) continue;
      const uint32_t h = e4m3_f16_bits(code) | (e4m3_f16_bits(other) << 16);
      const uint32_t b = v5::f16x2_to_bf16x2_scaled(h);
      uint16_t got[2] = {static_cast<uint16_t>(b & 0xFFFFu), static_cast<uint16_t>(b >> 16)};
      for (int k = 0; k < 2; ++k) {  // value * 2^-112 before any scale: exact
        const double v = ref::fp8_e4m3_decode(static_cast<uint8_t>(k == 0 ? code : other));
        REQUIRE(static_cast<double>(ref::bf16_decode(got[k])) == std::ldexp(v, -112));
        REQUIRE(std::signbit(ref::bf16_decode(got[k])) == std::signbit(v));
      }
      const uint32_t f = v5::first_factor(e), g = v5::slow_factor(e);
      for (int k = 0; k < 2; ++k) {
        got[k] = bf16_mul(got[k], static_cast<uint16_t>(f >> (16 * k)));
        if (!v5::fast_scale(e)) got[k] = bf16_mul(got[k], static_cast<uint16_t>(g >> (16 * k)));
      }
      for (int k = 0; k < 2; ++k) {
        const uint32_t c = k == 0 ? code : other;
        const float value = ref::bf16_decode(got[k]);
        if (e == 255) {  // UE8M0's NaN
          REQUIRE(std::isnan(value));
          continue;
        }
        // v4's dequantization (model1_codec.cuh), exact for e >= 3, whose bf16 code the tile holds
        const float want = model1_nope_value(c, e);
        if (e >= 3 || want == 0.0f) {
          REQUIRE_MESSAGE(ref::bf16_encode(value) == exact_bf16_bits(want), "code " << c << " scale byte " << e);
        }
      }
    }
}

// The producer's share of a decode block: every FP8 chunk (and its scale block) and every rope chunk of
// the 64 tokens exactly once; a quarter-warp's staged reads and tile writes hit 8 distinct 16-byte
// bank groups.
TEST_CASE("v5 producer: each thread's chunks cover the block once, staging and tile accesses spread over the banks") {
  std::set<int> fp8, rope;
  for (int t = 0; t < 128; ++t) {
    const int token = v5::producer_token(t), half = v5::producer_half(t);
    CHECK(token / 16 == t / 32);  // a warp's tokens: 16w .. 16w+15 (its ballot's low 16 lanes)
    if ((t & 31) < 16) CHECK(token == 16 * (t / 32) + (t & 31));
    for (int j = 0; j < v5::kFp8JobsPerThread; ++j) {
      const int g = v5::fp8_chunk(j, half);
      CHECK(g / 4 == v5::scale_block(j));
      fp8.insert(token * v5::kFp8ChunksPerToken + g);
    }
    for (int i = 0; i < v5::kRopeJobsPerThread; ++i) rope.insert(token * 8 + v5::rope_chunk(i, half));
  }
  CHECK(fp8.size() == 64u * 28u);
  CHECK(*fp8.rbegin() == 64 * 28 - 1);
  CHECK(rope.size() == 64u * 8u);
  for (int w = 0; w < 4; ++w)
    for (int quarter = 0; quarter < 4; ++quarter)
      for (int j = 0; j < v5::kFp8JobsPerThread; ++j) {
        std::set<uint32_t> staged, written;
        for (int l = 8 * quarter; l < 8 * quarter + 8; ++l) {
          const int t = 32 * w + l, token = v5::producer_token(t), g = v5::fp8_chunk(j, v5::producer_half(t));
          staged.insert((v5::raw_offset(token, g) / 16) % 8);
          written.insert((layout::matrix_offset(token, 2 * g) / 16) % 8);
        }
        CHECK(staged.size() == 8u);
        CHECK(written.size() == 8u);
      }
}

TEST_CASE("v5 shared memory plan: v3's tiles, disjoint staging, mbarriers after it, within 227 KiB") {
  const v5::Plan p = v5::plan();
  const v3::Plan p3 = v3::plan(0);
  CHECK(p.q == p3.q);
  CHECK(p.k[0] == p3.k[0]);
  CHECK(p.k[1] == p3.k[1]);
  CHECK(p.raw >= p.k[1] + v3::kTile);
  CHECK(p.scales >= p.raw + 64 * v5::kStageTokenBytes);
  CHECK(p.mask >= p.scales + 64 * 2 * 8);
  CHECK(p.full >= p.mask + 16);
  CHECK(p.empty >= p.full + 16);
  CHECK(p.q_free >= p.empty + 16);
  CHECK(p.total >= p.q_free + 8);
  CHECK(v5::smem_request() <= 232448u);
  CHECK(p.total < (1u << 18));  // descriptor start addresses: 14 bits of address >> 4
  // the work units: split fastest, then the head group, then the row; each once
  std::set<std::tuple<int64_t, int, int>> units;
  for (int u = 0; u < 5 * 2 * 3; ++u) {
    const v5::Unit w = v5::unit_of(u, 2, 3);
    CHECK(w.split == u % 3);
    units.insert({w.row, w.group, w.split});
    CHECK((w.row >= 0 && w.row < 5 && w.group >= 0 && w.group < 2));
  }
  CHECK(units.size() == 30u);
}

TEST_CASE("model1 dequantization: dequant8 unpacks 8 little-endian codes in order") {
  std::mt19937_64 gen(7);
  std::uniform_int_distribution<uint32_t> word;
  for (int trial = 0; trial < 2000; ++trial) {
    uint32_t lo = word(gen), hi = word(gen);
    // no NaN codes (the kernels never read one)
    for (int k = 0; k < 4; ++k) {
      if (is_nan_code((lo >> (8 * k)) & 0xFF)) lo &= ~(1u << (8 * k));
      if (is_nan_code((hi >> (8 * k)) & 0xFF)) hi &= ~(1u << (8 * k));
    }
    const uint32_t e = 100 + trial % 60;  // both paths: e <= 134 (one multiply) and above (two)
    uint32_t out[4];
    dequant8(lo, hi, e, out);
    for (int k = 0; k < 8; ++k) {
      const uint32_t code = ((k < 4 ? lo : hi) >> (8 * (k % 4))) & 0xFF;
      const uint16_t bf = static_cast<uint16_t>(out[k / 2] >> (16 * (k % 2)));
      CHECK(bf16_value(bf) == model1_nope_value(code, e));
    }
  }
}

TEST_CASE("model1 offsets agree with the layout contract (verify/layouts/flashmla_model1.h)") {
  for (int page : {1, 2, 53, 61, 64, 69, 256, 576}) {
    const layouts::Model1Layout l{page};
    CHECK(model1_page_bytes(page) == l.page_bytes());
    for (int64_t token :
         {int64_t{0}, int64_t{1}, int64_t{page - 1}, int64_t{page}, int64_t{7 * page + page / 2}, int64_t{100000}}) {
      CHECK(model1_data_offset(token, page, l.page_bytes()) == l.data_offset(token));
      CHECK(model1_scale_offset(token, page, l.page_bytes()) == l.scale_offset(token));
      CHECK(model1_data_offset(token, page, l.page_bytes()) % 16 == 0);  // the kernels' 16-byte copies
      CHECK(model1_scale_offset(token, page, l.page_bytes()) % 8 == 0);  // and 8-byte copies
    }
  }
  static_assert(layouts::Model1Layout::kTokenDataBytes == kModel1TokenDataBytes);
  static_assert(layouts::Model1Layout::kTokenScaleBytes == kModel1TokenScaleBytes);
  static_assert(layouts::Model1Layout::kNopeDims == kModel1NopeDims);
  static_assert(layouts::Model1Layout::kScaleBlock == kModel1ScaleBlock);
}

TEST_CASE("slot resolution: invalid entries, lengths and the two lists") {
  const int32_t window[] = {0, -1, 5, 7, std::numeric_limits<int32_t>::min(), 3};
  const int32_t extra[] = {2, 9, -123456, 1, std::numeric_limits<int32_t>::max()};
  DecodeRowSlots rs{};
  rs.list = window;
  rs.extra_list = extra;
  rs.topk = 6;
  rs.extra_topk = 5;
  rs.length = 5;  // slot 5 (entry 3) is past the length
  rs.extra_length = 5;
  static uint8_t pool_bytes[1], extra_bytes[1];
  rs.pool = PoolView{pool_bytes, 4, model1_page_bytes(4), 8};         // tokens 0..7
  rs.extra_pool = PoolView{extra_bytes, 2, model1_page_bytes(2), 6};  // tokens 0..5
  const bool want[] = {true, false, true,  true, false, false,  // window: 0 ok, -1, 5 ok, 7 ok, INT_MIN, past length
                       true, false, false, true, false};        // extra: 2 ok, 9 >= 6, negative, 1 ok, INT_MAX
  for (int slot = 0; slot < rs.total(); ++slot) {
    const uint8_t* data = nullptr;
    const uint8_t* scales = nullptr;
    CHECK_MESSAGE(rs.resolve(slot, data, scales) == want[slot], "slot " << slot);
    if (!want[slot]) continue;
    const bool is_extra = slot >= rs.topk;
    const int32_t token = is_extra ? extra[slot - rs.topk] : window[slot];
    const layouts::Model1Layout l{is_extra ? 2 : 4};
    const uint8_t* base = is_extra ? extra_bytes : pool_bytes;
    CHECK(data == base + l.data_offset(token));
    CHECK(scales == base + l.scale_offset(token));
  }
  const uint8_t* data;
  const uint8_t* scales;
  CHECK_FALSE(rs.resolve(rs.total(), data, scales));  // past both lists: the last block's padding
  CHECK_FALSE(rs.resolve(-1, data, scales));

  const int32_t rows[] = {4, -1, 10, 9, std::numeric_limits<int32_t>::max()};
  PrefillRowSlots ps{rows, 5, 4, 10};
  CHECK(ps.resolve(0) == 4);
  CHECK(ps.resolve(1) == -1);
  CHECK(ps.resolve(2) == -1);  // == s_kv
  CHECK(ps.resolve(3) == 9);
  CHECK(ps.resolve(4) == -1);  // past the length
  CHECK(list_length(nullptr, 0, 7) == 7);
  const int32_t lens[] = {-3, 3, 99};
  CHECK(list_length(lens, 0, 7) == 0);
  CHECK(list_length(lens, 1, 7) == 3);
  CHECK(list_length(lens, 2, 7) == 7);
}

TEST_CASE("v2 shared memory: matrix addressing is a bijection with conflict-free ldmatrix groups") {
  using namespace layout;
  std::set<uint32_t> seen;
  for (int row = 0; row < kRows; ++row)
    for (int chunk = 0; chunk < 64; ++chunk) {
      const uint32_t off = matrix_offset(row, chunk);
      CHECK(off % 16 == 0);
      CHECK(off < static_cast<uint32_t>(kMatrixBytes));
      seen.insert(off);
    }
  CHECK(seen.size() == static_cast<size_t>(kRows * 64));
  // ldmatrix: 8 consecutive rows at one chunk (any 8-aligned row start) = 8 distinct 16-byte bank groups.
  for (int row0 = 0; row0 < kRows; row0 += 8)
    for (int chunk = 0; chunk < 64; ++chunk) {
      std::set<uint32_t> banks;
      for (int r = 0; r < 8; ++r) banks.insert((matrix_offset(row0 + r, chunk) / 16) % 8);
      CHECK(banks.size() == 8);
    }
}

TEST_CASE("v2 shared memory: P planes stay inside their head line, S stores and P reads spread over the banks") {
  using namespace layout;
  for (int h = 0; h < kRows; ++h)
    for (int plane = 0; plane < 3; ++plane)
      for (int chunk = 0; chunk < 8; ++chunk) {
        const uint32_t off = p_offset(h, plane, chunk);
        CHECK(off % 16 == 0);
        CHECK(off >= static_cast<uint32_t>(h * kLineBytes));
        CHECK(off + 16 <= static_cast<uint32_t>(h * kLineBytes + 3 * 128));
      }
  for (int h = 0; h < kRows; ++h) CHECK(s_offset(h, 63) + 4 <= static_cast<uint32_t>((h + 1) * kLineBytes));
  // P ldmatrix: 8 consecutive heads at one chunk of one plane -> 8 distinct 16-byte bank groups.
  for (int h0 = 0; h0 < kRows; h0 += 8)
    for (int plane = 0; plane < 3; ++plane)
      for (int chunk = 0; chunk < 8; ++chunk) {
        std::set<uint32_t> banks;
        for (int r = 0; r < 8; ++r) banks.insert((p_offset(h0 + r, plane, chunk) / 16) % 8);
        CHECK(banks.size() == 8);
      }
  // S float2 stores of a half-warp: heads g = 0..3 (+ any multiple of 4), slots 2c, c = 0..3 -> 32 distinct banks.
  for (int h0 = 0; h0 < kRows; h0 += 4)
    for (int slot0 = 0; slot0 < 64; slot0 += 8) {
      std::set<uint32_t> banks;
      for (int g = 0; g < 4; ++g)
        for (int c = 0; c < 4; ++c)
          for (int w = 0; w < 2; ++w) banks.insert((s_offset(h0 + g, slot0 + 2 * c) / 4 + w) % 32);
      CHECK(banks.size() == 32);
    }
}

TEST_CASE("v2 shared memory plans: aligned, disjoint, within the 227 KiB of a block") {
  using namespace layout;
  const Plan d = decode_plan(), p = prefill_plan();
  CHECK(d.total <= 232448u);
  CHECK(p.total <= 232448u);
  for (uint32_t off : {d.q, d.k0, d.raw0, d.raw1, d.state, d.mask, p.q, p.k0, p.k1, p.sp, p.state, p.mask})
    CHECK(off % 16 == 0);
  // decode: q | k | raw0 | raw1 | state | mask, S / P inside a raw buffer
  CHECK(d.k0 >= d.q + kMatrixBytes);
  CHECK(d.raw0 >= d.k0 + kMatrixBytes);
  CHECK(d.raw1 >= d.raw0 + kRawBytes);
  CHECK(d.state >= d.raw1 + kRawBytes);
  CHECK(kSpBytes <= kRawBytes);
  // prefill: q | k0 | k1 | S/P | state | mask
  CHECK(p.k0 >= p.q + kMatrixBytes);
  CHECK(p.k1 >= p.k0 + kMatrixBytes);
  CHECK(p.sp >= p.k1 + kMatrixBytes);
  CHECK(p.state >= p.sp + kSpBytes);
  CHECK(p.mask >= p.state + 3 * kRows * 4);
}

// ---- v3 (v3_layout.cuh) ----------------------------------------------------------------------
namespace v3e {
using namespace dsv4::cuda::attention::v3;

// The fields of a wgmma shared-memory descriptor (PTX ISA "Matrix Descriptor Format").
struct Fields {
  uint32_t start, lbo, sbo, base_offset, swizzle;
};
Fields fields(uint64_t d) {
  return Fields{static_cast<uint32_t>(d & 0x3FFF) << 4, static_cast<uint32_t>((d >> 16) & 0x3FFF) << 4,
                static_cast<uint32_t>((d >> 32) & 0x3FFF) << 4, static_cast<uint32_t>((d >> 49) & 7),
                static_cast<uint32_t>(d >> 62)};
}
// 128-byte swizzle: address bits 4-6 XOR bits 7-9.
uint32_t swizzle128(uint32_t a) { return a ^ (((a >> 7) & 7u) << 4); }
// Byte address of element (mn, k) of a 16-bit operand whose k16 slice a descriptor describes:
// K-major ((8, m), (T, 2k)) : ((8T, SBO), (1, T)); MN-major ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO)).
uint32_t k_major_element(uint64_t d, int mn, int k) {
  const Fields f = fields(d);
  return swizzle128(f.start + static_cast<uint32_t>((mn % 8) * 128 + (mn / 8) * f.sbo + k * 2));
}
uint32_t mn_major_element(uint64_t d, int k, int mn) {
  const Fields f = fields(d);
  return swizzle128(f.start +
                    static_cast<uint32_t>((mn % 64) * 2 + (mn / 64) * f.lbo + (k % 8) * 128 + (k / 8) * f.sbo));
}
// Where the kernel stores element `dim` of row `row` of a tile (mma_layout.cuh matrix_offset).
uint32_t stored(uint32_t tile, int row, int dim) {
  return tile + layout::matrix_offset(row, dim / 8) + static_cast<uint32_t>((dim % 8) * 2);
}
}  // namespace v3e

TEST_CASE("v3 wgmma descriptors: every operand element read is the element written there") {
  using namespace v3e;
  for (int planes : {1, 3}) {
    const v3::Plan pl = v3::plan(planes);
    for (uint64_t d :
         {v3::k_major_desc(v3::k_major_start(pl.q, 0, 5)), v3::mn_major_desc(v3::mn_major_start(pl.k[1], 4, 3))}) {
      CHECK(fields(d).swizzle == 1);  // 128-byte
      CHECK(fields(d).base_offset == 0);
    }
    int64_t mismatches = 0;
    // QK, A = q: 64 heads x dims 16ks .. 16ks+15
    for (int ks = 0; ks < 32; ++ks)
      for (int m = 0; m < 64; ++m)
        for (int k = 0; k < 16; ++k)
          mismatches +=
              k_major_element(v3::k_major_desc(v3::k_major_start(pl.q, 0, ks)), m, k) != stored(pl.q, m, 16 * ks + k);
    // QK, B = k tile of stage s: slots 32c .. 32c+31 x dims 16ks ..
    for (int s = 0; s < v3::kStages; ++s)
      for (int c = 0; c < 2; ++c)
        for (int ks = 0; ks < 32; ++ks)
          for (int n = 0; n < 32; ++n)
            for (int k = 0; k < 16; ++k)
              mismatches += k_major_element(v3::k_major_desc(v3::k_major_start(pl.k[s], 32 * c, ks)), n, k) !=
                            stored(pl.k[s], 32 * c + n, 16 * ks + k);
    // PV, A = p tile of each plane: 64 heads x slots 16ks ..
    for (int plane = 0; plane < planes; ++plane)
      for (int ks = 0; ks < 4; ++ks)
        for (int m = 0; m < 64; ++m)
          for (int k = 0; k < 16; ++k)
            mismatches += k_major_element(v3::k_major_desc(v3::k_major_start(pl.p + plane * v3::kPTile, 0, ks)), m,
                                          k) != pl.p + v3::p_element_offset(plane, m, 16 * ks + k);
    // PV, B = the k tile read transposed: slots 16ks .. (K) x dims 256c .. 256c+255 (N)
    for (int s = 0; s < v3::kStages; ++s)
      for (int c = 0; c < 2; ++c)
        for (int ks = 0; ks < 4; ++ks)
          for (int k = 0; k < 16; ++k)
            for (int n = 0; n < 256; ++n)
              mismatches += mn_major_element(v3::mn_major_desc(v3::mn_major_start(pl.k[s], 4 * c, ks)), k, n) !=
                            stored(pl.k[s], 16 * ks + k, 256 * c + n);
    CHECK(mismatches == 0);
  }
}

TEST_CASE("v4 wgmma operands: QK's B over all 64 slots, and P's register fragment, read what they should") {
  using namespace v3e;
  const v3::Plan pl = v3::plan(0);  // v4: no p tiles
  int64_t mismatches = 0;
  // QK, B = k tile of stage s: slots 0 .. 63 x dims 16ks .. (v4::qk_block_all: N = 64 from row 0)
  for (int s = 0; s < v3::kStages; ++s)
    for (int ks = 0; ks < 32; ++ks)
      for (int n = 0; n < 64; ++n)
        for (int k = 0; k < 16; ++k)
          mismatches += k_major_element(v3::k_major_desc(v3::k_major_start(pl.k[s], 0, ks)), n, k) !=
                        stored(pl.k[s], n, 16 * ks + k);
  CHECK(mismatches == 0);
  // PV's A from registers (v4::pv_block_regs): word k of k-step ks packs accumulator elements
  // 8ks + 2k (low half) and 8ks + 2k + 1; the A fragment of m64nNk16 (per warp, as mma.m16n8k16's A)
  // wants in word k: row l/4 + 8(k % 2), columns 2(l % 4) + 8(k / 2) + {0, 1} of the k16 slice.
  for (int t = 0; t < 128; ++t)
    for (int ks = 0; ks < 4; ++ks)
      for (int k = 0; k < 4; ++k)
        for (int half = 0; half < 2; ++half) {
          const int e = 8 * ks + 2 * k + half, lane = t % 32;
          CHECK(v3::acc_row(t, e) == 16 * (t / 32) + lane / 4 + 8 * (k % 2));
          CHECK(v3::acc_col(t, e) == 16 * ks + 2 * (lane % 4) + 8 * (k / 2) + half);
        }
  CHECK(pl.p == pl.xmax);   // no p tiles: P lives in registers
  CHECK(pl.mask % 8 == 0);  // v4 reads a stage's four 16-bit validity words as one 64-bit word
  CHECK(v3::smem_request(0) <= 232448u);
}

TEST_CASE("v3 descriptor encoding: field positions, and a wrong stride is seen") {
  const uint64_t d = v3::descriptor(0x12340, 0x2000, 0x400);
  CHECK((d & 0x3FFF) == 0x1234);
  CHECK(((d >> 16) & 0x3FFF) == 0x200);
  CHECK(((d >> 32) & 0x3FFF) == 0x40);
  CHECK((d >> 62) == 1);
  CHECK(((d >> 46) & 0xFFFF) == 0);  // base offset and reserved bits clear
  // mutation: SBO 512 instead of 1,024 reads other rows
  const uint64_t bad = v3::descriptor(0, 16, 512);
  int64_t mismatches = 0;
  for (int m = 0; m < 64; ++m)
    for (int k = 0; k < 16; ++k) mismatches += v3e::k_major_element(bad, m, k) != v3e::stored(0, m, k);
  CHECK(mismatches > 0);
}

TEST_CASE("v3 fragments: the accumulator map and the producer share each cover their tile once") {
  for (int n : {32, 64, 256}) {  // v3's QK, v4's QK, PV
    std::set<int> seen;
    for (int t = 0; t < 128; ++t)
      for (int e = 0; e < n / 2; ++e) {
        const int r = v3::acc_row(t, e), c = v3::acc_col(t, e);
        CHECK((r >= 0 && r < 64 && c >= 0 && c < n));
        seen.insert(r * n + c);
      }
    CHECK(seen.size() == static_cast<size_t>(64 * n));
  }
  // the producer: (token, half) once each; the chunks a half writes cover the tile row once
  std::set<int> shares;
  for (int t = 0; t < 128; ++t) shares.insert(2 * v3::producer_token(t) + v3::producer_half(t));
  CHECK(shares.size() == 128u);
  for (int t = 0; t < 128; ++t) CHECK(v3::producer_token(t) / 16 == t / 32);  // a warp's tokens: 16w ..
  std::set<int> chunks;
  for (int half = 0; half < 2; ++half) {
    for (int i = 0; i < v3::kFp8ChunksPerThread; ++i) {
      const int g = v3::fp8_chunk(i, half);
      CHECK(g / 4 == i / 2);  // the scale block store_decode uses
      chunks.insert(2 * g);
      chunks.insert(2 * g + 1);
    }
    for (int i = 0; i < v3::kRopeChunksPerThread; ++i) chunks.insert(56 + v3::rope_chunk(i, half));
  }
  CHECK(chunks.size() == 64u);
  CHECK(*chunks.rbegin() == 63);
  CHECK(v3::even_lane_bits(0xFFFFFFFFu) == 0xFFFFu);
  CHECK(v3::even_lane_bits(0x5u) == 0x3u);       // lanes 0 and 2: tokens 0 and 1
  CHECK(v3::even_lane_bits(0x80000000u) == 0u);  // odd lanes are ignored
  CHECK(v3::even_lane_bits(0x40000000u) == 0x8000u);
}

TEST_CASE("v3 shared memory plan: 1,024-aligned tiles, disjoint regions, within the 227 KiB of a block") {
  for (int planes : {1, 3}) {
    const v3::Plan p = v3::plan(planes);
    CHECK(v3::smem_request(planes) <= 232448u);
    for (uint32_t off : {p.q, p.k[0], p.k[1], p.p}) CHECK(off % 1024 == 0);
    CHECK(p.k[0] >= p.q + v3::kTile);
    CHECK(p.k[1] >= p.k[0] + v3::kTile);
    CHECK(p.p >= p.k[1] + v3::kTile);
    CHECK(p.xmax >= p.p + planes * v3::kPTile);
    CHECK(p.xsum >= p.xmax + 512);
    CHECK(p.mask >= p.xsum + 512);
    CHECK(p.full >= p.mask + 16);
    CHECK(p.full % 8 == 0);
    CHECK(p.empty >= p.full + 16);
    CHECK(p.total >= p.empty + 16);
    // every descriptor start fits the 14-bit (>> 4) address field
    CHECK(p.total < (1u << 18));
  }
  std::set<uint32_t> seen;
  for (int plane = 0; plane < 3; ++plane)
    for (int h = 0; h < 64; ++h)
      for (int slot = 0; slot < 64; slot += 2) {
        const uint32_t off = v3::p_element_offset(plane, h, slot);
        CHECK(off % 4 == 0);
        CHECK(off < 3 * v3::kPTile);
        seen.insert(off);
      }
  CHECK(seen.size() == static_cast<size_t>(3 * 64 * 32));
}

TEST_CASE("decode_splits: one split when the grid fills the GPU, else whole blocks of slots") {
  CHECK(decode_splits(128, 2, 64, 640, 132) == 1);   // 256 blocks
  CHECK(decode_splits(66, 2, 64, 640, 132) == 1);    // exactly 132
  CHECK(decode_splits(64, 2, 128, 1152, 132) == 1);  // 256
  CHECK(decode_splits(2, 2, 64, 640, 132) == 10);    // 4 blocks: 33 would fit, 10 slot blocks
  CHECK(decode_splits(1, 1, 64, 4096, 132) == 64);
  CHECK(decode_splits(4, 2, 64, 64, 132) == 1);  // one slot block: nothing to split
  CHECK(decode_splits(3, 1, 64, 0, 132) == 1);
}

TEST_CASE("inverse RoPE pair: bitwise the oracle's inverse_rope_heads") {
  const ref::ModelConfig cfg = ref::ModelConfig::flash();
  const ref::PrecisionPolicy p = ref::PrecisionPolicy::official();
  const ref::RopeTable rope = ref::RopeTable::for_layer(cfg, 4, p);
  std::mt19937_64 gen(11);
  std::uniform_real_distribution<double> u(-3, 3);
  const int heads = 4, d = cfg.head_dim;
  for (int64_t pos : {int64_t{0}, int64_t{1}, int64_t{127}, int64_t{4095}, int64_t{65535}, int64_t{1000003}}) {
    Mat o(1, heads * d);
    for (Index i = 0; i < o.size(); ++i) o.data()[i] = ref::round_to(ref::Storage::bf16, u(gen));
    ref::ModelConfig c4 = cfg;
    c4.n_heads = heads;
    const Mat want = ref::inverse_rope_heads(o, pos, rope, c4, p);
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < 32; ++i) {
        const Index first = static_cast<Index>(h) * d + d - 64 + 2 * i;
        // the kernel's arithmetic: the conjugate angle through the forward rotation
        const float a = static_cast<float>(o(0, first)), b = static_cast<float>(o(0, first + 1));
        const float c = static_cast<float>(rope.cos_at(pos, i)), s = static_cast<float>(rope.sin_at(pos, i));
        CHECK(rope_re(a, b, c, -s) == want(0, first));
        CHECK(rope_im(a, b, c, -s) == want(0, first + 1));
      }
  }
}

// ---- the checks of the GPU test, against the oracle itself and mutated inputs ---------------------

namespace {

using testing::Check;
using testing::DecodeShape;
using testing::Expected;
using testing::OracleInputs;
using testing::ProbsKind;

// A small decode case where the sink carries real weight: 16 slots, small logits, sink 2.
testing::DecodeCase sink_heavy_case(std::mt19937_64& gen) {
  DecodeShape s;
  s.batch = 2;
  s.s_q = 2;
  s.n_heads = 4;
  s.topk = 8;
  s.extra_topk = 8;
  s.page_size = 4;
  s.extra_page_size = 2;
  s.window_tokens = 16;
  s.extra_tokens = 16;
  s.kv_sigma = 0.05;
  testing::DecodeCase c = testing::make_decode_case(s, gen);
  c.sink.assign(static_cast<size_t>(c.n_heads), 2.0f);
  return c;
}

testing::DecodeCase flash_like_case(std::mt19937_64& gen) {
  DecodeShape s;
  s.batch = 1;
  s.s_q = 2;
  s.n_heads = 8;
  s.topk = 128;
  s.extra_topk = 256;
  s.extra_tokens = 512;
  s.damage.invalid_fraction = 0.1;
  testing::DecodeCase c = testing::make_decode_case(s, gen);
  return c;
}

std::vector<uint16_t> codes_of(const Mat& m) { return testing::bf16_codes(m); }

std::vector<float> floats_of(const Mat& m) {
  std::vector<float> v(static_cast<size_t>(m.size()));
  for (Index i = 0; i < m.size(); ++i) v[static_cast<size_t>(i)] = static_cast<float>(m.data()[i]);
  return v;
}

}  // namespace

TEST_CASE("attention checks: the oracle passes against itself, and against its fp32-probability variant") {
  std::mt19937_64 gen(21);
  for (const testing::DecodeCase& c : {flash_like_case(gen), sink_heavy_case(gen)}) {
    CAPTURE(c.name);
    const OracleInputs in = c.oracle_inputs();
    const Expected official = testing::expected(in, ProbsKind::bf16);
    const Expected fp32p = testing::expected(in, ProbsKind::fp32);
    const Check self = testing::check_out(official, codes_of(official.out));
    CHECK_MESSAGE(self.ok, self.report);
    CHECK(testing::check_out_bitwise(official, codes_of(official.out), 0).ok);
    CHECK(testing::check_lse(official, floats_of(official.lse)).ok);
    CHECK(testing::check_max_logit(official, floats_of(official.max_logit)).ok);
    // The kernels round probabilities where the oracle does, but from logits that may differ in
    // the last fp32 bits: the official bound must admit a whole probability rounding of difference.
    const Check across = testing::check_out(official, codes_of(fp32p.out));
    CHECK_MESSAGE(across.ok, across.report);
    CHECK_FALSE(testing::check_out_bitwise(official, codes_of(fp32p.out), 0).ok);  // the bitwise check sees it
  }
}

TEST_CASE("attention checks: mutated inputs fail them") {
  std::mt19937_64 gen(22);
  const testing::DecodeCase c = sink_heavy_case(gen);
  const OracleInputs in = c.oracle_inputs();
  for (ProbsKind probs : {ProbsKind::bf16, ProbsKind::fp32}) {
    CAPTURE(static_cast<int>(probs));
    const Expected e = testing::expected(in, probs);

    OracleInputs no_sink = in;
    no_sink.sink.setConstant(-std::numeric_limits<double>::infinity());
    CHECK_FALSE(testing::check_out(e, codes_of(testing::expected(no_sink, probs).out)).ok);

    // The heaviest valid key of row 0 dropped (for its head 0).
    OracleInputs dropped = in;
    Index heaviest = -1;
    double best = -std::numeric_limits<double>::infinity();
    for (Index k = 0; k < in.indices.cols(); ++k) {
      const int32_t idx = in.indices(0, k);
      if (idx == -1) continue;
      double s = 0;
      for (Index x = 0; x < in.kv.cols(); ++x) s += in.q(0, x) * in.kv(idx, x);
      if (s > best) best = s, heaviest = k;
    }
    REQUIRE(heaviest >= 0);
    dropped.indices(0, heaviest) = -1;
    CHECK_FALSE(testing::check_out(e, codes_of(testing::expected(dropped, probs).out)).ok);

    OracleInputs scaled = in;
    scaled.scale = static_cast<float>(in.scale * 1.25);
    CHECK_FALSE(testing::check_out(e, codes_of(testing::expected(scaled, probs).out)).ok);

    // lse with the sink in it, and in base 2.
    std::vector<float> with_sink = floats_of(e.lse), base2 = floats_of(e.lse);
    for (Index i = 0; i < e.lse.size(); ++i) {
      if (!std::isfinite(e.lse.data()[i])) continue;
      const double sink = in.sink(i % in.n_heads);
      with_sink[static_cast<size_t>(i)] = static_cast<float>(std::log(std::exp(e.lse.data()[i]) + std::exp(sink)));
      base2[static_cast<size_t>(i)] = static_cast<float>(e.lse.data()[i] / std::log(2.0));
    }
    CHECK_FALSE(testing::check_lse(e, with_sink).ok);
    CHECK_FALSE(testing::check_lse(e, base2).ok);
  }
}

TEST_CASE("attention checks: NaN or inf where none is expected, and a missing +inf lse, fail") {
  std::mt19937_64 gen(23);
  DecodeShape s;
  s.batch = 1;
  s.s_q = 3;
  s.n_heads = 4;
  s.topk = 64;
  s.extra_topk = 64;
  s.damage.empty_rows = true;  // row 2 has no valid slot: out 0, lse +inf
  const testing::DecodeCase c = testing::make_decode_case(s, gen);
  const Expected e = testing::expected(c.oracle_inputs(), ProbsKind::bf16);
  REQUIRE(std::isinf(e.lse(2, 0)));
  std::vector<uint16_t> out = codes_of(e.out);
  out[5] = 0x7FC0;  // a NaN
  CHECK_FALSE(testing::check_out(e, out).ok);
  std::vector<float> lse = floats_of(e.lse);
  lse[2 * 4] = 0.0f;  // row 2 head 0: a finite lse where +inf is expected
  CHECK_FALSE(testing::check_lse(e, lse).ok);
  // and an empty row's output must be exactly 0
  std::vector<uint16_t> nonzero = codes_of(e.out);
  nonzero[static_cast<size_t>(2 * e.out.cols())] = ref::bf16_encode(1e-30f);
  CHECK_FALSE(testing::check_out(e, nonzero).ok);
}
