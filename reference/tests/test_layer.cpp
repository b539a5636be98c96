// The attention layer over the KV cache: any split of a sequence into calls (one prefill, prefill
// then one-token decodes, chunked continuation at random points) gives bitwise the same result for
// every token; the ring and paged caches give bitwise the same calls; a batch equals its sequences
// run alone; every call's index lists name exactly the keys docs/math.md "topk_idxs" says a token attends to.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/tests/layer_test_support.h"

namespace dsv4::ref {
namespace {

using testing::bitwise_equal;
using testing::Call;
using testing::check_same_outputs;
using testing::random_tokens;
using testing::run_calls;
using testing::same_bits;

AttentionLayer make_layer(const ModelConfig& cfg, int ratio, const PrecisionPolicy& p, uint64_t seed) {
  return AttentionLayer(cfg, AttentionWeights::random(cfg, ratio, seed), p);
}

// A key a token attends to, in logical terms: a window position or a compressed entry.
struct LogicalKey {
  bool compressed = false;
  int64_t value = 0;  // token position, or entry index j
  auto operator<=>(const LogicalKey&) const = default;
};

// The key that row `idx` of a call's kv matrix holds for the query at position t. The layouts
// (docs/math.md "index spaces" and index_lists.h): prefill [the call's s tokens; entries], decode [ring slots
// after the write; entries], chunked [ring slots before the call; the call's s tokens; entries].
// A ring slot holds the latest position congruent to it mod W that the cache had written.
LogicalKey logical_key(int64_t start, int64_t s, int W, int64_t t, int32_t idx) {
  const auto mod = [](int64_t a, int64_t m) { return ((a % m) + m) % m; };
  if (start == 0) return idx < s ? LogicalKey{false, idx} : LogicalKey{true, idx - s};
  if (s == 1) return idx < W ? LogicalKey{false, t - mod(t - idx, W)} : LogicalKey{true, idx - W};
  if (idx < W) return {false, (start - 1) - mod(start - 1 - idx, W)};
  if (idx < W + s) return {false, start + idx - W};
  return {true, idx - W - s};
}

// The logical keys of one row of an index list, in list order, -1 slots dropped.
std::vector<LogicalKey> logical_row(const IndexMat& idx, Index row, int64_t start, int64_t s, int W) {
  std::vector<LogicalKey> keys;
  for (Index c = 0; c < idx.cols(); ++c)
    if (idx(row, c) != -1) keys.push_back(logical_key(start, s, W, start + row, idx(row, c)));
  return keys;
}

// The entries the indexer must pick for one query: its visible entries (j < (t+1)/4) by score
// descending, lower j first among equal scores, the first min(index_topk, visible) of them.
std::vector<LogicalKey> expected_indexer_picks(const Mat& scores, Index row, int64_t t, int topk) {
  const int64_t visible = (t + 1) / 4;
  std::vector<int64_t> js(visible);
  std::iota(js.begin(), js.end(), 0);
  std::stable_sort(js.begin(), js.end(), [&](int64_t a, int64_t b) { return scores(row, a) > scores(row, b); });
  std::vector<LogicalKey> picks;
  for (int64_t i = 0; i < std::min<int64_t>(topk, visible); ++i) picks.push_back({true, js[i]});
  return picks;
}

// One call's shapes and index lists against docs/math.md "indexer/topk" and "topk_idxs".
void check_call_structure(const Call& call, const ModelConfig& cfg, int ratio) {
  const StageOutputs& o = call.out;
  const int64_t s = o.out.rows(), start = call.start, end = start + s;
  const int W = cfg.window_size;
  const bool prefill = start == 0;
  INFO("call at ", start, " of ", s, " tokens");
  CHECK(o.q_latent.rows() == s);
  CHECK(o.q.cols() == cfg.n_heads * cfg.head_dim);
  CHECK(o.kv.cols() == cfg.head_dim);
  CHECK(o.attn_core.cols() == cfg.n_heads * cfg.head_dim);
  CHECK(o.attn_wo_a.cols() == cfg.o_groups * cfg.o_lora_rank);
  CHECK(o.out.cols() == cfg.dim);

  // Spec: prefill [s, min(s,W) + compressed], decode and chunked [s, W + compressed], where
  // compressed is min(topk, end/4) for CSA and end/128 for HCA (end = start + s).
  const int64_t window_width = prefill ? std::min<int64_t>(s, W) : W;
  int64_t compressed_width = 0;
  if (ratio == 4) compressed_width = std::min<int64_t>(cfg.index_topk, end / 4);
  if (ratio == 128) compressed_width = end / 128;
  REQUIRE(o.topk_idxs.rows() == s);
  REQUIRE(o.topk_idxs.cols() == window_width + compressed_width);
  if (ratio != 0) CHECK(o.compressor_entries.rows() == end / ratio - start / ratio);
  if (ratio == 4) {
    REQUIRE(o.indexer_scores.cols() == end / 4);
    REQUIRE(o.indexer_topk.cols() == compressed_width);
    CHECK(o.indexer_compressor_entries.rows() == end / 4 - start / 4);
    CHECK(o.indexer_q.cols() == cfg.index_n_heads * cfg.index_head_dim);
    CHECK(o.indexer_weights.cols() == cfg.index_n_heads);
  }

  for (Index i = 0; i < s; ++i) {
    const int64_t t = start + i;
    CAPTURE(t);
    // Window: positions max(0, t-W+1) .. t, each once, listed before any compressed entry.
    std::vector<LogicalKey> window;
    for (int64_t p = std::max<int64_t>(0, t - W + 1); p <= t; ++p) window.push_back({false, p});
    const IndexMat window_part = o.topk_idxs.leftCols(window_width);
    std::vector<LogicalKey> got_window = logical_row(window_part, i, start, s, W);
    std::sort(got_window.begin(), got_window.end());
    CHECK(got_window == window);

    const IndexMat compressed_part = o.topk_idxs.rightCols(compressed_width);
    const std::vector<LogicalKey> got_compressed = logical_row(compressed_part, i, start, s, W);
    if (ratio == 128) {  // every complete block
      std::vector<LogicalKey> all;
      for (int64_t j = 0; j < (t + 1) / 128; ++j) all.push_back({true, j});
      CHECK(got_compressed == all);
    }
    if (ratio == 4) {
      for (int64_t j = 0; j < end / 4; ++j) {
        const bool visible = j < (t + 1) / 4;
        CHECK(std::isfinite(o.indexer_scores(i, j)) == visible);
        if (!visible) CHECK(o.indexer_scores(i, j) == -std::numeric_limits<double>::infinity());
      }
      const std::vector<LogicalKey> picks = expected_indexer_picks(o.indexer_scores, i, t, cfg.index_topk);
      CHECK(logical_row(o.indexer_topk, i, start, s, W) == picks);
      CHECK(got_compressed == picks);
      // Picks first, -1 padding after (prefill rows with fewer visible entries than k).
      for (Index c = static_cast<Index>(picks.size()); c < o.indexer_topk.cols(); ++c)
        CHECK(o.indexer_topk(i, c) == -1);
    }
  }
}

// Row i of a call equals the reference (one prefill of the whole sequence) at token start + i.
void check_call_matches_reference(const Call& call, const StageOutputs& ref, const ModelConfig& cfg, int ratio) {
  const StageOutputs& o = call.out;
  const int64_t s = o.out.rows();
  const int W = cfg.window_size;
  const int64_t ref_s = ref.out.rows();
  for (Index i = 0; i < s; ++i) {
    const int64_t t = call.start + i;
    INFO("token ", t, " of a call at ", call.start, " of ", s, " tokens");
    const auto same_row = [&](const Mat& a, const Mat& b) { return bitwise_equal(a.row(i), b.row(t)); };
    CHECK(same_row(o.q_latent, ref.q_latent));
    CHECK(same_row(o.q, ref.q));
    CHECK(same_row(o.kv, ref.kv));
    CHECK(same_row(o.attn_core, ref.attn_core));
    CHECK(same_row(o.attn_out_heads, ref.attn_out_heads));
    CHECK(same_row(o.attn_wo_a, ref.attn_wo_a));
    CHECK(same_row(o.out, ref.out));
    if (ratio == 4) {
      CHECK(same_row(o.indexer_q, ref.indexer_q));
      CHECK(same_row(o.indexer_weights, ref.indexer_weights));
      const int64_t visible = (t + 1) / 4;  // the other columns are -inf in both (checked by structure)
      CHECK(bitwise_equal(o.indexer_scores.row(i).head(visible), ref.indexer_scores.row(t).head(visible)));
      CHECK(logical_row(o.indexer_topk, i, call.start, s, W) == logical_row(ref.indexer_topk, t, 0, ref_s, W));
    }
    std::vector<LogicalKey> got = logical_row(o.topk_idxs, i, call.start, s, W);
    std::vector<LogicalKey> want = logical_row(ref.topk_idxs, t, 0, ref_s, W);
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    CHECK(got == want);
  }
}

// The calls' entries in order equal the reference's, and the final compressor states agree on the
// rows a reader may rely on (CompressorState::meaningful_rows; the others may hold stale copies).
void check_entries_and_state(const std::vector<Call>& calls, const StageOutputs& ref, int ratio) {
  if (ratio == 0) return;
  const int64_t length = calls.back().start + calls.back().out.out.rows();
  const auto concat = [&](Mat StageOutputs::*field) {
    Mat all(0, (ref.*field).cols());
    for (const Call& c : calls) {
      const Mat& part = c.out.*field;
      if (part.rows() == 0) continue;
      Mat grown(all.rows() + part.rows(), all.cols());
      grown << all, part;
      all = grown;
    }
    return all;
  };
  const auto same_meaningful = [&](const CompressorState& a, const CompressorState& b) {
    bool same = a.ratio == b.ratio && a.head_dim == b.head_dim;
    for (int r : b.meaningful_rows(length))
      same = same && bitwise_equal(a.kv.row(r), b.kv.row(r)) && bitwise_equal(a.score.row(r), b.score.row(r));
    return same;
  };
  CHECK(bitwise_equal(concat(&StageOutputs::compressor_entries), ref.compressor_entries));
  CHECK(same_meaningful(calls.back().out.compressor_state, ref.compressor_state));
  if (ratio == 4) {
    CHECK(bitwise_equal(concat(&StageOutputs::indexer_compressor_entries), ref.indexer_compressor_entries));
    CHECK(same_meaningful(calls.back().out.indexer_compressor_state, ref.indexer_compressor_state));
  }
}

// After a sequence of `length` tokens the ring holds the window kv of its last W positions, each in
// slot position mod W (what DeepSeek's decode reads, and what a capture's cache/window_kv holds).
void check_final_ring(const KvCache& cache, int seq, const Mat& kv, int64_t length, int W) {
  Mat ring = Mat::Zero(W, kv.cols());
  for (int64_t p = std::max<int64_t>(0, length - W); p < length; ++p) ring.row(p % W) = kv.row(p);
  CHECK(bitwise_equal(cache.ring(seq, length), ring));
}

// Call boundaries: a prefill of `first` tokens, then chunks of random length (1 = decode, longer
// than W = chunked prefill crossing the window) up to `length`.
std::vector<int64_t> random_bounds(int64_t first, int64_t length, int W, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> bounds{0, first};
  while (bounds.back() < length) {
    const int64_t pick = static_cast<int64_t>(rng() % 4);
    const int64_t s = pick == 0   ? 1
                      : pick == 1 ? 2 + static_cast<int64_t>(rng() % W)
                                  : W + static_cast<int64_t>(rng() % (2 * W));
    bounds.push_back(std::min(length, bounds.back() + s));
  }
  return bounds;
}

std::vector<int64_t> decode_bounds(int64_t first, int64_t length) {
  std::vector<int64_t> bounds{0};
  for (int64_t b = first; b <= length; ++b) bounds.push_back(b);
  return bounds;
}

// The whole equivalence check for one ratio, in the exact and the official policy.
// Prefill 37 tokens (not a multiple of 4 or 128), longer than W = 16; lengths cross the pages of
// 128 positions and, for ratio 128, two complete blocks.
void check_call_splits(int ratio, int64_t length) {
  const ModelConfig cfg = ModelConfig::tiny();
  const int W = cfg.window_size;
  for (const PrecisionPolicy& p : {PrecisionPolicy::exact(), PrecisionPolicy::official()}) {
    CAPTURE(p.name);
    const AttentionLayer layer = make_layer(cfg, ratio, p, 100 + ratio);
    const Mat x = random_tokens(cfg.dim, length, 200 + ratio);

    auto ref_cache = make_ring_cache(cfg, ratio, 1);
    const std::vector<Call> ref = run_calls(layer, x, {0, length}, *ref_cache, 0);
    check_call_structure(ref[0], cfg, ratio);

    {
      INFO("prefill 37, then one-token decodes");
      auto cache = make_ring_cache(cfg, ratio, 1);
      const std::vector<Call> calls = run_calls(layer, x, decode_bounds(37, length), *cache, 0);
      for (const Call& c : calls) {
        check_call_structure(c, cfg, ratio);
        check_call_matches_reference(c, ref[0].out, cfg, ratio);
      }
      check_entries_and_state(calls, ref[0].out, ratio);
      check_final_ring(*cache, 0, ref[0].out.kv, length, W);
    }
    {
      INFO("prefill 37, then chunks of random length; ring and paged caches");
      const std::vector<int64_t> bounds = random_bounds(37, length, W, 300 + ratio);
      auto ring = make_ring_cache(cfg, ratio, 2);
      auto paged = make_paged_cache(cfg, ratio, 2, 77);
      const std::vector<Call> calls = run_calls(layer, x, bounds, *ring, 1);
      const std::vector<Call> paged_calls = run_calls(layer, x, bounds, *paged, 1);
      for (size_t i = 0; i < calls.size(); ++i) {
        check_call_structure(calls[i], cfg, ratio);
        check_call_matches_reference(calls[i], ref[0].out, cfg, ratio);
        check_same_outputs(calls[i].out, paged_calls[i].out, "ring vs paged, call " + std::to_string(i));
      }
      check_entries_and_state(calls, ref[0].out, ratio);
      check_final_ring(*ring, 1, ref[0].out.kv, length, W);
      check_final_ring(*paged, 1, ref[0].out.kv, length, W);
    }
    check_final_ring(*ref_cache, 0, ref[0].out.kv, length, W);
  }
}

TEST_CASE("ratio 0 prefill == prefill + decodes == chunked and ring == paged bitwise") { check_call_splits(0, 80); }
TEST_CASE("ratio 4 prefill == prefill + decodes == chunked and ring == paged bitwise") { check_call_splits(4, 150); }
TEST_CASE("ratio 128 prefill == prefill + decodes == chunked and ring == paged bitwise") {
  check_call_splits(128, 300);
}

// Brute-force attention of token t over the keys docs/math.md "topk_idxs" names, written from the formula:
// the window positions max(0, t-W+1)..t (values: the window kv), the compressed entries (every
// complete block for HCA; the indexer's top-k by score, lower index on ties, for CSA), and the sink
// as a logit with a zero value: o_h = sum_j e^(s_j - M) v_j / (sum_j e^(s_j - M) + e^(sink_h - M)).
Eigen::RowVectorXd brute_force_attention(const StageOutputs& ref, const Eigen::RowVectorXd& q, const Mat& scores,
                                         Index score_row, int64_t t, const ModelConfig& cfg, int ratio,
                                         const Vec& sink) {
  std::vector<Eigen::RowVectorXd> values;
  for (int64_t p = std::max<int64_t>(0, t - cfg.window_size + 1); p <= t; ++p) values.push_back(ref.kv.row(p));
  if (ratio == 128)
    for (int64_t j = 0; j < (t + 1) / 128; ++j) values.push_back(ref.compressor_entries.row(j));
  if (ratio == 4)
    for (const LogicalKey& key : expected_indexer_picks(scores, score_row, t, cfg.index_topk))
      values.push_back(ref.compressor_entries.row(key.value));
  const int d = cfg.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  Eigen::RowVectorXd o(q.size());
  for (int h = 0; h < cfg.n_heads; ++h) {
    std::vector<double> logits;
    for (const auto& v : values) logits.push_back(scale * q.segment(h * d, d).dot(v));
    const double m = *std::max_element(logits.begin(), logits.end());
    double denominator = std::exp(sink[h] - m);
    Eigen::RowVectorXd numerator = Eigen::RowVectorXd::Zero(d);
    for (size_t j = 0; j < values.size(); ++j) {
      denominator += std::exp(logits[j] - m);
      numerator += std::exp(logits[j] - m) * values[j];
    }
    o.segment(h * d, d) = numerator / denominator;
  }
  return o;
}

TEST_CASE("exact policy - the attention of every token equals the brute-force formula over its keys") {
  const ModelConfig cfg = ModelConfig::tiny();
  for (int ratio : {0, 4, 128}) {
    CAPTURE(ratio);
    const AttentionLayer layer = make_layer(cfg, ratio, PrecisionPolicy::exact(), 60 + ratio);
    const int64_t length = ratio == 128 ? 270 : 100;
    const Mat x = random_tokens(cfg.dim, length, 61);
    auto ref_cache = make_ring_cache(cfg, ratio, 1);
    const StageOutputs ref = run_calls(layer, x, {0, length}, *ref_cache, 0)[0].out;
    std::vector<int64_t> bounds = random_bounds(37, length - 3, cfg.window_size, 62);
    for (int64_t b = length - 2; b <= length; ++b) bounds.push_back(b);
    auto cache = make_paged_cache(cfg, ratio, 1, 63);
    std::vector<Call> calls = run_calls(layer, x, bounds, *cache, 0);
    calls.push_back({0, ref});
    for (const Call& c : calls) {
      for (Index i = 0; i < c.out.out.rows(); ++i) {
        const int64_t t = c.start + i;
        CAPTURE(t);
        const Eigen::RowVectorXd want = brute_force_attention(ref, c.out.q.row(i), c.out.indexer_scores, i, t, cfg,
                                                              ratio, layer.weights().attn_sink);
        // fp64 throughout; only the summation order differs (at most 24 keys of 128 dims, values
        // and probabilities O(1)): a few 1e-16 each, so 1e-13 absolute is far above rounding and
        // far below any wrong key (which moves outputs by O(0.01) or more).
        CHECK((c.out.attn_core.row(i) - want).cwiseAbs().maxCoeff() < 1e-13);
      }
    }
  }
}

TEST_CASE("a batch equals its sequences run alone") {
  const ModelConfig cfg = ModelConfig::tiny();
  const int batch = 3;
  for (int ratio : {0, 4, 128}) {
    CAPTURE(ratio);
    const AttentionLayer layer = make_layer(cfg, ratio, PrecisionPolicy::official(), 5 + ratio);
    const std::vector<int64_t> bounds{0, 37, 38, 39, 40, 61, 140};
    std::vector<Mat> xs;
    for (int b = 0; b < batch; ++b) xs.push_back(random_tokens(cfg.dim, bounds.back(), 40 + b));
    auto cache = make_paged_cache(cfg, ratio, batch, 31);
    std::vector<std::vector<StageOutputs>> batched;
    for (size_t c = 0; c + 1 < bounds.size(); ++c) {
      std::vector<Mat> chunk;
      for (const Mat& x : xs) chunk.push_back(x.middleRows(bounds[c], bounds[c + 1] - bounds[c]));
      batched.push_back(layer.forward_batch(chunk, bounds[c], *cache));
      REQUIRE(batched.back().size() == batch);
    }
    for (int b = 0; b < batch; ++b) {
      auto alone = make_ring_cache(cfg, ratio, 1);
      const std::vector<Call> calls = run_calls(layer, xs[b], bounds, *alone, 0);
      for (size_t c = 0; c < calls.size(); ++c)
        check_same_outputs(batched[c][b], calls[c].out,
                           "sequence " + std::to_string(b) + ", call " + std::to_string(c));
    }
  }
}

TEST_CASE("the indexer of a decode step sees the block it completes") {
  const ModelConfig cfg = ModelConfig::tiny();  // index_topk 8
  const AttentionLayer layer = make_layer(cfg, 4, PrecisionPolicy::official(), 9);
  const Mat x = random_tokens(cfg.dim, 48, 10);
  auto cache = make_ring_cache(cfg, 4, 1);
  const std::vector<Call> calls = run_calls(layer, x, decode_bounds(5, 48), *cache, 0);
  int completing = 0;
  for (const Call& c : calls) {
    if (c.start == 0 || (c.start + 1) % 4 != 0) continue;
    const int64_t pos = c.start, j = (pos + 1) / 4 - 1;  // the block this token completes
    CAPTURE(pos);
    ++completing;
    CHECK(c.out.compressor_entries.rows() == 1);
    CHECK(c.out.indexer_compressor_entries.rows() == 1);
    REQUIRE(c.out.indexer_scores.cols() == j + 1);
    CHECK(std::isfinite(c.out.indexer_scores(0, j)));
    const IndexMat& picks = c.out.indexer_topk;
    const bool picked =
        std::find(picks.data(), picks.data() + picks.size(), cfg.window_size + j) != picks.data() + picks.size();
    // Its rank: earlier entries scoring at least as high go first (ties to the lower index).
    int64_t rank = 0;
    for (int64_t i = 0; i < j; ++i) rank += c.out.indexer_scores(0, i) >= c.out.indexer_scores(0, j) ? 1 : 0;
    CHECK(picked == (rank < cfg.index_topk));
    if (j + 1 <= cfg.index_topk) CHECK(picked);  // every visible entry fits in the top-k
  }
  CHECK(completing == 11);  // positions 7, 11, ..., 47
}

TEST_CASE("bad calls throw") {
  const ModelConfig cfg = ModelConfig::tiny();
  const AttentionLayer layer = make_layer(cfg, 4, PrecisionPolicy::exact(), 1);
  auto cache = make_ring_cache(cfg, 4, 1);
  const Mat x = random_tokens(cfg.dim, 8, 2);
  CHECK_THROWS_AS(layer.forward(random_tokens(cfg.dim + 1, 2, 3), 0, *cache, 0), std::invalid_argument);
  CHECK_THROWS_AS(layer.forward(x.topRows(0), 0, *cache, 0), std::invalid_argument);
  CHECK_THROWS_AS(layer.forward(x, 0, *cache, 1), std::invalid_argument);  // outside the batch
  auto hca_cache = make_ring_cache(cfg, 128, 1);
  CHECK_THROWS_AS(layer.forward(x, 0, *hca_cache, 0), std::invalid_argument);  // cache of another ratio
  layer.forward(x, 0, *cache, 0);
  CHECK_THROWS_AS(layer.forward(x.topRows(1), 9, *cache, 0), std::invalid_argument);  // skips position 8
  CHECK_THROWS_AS(layer.forward(x.topRows(1), 7, *cache, 0), std::invalid_argument);  // repeats position 7
  CHECK_NOTHROW(layer.forward(x.topRows(1), 8, *cache, 0));
  CHECK_THROWS_AS(layer.forward(x.topRows(2), cfg.max_seq_len - 1, *cache, 0), std::invalid_argument);

  CHECK_THROWS_AS(layer.forward_batch({x, x.topRows(4)}, 0, *make_ring_cache(cfg, 4, 2)), std::invalid_argument);
  CHECK_THROWS_AS(layer.forward_batch({x, x}, 0, *cache), std::invalid_argument);  // batch of 1

  ModelConfig bad = cfg;
  bad.window_size = 0;
  CHECK_THROWS_AS(AttentionLayer(bad, AttentionWeights::random(cfg, 4, 1), PrecisionPolicy::exact()),
                  std::invalid_argument);
  AttentionWeights w = AttentionWeights::random(cfg, 4, 1);
  w.wkv = Mat::Zero(cfg.head_dim + 1, cfg.dim);
  CHECK_THROWS_AS(AttentionLayer(cfg, w, PrecisionPolicy::exact()), std::invalid_argument);
}

// V4-Flash and V4-Pro dims: the real shapes build and run (a few tokens; the weights are ~1 and
// ~2.5 GB in double, so this takes tens of seconds).
void check_real_dims(const ModelConfig& cfg) {
  CAPTURE(cfg.name);
  const AttentionLayer layer = make_layer(cfg, 4, PrecisionPolicy::official(), 1);
  const Mat x = random_tokens(cfg.dim, 6, 2);
  auto cache = make_ring_cache(cfg, 4, 1);
  const std::vector<Call> calls = run_calls(layer, x, {0, 5, 6}, *cache, 0);
  for (const Call& c : calls) {
    check_call_structure(c, cfg, 4);
    CHECK(c.out.out.allFinite());
    CHECK(c.out.out.norm() > 0);
  }
  CHECK(calls[0].out.compressor_entries.rows() == 1);
  CHECK(calls[1].out.topk_idxs.cols() == cfg.window_size + 1);
}

TEST_CASE("the one-switch policies change a layer only from the stage their switch reaches") {
  const ModelConfig cfg = ModelConfig::tiny();
  const AttentionWeights weights = AttentionWeights::random(cfg, 4, 71);
  const Mat x = random_tokens(cfg.dim, 64, 72);  // top-8 of up to 16 entries: the indexer chooses
  const auto run = [&](const std::string& name) {
    const AttentionLayer layer(cfg, weights, PrecisionPolicy::by_name(name));
    auto cache = make_ring_cache(cfg, 4, 1);
    return run_calls(layer, x, {0, 64}, *cache, 0)[0].out;
  };
  const StageOutputs official = run("official"), probs = run("fp32-probs"), scores = run("fp32-indexer-scores"),
                     fp4_keys = run("fp4-indexer-keys-only"), fp8 = run("fp8-indexer"),
                     fp8_keys = run("fp8-indexer-keys-only");
  for (const StageOutputs* o : {&probs, &scores, &fp4_keys, &fp8, &fp8_keys}) {
    CHECK(bitwise_equal(o->q, official.q));
    CHECK(bitwise_equal(o->kv, official.kv));
    CHECK(bitwise_equal(o->compressor_entries, official.compressor_entries));
    CHECK(bitwise_equal(o->indexer_weights, official.indexer_weights));
  }
  // fp32-probs: the same selection, other probabilities.
  CHECK(bitwise_equal(probs.indexer_q, official.indexer_q));
  CHECK(bitwise_equal(probs.indexer_scores, official.indexer_scores));
  CHECK(bitwise_equal(probs.topk_idxs, official.topk_idxs));
  CHECK(!bitwise_equal(probs.attn_core, official.attn_core));
  // fp32-indexer-scores: the same q and keys, other scores.
  CHECK(bitwise_equal(scores.indexer_q, official.indexer_q));
  CHECK(bitwise_equal(scores.indexer_compressor_entries, official.indexer_compressor_entries));
  CHECK(!bitwise_equal(scores.indexer_scores, official.indexer_scores));
  // Keys only: the keys of the parent policy, a query that is not quantized (the same for both).
  CHECK(bitwise_equal(fp4_keys.indexer_compressor_entries, official.indexer_compressor_entries));
  CHECK(bitwise_equal(fp8_keys.indexer_compressor_entries, fp8.indexer_compressor_entries));
  CHECK(!bitwise_equal(fp4_keys.indexer_q, official.indexer_q));
  CHECK(bitwise_equal(fp4_keys.indexer_q, fp8_keys.indexer_q));
  // The unquantized query keeps more than the 8 magnitudes an FP4 block of 32 can hold.
  std::vector<double> magnitudes;
  for (Index c = 0; c < 32; ++c) magnitudes.push_back(std::fabs(fp4_keys.indexer_q(40, c)));
  std::sort(magnitudes.begin(), magnitudes.end());
  CHECK(std::unique(magnitudes.begin(), magnitudes.end()) - magnitudes.begin() > 8);
}

TEST_SUITE("slow") {
  TEST_CASE("V4-Flash dims - one prefill of 5 tokens and one decode") { check_real_dims(ModelConfig::flash()); }
  TEST_CASE("V4-Pro dims - one prefill of 5 tokens and one decode") { check_real_dims(ModelConfig::pro()); }
}

}  // namespace
}  // namespace dsv4::ref
