#include "verify/precision/activation_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "reference/numerics/storage.h"
#include "reference/primitives/linear.h"
#include "reference/random.h"

namespace dsv4::verify {

namespace {

// Independent streams of one seed.
uint64_t stream_seed(uint64_t seed, uint64_t stream) {
  return ref::splitmix64(seed ^ (stream * 0x9e3779b97f4a7c15ULL));
}

// N(0, 1) draws, one Box-Muller pair per draw (its cosine): the plain model's values are those the
// synthetic inputs drew before models existed.
ref::NormalStream normals(uint64_t seed) { return ref::NormalStream(seed, ref::NormalStream::Pairs::cosine_only); }

void require(bool ok, const std::string& option, const std::string& expected, const std::string& found) {
  if (!ok) throw std::invalid_argument(fmt::format("{}: expected {}, found {}", option, expected, found));
}

// Rows `dims` of every head of a [heads * head_dim, cols] weight times `gain`.
void scale_head_rows(ref::Mat& w, int heads, int head_dim, const std::vector<int>& dims, double gain) {
  for (int h = 0; h < heads; ++h)
    for (int c : dims) w.row(static_cast<ref::Index>(h) * head_dim + c) *= gain;
}

// Entries `dims` of an RMSNorm weight times `gain`, back on the bf16 grid of the checkpoint.
void scale_norm(ref::Vec& norm, const std::vector<int>& dims, double gain) {
  for (int c : dims) norm(c) = ref::round_to(ref::Storage::bf16, norm(c) * gain);
}

}  // namespace

std::string ActivationModel::describe() const {
  if (plain()) return "x ~ N(0, 1), weights as drawn";
  std::string x = x_tail_dof > 0 ? fmt::format("Student-t({}) rows scaled to variance 1", x_tail_dof) : "N(0, 1) rows";
  if (x_heavy_channels > 0)
    x += fmt::format(", {} heavy channel{} at +-{:g} sd", x_heavy_channels, x_heavy_channels == 1 ? "" : "s",
                     x_heavy_scale);
  const std::string qk = qk_heavy_channels > 0
                             ? fmt::format("{} heavy dim{} per head x {:g} (attention and indexer)", qk_heavy_channels,
                                           qk_heavy_channels == 1 ? "" : "s", qk_heavy_scale)
                             : "no heavy dims";
  return fmt::format("x: {}; q/k: {}", x, qk);
}

void ActivationModel::validate(const ref::ModelConfig& cfg) const {
  require(x_heavy_channels >= 0 && x_heavy_channels <= cfg.dim, "--x-heavy-channels",
          fmt::format("a count in [0, dim = {}]", cfg.dim), std::to_string(x_heavy_channels));
  require(std::isfinite(x_heavy_scale) && x_heavy_scale > 0, "--x-heavy-scale", "a positive number",
          fmt::format("{}", x_heavy_scale));
  require(x_tail_dof == 0 || x_tail_dof >= 3, "--x-tail-dof", "0 (normal) or >= 3 (a finite variance to scale to 1)",
          std::to_string(x_tail_dof));
  const int qk_dims = std::min(cfg.head_dim, cfg.index_head_dim);
  require(qk_heavy_channels >= 0 && qk_heavy_channels <= qk_dims, "--qk-heavy-channels",
          fmt::format("a count in [0, {}] (the smaller head dim)", qk_dims), std::to_string(qk_heavy_channels));
  require(std::isfinite(qk_heavy_scale) && qk_heavy_scale > 0, "--qk-heavy-scale", "a positive number",
          fmt::format("{}", qk_heavy_scale));
}

std::vector<int> heavy_channels(int count, int n, uint64_t seed) {
  if (count < 0 || count > n) throw std::invalid_argument(fmt::format("heavy_channels: {} of {} channels", count, n));
  std::vector<int> all(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  // A partial Fisher-Yates shuffle with the generator's own output (no std distribution).
  std::mt19937_64 rng(seed);
  for (int i = 0; i < count; ++i) {
    const auto j = static_cast<size_t>(i) + static_cast<size_t>(rng() % static_cast<uint64_t>(n - i));
    std::swap(all[static_cast<size_t>(i)], all[j]);
  }
  std::vector<int> chosen(all.begin(), all.begin() + count);
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

ref::Mat model_x(const ActivationModel& m, int64_t tokens, int dim, const std::vector<int>& heavy, uint64_t seed) {
  ref::NormalStream z_draws = normals(seed);                     // the entries (the plain model's stream)
  ref::NormalStream chi2_draws = normals(stream_seed(seed, 1));  // Student-t denominators
  std::mt19937_64 signs(stream_seed(seed, 2));                   // the heavy channels' signs
  std::vector<double> offset(static_cast<size_t>(dim), 0.0);
  for (int c : heavy) offset[static_cast<size_t>(c)] = (signs() >> 63 ? -1.0 : 1.0) * m.x_heavy_scale;
  // Student-t(nu) = z / sqrt(chi2_nu / nu) has variance nu / (nu - 2): scaled back to 1.
  const double t_scale = m.x_tail_dof > 0 ? std::sqrt((m.x_tail_dof - 2.0) / m.x_tail_dof) : 1.0;

  ref::Mat x(tokens, dim);
  for (ref::Index t = 0; t < tokens; ++t)
    for (ref::Index c = 0; c < dim; ++c) {
      double z = z_draws();
      if (m.x_tail_dof > 0) {
        double sum = 0.0;
        for (int k = 0; k < m.x_tail_dof; ++k) {
          const double n = chi2_draws();
          sum += n * n;
        }
        z *= t_scale / std::sqrt(sum / m.x_tail_dof);
      }
      if (offset[static_cast<size_t>(c)] != 0.0) z += offset[static_cast<size_t>(c)];
      x(t, c) = ref::round_to(ref::Storage::bf16, z);
    }
  return x;
}

void add_heavy_qk_dims(ref::AttentionWeights& w, const ref::ModelConfig& cfg, const ActivationModel& m,
                       const std::vector<int>& attention_dims, const std::vector<int>& indexer_dims) {
  if (m.qk_heavy_channels == 0) return;
  const double gain = m.qk_heavy_scale;
  // Attention q: wq_b's rows, then the per-head RMSNorm keeps their share of each head.
  scale_head_rows(w.wq_b, cfg.n_heads, cfg.head_dim, attention_dims, gain);
  w.wq_b = ref::fp8_weight_fake_quant(w.wq_b);
  // Attention keys: the window kv and the compressed entries, through their norms' weights.
  scale_norm(w.kv_norm, attention_dims, gain);
  if (w.compress_ratio != 0) scale_norm(w.compressor.norm, attention_dims, gain);
  if (w.compress_ratio == 4) {
    scale_head_rows(w.indexer.wq_b, cfg.index_n_heads, cfg.index_head_dim, indexer_dims, gain);
    w.indexer.wq_b = ref::fp8_weight_fake_quant(w.indexer.wq_b);
    scale_norm(w.indexer.compressor.norm, indexer_dims, gain);
  }
}

}  // namespace dsv4::verify
