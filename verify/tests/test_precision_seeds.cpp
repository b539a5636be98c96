// The precision report over seeds (verify/precision/over_seeds.h, seeded_report.h, checkpoint.h):
// intervals against values computed by hand, the seeds' figures combined as the definitions say,
// checkpoints that resume a run to the same report and refuse other options, and the activation
// models (activation_model.h): the plain model draws what the synthetic inputs always drew, the
// outliers are where and how large the options say.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <random>
#include <set>
#include <sstream>

#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/numerics/storage.h"
#include "reference/primitives/hadamard.h"
#include "verify/capture/tensor_convert.h"
#include "verify/precision/activation_model.h"
#include "verify/precision/over_seeds.h"
#include "verify/precision/report_json.h"
#include "verify/precision/report_markdown.h"
#include "verify/precision/seeded_report.h"
#include "verify/precision/synthetic_input.h"
#include "verify/tests/scratch_dir.h"

using namespace dsv4;
using namespace dsv4::verify;
namespace fs = std::filesystem;

namespace {

// Tiny dims where the indexer chooses (top-8 of up to 12 entries from position 35 on).
SeededReportOptions tiny_seeds(int seeds) {
  SeededReportOptions o;
  o.input.config = "tiny";
  o.input.ratios = {4};
  o.input.prefill = 48;
  o.input.chunk = 20;
  o.input.seed = 11;
  o.seeds = seeds;
  o.report.policies = {"official", "fp8-indexer"};
  return o;
}

// The JSON report without its timings (which differ between runs of the same figures).
nlohmann::json without_times(nlohmann::json j) {
  j.erase("reference_time");
  for (auto& p : j["policies"]) p.erase("time");
  return j;
}

}  // namespace

TEST_CASE("intervals: mean +- t(0.975, n-1) s / sqrt(n), no interval for one value or a non-finite one") {
  const Interval i = interval_over({1, 2, 3, 4, 5});
  CHECK(i.mean == 3.0);
  // s = sqrt(2.5); t(0.975, 4) = 2.7764 (tables): half-width 2.7764 * sqrt(2.5 / 5).
  CHECK(i.high - i.mean == doctest::Approx(2.7764 * std::sqrt(0.5)).epsilon(1e-12));
  CHECK(i.mean - i.low == doctest::Approx(2.7764 * std::sqrt(0.5)).epsilon(1e-12));
  CHECK(i.values == std::vector<double>{1, 2, 3, 4, 5});
  CHECK(!interval_over({0.25}).has_interval());
  CHECK(interval_over({0.25}).mean == 0.25);
  CHECK(!interval_over({1.0, std::numeric_limits<double>::infinity()}).has_interval());
  CHECK_THROWS_AS(interval_over({}), std::invalid_argument);

  // Table values and their order: wider with fewer seeds, towards 1.96.
  CHECK(t_quantile_975(1) == 12.7062);
  CHECK(t_quantile_975(4) == 2.7764);
  CHECK(t_quantile_975(30) == 2.0423);
  CHECK(t_quantile_975(45) == 2.0211);  // the table's value at 40: slightly wide
  for (int dof = 2; dof < 200; ++dof) CHECK(t_quantile_975(dof) <= t_quantile_975(dof - 1));
  CHECK(t_quantile_975(1000) > 1.96);
  CHECK_THROWS_AS(t_quantile_975(0), std::invalid_argument);

  // Separation: strictly disjoint intervals only.
  const Interval low = interval_over({1.0, 1.1, 0.9}), high = interval_over({2.0, 2.1, 1.9});
  CHECK(low.separated_below(high));
  CHECK(!high.separated_below(low));
  CHECK(!low.separated_below(interval_over({1.0, 5.0, -3.0})));
  CHECK(!interval_over({1.0}).separated_below(interval_over({5.0})));  // no interval, no ranking
}

TEST_CASE("pooled per-row recall: sum over sum with each seed as one cluster") {
  // Equal row counts: the pooled mean and interval are those of the seeds' means.
  const Interval equal = pooled_over_rows({8.0, 9.0, 7.0}, {10, 10, 10}, 1.0);
  const Interval seeds = interval_over({0.8, 0.9, 0.7});
  CHECK(equal.mean == doctest::Approx(seeds.mean).epsilon(1e-15));
  CHECK(equal.low == doctest::Approx(seeds.low).epsilon(1e-14));
  CHECK(equal.high == doctest::Approx(seeds.high).epsilon(1e-14));
  // Unequal counts, by hand: mean 19/25 = 0.76; residuals 9 - 0.76*10 = 1.4, 10 - 0.76*15 = -1.4;
  // variance 2/1 * (1.4^2 + 1.4^2) / 25^2; t(0.975, 1) = 12.7062.
  const Interval unequal = pooled_over_rows({9.0, 10.0, 0.0}, {10, 15, 0}, 1.0);
  CHECK(unequal.mean == doctest::Approx(0.76));
  CHECK(unequal.high - unequal.mean == doctest::Approx(12.7062 * std::sqrt(2.0 * 2 * 1.96) / 25).epsilon(1e-12));
  CHECK(unequal.values.size() == 2);  // the seed without rows is left out
  CHECK(pooled_over_rows({0.0}, {0}, 1.0).mean == 1.0);
  CHECK(!pooled_over_rows({0.0}, {0}, 1.0).has_interval());
}

TEST_CASE("rankings: neighbours joined by > or < only where their intervals separate") {
  const Interval a = interval_over({0.99, 0.98, 0.99}), b = interval_over({0.96, 0.95, 0.96}),
                 c = interval_over({0.955, 0.96, 0.95});
  CHECK(ranking({{"c", &c}, {"a", &a}, {"b", &b}}, true) == "`a` > `b` ~ `c`");
  CHECK(ranking({{"c", &c}, {"a", &a}, {"b", &b}}, false) == "`c` ~ `b` < `a`");
  const Interval one = interval_over({0.5});
  CHECK(ranking({{"one", &one}}, true).empty());
}

TEST_CASE("over seeds: each figure's values are the seeds' own reports' figures, in seed order") {
  SeededReportOptions o = tiny_seeds(3);
  const SeededReport r = run_seeded_report(o);
  REQUIRE(r.input.seeds == std::vector<uint64_t>{11, 12, 13});
  REQUIRE(r.policies.size() == 2);
  CHECK(r.policies[1].differences == "indexer_qk=e4m3/b128/ue8m0 (official: e2m1/b32/ue8m0)");

  for (size_t s = 0; s < 3; ++s) {
    SyntheticInputOptions one = o.input;
    one.seed = r.input.seeds[s];
    PrecisionReportOptions options = o.report;
    const PrecisionReport single = run_precision_report(synthetic_input(one), synthetic_input_info(one), options);
    for (size_t p = 0; p < 2; ++p) {
      const LayerResult& want = single.policies[p].layers[0];
      const LayerOverSeeds& got = r.policies[p].layers[0];
      for (size_t st = 0; st < want.stages.size(); ++st) {
        INFO(want.stages[st].stage);
        CHECK(got.stages[st].nmse.values[s] == want.stages[st].error.nmse());
        CHECK(got.stages[st].max_rel.values[s] == want.stages[st].error.max_rel());
      }
      CHECK(got.recall->mean_with_choice.values[s] == want.recall->summary().mean_with_choice);
      CHECK(got.recall->by_position.back().mean.values[s] == want.recall->buckets().back().summary.mean);
      CHECK(got.output_by_position.back().layer_nmse.values[s] ==
            want.output_by_position.rbegin()->second.layer.nmse());
    }
  }
  // Sums and pools: rows, element counts and histograms add up over seeds.
  const LayerOverSeeds& off = r.policies[0].layers[0];
  int64_t histogram_rows = 0;
  for (int64_t c : off.recall->histogram) histogram_rows += c;
  CHECK(histogram_rows == off.recall->rows_with_choice);
  CHECK(off.recall->rows == 3 * (48 - 3));  // positions 3..47 see an entry, in every seed
  CHECK(off.stage("out").n == 3 * 48 * 256);
  CHECK(off.stage("out").nmse.has_interval());
  CHECK(off.stage("out").nmse.low < off.stage("out").nmse.mean);
  // The worst row is the worst of every seed, and says which seed.
  double worst = 1.0;
  for (double v : off.recall->worst.values) worst = std::min(worst, v);
  CHECK(off.recall->worst_row.recall == worst);
  CHECK(off.recall->worst.values[off.recall->worst_seed - 11] == worst);
}

TEST_CASE("checkpoints: a resumed run gives the same report, runs only what is missing, refuses other options") {
  testing::ScratchDir dir("precision_checkpoints");
  SeededReportOptions o = tiny_seeds(2);
  o.checkpoint = dir.path() / "ck";
  const nlohmann::json first = to_json(run_seeded_report(o));
  const fs::path official_12 = dir.path() / "ck" / "seed-12" / "official.json";
  REQUIRE(fs::exists(official_12));
  REQUIRE(fs::exists(dir.path() / "ck" / "seed-11" / "fp8-indexer.json"));

  SUBCASE("everything checkpointed: the same report, timings included, nothing run") {
    int runs = 0;
    const nlohmann::json again = to_json(run_seeded_report(o, [&](const PrecisionProgress&) { ++runs; }));
    CHECK(again == first);
    CHECK(runs == 0);
  }
  SUBCASE("a killed run (one policy's file missing): only that seed runs, to the same figures") {
    fs::remove(official_12);
    std::vector<std::string> ran;
    const nlohmann::json again = to_json(run_seeded_report(
        o, [&](const PrecisionProgress& p) { ran.push_back(std::to_string(p.seed) + " " + p.policy); }));
    CHECK(without_times(again) == without_times(first));
    REQUIRE(!ran.empty());
    for (const std::string& r : ran) CHECK((r == "12 official" || r == "12 exact (reference)"));
    CHECK(fs::exists(official_12));
  }
  SUBCASE("another policy: only it runs; the earlier ones come from their files") {
    o.report.policies = {"official", "fp32-probs", "fp8-indexer"};
    std::set<std::string> ran;
    const SeededReport r = run_seeded_report(o, [&](const PrecisionProgress& p) { ran.insert(p.policy); });
    CHECK(ran == std::set<std::string>{"exact (reference)", "fp32-probs"});
    const nlohmann::json j = to_json(r);
    CHECK(j["policies"][0] == first["policies"][0]);
    CHECK(j["policies"][2] == first["policies"][1]);
    CHECK(j["policies"][1]["name"] == "fp32-probs");
  }
  SUBCASE("other options: the checkpoint is named, never reused") {
    o.input.prefill = 44;
    CHECK_THROWS_WITH_AS(run_seeded_report(o), doctest::Contains("seed-11"), std::invalid_argument);
    o.input.prefill = 48;
    o.input.activations.x_tail_dof = 5;
    CHECK_THROWS_WITH_AS(run_seeded_report(o), doctest::Contains("checkpoint"), std::invalid_argument);
  }
  SUBCASE("a damaged checkpoint is named") {
    std::ofstream(official_12) << "{\"format\": ";
    CHECK_THROWS_WITH_AS(run_seeded_report(o), doctest::Contains(official_12.string().c_str()), std::invalid_argument);
  }
}

TEST_CASE("activation model: the plain model draws N(0, 1) in bf16 by Box-Muller, as the synthetic inputs did") {
  const ref::Mat x = model_x(ActivationModel{}, 3, 16, {}, 99);
  std::mt19937_64 rng(99);
  for (ref::Index t = 0; t < 3; ++t)
    for (ref::Index c = 0; c < 16; ++c) {
      const double u1 = (static_cast<double>(rng() >> 11) + 0.5) * 0x1p-53;
      const double u2 = static_cast<double>(rng() >> 11) * 0x1p-53;
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
      CHECK(x(t, c) == ref::round_to(ref::Storage::bf16, z));
    }
}

TEST_CASE("activation model: heavy channels of x, Student-t rows, their validation") {
  ActivationModel m;
  m.x_heavy_channels = 3;
  m.x_heavy_scale = 200;
  const std::vector<int> heavy = heavy_channels(3, 64, 5);
  REQUIRE(heavy.size() == 3);
  CHECK(std::is_sorted(heavy.begin(), heavy.end()));
  CHECK(heavy == heavy_channels(3, 64, 5));  // a seed gives the same channels
  const ref::Mat plain = model_x(ActivationModel{}, 400, 64, {}, 7);
  const ref::Mat x = model_x(m, 400, 64, heavy, 7);
  for (int c = 0; c < 64; ++c) {
    const bool is_heavy = std::find(heavy.begin(), heavy.end(), c) != heavy.end();
    const double mean = x.col(c).mean();
    CAPTURE(c);
    if (is_heavy) {
      CHECK(std::abs(std::abs(mean) - 200.0) < 0.5);  // +-200 with N(0, 1) on top: one sign per channel
      CHECK((x.col(c).array() * mean > 0).all());
    } else {
      CHECK(x.col(c) == plain.col(c));  // the other channels are the plain model's
    }
  }

  // Student-t(5) scaled to variance 1: sample variance near 1, kurtosis 9 (3 + 6 / (dof - 4)) against
  // the normal's 3.
  ActivationModel t;
  t.x_tail_dof = 5;
  const ref::Mat tx = model_x(t, 2000, 64, {}, 8);
  const double var = tx.array().square().mean();
  const double kurtosis = tx.array().pow(4).mean() / (var * var);
  CHECK(var == doctest::Approx(1.0).epsilon(0.1));
  const double normal_var = plain.array().square().mean();
  CHECK(kurtosis > 6.0);
  CHECK(plain.array().pow(4).mean() / (normal_var * normal_var) < 3.5);

  const ref::ModelConfig cfg = ref::ModelConfig::tiny();
  ActivationModel bad;
  bad.x_tail_dof = 2;
  CHECK_THROWS_WITH_AS(bad.validate(cfg), doctest::Contains("--x-tail-dof"), std::invalid_argument);
  bad = ActivationModel{};
  bad.qk_heavy_channels = 129;
  CHECK_THROWS_WITH_AS(bad.validate(cfg), doctest::Contains("--qk-heavy-channels"), std::invalid_argument);
  bad = ActivationModel{};
  bad.x_heavy_scale = -1;
  CHECK_THROWS_WITH_AS(bad.validate(cfg), doctest::Contains("--x-heavy-scale"), std::invalid_argument);
  CHECK(ActivationModel{}.plain());
  CHECK(m.describe() == "x: N(0, 1) rows, 3 heavy channels at +-200 sd; q/k: no heavy dims");
}

TEST_CASE("activation model: heavy q/k dims are that much larger in the projected q and keys of both paths") {
  SyntheticInputOptions o;
  o.config = "tiny";
  o.ratios = {4};
  o.prefill = 16;
  o.activations.qk_heavy_channels = 2;
  o.activations.qk_heavy_scale = 16;
  const Capture c = synthetic_input(o);
  SyntheticInputOptions plain_options = o;
  plain_options.activations = ActivationModel{};
  const Capture plain = synthetic_input(plain_options);
  const ref::ModelConfig& cfg = c.config;

  // The exact layer's q, kv and indexer q and keys: the heavy dims' RMS over the others' RMS.
  const auto run = [&](const Capture& input) {
    const ref::AttentionLayer layer(cfg, input.layers.at(0).weights, ref::PrecisionPolicy::exact());
    auto cache = ref::make_ring_cache(cfg, 4, 1);
    return layer.forward(to_mats(input.layers.at(0).calls.at(0).stage("x")).at(0), 0, *cache, 0);
  };
  const ref::StageOutputs got = run(c), base = run(plain);
  // RMS ratio of dims that grew (per head of width d) to those that did not.
  const auto heavy_ratio = [](const ref::Mat& m, int d) {
    std::vector<double> grown(static_cast<size_t>(d));
    for (int k = 0; k < d; ++k) {
      double s = 0;
      for (ref::Index h = 0; h < m.cols() / d; ++h) s += m.col(h * d + k).squaredNorm();
      grown[static_cast<size_t>(k)] = s;
    }
    std::vector<double> sorted = grown;
    std::sort(sorted.begin(), sorted.end());
    return std::sqrt(sorted[static_cast<size_t>(d) - 2] / sorted[static_cast<size_t>(d) / 2]);  // 2nd largest / median
  };
  // q and kv before RoPE rotates the rope dims' pairs: the nope dims carry a clean picture, but the
  // heavy dims may be rope dims; the ratio stays large either way (a pair shares the energy).
  CHECK(heavy_ratio(got.q, cfg.head_dim) > 6.0);
  CHECK(heavy_ratio(base.q, cfg.head_dim) < 2.0);
  CHECK(heavy_ratio(got.kv, cfg.head_dim) > 6.0);
  CHECK(heavy_ratio(got.compressor_entries, cfg.head_dim) > 6.0);
  // The indexer's q and keys are compared after the Hadamard rotation, which spreads the heavy dims:
  // rotate back (the normalised Hadamard matrix is its own inverse) and look there.
  const ref::PrecisionPolicy exact = ref::PrecisionPolicy::exact();
  CHECK(heavy_ratio(ref::hadamard_rows(got.indexer_q, cfg.index_head_dim, exact), cfg.index_head_dim) > 6.0);
  CHECK(heavy_ratio(ref::hadamard_rows(base.indexer_q, cfg.index_head_dim, exact), cfg.index_head_dim) < 2.0);
  CHECK(heavy_ratio(ref::hadamard_rows(got.indexer_compressor_entries, cfg.index_head_dim, exact), cfg.index_head_dim) >
        6.0);
  // The report's input says what the inputs are.
  const InputInfo info = synthetic_input_info(o, {1, 2});
  CHECK(info.description.find("q/k: 2 heavy dims per head x 16") != std::string::npos);
  CHECK(info.description.find("seeds 1, 2") != std::string::npos);
  REQUIRE(info.activation_model);
  CHECK(info.activation_model->qk_heavy_channels == 2);
}

TEST_CASE("report over seeds: JSON intervals, Markdown intervals, rankings and the activation model") {
  SeededReportOptions o = tiny_seeds(3);
  o.report.policies = {"official", "bf16"};
  o.input.activations.x_heavy_channels = 2;
  SeededReport r = run_seeded_report(o);
  r.command = "dsv4-verify precision-report ...";
  const nlohmann::json j = to_json(r);
  CHECK(j["input"]["seeds"] == nlohmann::json::array({11, 12, 13}));
  CHECK(j["input"]["activation_model"]["x_heavy_channels"] == 2);
  CHECK(j["input"]["activation_model"]["note"].get<std::string>().find("not a capture") != std::string::npos);
  const nlohmann::json& nmse = j["policies"][0]["layers"][0]["stages"][0]["nmse"];
  CHECK(nmse["values"].size() == 3);
  CHECK(nmse["low"].get<double>() < nmse["mean"].get<double>());
  CHECK(nmse["high"].get<double>() > nmse["mean"].get<double>());

  std::ostringstream md;
  write_precision_markdown(md, r);
  const std::string text = md.str();
  CHECK(text.find("Seeds: 11, 12, 13") != std::string::npos);
  CHECK(text.find("a model with outliers, not a capture") != std::string::npos);
  CHECK(text.find("Rankings the 95% intervals support") != std::string::npos);
  CHECK(text.find(format_interval(r.policies[0].layers[0].stage("out").nmse)) != std::string::npos);
  CHECK(text.find("| official | none |") != std::string::npos);  // what differs from official
  CHECK(text.find("Per-row recall pooled over 3 seeds") != std::string::npos);
}
