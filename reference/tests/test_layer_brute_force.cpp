// The layer at V4-Flash dims checked on values: an independent fp64 recomputation of every stage of
// a CSA layer (written from docs/math.md with plain loops and Eigen products, sharing no code with
// reference/stages) against the oracle's exact policy over a 300-token prefill; and, in official
// precision, a prefill of 150 tokens followed by 150 one-token decodes against one prefill of 300,
// bit for bit (prefills of at least the window length; docs/math.md "bitwise invariants").
// index_topk is lowered to 16 so that 300 tokens (75 compressed entries) make the indexer choose in
// most rows; max_seq_len to 512 to keep the caches small. Label slow (about a minute).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "reference/config.h"
#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/precision.h"
#include "reference/weights.h"

namespace dsv4::ref {
namespace {

constexpr int kTokens = 300;

ModelConfig flash_test_config() {
  ModelConfig cfg = ModelConfig::flash();
  cfg.max_seq_len = 512;
  cfg.index_topk = 16;
  return cfg;
}

Mat random_input(int64_t tokens, int dim, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal;
  Mat x(tokens, dim);
  for (Index i = 0; i < x.size(); ++i) x.data()[i] = normal(gen);
  return x;
}

// ---- the mathematics, in fp64 ------------------------------------------------------------------

// RMSNorm of a row with weight w (or none).
Eigen::RowVectorXd rms_norm(const Eigen::RowVectorXd& v, const Vec* w, double eps) {
  const double scale = 1.0 / std::sqrt(v.squaredNorm() / static_cast<double>(v.size()) + eps);
  Eigen::RowVectorXd out = v * scale;
  if (w) out = out.cwiseProduct(w->transpose());
  return out;
}

// The frequencies of the YaRN table of compressed layers: 1 / base^(2i/64), blended between f /
// factor and f by the ramp between the correction dims of beta_fast and beta_slow.
std::vector<double> yarn_frequencies(const ModelConfig& c) {
  const int half = c.rope_head_dim / 2;
  const auto corr = [&](double rotations) {
    return c.rope_head_dim * std::log(c.original_seq_len / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(c.compress_rope_theta));
  };
  const double low = std::max(std::floor(corr(c.beta_fast)), 0.0);
  const double high = std::min(std::ceil(corr(c.beta_slow)), static_cast<double>(c.rope_head_dim - 1));
  std::vector<double> f(half);
  for (int i = 0; i < half; ++i) {
    const double base = 1.0 / std::pow(c.compress_rope_theta, 2.0 * i / c.rope_head_dim);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    f[i] = base / c.rope_factor * ramp + base * (1 - ramp);
  }
  return f;
}

// Interleaved RoPE on the last 64 dims of a vector at a position (sign -1: the inverse rotation).
void rotate(double* v, int dim, int64_t position, const std::vector<double>& freqs, double sign = 1) {
  double* tail = v + dim - 2 * static_cast<int>(freqs.size());
  for (size_t i = 0; i < freqs.size(); ++i) {
    const double a = static_cast<double>(position) * freqs[i];
    const double c = std::cos(a), s = sign * std::sin(a);
    const double re = tail[2 * i], im = tail[2 * i + 1];
    tail[2 * i] = re * c - im * s;
    tail[2 * i + 1] = re * s + im * c;
  }
}

// The normalised Sylvester Hadamard matrix of size n (H[i,j] = (-1)^popcount(i&j) / sqrt(n)).
Mat hadamard(int n) {
  Mat h(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) h(i, j) = (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) / std::sqrt(n);
  return h;
}

// The ratio-4 compressor with overlap over a whole prefill: entry j pools, per channel, the "a"
// half of block j-1 and the "b" half of block j with a softmax of wgate(x) + ape; then RMSNorm
// and RoPE at position 4j (and the Hadamard rotation for the indexer's keys).
Mat compressor_entries(const CompressorWeights& w, const Mat& x, const std::vector<double>& freqs, double eps,
                       const Mat* rotation) {
  const int d = w.head_dim;
  const Mat kv = x * w.wkv.transpose();
  Mat score = x * w.wgate.transpose();
  for (Index t = 0; t < x.rows(); ++t) score.row(t) += w.ape.row(t % 4);
  const Index n = x.rows() / 4;
  Mat out(n, d);
  for (Index j = 0; j < n; ++j) {
    Eigen::RowVectorXd pooled(d);
    for (int c = 0; c < d; ++c) {
      std::vector<std::pair<double, double>> terms;  // (score, value)
      if (j > 0)
        for (Index t = 4 * (j - 1); t < 4 * j; ++t) terms.emplace_back(score(t, c), kv(t, c));
      for (Index t = 4 * j; t < 4 * j + 4; ++t) terms.emplace_back(score(t, d + c), kv(t, d + c));
      double top = terms[0].first;
      for (const auto& [s, v] : terms) top = std::max(top, s);
      double num = 0, den = 0;
      for (const auto& [s, v] : terms) {
        num += std::exp(s - top) * v;
        den += std::exp(s - top);
      }
      pooled(c) = num / den;
    }
    Eigen::RowVectorXd e = rms_norm(pooled, &w.norm, eps);
    rotate(e.data(), d, 4 * j, freqs);
    if (rotation) e = e * rotation->transpose();
    out.row(j) = e;
  }
  return out;
}

struct BruteForce {
  Mat q_latent, q, kv, entries, indexer_q, indexer_weights, indexer_keys, scores, core, out_heads, wo_a, out;
  std::vector<std::vector<int>> selected;  // per token: the chosen entries
};

BruteForce brute_force(const ModelConfig& c, const AttentionWeights& w, const Mat& x) {
  const int T = static_cast<int>(x.rows()), H = c.n_heads, d = c.head_dim, IH = c.index_n_heads, ID = c.index_head_dim;
  const std::vector<double> freqs = yarn_frequencies(c);
  const Mat rot = hadamard(ID);
  BruteForce b;
  b.q_latent = x * w.wq_a.transpose();
  for (int t = 0; t < T; ++t) b.q_latent.row(t) = rms_norm(b.q_latent.row(t), &w.q_norm, c.norm_eps);
  b.q = b.q_latent * w.wq_b.transpose();
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      Eigen::RowVectorXd head = b.q.row(t).segment(h * d, d);
      head = rms_norm(head, nullptr, c.norm_eps);
      rotate(head.data(), d, t, freqs);
      b.q.row(t).segment(h * d, d) = head;
    }
  b.kv = x * w.wkv.transpose();
  for (int t = 0; t < T; ++t) {
    Eigen::RowVectorXd row = rms_norm(b.kv.row(t), &w.kv_norm, c.norm_eps);
    rotate(row.data(), d, t, freqs);
    b.kv.row(t) = row;
  }
  b.entries = compressor_entries(w.compressor, x, freqs, c.norm_eps, nullptr);

  // The indexer: q per head (RoPE, Hadamard), weights, keys from its own compressor, scores
  // sum_h w_h relu(q_h . k_j) over the visible entries j < (t+1)/4, top-k by score.
  b.indexer_q = b.q_latent * w.indexer.wq_b.transpose();
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < IH; ++h) {
      Eigen::RowVectorXd head = b.indexer_q.row(t).segment(h * ID, ID);
      rotate(head.data(), ID, t, freqs);
      b.indexer_q.row(t).segment(h * ID, ID) = head * rot.transpose();
    }
  b.indexer_weights = x * w.indexer.weights_proj.transpose() * (std::pow(ID, -0.5) * std::pow(IH, -0.5));
  b.indexer_keys = compressor_entries(w.indexer.compressor, x, freqs, c.norm_eps, &rot);
  const int n = T / 4, k = std::min(c.index_topk, n);
  b.scores = Mat::Constant(T, n, -std::numeric_limits<double>::infinity());
  b.selected.resize(T);
  for (int t = 0; t < T; ++t) {
    const int visible = (t + 1) / 4;
    for (int j = 0; j < visible; ++j) {
      double s = 0;
      for (int h = 0; h < IH; ++h)
        s += b.indexer_weights(t, h) * std::max(0.0, b.indexer_q.row(t).segment(h * ID, ID).dot(b.indexer_keys.row(j)));
      b.scores(t, j) = s;
    }
    std::vector<int> order(visible);
    for (int j = 0; j < visible; ++j) order[j] = j;
    std::stable_sort(order.begin(), order.end(), [&](int a, int z) { return b.scores(t, a) > b.scores(t, z); });
    order.resize(std::min(k, visible));
    b.selected[t] = order;
  }

  // Attention over the window positions and the selected entries, the sink in the denominator.
  b.core = Mat::Zero(T, H * d);
  const double scale = std::pow(d, -0.5);
  for (int t = 0; t < T; ++t) {
    std::vector<Eigen::RowVectorXd> keys;
    for (int p = std::max(0, t - c.window_size + 1); p <= t; ++p) keys.push_back(b.kv.row(p));
    for (int j : b.selected[t]) keys.push_back(b.entries.row(j));
    for (int h = 0; h < H; ++h) {
      const Eigen::RowVectorXd qh = b.q.row(t).segment(h * d, d);
      std::vector<double> logit;
      for (const auto& key : keys) logit.push_back(scale * qh.dot(key));
      double top = *std::max_element(logit.begin(), logit.end());
      double den = std::exp(w.attn_sink(h) - top);
      for (double l : logit) den += std::exp(l - top);
      Eigen::RowVectorXd o = Eigen::RowVectorXd::Zero(d);
      for (size_t i = 0; i < keys.size(); ++i) o += std::exp(logit[i] - top) / den * keys[i];
      b.core.row(t).segment(h * d, d) = o;
    }
  }
  b.out_heads = b.core;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) rotate(b.out_heads.row(t).data() + h * d, d, t, freqs, -1);
  const int G = c.o_groups, R = c.o_lora_rank, per_group = H * d / G;
  b.wo_a = Mat(T, G * R);
  for (int g = 0; g < G; ++g)
    b.wo_a.middleCols(g * R, R) =
        b.out_heads.middleCols(g * per_group, per_group) * w.wo_a.middleRows(g * R, R).transpose();
  b.out = b.wo_a * w.wo_b.transpose();
  return b;
}

// max |a - b| over max |b|: fp64 reassociation leaves ~1e-13.
double relative_difference(const Mat& a, const Mat& b) {
  REQUIRE(a.rows() == b.rows());
  REQUIRE(a.cols() == b.cols());
  return (a - b).cwiseAbs().maxCoeff() / b.cwiseAbs().maxCoeff();
}

bool bitwise_equal(const Mat& a, const Mat& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Index i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint64_t>(a.data()[i]) != std::bit_cast<uint64_t>(b.data()[i])) return false;
  return true;
}

}  // namespace

TEST_SUITE("slow") {
  TEST_CASE("V4-Flash dims CSA layer - the exact policy equals an independent fp64 recomputation on 300 tokens") {
    const ModelConfig cfg = flash_test_config();
    const AttentionWeights w = AttentionWeights::random(cfg, 4, 5);
    const Mat x = random_input(kTokens, cfg.dim, 6);
    const AttentionLayer layer(cfg, w, PrecisionPolicy::exact());
    auto cache = make_ring_cache(cfg, 4, 1);
    const StageOutputs o = layer.forward(x, 0, *cache, 0);
    const BruteForce b = brute_force(cfg, w, x);

    // Every dense stage agrees to fp64 reassociation (sums of up to 8192 terms: < 1e-10).
    constexpr double kFp64 = 1e-10;
    CHECK(relative_difference(o.q_latent, b.q_latent) < kFp64);
    CHECK(relative_difference(o.q, b.q) < kFp64);
    CHECK(relative_difference(o.kv, b.kv) < kFp64);
    CHECK(relative_difference(o.compressor_entries, b.entries) < kFp64);
    CHECK(relative_difference(o.indexer_q, b.indexer_q) < kFp64);
    CHECK(relative_difference(o.indexer_weights, b.indexer_weights) < kFp64);
    CHECK(relative_difference(o.indexer_compressor_entries, b.indexer_keys) < kFp64);
    Mat finite_scores = o.indexer_scores, finite_brute = b.scores;
    for (Index i = 0; i < finite_scores.size(); ++i) {
      CHECK(std::isinf(finite_scores.data()[i]) == std::isinf(finite_brute.data()[i]));  // the same mask
      if (std::isinf(finite_scores.data()[i])) finite_scores.data()[i] = finite_brute.data()[i] = 0;
    }
    CHECK(relative_difference(finite_scores, finite_brute) < kFp64);

    // The same entries chosen by every token (prefill offset s: entry j is index s + j); the
    // indexer chooses (fewer picks than visible entries) in most rows.
    int choosing_rows = 0;
    for (int t = 0; t < kTokens; ++t) {
      std::vector<int> got;
      for (Index c = 0; c < o.indexer_topk.cols(); ++c)
        if (o.indexer_topk(t, c) >= 0) got.push_back(o.indexer_topk(t, c) - kTokens);
      std::vector<int> want = b.selected[t];
      std::sort(got.begin(), got.end());
      std::sort(want.begin(), want.end());
      CHECK(got == want);
      choosing_rows += (t + 1) / 4 > cfg.index_topk;
    }
    CHECK(choosing_rows > kTokens / 2);

    CHECK(relative_difference(o.attn_core, b.core) < kFp64);
    CHECK(relative_difference(o.attn_out_heads, b.out_heads) < kFp64);
    CHECK(relative_difference(o.attn_wo_a, b.wo_a) < kFp64);
    CHECK(relative_difference(o.out, b.out) < kFp64);
  }

  TEST_CASE("V4-Flash dims CSA layer - official prefill of 300 equals prefill 150 then 150 decodes bitwise") {
    const ModelConfig cfg = flash_test_config();
    const AttentionLayer layer(cfg, AttentionWeights::random(cfg, 4, 7), PrecisionPolicy::official());
    const Mat x = random_input(kTokens, cfg.dim, 8);
    auto whole_cache = make_ring_cache(cfg, 4, 1);
    const StageOutputs whole = layer.forward(x, 0, *whole_cache, 0);
    auto split_cache = make_ring_cache(cfg, 4, 1);
    const StageOutputs first = layer.forward(x.topRows(150), 0, *split_cache, 0);
    CHECK(bitwise_equal(first.out, whole.out.topRows(150)));
    CHECK(bitwise_equal(first.attn_core, whole.attn_core.topRows(150)));
    for (int t = 150; t < kTokens; ++t) {
      const StageOutputs step = layer.forward(x.middleRows(t, 1), t, *split_cache, 0);
      INFO("position ", t);
      CHECK(bitwise_equal(step.q, whole.q.middleRows(t, 1)));
      CHECK(bitwise_equal(step.kv, whole.kv.middleRows(t, 1)));
      CHECK(bitwise_equal(step.attn_core, whole.attn_core.middleRows(t, 1)));
      CHECK(bitwise_equal(step.out, whole.out.middleRows(t, 1)));
    }
    CHECK(bitwise_equal(split_cache->entries(0, EntryKind::main, kTokens / 4),
                        whole_cache->entries(0, EntryKind::main, kTokens / 4)));
  }
}

}  // namespace dsv4::ref
