// The precision report (verify/precision/): the error accumulator against compare_dense, recall on
// hand-made index lists, the report against policies run by hand (chained caches, the Hadamard
// basis, the output error by position), exact against exact, and the figures of the official policy.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "verify/capture/tensor_convert.h"
#include "verify/compare/dense.h"
#include "verify/precision/error_stats.h"
#include "verify/precision/precision_report.h"
#include "verify/precision/report_json.h"
#include "verify/precision/seeded_report.h"
#include "verify/precision/synthetic_input.h"
#include "verify/precision/topk_recall.h"

using namespace dsv4;
using namespace dsv4::verify;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

ref::Mat random_mat(int rows, int cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  ref::Mat m(rows, cols);
  for (ref::Index i = 0; i < m.size(); ++i) m.data()[i] = u(rng);
  return m;
}

// Tiny dims with a prefill long enough that the indexer chooses: top-8 of up to 16 visible entries
// from position 35 on (visible = (t + 1) / 4), then two decodes.
SyntheticInputOptions tiny_choosing_input() {
  SyntheticInputOptions o;
  o.config = "tiny";
  o.ratios = {4};
  o.prefill = 64;
  o.decode = 2;
  o.batch = 2;
  o.seed = 5;
  return o;
}

// sum (got - ref)^2 / sum ref^2 over every row of every call, written out as the definition.
double brute_nmse(const std::vector<ref::Mat>& want, const std::vector<ref::Mat>& got) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i)
    for (ref::Index k = 0; k < want[i].size(); ++k) {
      const double w = want[i].data()[k], g = got[i].data()[k];
      if (!std::isfinite(w)) continue;
      err += (g - w) * (g - w);
      norm += w * w;
    }
  return err / norm;
}

// The normalised Sylvester Hadamard matrix of order n, entry by entry: (-1)^popcount(i & j) / sqrt(n).
ref::Mat hadamard_matrix(int n) {
  ref::Mat h(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) h(i, j) = (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) / std::sqrt(n);
  return h;
}

}  // namespace

TEST_CASE("ErrorStats gives compare_dense's NMSE, cos-diff, max abs and max rel, over several adds") {
  ref::Mat want = random_mat(6, 10, 1);
  ref::Mat got = want + 1e-3 * random_mat(6, 10, 2);
  want(2, 3) = got(2, 3) = -kInf;  // a masked score on both sides: matched, not in the metrics
  want(4, 0) = 0.0;                // no relative error where the reference is 0
  ErrorStats stats;
  stats.add(want.topRows(4), got.topRows(4));
  stats.add(want.bottomRows(2), got.bottomRows(2));

  const std::vector<int64_t> shape = {6, 10};
  const DenseMetrics m = compare_dense({want.data(), 60}, {got.data(), 60}, shape, Tolerance{});
  CHECK(stats.n() == 60);
  CHECK(stats.n_finite() == m.n_finite);
  CHECK(stats.nonfinite_matched() == 1);
  CHECK(stats.nonfinite_mismatches() == 0);
  // Both sum the same long double products, in different orders: a few ulps of long double.
  CHECK(stats.nmse() == doctest::Approx(m.nmse).epsilon(1e-14));
  CHECK(stats.cos_diff() == doctest::Approx(m.cos_diff).epsilon(1e-14));
  CHECK(stats.ref_rms() == doctest::Approx(m.ref_rms).epsilon(1e-14));
  // Maxima of the same doubles: equal.
  CHECK(stats.max_abs() == m.max_abs);
  CHECK(stats.max_rel() == m.max_rel);
}

TEST_CASE("ErrorStats counts a non-finite class mismatch and bins errors by their row's RMS") {
  ref::Mat want(2, 2), got(2, 2);
  want << 3.0, 4.0, -kInf, 1.0;
  got << 3.0, 4.0 + 0.05 * std::sqrt(12.5), kInf, 1.0;  // row 0 RMS sqrt(12.5): error 10^-1.30103
  ErrorStats stats;
  stats.add(want, got);
  CHECK(stats.nonfinite_mismatches() == 1);
  const ErrorHistogram& h = stats.histogram();
  CHECK(h.zero == 2);  // 3.0 and the 1.0 of row 1 are exact
  // log10(0.05) = -1.30103: bin floor((-1.30103 + 10) / 0.25) = 34.
  CHECK(h.bins[34] == 1);
  int64_t total = 0;
  for (int64_t c : h.bins) total += c;
  CHECK(total == 1);
  CHECK_THROWS_AS(stats.add(want, got.leftCols(1)), std::invalid_argument);
}

TEST_CASE("RecallStats: per-row recall, rows with a choice, worst row and position buckets") {
  // Three query rows at positions 10, 11, 12 of call 3: row 0 selects nothing yet, row 1 keeps 3 of 3
  // visible entries (no choice), row 2 keeps 3 of 4 visible (a choice) and the tested list
  // swaps one of them.
  ref::IndexMat exact(3, 3), tested(3, 3);
  exact << -1, -1, -1, 20, 21, 22, 21, 22, 23;
  tested << -1, -1, -1, 22, 20, 21, 21, 20, 23;
  ref::Mat scores(3, 4);
  scores << -kInf, -kInf, -kInf, -kInf, 1, 2, 3, -kInf, 1, 2, 3, 4;
  RecallStats r(2);
  r.add(exact, tested, scores, 3, 1, 10);
  const RecallSummary s = r.summary();
  CHECK(s.rows == 2);
  CHECK(s.rows_with_choice == 1);
  CHECK(s.mean == doctest::Approx((1.0 + 2.0 / 3.0) / 2));
  CHECK(s.mean_with_choice == doctest::Approx(2.0 / 3.0));
  CHECK(s.worst == doctest::Approx(2.0 / 3.0));
  CHECK(r.worst_row().call == 3);
  CHECK(r.worst_row().seq == 1);
  CHECK(r.worst_row().position == 12);
  const std::vector<RecallBucket> b = r.buckets();
  REQUIRE(b.size() == 2);  // positions 10-11 and 12-13
  CHECK(b[0].first_position == 10);
  CHECK(b[0].last_position == 11);
  CHECK(b[0].summary.rows == 1);
  CHECK(b[0].summary.mean == 1.0);
  CHECK(b[1].summary.mean == doctest::Approx(2.0 / 3.0));
  CHECK(r.histogram()[13] == 1);  // 2/3 of 20 bins: bin floor(13.3)
  CHECK_THROWS_AS(RecallStats(0), std::invalid_argument);
}

TEST_CASE("precision report: exact against exact is zero error and recall 1") {
  const SyntheticInputOptions o = tiny_choosing_input();
  PrecisionReportOptions options;
  options.policies = {"exact"};
  const PrecisionReport r = run_precision_report(synthetic_input(o), synthetic_input_info(o), options);
  REQUIRE(r.policies.size() == 1);
  const LayerResult& layer = r.policies[0].layers.at(0);
  CHECK(layer.stages.size() == 12);  // every dense stage of a CSA layer
  for (const StageError& s : layer.stages) {
    INFO(s.stage);
    CHECK(s.error.n_finite() > 0);
    CHECK(s.error.nmse() == 0.0);
    CHECK(s.error.max_abs() == 0.0);
  }
  REQUIRE(layer.recall);
  CHECK(layer.recall->summary().rows_with_choice > 0);
  CHECK(layer.recall->summary().mean == 1.0);
  CHECK(layer.recall->summary().worst == 1.0);
}

TEST_CASE("precision report: official against exact, checked against the two policies run by hand") {
  const SyntheticInputOptions o = tiny_choosing_input();
  const Capture input = synthetic_input(o);
  PrecisionReportOptions options;
  options.policies = {"official", "fp8-indexer-no-hadamard"};
  const PrecisionReport r = run_precision_report(input, synthetic_input_info(o), options);
  CHECK(r.input.kind == "synthetic");
  CHECK(r.input.weights == WeightsOrigin::random);

  // The same calls by hand: one cache per policy, every call in order.
  const LayerCapture& layer = input.layers.at(0);
  auto run_policy = [&](const std::string& name) {
    const ref::AttentionLayer attention(input.config, layer.weights, ref::PrecisionPolicy::by_name(name));
    auto cache = ref::make_ring_cache(input.config, 4, o.batch);
    std::vector<ref::StageOutputs> outs;
    for (const CallCapture& call : layer.calls)
      for (ref::StageOutputs& s : attention.forward_batch(to_mats(call.stage("x")), call.start_pos, *cache))
        outs.push_back(std::move(s));
    return outs;
  };
  const std::vector<ref::StageOutputs> exact = run_policy("exact"), official = run_policy("official"),
                                       no_hadamard = run_policy("fp8-indexer-no-hadamard");
  auto field = [](const std::vector<ref::StageOutputs>& outs, ref::Mat ref::StageOutputs::*m) {
    std::vector<ref::Mat> v;
    for (const ref::StageOutputs& s : outs) v.push_back(s.*m);
    return v;
  };

  const LayerResult& off = r.policies.at(0).layers.at(0);
  // The two sums run over the same values in different orders: relative 1e-12 covers the rounding.
  CHECK(off.stage("out").error.nmse() ==
        doctest::Approx(brute_nmse(field(exact, &ref::StageOutputs::out), field(official, &ref::StageOutputs::out)))
            .epsilon(1e-12));
  CHECK(off.stage("attn/core").error.nmse() ==
        doctest::Approx(
            brute_nmse(field(exact, &ref::StageOutputs::attn_core), field(official, &ref::StageOutputs::attn_core)))
            .epsilon(1e-12));
  for (const StageError& s : off.stages) {
    INFO(s.stage);
    CHECK(s.error.nmse() > 0.0);  // official rounds every stage
    CHECK(s.error.nonfinite_mismatches() == 0);
  }
  CHECK(off.recall->summary().rows_with_choice > 0);
  CHECK(off.recall->summary().mean <= 1.0);
  CHECK(off.recall->summary().worst <= off.recall->summary().mean);

  // Without the Hadamard rotation the indexer q is compared in the plain basis: the exact values
  // rotated back by the Hadamard matrix built entry by entry.
  const ref::Mat h = hadamard_matrix(input.config.index_head_dim);
  std::vector<ref::Mat> exact_plain;
  for (const ref::StageOutputs& s : exact) {
    ref::Mat q = s.indexer_q;
    for (ref::Index head = 0; head < input.config.index_n_heads; ++head) {
      const auto block = q.middleCols(head * input.config.index_head_dim, input.config.index_head_dim);
      const ref::Mat plain = block * h.transpose();
      q.middleCols(head * input.config.index_head_dim, input.config.index_head_dim) = plain;
    }
    exact_plain.push_back(q);
  }
  const StageError& q_plain = r.policies.at(1).layers.at(0).stage("indexer/q");
  CHECK(!q_plain.note.empty());
  CHECK(q_plain.error.nmse() ==
        doctest::Approx(brute_nmse(exact_plain, field(no_hadamard, &ref::StageOutputs::indexer_q))).epsilon(1e-9));
  CHECK(q_plain.error.nmse() < 0.01);  // FP8 e4m3 rounding; against the rotated basis it would be ~2
}

TEST_CASE("precision report JSON: a policies list with name, settings, per-stage and end-to-end figures") {
  const SyntheticInputOptions o = tiny_choosing_input();
  PrecisionReportOptions options;
  options.policies = {"exact", "official"};
  const nlohmann::json j =
      to_json(single_report(run_precision_report(synthetic_input(o), synthetic_input_info(o), options)));
  CHECK(j["format"] == kPrecisionReportFormat);
  CHECK(j["format_version"] == 2);
  CHECK(j["input"]["seeds"] == nlohmann::json::array({5}));
  CHECK(j["input"]["kind"] == "synthetic");
  CHECK(j["input"]["weights"] == "random");
  REQUIRE(j["policies"].size() == 2);
  const nlohmann::json& off = j["policies"][1];
  CHECK(off["name"] == "official");
  CHECK(off["settings"]["kv_nope"] == "e4m3/b64/ue8m0");
  CHECK(off["settings"]["indexer_qk"] == "e2m1/b32/ue8m0");
  CHECK(off["differences_from_official"] == "none");
  CHECK(j["policies"][0]["settings"]["kv_nope"].is_null());
  CHECK(j["policies"][0]["differences_from_official"].get<std::string>().find("activations=fp64 (official: bf16)") ==
        0);
  const nlohmann::json& layer = off["layers"][0];
  CHECK(layer["compress_ratio"] == 4);
  CHECK(layer["stages"].size() == 12);
  CHECK(layer["stages"][0]["stage"] == "q_latent");
  // One seed: each figure is its value, without an interval.
  const nlohmann::json& nmse = layer["stages"][0]["nmse"];
  CHECK(nmse["mean"].get<double>() > 0.0);
  CHECK(nmse["low"].is_null());
  CHECK(nmse["values"] == nlohmann::json::array({nmse["mean"]}));
  const nlohmann::json& e2e = layer["end_to_end"];
  CHECK(e2e["attention_output"]["stage"] == "attn/core");
  CHECK(e2e["layer_output"]["stage"] == "out");
  CHECK(e2e["topk_recall"]["mean"]["mean"].get<double>() <= 1.0);
  CHECK(!e2e["topk_recall"]["by_position"].empty());
  CHECK(e2e["output_by_position"].size() == e2e["topk_recall"]["by_position"].size());
  CHECK(off["time"]["cpu_seconds"]["mean"].get<double>() > 0.0);
  CHECK(j["reference_time"]["wall_seconds"]["mean"].get<double>() > 0.0);
  CHECK(j["policies"][0]["layers"][0]["end_to_end"]["topk_recall"]["mean"]["mean"] == 1.0);
}

TEST_CASE("precision report: the output error by position bucket is the error of the bucket's rows") {
  const SyntheticInputOptions o = tiny_choosing_input();  // 66 positions in calls of 64 and two decodes
  const Capture input = synthetic_input(o);
  PrecisionReportOptions options;
  options.policies = {"official"};
  options.position_bucket = 20;  // buckets 0-19, 20-39, 40-59, 60-79: a call crosses three of them
  const PrecisionReport r = run_precision_report(input, synthetic_input_info(o), options);
  const LayerResult& layer = r.policies.at(0).layers.at(0);
  REQUIRE(layer.output_by_position.size() == 4);

  const LayerCapture& lc = input.layers.at(0);
  auto run_policy = [&](const std::string& name) {
    const ref::AttentionLayer attention(input.config, lc.weights, ref::PrecisionPolicy::by_name(name));
    auto cache = ref::make_ring_cache(input.config, 4, o.batch);
    std::vector<std::vector<ref::Mat>> out(static_cast<size_t>(o.batch));  // per sequence, per call
    for (const CallCapture& call : lc.calls) {
      const std::vector<ref::StageOutputs> got =
          attention.forward_batch(to_mats(call.stage("x")), call.start_pos, *cache);
      for (size_t b = 0; b < got.size(); ++b) out[b].push_back(got[b].out);
    }
    return out;
  };
  const auto exact = run_policy("exact"), official = run_policy("official");
  // Bucket 40-59 by hand: the rows at those positions of every sequence.
  std::vector<ref::Mat> want, got;
  for (size_t b = 0; b < exact.size(); ++b) {
    int64_t start = 0;
    for (size_t c = 0; c < exact[b].size(); ++c) {
      for (ref::Index i = 0; i < exact[b][c].rows(); ++i)
        if (start + i >= 40 && start + i <= 59) {
          want.push_back(exact[b][c].row(i));
          got.push_back(official[b][c].row(i));
        }
      start += exact[b][c].rows();
    }
  }
  const OutputErrorBucket& bucket = layer.output_by_position.at(2);
  CHECK(bucket.first_position == 40);
  CHECK(bucket.last_position == 59);
  CHECK(bucket.layer.n() == 20 * o.batch * input.config.dim);
  CHECK(bucket.layer.nmse() == doctest::Approx(brute_nmse(want, got)).epsilon(1e-12));
  int64_t n = 0;
  for (const auto& [key, b] : layer.output_by_position) n += b.layer.n();
  CHECK(n == layer.stage("out").error.n());  // every row in exactly one bucket
}

TEST_CASE("precision report: unknown and repeated policies are refused by name") {
  CHECK_THROWS_WITH_AS(resolve_policies({"official", "fp6"}), doctest::Contains("'fp6'"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(resolve_policies({"bf16", "bf16"}), doctest::Contains("twice"), std::invalid_argument);
  CHECK(resolve_policies({}).size() == ref::PrecisionPolicy::all_named().size());
}

TEST_CASE("precision report: window-only and HCA layers have no recall, and their stages only") {
  SyntheticInputOptions o = tiny_choosing_input();
  o.ratios = {0, 128};
  o.prefill = 130;  // one complete HCA block (128 positions)
  o.decode = 0;
  o.batch = 1;
  PrecisionReportOptions options;
  options.policies = {"official"};
  const PrecisionReport r = run_precision_report(synthetic_input(o), synthetic_input_info(o), options);
  const std::vector<LayerResult>& layers = r.policies.at(0).layers;
  REQUIRE(layers.size() == 2);
  CHECK(!layers[0].recall);
  CHECK(!layers[1].recall);
  CHECK(layers[0].stages.size() == 7);  // q_latent, q, kv, attn/core, attn/out_heads, attn/wo_a, out
  CHECK(layers[1].stages.size() == 8);  // and compressor/entries
  CHECK(layers[1].stage("compressor/entries").error.n() == 128);  // one entry of head_dim 128
}
