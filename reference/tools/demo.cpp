// dsv4-oracle-demo: one attention layer with random weights and inputs, a prefill then N one-token
// decodes, printing every stage of every call: its shape and a few statistics, and for the index
// stages their first rows. Stage names are the capture format's datasets.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <random>
#include <stdexcept>
#include <string>

#include "reference/config.h"
#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/numerics/storage.h"
#include "reference/precision.h"
#include "reference/weights.h"

namespace {

using dsv4::ref::CompressorState;
using dsv4::ref::Index;
using dsv4::ref::IndexMat;
using dsv4::ref::Mat;
using dsv4::ref::StageOutputs;

// mean, rms and max|.| over the finite values; masked (-inf) values are counted apart.
void print_dense(const std::string& name, const Mat& m) {
  if (m.size() == 0) {
    fmt::print("  {:<30} [{}, {}]\n", name, m.rows(), m.cols());
    return;
  }
  double sum = 0, sum_sq = 0, max_abs = 0;
  int64_t finite = 0;
  for (Index i = 0; i < m.size(); ++i) {
    const double v = m.data()[i];
    if (!std::isfinite(v)) continue;
    ++finite;
    sum += v;
    sum_sq += v * v;
    max_abs = std::max(max_abs, std::abs(v));
  }
  const double n = static_cast<double>(std::max<int64_t>(finite, 1));
  std::string first;
  for (Index c = 0; c < std::min<Index>(4, m.cols()); ++c) first += fmt::format(" {:+.5g}", m(0, c));
  fmt::print("  {:<30} [{}, {}]  mean {:+.4e}  rms {:.4e}  max|.| {:.4e}  row0:{}{}\n", name, m.rows(), m.cols(),
             sum / n, std::sqrt(sum_sq / n), max_abs, first,
             finite < m.size() ? fmt::format("  ({} masked)", m.size() - finite) : "");
}

// The first rows and the last one (the query that sees the most keys).
void print_indices(const std::string& name, const IndexMat& m, Index first_rows) {
  fmt::print("  {:<30} [{}, {}]\n", name, m.rows(), m.cols());
  const Index cols_shown = std::min<Index>(m.cols(), 24);
  for (Index r = 0; r < m.rows(); ++r) {
    if (r >= first_rows && r != m.rows() - 1) continue;
    std::string row;
    for (Index c = 0; c < cols_shown; ++c) row += fmt::format(" {}", m(r, c));
    fmt::print("    row {:>4}:{}{}\n", r, row, cols_shown < m.cols() ? " ..." : "");
  }
}

void print_state(const std::string& name, const CompressorState& s) {
  print_dense(name + "/state_kv", s.kv);
  print_dense(name + "/state_score", s.score);
}

void print_call(const StageOutputs& o, int ratio) {
  print_dense("q_latent", o.q_latent);
  print_dense("q", o.q);
  print_dense("kv", o.kv);
  if (ratio == 4) {
    print_dense("indexer/q", o.indexer_q);
    print_dense("indexer/weights", o.indexer_weights);
    print_dense("indexer/compressor/entries", o.indexer_compressor_entries);
    print_state("indexer/compressor", o.indexer_compressor_state);
    print_dense("indexer/scores", o.indexer_scores);
    print_indices("indexer/topk", o.indexer_topk, 2);
  }
  if (ratio != 0) {
    print_dense("compressor/entries", o.compressor_entries);
    print_state("compressor", o.compressor_state);
  }
  print_indices("topk_idxs", o.topk_idxs, 2);
  print_dense("attn/core", o.attn_core);
  print_dense("attn/out_heads", o.attn_out_heads);
  print_dense("attn/wo_a", o.attn_wo_a);
  print_dense("out", o.out);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dsv4-oracle-demo: one DeepSeek-V4 attention layer through the CPU oracle, stage by stage"};
  std::string config = "tiny";
  int ratio = 4;
  int64_t prefill = 37;
  int64_t decode = 3;
  std::string precision = "official";
  uint64_t seed = 1;
  app.add_option("--config", config, "model dims: tiny, flash or pro")->check(CLI::IsMember({"tiny", "flash", "pro"}));
  app.add_option("--ratio", ratio, "compress ratio of the layer: 0, 4 or 128")->check(CLI::IsMember({0, 4, 128}));
  app.add_option("--prefill", prefill, "tokens of the prefill call")->check(CLI::PositiveNumber);
  app.add_option("--decode", decode, "one-token decode calls after the prefill")->check(CLI::NonNegativeNumber);
  app.add_option("--precision", precision, "precision policy (exact, official, ...)");
  app.add_option("--seed", seed, "seed of the random weights and inputs");
  CLI11_PARSE(app, argc, argv);

  try {
    using namespace dsv4::ref;
    const ModelConfig cfg = ModelConfig::by_name(config);
    const PrecisionPolicy policy = PrecisionPolicy::by_name(precision);
    if (prefill + decode > cfg.max_seq_len)
      throw std::invalid_argument(fmt::format("--prefill + --decode = {} is past max_seq_len = {} of config {}",
                                              prefill + decode, cfg.max_seq_len, cfg.name));
    fmt::print("config {} (dim {}, heads {}, head_dim {}, window {}), ratio {}, precision: {}\n", cfg.name, cfg.dim,
               cfg.n_heads, cfg.head_dim, cfg.window_size, ratio, policy.describe());
    const AttentionLayer layer(cfg, AttentionWeights::random(cfg, ratio, seed), policy);

    // Attention inputs are bf16 in DeepSeek's code: N(0, 1) values rounded to bf16.
    std::mt19937_64 rng(seed + 1);
    std::normal_distribution<double> normal(0.0, 1.0);
    Mat x(prefill + decode, cfg.dim);
    for (Index i = 0; i < x.size(); ++i) x.data()[i] = round_to(Storage::bf16, normal(rng));

    auto cache = make_ring_cache(cfg, ratio, 1);
    int64_t start = 0;
    for (int64_t call = 0; call <= decode; ++call) {
      const int64_t s = call == 0 ? prefill : 1;
      const auto t0 = std::chrono::steady_clock::now();
      const StageOutputs o = layer.forward(x.middleRows(start, s), start, *cache, 0);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print("\ncall {}: {} of positions [{}, {}) ({:.3f} s)\n", call, call == 0 ? "prefill" : "decode", start,
                 start + s, seconds);
      print_call(o, ratio);
      start += s;
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
