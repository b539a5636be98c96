// Host-only tests of the indexer and top-k kernels' scalar code (no GPU needed, so CI runs them):
// the v1 arithmetic (indexer_math.cuh, compiled here for the CPU) bit for bit against the oracle's
// indexer_q and indexer_scores; the cache offsets against verify/layouts; the e2m1 -> e4m3 unpacking
// on every code; the v2 epilogue's lane exchange simulated over a warp; the v3 decode's page walk
// (32-bit page split, slot offsets, each thread's share of a tile), each lane's share of the v4
// decode's producer warp and the v5 producer's bulk runs; the v3 prefill's work units (prefill_schedule.h); the top-k
// order keys; the v3 top-k's index arithmetic (slices, warp segments, digits, select bins, the sort network).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/numerics.cuh"
#include "cuda/common/wgmma_layout.h"
#include "cuda/indexer/cache_layout.cuh"
#include "cuda/indexer/host_vectors.h"
#include "cuda/indexer/indexer_math.cuh"
#include "cuda/indexer/key_major_tile.h"
#include "cuda/indexer/oracle_mirror.h"
#include "cuda/indexer/page_walk.h"
#include "cuda/indexer/prefill_schedule.h"
#include "cuda/indexer/tile_math.cuh"
#include "cuda/topk/topk_keys.cuh"
#include "cuda/topk/topk_v3_plan.h"
#include "reference/config.h"
#include "reference/numerics/block_quant.h"
#include "reference/numerics/fp4_e2m1.h"
#include "reference/numerics/fp8_e4m3.h"
#include "reference/precision.h"
#include "reference/stages/indexer.h"
#include "reference/weights.h"
#include "verify/layouts/deepgemm_indexer_cache.h"

using namespace dsv4;
using cuda::IndexerFormat;
using cuda::ScoreStorage;
using ref::Index;
using ref::Mat;

namespace {

ref::PrecisionPolicy policy(IndexerFormat f, bool hadamard, ScoreStorage s) {
  ref::PrecisionPolicy p = ref::PrecisionPolicy::official();
  if (f == IndexerFormat::fp8) p.indexer_qk = ref::BlockFormat::fp8_per_head(128);
  p.indexer_hadamard = hadamard;
  p.indexer_scores = s == ScoreStorage::bf16 ? ref::Storage::bf16 : ref::Storage::fp32;
  p.fp8_linears = ref::LinearKind::exact;  // the projection is an input here: one-hot rows pass it through
  return p;
}

double bf16(double v) { return ref::round_to(ref::Storage::bf16, v); }

// s tokens of IH heads of wq_b output: bf16 values with a spread of magnitudes (some tiny heads).
Mat projection(Index s, int heads, std::mt19937_64& gen) {
  std::normal_distribution<double> n(0, 1);
  std::uniform_int_distribution<int> e(-8, 3);
  Mat m(s, heads * 128);
  for (Index i = 0; i < s; ++i)
    for (int h = 0; h < heads; ++h) {
      const double scale = std::ldexp(1.0, e(gen));
      for (int c = 0; c < 128; ++c) m(i, h * 128 + c) = bf16(n(gen) * scale);
    }
  return m;
}

// The oracle's indexer_q of given projections: x = one-hot rows, wq_b = q_proj^T (exact linear).
Mat oracle_q(const Mat& q_proj, int64_t start_pos, const ref::RopeTable& rope, const ref::ModelConfig& cfg,
             const ref::PrecisionPolicy& p) {
  ref::IndexerWeights w;
  w.wq_b = q_proj.transpose();
  return ref::indexer_q(w, Mat::Identity(q_proj.rows(), q_proj.rows()), start_pos, rope, cfg, p);
}

// q_vector_serial over every (token, head): values [s, IH*128] and the codes as HostVectors.
Mat serial_q(const Mat& q_proj, int64_t start_pos, const ref::RopeTable& rope, int heads, IndexerFormat f,
             bool hadamard, cuda::HostVectors& codes) {
  const std::vector<float> table = cuda::position_rope(rope, start_pos, q_proj.rows());
  codes.format = f;
  codes.count = q_proj.rows() * heads;
  codes.codes.assign(static_cast<size_t>(codes.count * cuda::code_bytes(f)), 0);
  codes.scales.assign(static_cast<size_t>(codes.count * 4), 0);
  Mat values(q_proj.rows(), q_proj.cols());
  for (Index i = 0; i < q_proj.rows(); ++i)
    for (int h = 0; h < heads; ++h) {
      uint16_t x[128], v[128];
      for (int c = 0; c < 128; ++c) x[c] = cuda::bf16_bits(static_cast<float>(q_proj(i, h * 128 + c)));
      const int64_t vec = i * heads + h;
      cuda::q_vector_serial(x, table.data() + i * 64, hadamard, f, codes.codes.data() + vec * cuda::code_bytes(f),
                            codes.scales.data() + vec * 4, v);
      for (int c = 0; c < 128; ++c) values(i, h * 128 + c) = cuda::bf16_value(v[c]);
    }
  return values;
}

}  // namespace

TEST_CASE("q path: q_vector_serial equals the oracle's indexer_q bit for bit, codes included") {
  ref::ModelConfig cfg = ref::ModelConfig::flash();
  std::mt19937_64 gen(7);
  const int heads = 4;
  cfg.index_n_heads = heads;
  for (IndexerFormat f : {IndexerFormat::fp4, IndexerFormat::fp8})
    for (bool hadamard : {true, false}) {
      const std::string format = cuda::format_name(f);
      CAPTURE(format);
      CAPTURE(hadamard);
      const ref::PrecisionPolicy p = policy(f, hadamard, ScoreStorage::bf16);
      const ref::RopeTable rope = ref::RopeTable::for_layer(cfg, 4, p);
      const int64_t start_pos = 1000;  // angles of many turns
      const Mat q_proj = projection(24, heads, gen);
      const Mat want = oracle_q(q_proj, start_pos, rope, cfg, p);
      cuda::HostVectors codes;
      const Mat got = serial_q(q_proj, start_pos, rope, heads, f, hadamard, codes);
      int64_t value_bad = 0, code_bad = 0;
      for (Index i = 0; i < got.size(); ++i)
        value_bad += std::bit_cast<uint64_t>(got.data()[i]) != std::bit_cast<uint64_t>(want.data()[i]);
      for (int64_t vec = 0; vec < codes.count; ++vec) {  // the codes stand for the values
        const Mat from_codes = cuda::dequantize_vectors(codes, vec, 1);
        for (int c = 0; c < 128; ++c) code_bad += from_codes(0, c) != got(vec / heads, (vec % heads) * 128 + c);
      }
      CHECK(value_bad == 0);
      CHECK(code_bad == 0);
    }
}

TEST_CASE("logits: logit_serial equals the oracle's indexer_scores bit for bit, masks included") {
  const ref::ModelConfig cfg = ref::ModelConfig::flash();
  std::mt19937_64 gen(11);
  const int heads = 8;
  std::uniform_real_distribution<double> u(-1, 1);
  for (IndexerFormat f : {IndexerFormat::fp4, IndexerFormat::fp8})
    for (ScoreStorage s : {ScoreStorage::bf16, ScoreStorage::fp32}) {
      const std::string format = cuda::format_name(f);
      CAPTURE(format);
      const std::string storage = cuda::storage_name(s);
      CAPTURE(storage);
      const ref::PrecisionPolicy p = policy(f, true, s);
      const ref::RopeTable rope = ref::RopeTable::for_layer(cfg, 4, p);
      const int64_t start_pos = 37, n_queries = 9;
      const int64_t n_keys = (start_pos + n_queries) / 4;
      cuda::HostVectors qc, kc;
      const Mat q = serial_q(projection(n_queries, heads, gen), start_pos, rope, heads, f, true, qc);
      const Mat key_rows = serial_q(projection(n_keys, 1, gen), 0, rope, 1, f, true, kc);
      Mat w(n_queries, heads);
      for (Index i = 0; i < w.size(); ++i) w.data()[i] = bf16(u(gen) * 0.1);
      const Mat want = ref::indexer_scores(q, w, key_rows, start_pos, 4, p);
      int64_t bad = 0, masked = 0;
      for (int64_t i = 0; i < n_queries; ++i) {
        std::vector<float> wf(static_cast<size_t>(heads));
        for (int h = 0; h < heads; ++h) wf[static_cast<size_t>(h)] = static_cast<float>(w(i, h));
        const auto q_head = [&](int h) {
          const int64_t vec = i * heads + h;
          return cuda::VectorView{qc.codes.data() + vec * cuda::code_bytes(f), qc.scales.data() + vec * 4, f, false};
        };
        for (int64_t j = 0; j < n_keys; ++j) {
          const bool visible = j < (start_pos + i + 1) / 4;
          masked += !visible && want(i, j) == -std::numeric_limits<double>::infinity();
          if (!visible) continue;
          const cuda::VectorView k{kc.codes.data() + j * cuda::code_bytes(f), kc.scales.data() + j * 4, f, false};
          const float got = cuda::logit_serial(q_head, wf.data(), k, heads, s);
          bad += std::bit_cast<uint64_t>(static_cast<double>(got)) != std::bit_cast<uint64_t>(want(i, j));
        }
      }
      CHECK(bad == 0);
      CHECK(masked > 0);  // the case has masked entries
    }
}

TEST_CASE("paged cache offsets: the DeepGEMM layout matches verify/layouts, the interleaved one packs its pages") {
  for (IndexerFormat f : {IndexerFormat::fp8, IndexerFormat::fp4}) {
    layouts::DeepGemmIndexerLayout dg;
    dg.element =
        f == IndexerFormat::fp8 ? layouts::IndexerCacheElement::fp8_e4m3 : layouts::IndexerCacheElement::fp4_e2m1;
    int64_t bad = 0;
    for (int64_t token = 0; token < 5 * 64; ++token) {
      const cuda::KeyOffsets at =
          cuda::key_offsets(cuda::IndexerCacheLayout::deepgemm, f, 64, token / 64, static_cast<int>(token % 64));
      bad += at.codes != dg.data_offset(token) || at.scale_word != dg.scale_offset(token);
    }
    CHECK(bad == 0);
    // Interleaved: the slots of a page tile its bytes exactly once.
    const int64_t slot_bytes = cuda::code_bytes(f) + 4;
    std::vector<int> covered(static_cast<size_t>(32 * slot_bytes), 0);
    for (int u = 0; u < 32; ++u) {
      const cuda::KeyOffsets at = cuda::key_offsets(cuda::IndexerCacheLayout::interleaved, f, 32, 0, u);
      for (int64_t b = 0; b < cuda::code_bytes(f); ++b) ++covered[static_cast<size_t>(at.codes + b)];
      for (int64_t b = 0; b < 4; ++b) ++covered[static_cast<size_t>(at.scale_word + b)];
    }
    CHECK(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));
  }
}

TEST_CASE("decode v3 page walk: the multiply-shift split is t / page_keys and t % page_keys for every t < 2^31") {
  namespace pw = cuda::page_walk;
  std::vector<int> sizes;
  for (int d = 1; d <= 300; ++d) sizes.push_back(d);
  for (int l = 9; l <= 30; ++l) sizes.insert(sizes.end(), {(1 << l) - 1, 1 << l, (1 << l) + 1});
  sizes.insert(sizes.end(), {1000003, 0x7fffffff});
  std::mt19937_64 gen(31);
  std::uniform_int_distribution<uint32_t> any_key(0, 0x7fffffffu);
  int64_t bad = 0, checked = 0;
  for (int d : sizes) {
    const pw::PageDivider div = pw::make_page_divider(d);
    const auto check = [&](uint32_t t) {
      const pw::PageSlot ps = pw::split(div, t);
      bad += ps.page != t / static_cast<uint32_t>(d) || ps.slot != t % static_cast<uint32_t>(d);
      ++checked;
    };
    for (uint32_t t = 0; t < 4096; ++t) check(t);
    for (uint32_t t = 0x7fffffffu - 4095; t != 0x80000000u; ++t) check(t);
    for (int i = 0; i < 2000; ++i) {  // around page boundaries and anywhere
      const uint32_t t = any_key(gen);
      check(t);
      const uint32_t boundary = t - t % static_cast<uint32_t>(d);
      check(boundary);
      if (boundary > 0) check(boundary - 1);
    }
    if ((d & (d - 1)) == 0) CHECK(div.magic == 1u << 31);  // a power of two: the split is a shift
  }
  CHECK(checked > 1000000);
  CHECK(bad == 0);
}

TEST_CASE("decode v3 page walk: slot offsets equal key_offsets in both layouts, formats and several page sizes") {
  namespace pw = cuda::page_walk;
  int64_t bad = 0;
  for (cuda::IndexerCacheLayout layout : {cuda::IndexerCacheLayout::interleaved, cuda::IndexerCacheLayout::deepgemm})
    for (IndexerFormat f : {IndexerFormat::fp8, IndexerFormat::fp4})
      for (int page_keys : {4, 12, 32, 64, 100, 256}) {
        const pw::SlotStrides strides = pw::slot_strides(layout, f, page_keys);
        for (uint32_t page : {0u, 1u, 7u, 200000u})  // page 200000 of 256 FP8 keys: offsets past 2^32
          for (int slot = 0; slot < page_keys; ++slot) {
            const cuda::KeyOffsets want = cuda::key_offsets(layout, f, page_keys, page, slot);
            bad +=
                pw::code_offset(strides, page, static_cast<uint32_t>(slot)) != static_cast<uint64_t>(want.codes) ||
                pw::scale_offset(strides, page, static_cast<uint32_t>(slot)) != static_cast<uint64_t>(want.scale_word);
          }
      }
  CHECK(bad == 0);
}

TEST_CASE("decode v3 page walk: a tile's copies cover every code byte and scale word of its 64 keys once") {
  namespace pw = cuda::page_walk;
  constexpr int kKeys = pw::kTileKeys;
  for (IndexerFormat f : {IndexerFormat::fp8, IndexerFormat::fp4})
    for (cuda::IndexerCacheLayout layout :
         {cuda::IndexerCacheLayout::deepgemm, cuda::IndexerCacheLayout::interleaved}) {
      const int cb = cuda::code_bytes(f);
      CAPTURE(cb);
      std::vector<int> code_bytes(static_cast<size_t>(kKeys * cb), 0), scale_words(kKeys, 0);
      int64_t bad_lookup = 0;
      const auto cover = [&](pw::CopyUnit u, int width) {
        for (int b = 0; b < width; ++b) ++code_bytes[static_cast<size_t>(u.row * cb + u.byte + b)];
        if (u.byte == 0) ++scale_words[static_cast<size_t>(u.row)];
      };
      for (int t = 0; t < pw::kTileThreads; ++t) {
        if (layout == cuda::IndexerCacheLayout::deepgemm) {
          if (f == IndexerFormat::fp8) {
            for (int i = 0; i < 4; ++i) {
              const pw::CopyUnit u = pw::deepgemm_fp8_unit(t, i);
              bad_lookup += u.row != pw::deepgemm_fp8_unit(t, 0).row;  // the kernel looks one key up
              for (int h = 0; h < 16; ++h) ++code_bytes[static_cast<size_t>(u.row * cb + u.byte + h)];
              if (u.byte == 0 && i == 0) ++scale_words[static_cast<size_t>(u.row)];
            }
          } else {
            for (int i = 0; i < 2; ++i) cover(pw::deepgemm_fp4_unit(t, i), 16);
          }
        } else {
          const int words = cb / 4, lane = t % 32;
          for (int p = 0; p < pw::kWarpKeys * words / 32; ++p) {
            const pw::CopyUnit u = pw::interleaved_unit(words, t, p);
            // The shuffle's source lane looked up exactly this key.
            const int src = pw::warp_key(words, lane, p);
            bad_lookup += src < 0 || src >= 32 || pw::kWarpKeys * (t / 32) + pw::lookup_key(src) != u.row;
            cover(u, 4);
          }
        }
      }
      CHECK(bad_lookup == 0);
      CHECK(std::all_of(code_bytes.begin(), code_bytes.end(), [](int c) { return c == 1; }));
      CHECK(std::all_of(scale_words.begin(), scale_words.end(), [](int c) { return c == 1; }));
    }
}

TEST_CASE("decode v4 page walk: the producer warp's copies cover every code byte and scale word of a tile once") {
  namespace pw = cuda::page_walk;
  constexpr int kKeys = pw::kTileKeys;
  for (IndexerFormat f : {IndexerFormat::fp8, IndexerFormat::fp4})
    for (cuda::IndexerCacheLayout layout :
         {cuda::IndexerCacheLayout::deepgemm, cuda::IndexerCacheLayout::interleaved}) {
      const int cb = cuda::code_bytes(f);
      CAPTURE(cb);
      std::vector<int> code_bytes(static_cast<size_t>(kKeys * cb), 0), scale_words(kKeys, 0);
      int64_t bad_lookup = 0;
      for (int lane = 0; lane < pw::kProducerLanes; ++lane) {
        if (layout == cuda::IndexerCacheLayout::deepgemm) {
          for (int j = 0; j < pw::kLaneLookups; ++j) {
            const int looked_up = pw::producer_deepgemm_unit(lane, j, 0).row;  // the kernel's lookup j
            for (int m = 0; m < cb / 32; ++m) {
              const pw::CopyUnit u = pw::producer_deepgemm_unit(lane, j, m);
              bad_lookup += u.row != looked_up;
              for (int b = 0; b < 16; ++b) ++code_bytes[static_cast<size_t>(u.row * cb + u.byte + b)];
            }
            if (lane % 2 == 0) ++scale_words[static_cast<size_t>(looked_up)];
          }
        } else {
          const int words = cb / 4;
          for (int p = 0; p < kKeys * words / 32; ++p) {
            const pw::CopyUnit u = pw::producer_interleaved_unit(words, lane, p);
            // The shuffle's source lane u.row % 32 looked this key up as its lookup producer_lookup(words, p).
            bad_lookup += 32 * pw::producer_lookup(words, p) + u.row % 32 != u.row;
            for (int b = 0; b < 4; ++b) ++code_bytes[static_cast<size_t>(u.row * cb + u.byte + b)];
          }
          for (int i = 0; i < 2; ++i) ++scale_words[static_cast<size_t>(32 * i + lane)];
        }
      }
      CHECK(bad_lookup == 0);
      CHECK(std::all_of(code_bytes.begin(), code_bytes.end(), [](int c) { return c == 1; }));
      CHECK(std::all_of(scale_words.begin(), scale_words.end(), [](int c) { return c == 1; }));
    }
}

TEST_CASE("decode v5 bulk runs: 16-byte aligned copies of the keys of a page, every byte of a tile once") {
  namespace pw = cuda::page_walk;
  using Layout = cuda::IndexerCacheLayout;
  for (IndexerFormat f : {IndexerFormat::fp8, IndexerFormat::fp4})
    for (int page_keys : {4, 8, 12, 60, 64, 100, 128, 256, 4100}) {
      const uint32_t cb = static_cast<uint32_t>(cuda::code_bytes(f));
      CAPTURE(cb);
      CAPTURE(page_keys);
      const pw::PageDivider div = pw::make_page_divider(page_keys);
      const pw::SlotStrides strides = pw::slot_strides(Layout::deepgemm, f, page_keys);
      int64_t bad = 0, runs = 0;
      uint32_t last_page = 0;  // of the walk over full tiles: successive runs on successive pages
      for (uint32_t tile = 0; tile < 300; ++tile)
        for (uint32_t n_valid : {64u, 1u, 2u, 3u, 4u, 5u, 31u, 62u, 63u}) {
          const uint32_t first = tile * pw::kTileKeys;
          const uint32_t first_page = pw::split(div, first).page;
          std::vector<int> codes(pw::kTileKeys, 0), scales(pw::kTileKeys, 0);
          uint32_t bytes = 0;
          for (uint32_t row = 0; row < n_valid;) {
            const pw::BulkRun run = pw::bulk_run(div, first, first_page, row, n_valid);
            ++runs;
            const uint32_t key = first + row;
            // The run: keys of one page, starting at this key's slot, ending at the page's end or n_valid.
            bad += run.row != row || run.keys == 0 || run.slot != key % static_cast<uint32_t>(page_keys);
            bad += run.page_index != key / static_cast<uint32_t>(page_keys) - first_page;
            // The producer's window of 32 pages moves one page at a time: each run one page further.
            const uint32_t page = first_page + run.page_index;
            if (n_valid == 64) bad += runs > 1 && page != last_page + (row == 0 && run.slot != 0 ? 0 : 1);
            if (n_valid == 64) last_page = page;
            bad += run.slot + run.keys != static_cast<uint32_t>(page_keys) && row + run.keys != n_valid;
            // Only the run ending at n_valid may leave scale words to the lanes.
            bad += run.keys % 4 != 0 && row + run.keys != n_valid;
            // Pool page 2 i + 5 for the tile's i-th page: the copies' sources are cache_layout's offsets,
            // 16-byte aligned, and their sizes multiples of 16.
            const uint32_t pool_page = 2 * run.page_index + 5;
            const uint64_t code_at = pw::code_offset(strides, pool_page, run.slot);
            const uint64_t scale_at = pw::scale_offset(strides, pool_page, run.slot);
            const cuda::KeyOffsets want = cuda::key_offsets(Layout::deepgemm, f, page_keys, pool_page, run.slot);
            bad += static_cast<int64_t>(code_at) != want.codes || static_cast<int64_t>(scale_at) != want.scale_word;
            const uint32_t scale_keys = pw::bulk_scale_keys(run.keys);
            bad += code_at % 16 != 0 || (cb * run.keys) % 16 != 0;
            bad += scale_keys > 0 && (scale_at % 16 != 0 || (4 * scale_keys) % 16 != 0);
            bad += scale_keys > run.keys || run.keys - scale_keys >= 4;
            for (uint32_t i = 0; i < run.keys; ++i) ++codes[row + i];
            for (uint32_t i = 0; i < scale_keys; ++i) ++scales[row + i];
            bytes += cb * run.keys + 4 * scale_keys;
            row += run.keys;
          }
          // The lanes' scale words: the last n_valid % 4 keys.
          for (uint32_t r = pw::bulk_scale_keys(n_valid); r < n_valid; ++r) ++scales[r];
          bad += bytes != pw::bulk_tile_bytes(cb, n_valid);
          for (uint32_t r = 0; r < pw::kTileKeys; ++r) {
            const int want = r < n_valid ? 1 : 0;
            bad += codes[r] != want || scales[r] != want;
          }
        }
      CHECK(runs > 0);
      CHECK(bad == 0);
    }
}

TEST_CASE("DeepGEMM pages: pack_paged writes the bytes of verify/layouts' encoder and its decoder reads them back") {
  std::mt19937_64 gen(23);
  const ref::ModelConfig cfg = ref::ModelConfig::flash();
  for (IndexerFormat f : {IndexerFormat::fp8, IndexerFormat::fp4}) {
    const std::string format = cuda::format_name(f);
    CAPTURE(format);
    const ref::RopeTable rope = ref::RopeTable::for_layer(cfg, 4, policy(f, true, ScoreStorage::bf16));
    cuda::HostVectors serial;
    const Mat values = serial_q(projection(150, 1, gen), 0, rope, 1, f, true, serial);  // 150 keys: 3 pages
    const cuda::HostVectors keys = cuda::quantize_vectors(values, f);                   // the oracle's decomposition
    const ref::BlockFormat bf =
        f == IndexerFormat::fp4 ? ref::BlockFormat::fp4_indexer() : ref::BlockFormat::fp8_per_head(128);
    std::vector<ref::QuantizedRow> rows;
    for (Index t = 0; t < values.rows(); ++t) {
      const std::vector<double> row(values.row(t).data(), values.row(t).data() + 128);
      rows.push_back(ref::quantize_row(bf, row));
    }
    layouts::DeepGemmIndexerLayout dg;
    dg.element =
        f == IndexerFormat::fp8 ? layouts::IndexerCacheElement::fp8_e4m3 : layouts::IndexerCacheElement::fp4_e2m1;
    const std::vector<uint8_t> theirs = layouts::encode_deepgemm_indexer(rows, dg);
    const std::vector<uint8_t> ours =
        cuda::pack_paged({keys}, {std::vector<int32_t>{0, 1, 2}}, cuda::IndexerCacheLayout::deepgemm, 64, 3, 0);
    CHECK(ours == theirs);
    CHECK(layouts::decode_deepgemm_indexer(ours, values.rows(), dg) == values);
  }
}

TEST_CASE("FP4 unpacking: every group of four e2m1 codes becomes their exact e4m3 codes") {
  int64_t bad = 0;
  for (uint32_t word = 0; word < 65536; ++word) {
    const uint32_t out = cuda::logits_tile::e2m1x4_to_e4m3x4(word);
    for (int k = 0; k < 4; ++k) {
      const uint8_t nibble = static_cast<uint8_t>((word >> (4 * k)) & 0xf);
      const uint8_t byte = static_cast<uint8_t>(out >> (8 * k));
      bad += byte != ref::fp8_e4m3_encode(ref::fp4_e2m1_decode(nibble));  // -0 (0x8) -> 0x80
    }
  }
  CHECK(bad == 0);
  const uint4 v = cuda::logits_tile::unpack16(make_uint2(0x76543210u, 0xFEDCBA98u));  // codes 0..15 in order
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
  for (int i = 0; i < 16; ++i)
    CHECK(static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4))) ==
          ref::fp8_e4m3_encode(ref::fp4_e2m1_decode(static_cast<uint8_t>(i))));
}

namespace {

// One warp of the v2 epilogue, simulated: lane l's slot c holds the sum of its two rows of column
// slot_col(c, l); the three exchange rounds run in lock step; afterwards every owned slot must
// hold the column's sum over the warp's 16 rows, and the owned columns must be every column once.
template <int N>
void simulate_exchange() {
  constexpr int kSlots = N / 4;
  // value(row, col): distinct powers of two, so a sum identifies exactly which terms it holds.
  auto value = [](int row, int col) { return std::ldexp(1.0, row) * (col + 1); };
  std::vector<std::vector<double>> v(32, std::vector<double>(kSlots));
  for (int l = 0; l < 32; ++l)
    for (int c = 0; c < kSlots; ++c) {
      const int reg = 4 * (c / 2) + c % 2;
      const int col = cuda::logits_tile::slot_col(c, l);
      REQUIRE(col == cuda::wgmma::acc_col(reg, l));
      REQUIRE(col == cuda::wgmma::acc_col(reg + 2, l));
      v[l][c] = value(cuda::wgmma::acc_row(reg, 0, l), col) + value(cuda::wgmma::acc_row(reg + 2, 0, l), col);
    }
  for (int round = 0; round < 3; ++round) {
    const int half = kSlots >> (round + 1);
    std::vector<std::vector<double>> send(32, std::vector<double>(half));
    std::vector<std::vector<double>> keep(32, std::vector<double>(half));
    for (int l = 0; l < 32; ++l)
      for (int k = 0; k < half; ++k) {
        const bool upper = cuda::logits_tile::kept_upper(round, l);
        keep[l][k] = upper ? v[l][half + k] : v[l][k];
        send[l][k] = upper ? v[l][k] : v[l][half + k];
      }
    for (int l = 0; l < 32; ++l)
      for (int k = 0; k < half; ++k) v[l][k] = keep[l][k] + send[l ^ (4 << round)][k];
  }
  std::vector<int> owners(N, 0);
  int64_t bad = 0;
  for (int l = 0; l < 32; ++l)
    for (int k = 0; k < kSlots / 8; ++k) {
      const int col = cuda::logits_tile::slot_col(cuda::logits_tile::owned_slot<kSlots>(k, l), l);
      ++owners[static_cast<size_t>(col)];
      double want = 0;
      for (int row = 0; row < 16; ++row) want += value(row, col);
      bad += v[l][k] != want;
    }
  CHECK(bad == 0);
  CHECK(std::all_of(owners.begin(), owners.end(), [](int o) { return o == 1; }));
}

}  // namespace

TEST_CASE("v2 epilogue: the lane exchange leaves each column's 16-row sum with exactly one lane") {
  simulate_exchange<128>();
  simulate_exchange<64>();
}

namespace {

// An addition tree as text with the two operands of every '+' in sorted order: fp32 addition is
// commutative bit for bit, so two trees give the same bits on every input when these texts agree.
std::string plus(const std::string& a, const std::string& b) {
  return a < b ? "(" + a + "+" + b + ")" : "(" + b + "+" + a + ")";
}
// v2's p_r of a key: the fma of heads h + 8 (multiplied) and h (its product the addend).
std::string pair_term(int h) { return "p" + std::to_string(h); }

// v2's head sum of one key (logits_tile.cuh head_sum): per warp W the rows r and r + 8 of its 16
// heads in one fma (p_r, r = 0..7), the lane rounds over r bits 0, 1, 2, then the warps in order.
std::string v2_tree() {
  std::string total;
  for (int W = 0; W < 4; ++W) {
    std::vector<std::string> p(8);
    for (int r = 0; r < 8; ++r) p[static_cast<size_t>(r)] = pair_term(16 * W + r);
    for (int bit = 1; bit < 8; bit *= 2)
      for (int r = 0; r < 8; r += 2 * bit)
        p[static_cast<size_t>(r)] = plus(p[static_cast<size_t>(r)], p[static_cast<size_t>(r + bit)]);
    total = W == 0 ? p[0] : plus(total, p[0]);
  }
  return total;
}

}  // namespace

TEST_CASE("prefill v4 epilogue: every lane's logit is v2's addition tree of its key and query") {
  namespace km = cuda::key_major;
  const std::string want = v2_tree();
  int64_t bad_layout = 0, bad_tree = 0;
  std::vector<int> owners(km::kKeys * km::kPairQueries, 0);
  for (int w = 0; w < 4; ++w) {
    // v[lane][rs][qi][W] as key_major::head_sum forms it; key of (w, lane, rs), query qi.
    std::vector<std::vector<std::string>> v(32, std::vector<std::string>(16));
    auto at = [](int rs, int qi, int W) { return static_cast<size_t>(8 * rs + 4 * qi + W); };
    for (int l = 0; l < 32; ++l)
      for (int rs = 0; rs < 2; ++rs)
        for (int qi = 0; qi < km::kPairQueries; ++qi)
          for (int W = 0; W < 4; ++W) {
            std::string p[2];
            for (int b = 0; b < 2; ++b) {
              // The two registers of the fma: heads 16 W + r (+ 8) of the key 16 w + l/4 + 8 rs.
              for (int hi = 0; hi < 2; ++hi) {
                const int k = km::acc_index(qi, 2 * W + hi, rs, b);
                bad_layout += cuda::wgmma::acc_row(k, w, l) != 16 * w + l / 4 + 8 * rs;
                bad_layout += cuda::wgmma::acc_col(k, l) != 64 * qi + km::octet_head(2 * W + hi, b, l);
              }
              const int h = km::octet_head(2 * W, b, l);
              bad_layout += km::octet_head(2 * W + 1, b, l) != h + 8;
              p[b] = pair_term(h);
            }
            v[static_cast<size_t>(l)][at(rs, qi, W)] = plus(p[0], p[1]);
          }
    // The exchange: lane l reads chunk kept_chunk(l) (j = 2 rs + qi) of the 4 lanes of its quad in
    // quad order and adds (c0 + c1) + (c2 + c3) for each W, then the W in order.
    for (int l = 0; l < 32; ++l) {
      const int j = km::kept_chunk(l), rs = j / 2, qi = j % 2;
      std::string s[4];
      for (int W = 0; W < 4; ++W) {
        auto from = [&](int c) { return v[static_cast<size_t>((l & ~3) | c)][at(rs, qi, W)]; };
        s[W] = plus(plus(from(0), from(1)), plus(from(2), from(3)));
      }
      const std::string total = plus(plus(plus(s[0], s[1]), s[2]), s[3]);
      bad_tree += total != want;
      bad_layout += km::out_key(w, l) != 16 * w + l / 4 + 8 * rs || km::out_query(l) != qi;
      ++owners[static_cast<size_t>(km::out_query(l) * km::kKeys + km::out_key(w, l))];
    }
  }
  CHECK(bad_layout == 0);
  CHECK(bad_tree == 0);
  CHECK(std::all_of(owners.begin(), owners.end(), [](int o) { return o == 1; }));  // every logit once
}

TEST_CASE("prefill v4 exchange: every chunk has its own 16-byte unit and a quarter-warp's accesses are conflict-free") {
  namespace km = cuda::key_major;
  for (int pieces : {1, 2}) {  // fp32 and double (bf16 scores) head sums
    INFO("pieces " << pieces);
    std::vector<int> writers(static_cast<size_t>(4 * pieces * 32), 0);
    int64_t bad_offset = 0, conflicts = 0;
    for (int j = 0; j < 4; ++j)
      for (int piece = 0; piece < pieces; ++piece)
        for (int l = 0; l < 32; ++l) {
          const int unit = km::exchange_unit(j, piece, pieces, l);
          ++writers[static_cast<size_t>(unit)];
          bad_offset += km::store_offset(km::store_base(l), j, piece, pieces) != 16u * static_cast<unsigned>(unit);
        }
    for (int l = 0; l < 32; ++l)
      for (int c = 0; c < 4; ++c)
        for (int piece = 0; piece < pieces; ++piece)
          bad_offset += km::load_offset(km::load_base(l, pieces), c, piece) !=
                        16u * static_cast<unsigned>(km::exchange_unit(km::kept_chunk(l), piece, pieces, (l & ~3) | c));
    // A 16-byte access of a warp runs as 4 quarter-warps of 8 lanes; it is conflict-free when their
    // 8 units fall in the 8 distinct 16-byte bank groups of a 128-byte row (unit % 8).
    for (int q = 0; q < 4; ++q)
      for (int piece = 0; piece < pieces; ++piece) {
        for (int j = 0; j < 4; ++j) {  // stores: chunk j of lanes 8q .. 8q + 7
          int seen = 0;
          for (int l = 8 * q; l < 8 * q + 8; ++l) seen |= 1 << (km::exchange_unit(j, piece, pieces, l) % 8);
          conflicts += seen != 0xff;
        }
        for (int c = 0; c < 4; ++c) {  // reads: each lane its kept chunk of quad lane c
          int seen = 0;
          for (int l = 8 * q; l < 8 * q + 8; ++l)
            seen |= 1 << (km::exchange_unit(km::kept_chunk(l), piece, pieces, (l & ~3) | c) % 8);
          conflicts += seen != 0xff;
        }
      }
    CHECK(bad_offset == 0);
    CHECK(conflicts == 0);
    CHECK(std::all_of(writers.begin(), writers.end(), [](int n) { return n == 1; }));
  }
  // The weights: each (query, head) its own slot, a lane's 16 of a query at weight_base + 4 k
  // (k = 2 o + b, head octet_head(o, b, lane)), and a quarter-warp's 16-byte loads conflict-free.
  std::vector<int> slots(static_cast<size_t>(km::kWeightFloats), 0);
  int64_t bad_weight = 0, weight_conflicts = 0;
  for (int qi = 0; qi < km::kPairQueries; ++qi) {
    for (int h = 0; h < 64; ++h) ++slots[static_cast<size_t>(km::weight_slot(qi, h))];
    for (int l = 0; l < 32; ++l)
      for (int o = 0; o < 8; ++o)
        for (int b = 0; b < 2; ++b)
          bad_weight += km::weight_base(l) + 4u * static_cast<unsigned>(km::weight_slot(qi, 0) + 2 * o + b) !=
                        4u * static_cast<unsigned>(km::weight_slot(qi, km::octet_head(o, b, l)));
    for (int k = 0; k < 16; k += 4) {
      int seen = 0;
      for (int l = 0; l < 4; ++l)  // lanes 4 .. 7 of the quarter-warp read the same addresses
        seen |= 1 << (((km::weight_base(l) + 4u * static_cast<unsigned>(km::weight_slot(qi, 0) + k)) / 16) % 8);
      weight_conflicts += std::popcount(static_cast<unsigned>(seen)) != 4;
    }
  }
  CHECK(bad_weight == 0);
  CHECK(weight_conflicts == 0);
  CHECK(std::count(slots.begin(), slots.end(), 1) == 2 * 64);
  CHECK(std::count(slots.begin(), slots.end(), 0) == km::kWeightFloats - 2 * 64);
}

TEST_CASE("wgmma operand tiles: tile_offset is the no-swizzle K-major layout the descriptors describe") {
  for (int rows : {64, 128}) {
    const int lbo = rows * 16, sbo = 128;  // wgmma.cuh slice_descriptor
    int64_t bad = 0;
    for (int r = 0; r < rows; ++r)
      for (int kb = 0; kb < 128; ++kb) {
        const int slice = kb / 32, in_slice = kb % 32;
        const int canonical = slice * 2 * lbo + (in_slice / 16) * lbo + (r / 8) * sbo + (r % 8) * 16 + in_slice % 16;
        bad += cuda::wgmma::tile_offset(rows, r, kb) != canonical;
      }
    CHECK(bad == 0);
  }
}

TEST_CASE(
    "prefill v3 units: every logit in one unit, every key of a range in a computed tile, tiles below the key count") {
  namespace pv = cuda::prefill_v3;
  std::mt19937_64 gen(14);
  struct Shape {
    int64_t s, n_keys, n_cols;
  };
  // Ragged tails (queries not a multiple of 4, columns not of 128 or 2048), a chunk boundary, extra
  // columns past the keys, one query, one column.
  for (const Shape sh : {Shape{9, 2600, 2700}, Shape{67, 150, 150}, Shape{1, 1, 1}, Shape{13, 700, 700},
                         Shape{5, 4096, 4097}, Shape{3, 200, 260}}) {
    for (int kind = 0; kind < 3; ++kind) {  // causal, random (empty ranges included), all empty
      std::vector<int32_t> ks(static_cast<size_t>(sh.s)), ke(static_cast<size_t>(sh.s));
      std::uniform_int_distribution<int64_t> pos(0, sh.n_keys);
      for (int64_t i = 0; i < sh.s; ++i) {
        int64_t a = 0, b = 0;
        if (kind == 0) {
          b = std::min(sh.n_keys, (533 + i + 1) / 4);
        } else if (kind == 1) {
          a = pos(gen);
          b = pos(gen);
          if (i % 5 == 2) b = a;  // empty
          if (a > b) std::swap(a, b);
        }
        ks[static_cast<size_t>(i)] = static_cast<int32_t>(a);
        ke[static_cast<size_t>(i)] = static_cast<int32_t>(b);
      }
      const pv::Schedule sched{sh.s, sh.n_cols};
      REQUIRE(sched.units() <= pv::kMaxUnits);
      std::vector<int> covered(static_cast<size_t>(sh.s * sh.n_cols), 0);
      int64_t uncomputed_in_range = 0, outside_keys = 0, bad_range = 0, bad_chunk = 0;
      for (int u = 0; u < static_cast<int>(sched.units()); ++u) {
        const int64_t first_query = int64_t{pv::unit_query_group(u, static_cast<int>(sched.chunks()))} * 4;
        int64_t lo = 0, hi = 0;
        pv::unit_key_range(ks.data(), ke.data(), first_query, sh.s, lo, hi);
        // The union, counted directly.
        int64_t want_lo = pv::kNoKeys, want_hi = 0;
        for (int64_t i = first_query; i < std::min(sh.s, first_query + 4); ++i)
          if (ke[static_cast<size_t>(i)] > ks[static_cast<size_t>(i)]) {
            want_lo = std::min<int64_t>(want_lo, ks[static_cast<size_t>(i)]);
            want_hi = std::max<int64_t>(want_hi, ke[static_cast<size_t>(i)]);
          }
        bad_range += lo != want_lo || hi != want_hi;
        const pv::Unit w = pv::unit_of(sched, u, lo, hi);
        bad_range += w.first_query != first_query;
        bad_chunk += w.chunk_begin < 0 || w.chunk_end > sched.col_tiles() || w.chunk_begin >= w.chunk_end ||
                     w.first < w.chunk_begin || w.last > w.chunk_end || w.first > w.last;
        for (int64_t tile = w.first; tile < w.last; ++tile)
          outside_keys += !(tile * pv::kTileKeys < hi && hi <= sh.n_keys);  // TMA's box starts below the keys
        for (int64_t i = first_query; i < std::min(sh.s, first_query + 4); ++i)
          for (int64_t tile = w.chunk_begin; tile < w.chunk_end; ++tile)
            for (int64_t col = tile * pv::kTileKeys; col < std::min(sh.n_cols, (tile + 1) * pv::kTileKeys); ++col) {
              ++covered[static_cast<size_t>(i * sh.n_cols + col)];
              const bool in_range = col >= ks[static_cast<size_t>(i)] && col < ke[static_cast<size_t>(i)];
              uncomputed_in_range += in_range && !w.computed(tile);
            }
      }
      INFO("s " << sh.s << " n_cols " << sh.n_cols << " kind " << kind);
      CHECK(bad_range == 0);
      CHECK(bad_chunk == 0);
      CHECK(uncomputed_in_range == 0);
      CHECK(outside_keys == 0);
      CHECK(std::count(covered.begin(), covered.end(), 1) == static_cast<int64_t>(covered.size()));
    }
  }
}

TEST_CASE("top-k order keys: the oracle's order (score descending, lower index first, -0 == +0)") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xs{inf,
                        -inf,
                        nan,
                        0.0f,
                        -0.0f,
                        1e-45f,
                        -1e-45f,
                        3.0f,
                        -3.0f,
                        3.0f,
                        std::numeric_limits<float>::max(),
                        -std::numeric_limits<float>::max(),
                        1.5f,
                        1e-38f};
  std::mt19937_64 gen(3);
  std::uniform_real_distribution<float> u(-10, 10);
  for (int i = 0; i < 200; ++i) xs.push_back(std::round(u(gen)));  // many ties
  int64_t bad = 0;
  for (size_t a = 0; a < xs.size(); ++a) {
    const bool va = xs[a] > -inf;  // visible: not -inf, not NaN
    bad += (cuda::order_key(xs[a]) != 0) != va;
    for (size_t b = 0; b < xs.size(); ++b) {
      if (!va || !(xs[b] > -inf)) continue;
      const bool oracle_before = xs[a] > xs[b] || (xs[a] == xs[b] && a < b);
      const bool key_before = cuda::composite(cuda::order_key(xs[a]), static_cast<uint32_t>(a)) >
                              cuda::composite(cuda::order_key(xs[b]), static_cast<uint32_t>(b));
      bad += oracle_before != key_before;
    }
    bad += cuda::composite_index(cuda::composite(cuda::order_key(xs[a]), static_cast<uint32_t>(a))) != a;
  }
  CHECK(bad == 0);
}

TEST_CASE("top-k v3 plan: slices and warp segments partition each row in index order, digits cover 32 bits") {
  namespace plan = cuda::topk_v3_plan;
  CHECK(plan::cluster_size(0, 16) == 1);
  CHECK(plan::cluster_size(16384, 16) == 1);
  CHECK(plan::cluster_size(16385, 16) == 2);
  CHECK(plan::cluster_size(262144, 16) == 16);
  CHECK(plan::cluster_size(262144, 8) == 8);
  CHECK(plan::cluster_size(1 << 20, 16) == 16);
  CHECK(plan::cluster_size(1 << 30, plan::kMaxCluster) == plan::kMaxCluster);
  CHECK(plan::kChunk == 4 * 32);
  int64_t bad = 0;
  std::vector<int64_t> lens{0,     1,     31,    32,     33,     1000,   1024,   1025,   16383,  16384,
                            16385, 32768, 32769, 100000, 262143, 262144, 262145, 524288, 1000000};
  for (int64_t len : lens)
    for (int c : {1, 2, 3, 8, 16}) {
      int64_t next = 0;  // the next index the walk must reach, in rank, warp, chunk order
      const bool resident = plan::slice_part(len, c) <= plan::kResident;
      bad += plan::slice_part(len, c) % plan::kChunk != 0 || plan::slice_part(len, c) * c < len;
      for (int r = 0; r < c; ++r) {
        const plan::Slice s = plan::slice_of(len, c, r);
        bad += s.lo != next || s.hi < s.lo || s.seg % plan::kChunk != 0 || s.seg * plan::kWarps < s.hi - s.lo;
        if (resident) bad += plan::whole_chunks(s.hi - s.lo) > plan::kResident;
        for (int w = 0; w < plan::kWarps; ++w) {
          bad += plan::warp_begin(s, w) != next;
          bad += plan::warp_begin(s, w) < s.hi && (plan::warp_begin(s, w) - s.lo) % plan::kChunk != 0;
          bad += plan::warp_end(s, w) < plan::warp_begin(s, w) || plan::warp_end(s, w) > s.hi;
          next = plan::warp_end(s, w);
        }
        bad += next != s.hi;
      }
      bad += next != len;
    }
  CHECK(bad == 0);
  // Digits: pass p's bits lie right below pass p-1's, 32 in all; bins a power of two.
  int covered = 32;
  for (int p = 0; p < plan::kPasses; ++p) {
    const int bits = std::countr_zero(static_cast<unsigned>(plan::digit_bins(p)));
    CHECK((1 << bits) == plan::digit_bins(p));
    CHECK(plan::digit_bins(p) <= plan::kMaxBins);
    CHECK(plan::digit_shift(p) + bits == covered);
    covered = plan::digit_shift(p);
  }
  CHECK(covered == 0);
  // The select: the threads' bin pairs (high_bin, high_bin - 1) cover every bin once, descending.
  for (int p = 0; p < plan::kPasses; ++p) {
    const int bins = plan::digit_bins(p);
    std::vector<int> seen(static_cast<size_t>(bins), 0);
    int expect = bins - 1;
    for (int t = 0; t < plan::kThreads; ++t) {
      const int top = plan::high_bin(bins, t);
      if (top <= 0) continue;
      bad += top != expect;
      ++seen[static_cast<size_t>(top)];
      ++seen[static_cast<size_t>(top - 1)];
      expect = top - 2;
    }
    for (int v : seen) bad += v != 1;
  }
  CHECK(bad == 0);
}

TEST_CASE("top-k v3 plan: the bitonic network of bitonic_keeps_max sorts every size descending") {
  namespace plan = cuda::topk_v3_plan;
  std::mt19937_64 gen(11);
  int64_t bad = 0;
  for (int size = 64; size <= 2048; size <<= 1)
    for (int n : {0, 1, size / 2 + 1, size - 1, size}) {
      std::vector<uint64_t> v(static_cast<size_t>(size), 0);
      for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (gen() | 1) >> 1;  // distinct with overwhelming odds
      std::vector<uint64_t> want(v);
      std::sort(want.begin(), want.end(), std::greater<>());
      for (int span = 2; span <= size; span <<= 1)
        for (int stride = span / 2; stride > 0; stride >>= 1) {
          std::vector<uint64_t> next(v);
          for (int p = 0; p < size; ++p) {
            const uint64_t a = v[static_cast<size_t>(p)], b = v[static_cast<size_t>(p ^ stride)];
            next[static_cast<size_t>(p)] = plan::bitonic_keeps_max(p, stride, span) ? std::max(a, b) : std::min(a, b);
          }
          v = next;
        }
      bad += v != want;
    }
  CHECK(bad == 0);
}
