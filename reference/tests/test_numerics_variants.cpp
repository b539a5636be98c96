// Numerics variants (docs/math.md "Numerics variants"): the rounding variants of the formats against
// brute force over their grids, the UE8M0 floor rule and custom amax floors, each NumericsVariant
// switch against an independent construction of what it must compute, the mutation catalogue and
// MutatedStages (only the stage it names changes), and the pre-quantization table (the oracle's
// stage = its final rounding of its pre-quantization value, bit for bit).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "layer_test_support.h"
#include "reference/mutation.h"
#include "reference/numerics/bf16.h"
#include "reference/numerics/block_quant.h"
#include "reference/numerics/fp4_e2m1.h"
#include "reference/numerics/fp8_e4m3.h"
#include "reference/numerics/scale_rules.h"
#include "reference/pre_quant.h"
#include "reference/stages/indexer.h"
#include "reference/stages/sparse_mqa.h"

using namespace dsv4::ref;
using dsv4::ref::testing::bitwise_equal;
using dsv4::ref::testing::random_tokens;
using dsv4::ref::testing::same_bits;

namespace {

// Every non-negative finite value of a format's grid, ascending.
std::vector<double> e4m3_grid() {
  std::set<double> g;
  for (int c = 0; c < 0x80; ++c)
    if (const double v = fp8_e4m3_decode(static_cast<uint8_t>(c)); !std::isnan(v)) g.insert(v);
  return {g.begin(), g.end()};
}
std::vector<double> e2m1_grid() { return {0, 0.5, 1, 1.5, 2, 3, 4, 6}; }

// Brute force over the grid: toward zero = the largest grid point <= |x|; to nearest with ties
// toward zero = the nearest, the smaller one at a tie. Saturates at the top.
double brute_toward_zero(const std::vector<double>& grid, double x) {
  const double a = std::min(std::fabs(x), grid.back());
  double r = 0;
  for (double g : grid)
    if (g <= a) r = g;
  return std::copysign(r, x);
}
double brute_ties_toward_zero(const std::vector<double>& grid, double x) {
  const double a = std::min(std::fabs(x), grid.back());
  double best = grid.front();
  for (double g : grid)
    if (std::fabs(g - a) < std::fabs(best - a)) best = g;  // strict: the first (smaller) of a tie stays
  return std::copysign(best, x);
}

// Values that hit every midpoint of the grid, plus random ones.
std::vector<double> probe_values(const std::vector<double>& grid, uint64_t seed) {
  std::vector<double> xs;
  for (size_t i = 0; i + 1 < grid.size(); ++i) {
    const double mid = (grid[i] + grid[i + 1]) / 2;
    for (double v : {grid[i], mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e9)}) {
      xs.push_back(v);
      xs.push_back(-v);
    }
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.1 * grid.back(), 1.1 * grid.back());
  for (int i = 0; i < 20000; ++i) xs.push_back(u(rng));
  return xs;
}

Mat random_mat(Index rows, Index cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  Mat m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = round_to(Storage::bf16, normal(rng));
  return m;
}

PrecisionPolicy with_variant(NumericsVariant v) {
  PrecisionPolicy p = PrecisionPolicy::official();
  p.variant = v;
  return p;
}

}  // namespace

TEST_CASE("variant rounding: e4m3 and e2m1 toward zero and ties toward zero equal brute force over the grid") {
  for (const auto& [grid, tz, ttz, rne] :
       {std::tuple{e4m3_grid(), &fp8_e4m3_round_toward_zero, &fp8_e4m3_round_ties_toward_zero, &fp8_e4m3_round},
        std::tuple{e2m1_grid(), &fp4_e2m1_round_toward_zero, &fp4_e2m1_round_ties_toward_zero, &fp4_e2m1_round}}) {
    int ties_that_differ_from_rne = 0;
    for (double x : probe_values(grid, 3)) {
      CAPTURE(x);
      CHECK(same_bits(tz(x), brute_toward_zero(grid, x)));
      CHECK(same_bits(ttz(x), brute_ties_toward_zero(grid, x)));
      ties_that_differ_from_rne += ttz(x) != rne(x);
    }
    CHECK(ties_that_differ_from_rne > 0);  // the variant is not RNE in disguise
  }
  // The FP4 ties of docs/math.md: RNE 0.75 -> 1, 1.75 -> 2, 3.5 -> 4; ties toward zero 0.5, 1.5, 3.
  CHECK(fp4_e2m1_round_ties_toward_zero(0.75) == 0.5);
  CHECK(fp4_e2m1_round_ties_toward_zero(1.75) == 1.5);
  CHECK(fp4_e2m1_round_ties_toward_zero(-3.5) == -3);
  CHECK(fp4_e2m1_round_ties_toward_zero(2.5) == 2);  // RNE agrees here
  CHECK(fp8_e4m3_round_toward_zero(1.9375) == 1.875);
  CHECK(fp8_e4m3_round_toward_zero(500) == 448);
  CHECK(std::isnan(fp8_e4m3_round_toward_zero(std::nan(""))));
  CHECK(round_element(Element::e2m1, ElementRounding::nearest_ties_toward_zero, 0.75) == 0.5);
  CHECK(round_element(Element::e4m3, ElementRounding::nearest_even, 0.75) == fp8_e4m3_round(0.75));
}

TEST_CASE("variant scales: UE8M0 floor is the exponent without the ceiling, and saturates the block top") {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> e(-40, 10);
  for (int i = 0; i < 5000; ++i) {
    const auto amax = static_cast<float>(std::exp2(e(rng)));
    const float t = std::fmax(amax, 1e-4f) * (1.0f / 448.0f);
    CHECK(ue8m0_floor_exponent(amax, 1e-4f, 448) == static_cast<int>(std::floor(std::log2(static_cast<double>(t)))));
    const int ceil_e = ue8m0_ceil_exponent(amax, 1e-4f, 448);
    CHECK(ceil_e - ue8m0_floor_exponent(amax, 1e-4f, 448) == (std::exp2(std::floor(std::log2(t))) == t ? 0 : 1));
  }
  BlockFormat floor = BlockFormat::fp4_indexer();
  floor.scale = ScaleRule::ue8m0_floor;
  std::vector<double> row(32, 0.25);
  row[0] =
      5.0;  // amax/6 = 0.833: ceil scale 1 (5 -> 5 rounds to 4), floor scale 0.5 (5/0.5 = 10 -> saturates at 6 -> 3)
  std::vector<double> ceiled = row, floored = row;
  fake_quant_row(BlockFormat::fp4_indexer(), ceiled);
  fake_quant_row(floor, floored);
  CHECK(ceiled[0] == 4);
  CHECK(floored[0] == 3);
  CHECK(floored[1] == 0.25);  // 0.25 / 0.5 = 0.5: on the grid at the finer scale
  CHECK(floor.name() == "e2m1/b32/ue8m0-floor");
}

TEST_CASE("variant floors: FP4 with the FP8 floor 1e-4 quantizes a tiny block on a coarser grid") {
  BlockFormat floored = BlockFormat::fp4_indexer();
  floored.custom_amax_floor = 1e-4f;
  CHECK(floored.amax_floor() == 1e-4f);
  CHECK(floored.name() == "e2m1/b32/ue8m0/floor=0.0001");
  std::vector<double> row(32);
  for (int i = 0; i < 32; ++i) row[i] = round_to(Storage::bf16, 3e-6 * (i - 15));
  std::vector<double> official = row, variant = row;
  fake_quant_row(BlockFormat::fp4_indexer(), official);
  fake_quant_row(floored, variant);
  // amax 4.8e-5: DeepSeek's scale 2^ceil(log2(4.8e-5/6)) = 2^-16; with the floor 2^ceil(log2(1e-4/6)) = 2^-15.
  CHECK(block_scale(BlockFormat::fp4_indexer(), 4.8e-5, 0) == std::ldexp(1.0, -16));
  CHECK(block_scale(floored, 4.8e-5, 0) == std::ldexp(1.0, -15));
  CHECK(official != variant);
  // Above 1e-4 the floor does nothing.
  std::vector<double> big(32, 0.5), big_variant(32, 0.5);
  fake_quant_row(BlockFormat::fp4_indexer(), big);
  fake_quant_row(floored, big_variant);
  CHECK(big == big_variant);
}

TEST_CASE("variant RoPE: a shifted position is the rotation at t + shift, and t - 1 at 0 rotates backwards") {
  const ModelConfig cfg = ModelConfig::tiny();
  const PrecisionPolicy official = PrecisionPolicy::official();
  const RopeTable table = RopeTable::for_layer(cfg, 4, official);
  const Mat x = random_mat(1, 2 * cfg.head_dim, 9);
  NumericsVariant plus;
  plus.rope_position_shift = 1;
  for (int64_t t : {0, 5, 300}) {
    Mat a = x, b = x;
    apply_rope(a.row(0), 2, cfg.head_dim, t, table, false, with_variant(plus));
    apply_rope(b.row(0), 2, cfg.head_dim, t + 1, table, false, official);
    CHECK(bitwise_equal(a, b));
  }
  NumericsVariant minus;
  minus.rope_position_shift = -1;
  Mat a = x, b = x;
  apply_rope(a.row(0), 2, cfg.head_dim, 0, table, false, with_variant(minus));  // position -1
  apply_rope(b.row(0), 2, cfg.head_dim, 1, table, /*inverse=*/true, official);  // rotation by -theta(1)
  CHECK(bitwise_equal(a, b));
}

TEST_CASE("variant RoPE: first dims and halves are the official rotation of permuted dims") {
  const ModelConfig cfg = ModelConfig::tiny();  // head_dim 128 = 64 nope + 64 rope
  const PrecisionPolicy official = PrecisionPolicy::official();
  const RopeTable table = RopeTable::for_layer(cfg, 0, official);
  const int d = cfg.head_dim, rope = cfg.rope_head_dim, half = rope / 2;
  const Mat x = random_mat(1, d, 10);
  // first dims: swapping the two 64-dim halves of the head moves dims [0, 64) where RoPE acts.
  std::vector<Index> swap(d), halves(d);
  for (int i = 0; i < d; ++i) swap[i] = (i + rope) % d;
  // halves: slot d-64+2i holds dim d-64+i, slot d-64+2i+1 holds dim d-64+half+i.
  for (int i = 0; i < d; ++i) halves[i] = i;
  for (int i = 0; i < half; ++i) {
    halves[d - rope + 2 * i] = d - rope + i;
    halves[d - rope + 2 * i + 1] = d - rope + half + i;
  }
  for (const auto& [pairs, perm] :
       {std::pair{RopePairs::first_interleaved, swap}, std::pair{RopePairs::last_halves, halves}}) {
    NumericsVariant v;
    v.rope_pairs = pairs;
    Mat variant = x;
    apply_rope(variant.row(0), 1, d, 77, table, false, with_variant(v));
    Mat permuted(1, d);
    for (int i = 0; i < d; ++i) permuted(0, i) = x(0, perm[i]);
    apply_rope(permuted.row(0), 1, d, 77, table, false, official);
    Mat back(1, d);
    for (int i = 0; i < d; ++i) back(0, perm[i]) = permuted(0, i);
    CHECK(bitwise_equal(variant, back));
    CHECK_FALSE(bitwise_equal(variant, x));
  }
}

TEST_CASE("variant ape shift: the compressor with ape row (t + 1) mod r is the compressor with its ape rows rolled") {
  const ModelConfig cfg = ModelConfig::tiny();
  for (int ratio : {4, 128}) {
    CAPTURE(ratio);
    const AttentionWeights w = AttentionWeights::random(cfg, ratio, 21);
    CompressorWeights rolled = w.compressor;
    for (int i = 0; i < ratio; ++i) rolled.ape.row(i) = w.compressor.ape.row((i + 1) % ratio);
    const Mat x = random_tokens(cfg.dim, 2 * ratio + 3, 22);
    const RopeTable rope = RopeTable::for_layer(cfg, ratio, PrecisionPolicy::official());
    NumericsVariant v;
    v.ape_shift = 1;
    CompressorState s1 = CompressorState::fresh(ratio, cfg.head_dim), s2 = s1;
    const CompressorOutput a =
        compress(w.compressor, CompressorKind::main, x, 0, s1, rope, cfg.norm_eps, with_variant(v));
    const CompressorOutput b =
        compress(rolled, CompressorKind::main, x, 0, s2, rope, cfg.norm_eps, PrecisionPolicy::official());
    CHECK(bitwise_equal(a.entries, b.entries));
    CHECK(bitwise_equal(s1.score, s2.score));
    CompressorState s3 = CompressorState::fresh(ratio, cfg.head_dim);
    CHECK_FALSE(bitwise_equal(
        compress(w.compressor, CompressorKind::main, x, 0, s3, rope, cfg.norm_eps, PrecisionPolicy::official()).entries,
        a.entries));
  }
}

TEST_CASE("variant causal boundary: entry j visible to token t iff j < (t + 1 + shift) / 4, values unchanged") {
  const Mat q = random_mat(13, 2 * 64, 31), w = random_mat(13, 2, 32), keys = random_mat(3, 64, 33);
  const Mat official = indexer_scores(q, w, keys, 0, 4, PrecisionPolicy::official());
  for (int shift : {1, -1}) {
    NumericsVariant v;
    v.causal_shift = shift;
    const Mat variant = indexer_scores(q, w, keys, 0, 4, with_variant(v));
    for (Index t = 0; t < 13; ++t)
      for (Index j = 0; j < 3; ++j) {
        INFO("t ", t, " j ", j, " shift ", shift);
        const bool visible = j < std::clamp<int64_t>((t + 1 + shift) / 4, 0, 3);
        CHECK(std::isinf(variant(t, j)) == !visible);
        if (visible && !std::isinf(official(t, j))) CHECK(same_bits(variant(t, j), official(t, j)));
      }
  }
}

TEST_CASE("variant attention: the sink dropped and the scale from another dim, against the formula") {
  const ModelConfig cfg = ModelConfig::tiny();
  const AttentionWeights weights = AttentionWeights::random(cfg, 0, 41);
  const PrecisionPolicy exact = PrecisionPolicy::exact();
  const Mat q = random_mat(2, cfg.n_heads * cfg.head_dim, 42), kv = random_mat(5, cfg.head_dim, 43);
  IndexMat idx(2, 5);
  idx << 0, 1, 2, 3, 4, 4, 2, -1, 0, -1;
  auto cache = make_ring_cache(cfg, 0, 1);
  const AttentionKv rows{*cache, 0, IndexSpace::for_call(0, 5, cfg.window_size), kv, 0};
  // Brute force in double: o_h = sum_j e^{s_j} v_j / (sum_j e^{s_j} [+ e^{sink_h}]).
  auto formula = [&](double scale, bool sink) {
    Mat o = Mat::Zero(2, q.cols());
    for (Index i = 0; i < 2; ++i)
      for (int h = 0; h < cfg.n_heads; ++h) {
        double den = sink ? std::exp(weights.attn_sink(h)) : 0;
        Eigen::RowVectorXd acc = Eigen::RowVectorXd::Zero(cfg.head_dim);
        for (Index c = 0; c < 5; ++c) {
          if (idx(i, c) < 0) continue;
          const double e = std::exp(scale * q.row(i).segment(h * cfg.head_dim, cfg.head_dim).dot(kv.row(idx(i, c))));
          den += e;
          acc += e * kv.row(idx(i, c));
        }
        o.row(i).segment(h * cfg.head_dim, cfg.head_dim) = acc / den;
      }
    return o;
  };
  for (const auto& [dev, scale, sink] : {std::tuple{Deviation::sink_dropped, 1 / std::sqrt(128.0), false},
                                         std::tuple{Deviation::softmax_scale_nope_dim, 1 / std::sqrt(64.0), true}}) {
    const AttentionLayer layer(cfg, weights, deviated_policy(exact, Mutation{Stage::attn_core, dev}, 0));
    const Mat o = oracle_stages().sparse_mqa(layer, q, rows, idx);
    CHECK((o - formula(scale, sink)).cwiseAbs().maxCoeff() < 1e-12);
  }
  const AttentionLayer clean(cfg, weights, exact);
  CHECK((oracle_stages().sparse_mqa(clean, q, rows, idx) - formula(1 / std::sqrt(128.0), true)).cwiseAbs().maxCoeff() <
        1e-12);
}

TEST_CASE("output deviations: next bf16 up, times 1.1 and 0.5, one index replaced") {
  Mat m(1, 5);
  m << 1.0, -1.0, 0.0, -std::numeric_limits<double>::infinity(), 3.0;
  Mat up = m;
  alter_output(Mutation{Stage::q, Deviation::one_ulp_high}, Storage::bf16, up);
  CHECK(up(0, 0) == 1.0 + 0x1p-7);
  CHECK(up(0, 1) == -(1.0 - 0x1p-8));
  CHECK(up(0, 2) == static_cast<double>(bf16_decode(1)));
  CHECK(std::isinf(up(0, 3)));
  Mat scaled = m;
  alter_output(Mutation{Stage::q, Deviation::scaled_1_1}, Storage::bf16, scaled);
  CHECK(scaled(0, 4) == round_to(Storage::bf16, 3.3));
  CHECK(std::isinf(scaled(0, 3)));
  Mat halved = m;
  alter_output(Mutation{Stage::indexer_q, Deviation::scaled_0_5}, Storage::bf16, halved);
  CHECK(halved(0, 4) == 1.5);
  CHECK(halved(0, 1) == -0.5);

  IndexMat picks(3, 3);
  picks << -1, -1, -1, 0, -1, -1, 1, 0, -1;
  IndexMat a = picks;
  alter_output(Mutation{Stage::topk_idxs, Deviation::index_replaced}, 0, 2, a);
  CHECK(a(1, 0) == 1);  // row 1 holds {0}: its first pick becomes 1, the smallest index it lacks
  a(1, 0) = 0;
  CHECK(a == picks);
  IndexMat full(1, 2);
  full << 0, 1;
  alter_output(Mutation{Stage::topk_idxs, Deviation::index_replaced}, 0, 2, full);
  CHECK(full(0, 0) == -1);  // every index held: the first pick lost, never a duplicate
  CHECK(full(0, 1) == 1);
  IndexMat causal(2, 2);
  causal << 0, -1, 0, -1;  // row 0 sees entry 0 only, row 1 entries 0 and 1
  alter_output(Mutation{Stage::indexer_topk, Deviation::index_replaced}, 0, 2, causal,
               [](Index row, int32_t u) { return u <= row; });
  CHECK(causal(0, 0) == 0);  // row 0 lacks no visible entry
  CHECK(causal(1, 0) == 1);
}

TEST_CASE("mutation catalogue: names round-trip, every stage's deviations, bad names refused") {
  const std::vector<Mutation> all = all_mutations();
  std::set<std::string> names;
  for (const Mutation& m : all) {
    CAPTURE(m.name());
    CHECK(names.insert(m.name()).second);
    CHECK(Mutation::parse(m.name()) == m);
    CHECK_FALSE(m.describe().empty());
  }
  CHECK(names.count("indexer/q:ties-toward-zero") == 1);
  CHECK(names.count("kv:round-toward-zero") == 1);
  CHECK(names.count("attn/core:sink-dropped") == 1);
  CHECK(names.count("topk_idxs:index-replaced") == 1);
  CHECK_THROWS_AS(Mutation::parse("q:ties-toward-zero"), std::invalid_argument);  // q is not quantized
  CHECK_THROWS_AS(Mutation::parse("nope:sink-dropped"), std::invalid_argument);
  CHECK_THROWS_AS(Mutation::parse("sink-dropped"), std::invalid_argument);

  // Under official precision at tiny dims: FP4 stages get the 1e-4 floor, FP8 stages 6*2^-126;
  // the index-head-dim scale is head_dim itself at tiny dims, so it is left out.
  const ModelConfig tiny = ModelConfig::tiny();
  auto has = [](const std::vector<Mutation>& ms, Deviation d) {
    return std::any_of(ms.begin(), ms.end(), [d](const Mutation& m) { return m.deviation == d; });
  };
  const PrecisionPolicy official = PrecisionPolicy::official();
  CHECK(has(mutations_of(Stage::indexer_q, official, tiny), Deviation::amax_floor_1e4));
  CHECK_FALSE(has(mutations_of(Stage::indexer_q, official, tiny), Deviation::amax_floor_6x2m126));
  CHECK(has(mutations_of(Stage::kv, official, tiny), Deviation::amax_floor_6x2m126));
  CHECK_FALSE(has(mutations_of(Stage::attn_core, official, tiny), Deviation::softmax_scale_index_head_dim));
  CHECK(has(mutations_of(Stage::attn_core, official, ModelConfig::flash()), Deviation::softmax_scale_index_head_dim));
  CHECK(mutations_of(Stage::kv, PrecisionPolicy::by_name("no-kv-quant"), tiny).size() <
        mutations_of(Stage::kv, official, tiny).size());
  CHECK_FALSE(has(mutations_of(Stage::attn_core, PrecisionPolicy::by_name("fp32"), tiny), Deviation::probs_fp32));
  CHECK(official.variant.is_deepseek());
  CHECK(official.describe().find("variant") == std::string::npos);
}

TEST_CASE("MutatedStages: the named stage differs, the stages it does not feed are bitwise the oracle's") {
  const ModelConfig cfg = ModelConfig::tiny();
  const Mat x = random_tokens(cfg.dim, 13, 51);
  for (int ratio : {0, 4, 128}) {
    const AttentionLayer layer(cfg, AttentionWeights::random(cfg, ratio, 52), PrecisionPolicy::official());
    auto clean_cache = make_ring_cache(cfg, ratio, 1);
    const StageOutputs clean = layer.forward(x, 0, *clean_cache, 0);
    CHECK(&layer.with_policy(PrecisionPolicy::exact()).weights() == &layer.weights());  // shared, not copied
    for (const StageDef& s : stages()) {
      if (!s.is_compared() || !in_scope(s.scope, ratio)) continue;
      for (const Mutation& m : mutations_of(s.id, layer.policy(), cfg)) {
        CAPTURE(m.name());
        CAPTURE(ratio);
        const MutatedStages mutated(oracle_stages(), m);
        auto cache = make_ring_cache(cfg, ratio, 1);
        const StageOutputs out = layer.forward(x, 0, *cache, 0, mutated);
        // q_latent feeds everything but depends on nothing: only its own mutations move it.
        CHECK(bitwise_equal(out.q_latent, clean.q_latent) == (m.stage != Stage::q_latent));
        // The input side of the target is untouched: kv reads only x.
        if (m.stage != Stage::kv) CHECK(bitwise_equal(out.kv, clean.kv));
        // The target itself changes, except for bugs these 13 tokens cannot show: amax floors
        // (no block has amax < 1e-4), an indexer mask shift or a replaced index where nothing is
        // visible, the ape shift of a ratio-128 layer that completes no entry.
        const bool may_not_show = m.deviation == Deviation::amax_floor_1e4 ||
                                  m.deviation == Deviation::amax_floor_6x2m126 ||
                                  (ratio == 128 && s.name.starts_with("compressor/"));
        if (!may_not_show) {
          const bool same = s.dense_result ? bitwise_equal(*s.dense_result(out), *s.dense_result(clean))
                                           : *s.index_result(out) == *s.index_result(clean);
          CHECK_FALSE(same);
        }
      }
    }
  }
}

TEST_CASE("pre-quantization table: the oracle's stage is its final rounding of its pre-quantization value") {
  const ModelConfig cfg = ModelConfig::tiny();
  const PrecisionPolicy official = PrecisionPolicy::official();
  const AttentionLayer layer(cfg, AttentionWeights::random(cfg, 4, 61), official);
  const Mat x = random_tokens(cfg.dim, 13, 62);
  REQUIRE(pre_quant_datasets().size() == 4);
  for (const PreQuantDef& d : pre_quant_datasets()) {
    CAPTURE(d.name);
    CHECK(d.name == "pre_quant/" + std::string(stage(d.stage).name));
    CHECK(find_pre_quant(d.name) == &d);
    CHECK(pre_quant_of(d.stage) == &d);
    const AttentionLayer unquantized = layer.with_policy(d.without_quantization(official));
    auto c1 = make_ring_cache(cfg, 4, 1), c2 = make_ring_cache(cfg, 4, 1);
    const StageOutputs quantized = layer.forward(x, 0, *c1, 0);
    const StageOutputs pre = unquantized.forward(x, 0, *c2, 0);
    Mat requantized = *stage(d.stage).dense_result(pre);
    CHECK_FALSE(bitwise_equal(requantized, *stage(d.stage).dense_result(quantized)));
    d.quantize(requantized, cfg, official);
    CHECK(bitwise_equal(requantized, *stage(d.stage).dense_result(quantized)));
  }
  CHECK(pre_quant_of(Stage::q) == nullptr);
  CHECK(is_pre_quant_group("pre_quant"));
  CHECK(is_pre_quant_group("pre_quant/indexer/compressor"));
  CHECK_FALSE(is_pre_quant_group("pre_quant/kv"));
}
