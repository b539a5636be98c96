// The replay engine (verify/replay/): the stage-provider composition of stage-local and chained replay against
// ref::AttentionLayer::forward_batch (the synthetic captures come from forward_batch, an independent assembly of the
// same stages, so an oracle replaying them must be bit for bit equal in every mode and call kind); the first failure
// lands on the stage that was corrupted; MISSING stages and derived state; compressor states
// compared on their meaningful rows only; index sets order-free with the score tie rule; filters.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <set>

#include "reference/stage_registry.h"
#include "verify/capture/capture_error.h"
#include "verify/replay/backend.h"
#include "verify/replay/replay.h"
#include "verify/replay/synth.h"

using namespace dsv4::verify;

namespace {

Capture synth(std::vector<int> ratios, std::vector<int64_t> calls, uint64_t seed = 7) {
  SynthOptions o;
  o.ratios = std::move(ratios);
  o.calls = std::move(calls);
  o.seed = seed;
  return synthesize_capture(o);
}

Report replay(const Capture& c, ReplayMode mode, ReplayOptions o = {}) {
  o.mode = mode;
  return replay_capture(c, o);
}

Tensor& dataset(Capture& c, int layer, int call, const std::string& name) {
  return c.layers.at(layer).calls.at(call).stages.at(name);
}

const Record& record(const Report& r, int layer, int call, const std::string& stage) {
  for (const Record& rec : r.records)
    if (rec.layer == layer && rec.call == call && rec.stage == stage) return rec;
  FAIL("no record for layer ", layer, " call ", call, " ", stage);
  return r.records.front();
}

// Every record PASS (or VACUOUS: a call that completed no compressor entry compares nothing), and
// every comparison bit for bit: the oracle replaying its own capture.
void check_bitwise(const Report& r) {
  REQUIRE_FALSE(r.records.empty());
  for (const Record& rec : r.records) {
    INFO(rec.layer, " ", rec.call, " ", rec.stage, " ", rec.note);
    CHECK((rec.status == Status::pass || rec.status == Status::vacuous));
    if (rec.status == Status::vacuous) CHECK(rec.stage.find("entries") != std::string::npos);
    if (const auto* d = std::get_if<DenseMetrics>(&rec.metrics)) {
      CHECK(d->bitwise_mismatches == 0);
      CHECK(d->nonfinite_mismatches == 0);
    } else if (const auto* s = std::get_if<IndexSetMetrics>(&rec.metrics)) {
      CHECK(s->rows_exact == s->rows);
    } else {
      FAIL_CHECK("record not compared");
    }
  }
}

}  // namespace

TEST_CASE("replaying the oracle's own capture is bitwise in both modes for prefill, chunked and decode calls") {
  // 13-token prefill, a 5-token chunk crossing the window (16) and a C4 block, decodes, a 2-token
  // chunk: the three index spaces, entries completed by every call kind.
  const Capture c = synth({0, 4, 128}, {13, 5, 1, 1, 2});
  for (ReplayMode mode : {ReplayMode::stage_local, ReplayMode::chained}) {
    INFO(to_string(mode));
    const Report r = replay(c, mode);
    check_bitwise(r);
    // Every stage of each layer's ratio, every call: 8 (ratio 0) + 18 (ratio 4) + 11 (ratio 128).
    CHECK(r.records.size() == 5 * (8 + 18 + 11));
    CHECK_FALSE(r.first_failure().has_value());
  }
}

TEST_CASE("records follow layers then calls then the stage registry") {
  const Capture c = synth({4, 0}, {6, 1});
  const Report r = replay(c, ReplayMode::stage_local);
  std::vector<std::tuple<int, int, int>> order;
  for (const Record& rec : r.records) {
    const auto* s = dsv4::ref::find_stage(rec.stage);
    REQUIRE(s != nullptr);
    CHECK(s->is_compared());
    order.emplace_back(rec.layer, rec.call, static_cast<int>(s->id));
  }
  CHECK(std::is_sorted(order.begin(), order.end()));
  CHECK(r.records.front().layer == 0);
  CHECK(r.records.back().layer == 1);
}

TEST_CASE("a corrupted attn/core value is the first failure in stage-local replay") {
  Capture c = synth({4}, {13, 1, 1});
  Tensor& core = dataset(c, 0, 1, "attn/core");
  core.values[37] += 1.0;  // values are O(1) bf16: +1 is far outside one bf16 flip
  const Report r = replay(c, ReplayMode::stage_local);
  REQUIRE(r.first_failure().has_value());
  CHECK(*r.first_failure() == StageId{0, 1, "attn/core"});
  const auto& m = std::get<DenseMetrics>(record(r, 0, 1, "attn/core").metrics);
  CHECK(m.max_abs_at.index == 37);
  CHECK(m.elements_failed == 1);
  // Stage-local: attn/out_heads is computed from the corrupted core (element 37 is a nope dim,
  // which the inverse RoPE passes through), so it differs from the captured one there too;
  // attn/wo_a reads the captured out_heads and passes; call 2 starts from its cache datasets.
  CHECK(record(r, 0, 1, "attn/out_heads").status == Status::fail);
  CHECK(record(r, 0, 1, "attn/wo_a").status == Status::pass);
  CHECK(r.counts().failed == 2);
}

TEST_CASE(
    "a corrupted early stage is the first failure in chained replay and a consumer inconsistent with it fails on its "
    "own error") {
  Capture c = synth({128}, {13, 1});
  dataset(c, 0, 0, "kv").values[5] += 1.0;
  const Report r = replay(c, ReplayMode::chained);
  REQUIRE(r.first_failure().has_value());
  CHECK(*r.first_failure() == StageId{0, 0, "kv"});
  // Chained metrics compare against the oracle's end-to-end values: attn/core, computed by the oracle
  // from its own (clean) kv, equals the captured core bit for bit. The verdict is the stage's own
  // error: attention recomputed from the captured (corrupted) kv differs from the captured core, as
  // an engine whose attention read another kv than the one it reported would. So attn/core fails
  // with a chained max_abs of 0 and its note says why.
  const Record& core = record(r, 0, 0, "attn/core");
  CHECK(core.status == Status::fail);
  CHECK(std::get<DenseMetrics>(core.metrics).max_abs == 0.0);
  CHECK(core.note.find("verdict on the stage's own error") != std::string::npos);
  // Every stage after attention reads the captured attn/core (equal to the clean one): they pass.
  CHECK(record(r, 0, 0, "attn/out_heads").status == Status::pass);
  CHECK(r.counts().failed == 2);

  // Stage-local gives the same verdicts, with its metrics against the captured-input recomputation.
  const Report local = replay(c, ReplayMode::stage_local);
  CHECK(*local.first_failure() == StageId{0, 0, "kv"});
  CHECK(record(local, 0, 0, "attn/core").status == Status::fail);
  CHECK(local.counts().failed == 2);
}

TEST_CASE("fail-fast stops at the first failing record") {
  Capture c = synth({0}, {13, 1, 1});
  dataset(c, 0, 1, "q").values[0] += 1.0;
  dataset(c, 0, 2, "q").values[0] += 1.0;
  ReplayOptions o;
  o.fail_fast = true;
  const Report r = replay(c, ReplayMode::stage_local, o);
  CHECK(r.records.back().status == Status::fail);
  CHECK(r.records.back().id() == StageId{0, 1, "q"});
  CHECK(r.counts().failed == 1);
}

TEST_CASE("a stage missing from the capture is MISSING and its consumers use the replay's own value") {
  Capture c = synth({4}, {13, 1});
  c.layers.at(0).calls.at(1).stages.erase("q");
  c.layers.at(0).calls.at(1).stages.erase("indexer/topk");
  const Report r = replay(c, ReplayMode::stage_local);
  CHECK(record(r, 0, 1, "q").status == Status::missing);
  CHECK(record(r, 0, 1, "indexer/topk").status == Status::missing);
  CHECK(record(r, 0, 1, "attn/core").note.find("input q not captured") != std::string::npos);
  CHECK(record(r, 0, 1, "topk_idxs").note.find("input indexer/topk not captured") != std::string::npos);
  CHECK(record(r, 0, 1, "attn/core").status == Status::pass);
  CHECK(r.counts().missing == 2);
  CHECK(r.counts().failed == 0);
}

TEST_CASE("without cache datasets stage-local replay carries the state of the earlier calls") {
  Capture c = synth({4, 128}, {13, 3, 1, 1});
  for (auto& [index, layer] : c.layers)
    for (CallCapture& call : layer.calls)
      std::erase_if(call.stages, [](const auto& kv) { return kv.first.starts_with("cache/"); });
  const Report r = replay(c, ReplayMode::stage_local);
  check_bitwise(r);
  CHECK(record(r, 0, 2, "attn/core").note.find("cache/window_kv not captured") != std::string::npos);
  CHECK(record(r, 0, 2, "indexer/scores").note.find("cache/indexer_kv not captured") != std::string::npos);
  CHECK(record(r, 1, 3, "compressor/entries").note.find("cache/compressor_state_* not captured") != std::string::npos);
  // Call 0 (a prefill) needs no state before it: no note.
  CHECK(record(r, 0, 0, "attn/core").note.find("not captured") == std::string::npos);
}

TEST_CASE("a call that does not continue the previous one needs its cache datasets") {
  Capture c = synth({0}, {13, 1, 1});
  // Drop call 1: call 2 (renumbered 1) starts at 14, the replayed calls end at 13.
  std::vector<CallCapture>& calls = c.layers.at(0).calls;
  calls.erase(calls.begin() + 1);
  calls[1].index = 1;
  // Stage-local with the ring captured: fine.
  CHECK(replay(c, ReplayMode::stage_local).counts().failed == 0);
  // Without it: the dataset is named.
  calls[1].stages.erase("cache/window_kv");
  try {
    replay(c, ReplayMode::stage_local);
    FAIL("expected a CaptureError");
  } catch (const CaptureError& e) {
    CHECK(e.object() == "/layers/0/calls/1/cache/window_kv");
    CHECK(e.found() == "nothing");
  }
  // Chained replay never reads cache datasets: start_pos is named.
  try {
    replay(c, ReplayMode::chained);
    FAIL("expected a CaptureError");
  } catch (const CaptureError& e) {
    CHECK(e.object() == "/layers/0/calls/1: attribute 'start_pos'");
    CHECK(e.found() == "14");
  }
}

TEST_CASE("compressor states are compared on their meaningful rows only") {
  // Ratio 4 after 14 tokens: rows 0..3 hold the previous block, row 4 + (14 mod 4 = 2) - 1 = 5 is
  // the last written; rows 6 and 7 are don't-care.
  Capture c = synth({4}, {14});
  Tensor& state = dataset(c, 0, 0, "compressor/state_kv");
  const int64_t cols = state.shape.at(2);
  state.values[6 * cols + 3] = 123.0;  // sequence 0, row 6: not compared
  const Report r = replay(c, ReplayMode::stage_local);
  const Record& rec = record(r, 0, 0, "compressor/state_kv");
  CHECK(rec.status == Status::pass);
  CHECK(std::get<DenseMetrics>(rec.metrics).n == 2 * 6 * cols);
  CHECK(rec.note.find("6 of 8 rows") != std::string::npos);

  state.values[5 * cols + 3] += 1.0;  // row 5: compared
  const Report r2 = replay(c, ReplayMode::stage_local);
  CHECK(*r2.first_failure() == StageId{0, 0, "compressor/state_kv"});
}

TEST_CASE("index sets are compared order-free and swaps pass only inside the score tie window") {
  // Prefill 40, ratio 4: the last query sees 10 entries and selects k = 8.
  Capture c = synth({4}, {40});
  Tensor& scores = dataset(c, 0, 0, "indexer/scores");
  Tensor& topk = dataset(c, 0, 0, "indexer/topk");
  const int64_t row = 39, n = scores.shape.at(2), k = topk.shape.at(2), offset = 40;
  auto score = [&](int64_t j) -> double& { return scores.values[row * n + j]; };
  auto pick = [&](int64_t slot) -> double& { return topk.values[row * k + slot]; };
  REQUIRE(n == 10);
  REQUIRE(k == 8);

  SUBCASE("a permuted row is the same set") {
    std::reverse(topk.values.begin() + row * k, topk.values.begin() + (row + 1) * k);
    const Report r = replay(c, ReplayMode::stage_local);
    CHECK(record(r, 0, 0, "indexer/topk").status == Status::pass);
  }

  // The k-th selected entry (lowest score) and the best entry left out.
  std::set<int64_t> selected;
  for (int64_t s = 0; s < k; ++s) selected.insert(static_cast<int64_t>(pick(s)) - offset);
  int64_t kth = -1, out = -1;
  for (int64_t j = 0; j < n; ++j) {
    if (selected.count(j) && (kth < 0 || score(j) < score(kth))) kth = j;
    if (!selected.count(j) && (out < 0 || score(j) > score(out))) out = j;
  }
  REQUIRE(kth >= 0);
  REQUIRE(out >= 0);
  // Tie them exactly: the oracle keeps the lower index; the capture lists the other one.
  score(out) = score(kth);
  const int64_t winner = std::min(kth, out), loser = std::max(kth, out);
  const auto slot =
      std::find(topk.values.begin() + row * k, topk.values.begin() + (row + 1) * k, static_cast<double>(kth + offset));
  *slot = static_cast<double>(loser + offset);
  Tensor& idxs = dataset(c, 0, 0, "topk_idxs");
  const int64_t width = idxs.shape.at(2);
  std::replace(idxs.values.begin() + row * width, idxs.values.begin() + (row + 1) * width,
               static_cast<double>(kth + offset), static_cast<double>(loser + offset));

  SUBCASE("a swap between exact ties passes") {
    const Report r = replay(c, ReplayMode::stage_local);
    const Record& rec = record(r, 0, 0, "indexer/topk");
    CHECK(rec.status == Status::pass);
    CHECK(std::get<IndexSetMetrics>(rec.metrics).rows_tie_equivalent == 1);
    // Stage-local topk_idxs is built from the captured indexer/topk, which lists the loser too.
    CHECK(record(r, 0, 0, "topk_idxs").status == Status::pass);
  }
  SUBCASE("a swap with a score outside the window fails") {
    // The listed entry now scores 10 % + 1 below the threshold: far outside 2 bf16 spacings.
    score(loser) = score(winner) - 0.1 * std::fabs(score(winner)) - 1.0;
    const Report r = replay(c, ReplayMode::stage_local);
    CHECK(record(r, 0, 0, "indexer/topk").status == Status::fail);
    const auto& m = std::get<IndexSetMetrics>(record(r, 0, 0, "indexer/topk").metrics);
    CHECK(m.first_failure.row == row);
  }
}

TEST_CASE("the layer call and stage filters select records without changing the replay") {
  const Capture c = synth({0, 4}, {13, 1, 1});
  ReplayOptions o;
  o.layer = 1;
  o.call = 2;
  o.stage_regex = "^attn/|topk";
  const Report r = replay(c, ReplayMode::stage_local, o);
  std::vector<std::string> stages;
  for (const Record& rec : r.records) {
    CHECK(rec.layer == 1);
    CHECK(rec.call == 2);
    stages.push_back(rec.stage);
  }
  CHECK(stages == std::vector<std::string>{"indexer/topk", "topk_idxs", "attn/core", "attn/out_heads", "attn/wo_a"});
  check_bitwise(r);

  ReplayOptions bad;
  bad.stage_regex = "(";
  CHECK_THROWS_AS(replay(c, ReplayMode::stage_local, bad), std::invalid_argument);
  bad = {};
  bad.layer = 5;
  CHECK_THROWS_AS(replay(c, ReplayMode::stage_local, bad), std::invalid_argument);
  bad = {};
  bad.call = 3;
  CHECK_THROWS_AS(replay(c, ReplayMode::stage_local, bad), std::invalid_argument);
  bad = {};
  bad.precision = "fp16-everything";
  CHECK_THROWS_AS(replay(c, ReplayMode::stage_local, bad), std::invalid_argument);
}

TEST_CASE("an official capture replayed in exact precision fails: the precision reaches the stages") {
  const Capture c = synth({0}, {13});
  ReplayOptions o;
  o.precision = "exact";
  const Report r = replay(c, ReplayMode::stage_local, o);
  CHECK(r.precision == "exact");
  CHECK(r.tolerances.ends_with("exact.json"));
  CHECK(r.counts().failed > 0);
}

TEST_CASE("an exact capture replays within the exact tolerance table") {
  // Stored as float32: the differences are the float32 rounding of inputs and outputs, which
  // docs/tolerances.md section 5 bounds.
  SynthOptions o;
  o.ratios = {0, 4, 128};
  o.calls = {13, 4, 1};
  o.precision = "exact";
  Capture c = synthesize_capture(o);
  for (auto& [index, layer] : c.layers)
    for (CallCapture& call : layer.calls)
      for (auto& [name, t] : call.stages)
        if (!t.is_index)
          for (double& v : t.values) v = static_cast<double>(static_cast<float>(v));
  for (ReplayMode mode : {ReplayMode::stage_local, ReplayMode::chained}) {
    INFO(to_string(mode));
    const Report r = replay(c, mode);
    CHECK(r.precision == "exact");
    CHECK(r.counts().failed == 0);
  }
}

TEST_CASE("synth is deterministic and the seed matters") {
  SynthOptions o;
  o.ratios = {4};
  o.calls = {13, 1};
  const Capture a = synthesize_capture(o), b = synthesize_capture(o);
  for (const auto& [name, t] : a.layers.at(0).calls.at(1).stages) {
    INFO(name);
    CHECK(t.values == b.layers.at(0).calls.at(1).stages.at(name).values);
    CHECK(t.shape == b.layers.at(0).calls.at(1).stages.at(name).shape);
  }
  o.seed = 2;
  const Capture other = synthesize_capture(o);
  CHECK(other.layers.at(0).calls.at(0).stage("x").values != a.layers.at(0).calls.at(0).stage("x").values);

  SynthOptions bad;
  bad.ratios = {3};
  CHECK_THROWS_AS(synthesize_capture(bad), std::invalid_argument);
  bad = {};
  bad.prefill = 1000;
  bad.decode = 100;  // past tiny's max_seq_len 1024
  CHECK_THROWS_AS(synthesize_capture(bad), std::invalid_argument);
}

TEST_CASE("the cuda backend runs or says why not") {
  try {
    const auto backend = make_backend("cuda", "official");
    CHECK(backend->name() == "cuda");
    CHECK(backend->computes(dsv4::ref::StageEntry::compress));
    CHECK_FALSE(backend->computes(dsv4::ref::StageEntry::q_latent));
    // Dims the kernels lack are left to the oracle, with the reason the record's note carries.
    dsv4::ref::ModelConfig odd = dsv4::ref::ModelConfig::tiny();
    odd.head_dim = 192;
    CHECK(backend->declines(dsv4::ref::Stage::compressor_entries, odd).find("this layer's is 192") !=
          std::string::npos);
    CHECK(backend->declines(dsv4::ref::Stage::indexer_compressor_entries, odd).empty());
    CHECK(backend->declines(dsv4::ref::Stage::compressor_entries, dsv4::ref::ModelConfig::flash()).empty());
  } catch (const BackendUnavailable& e) {
    CHECK(std::string(e.what()).starts_with("cuda backend not built / no GPU"));
  }
  CHECK(make_backend("cpu", "official")->name() == "oracle");
  CHECK_THROWS_AS(make_backend("tpu", "official"), std::invalid_argument);
}
