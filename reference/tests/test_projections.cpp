// The q path, the window kv path and the output projection against direct formulas (written here
// with their own rotation and norm loops), the FP8 grid of the kv nope dims, and hand-computed
// FP8 values.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <random>
#include <stdexcept>

#include "reference/config.h"
#include "reference/numerics/bf16.h"
#include "reference/numerics/fp8_e4m3.h"
#include "reference/precision.h"
#include "reference/primitives/linear.h"
#include "reference/primitives/rmsnorm.h"
#include "reference/primitives/rope.h"
#include "reference/stages/output_projection.h"
#include "reference/stages/projections.h"

using namespace dsv4::ref;

namespace {

Mat random_uniform(Index rows, Index cols, double lo, double hi, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Mat m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = u(gen);
  return m;
}

// Values k/16, |k| <= 32: bf16 values whose products and dot products are exact in fp64.
Mat grid_values(Index rows, Index cols, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> k(-32, 32);
  Mat m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = k(gen) / 16.0;
  return m;
}

Mat on_bf16_grid(Mat m) {
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = bf16_round(static_cast<float>(m.data()[i]));
  return m;
}

bool bitwise_equal(const Mat& a, const Mat& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Index i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint64_t>(a.data()[i]) != std::bit_cast<uint64_t>(b.data()[i])) return false;
  return true;
}

// tiny() with V4's head_dim 512 (nope 448 = seven FP8 blocks of 64 + rope 64).
ModelConfig tiny_wide_heads() {
  ModelConfig cfg = ModelConfig::tiny();
  cfg.head_dim = 512;
  return cfg;
}

// Weights built here (FP8 weights on the e4m3 128x128-block grid, bf16 weights on the bf16 grid),
// scaled by fan-in so activations stay O(1).
AttentionWeights make_weights(const ModelConfig& cfg, uint64_t seed) {
  const auto fp8 = [&](Index rows, Index cols, uint64_t s) {
    const double a = std::sqrt(3.0 / static_cast<double>(cols));
    return fp8_weight_fake_quant(random_uniform(rows, cols, -a, a, s));
  };
  AttentionWeights w;
  w.wq_a = fp8(cfg.q_lora_rank, cfg.dim, seed + 1);
  w.q_norm = on_bf16_grid(random_uniform(1, cfg.q_lora_rank, 0.5, 1.5, seed + 2)).row(0).transpose();
  w.wq_b = fp8(static_cast<Index>(cfg.n_heads) * cfg.head_dim, cfg.q_lora_rank, seed + 3);
  w.wkv = fp8(cfg.head_dim, cfg.dim, seed + 4);
  w.kv_norm = on_bf16_grid(random_uniform(1, cfg.head_dim, 0.5, 1.5, seed + 5)).row(0).transpose();
  const Index group_width = static_cast<Index>(cfg.n_heads) * cfg.head_dim / cfg.o_groups;
  w.wo_a = grid_values(static_cast<Index>(cfg.o_groups) * cfg.o_lora_rank, group_width, seed + 6);
  w.wo_b = fp8(cfg.dim, static_cast<Index>(cfg.o_groups) * cfg.o_lora_rank, seed + 7);
  return w;
}

// Rotates the interleaved pairs of the last rope_dim dims of each head by angle sign * t * freq_k.
void rotate_heads(Eigen::Ref<Eigen::RowVectorXd> row, int heads, int head_dim, const RopeTable& rope, int64_t t,
                  double sign) {
  for (int h = 0; h < heads; ++h)
    for (int k = 0; k < rope.rope_dim / 2; ++k) {
      const Index c = h * head_dim + head_dim - rope.rope_dim + 2 * k;
      const double angle = sign * static_cast<double>(t) * rope.freqs(k);
      const double re = row(c), im = row(c + 1);
      row(c) = re * std::cos(angle) - im * std::sin(angle);
      row(c + 1) = re * std::sin(angle) + im * std::cos(angle);
    }
}

// y * weight / sqrt(mean(y^2) + eps) over groups of `width` columns.
Mat normalized(const Mat& y, Index width, const Vec* weight, double eps) {
  Mat out = y;
  for (Index i = 0; i < y.rows(); ++i)
    for (Index g = 0; g < y.cols(); g += width) {
      double squares = 0;
      for (Index c = g; c < g + width; ++c) squares += y(i, c) * y(i, c);
      const double inv_rms = 1.0 / std::sqrt(squares / static_cast<double>(width) + eps);
      for (Index c = g; c < g + width; ++c) out(i, c) = y(i, c) * inv_rms * (weight ? (*weight)(c - g) : 1.0);
    }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// window kv and quantize_kv_nope

TEST_CASE("quantize_kv_nope: hand-computed e4m3 values with a UE8M0 block scale and rope dims untouched") {
  // One block of 64 nope dims (amax 100: t = 100/448 = 0.223, s = 2^ceil(log2 t) = 1/4), then 2 rope dims.
  Mat kv = Mat::Zero(1, 66);
  kv(0, 0) = 100.0;         // 400 -> e4m3 spacing 32 in [256, 512): 12.5 ties to even 12 -> 384 -> 96
  kv(0, 1) = 1.0;           // 4 is on the grid
  kv(0, 2) = 0.3;           // 1.2 -> spacing 1/8 in [1, 2): 9.6 -> 10 -> 1.25 -> 0.3125
  kv(0, 3) = -0.01;         // -0.04 -> subnormal spacing 2^-9: 20.48 -> 20 -> -0.0390625 -> -0.009765625
  kv(0, 64) = 0.123456789;  // rope dims keep their values, even off the bf16 grid
  kv(0, 65) = -7.77;
  Mat unset = kv;
  quantize_kv_nope(kv, 2, PrecisionPolicy::official());
  CHECK(kv(0, 0) == 96.0);
  CHECK(kv(0, 1) == 1.0);
  CHECK(kv(0, 2) == 0.3125);
  CHECK(kv(0, 3) == -0.009765625);
  CHECK(kv.block(0, 4, 1, 60).cwiseAbs().maxCoeff() == 0.0);
  CHECK(kv(0, 64) == 0.123456789);
  CHECK(kv(0, 65) == -7.77);
  // without a kv_nope format nothing changes
  quantize_kv_nope(unset, 2, PrecisionPolicy::exact());
  CHECK(unset(0, 2) == 0.3);
  // a nope width that is not a multiple of the block
  Mat odd = Mat::Zero(2, 70);
  CHECK_THROWS_AS(quantize_kv_nope(odd, 2, PrecisionPolicy::official()), std::invalid_argument);
}

TEST_CASE("window_kv official: nope dims on the FP8 grid per 64-block and rope dims bf16 unquantized") {
  const ModelConfig cfg = tiny_wide_heads();
  const PrecisionPolicy p = PrecisionPolicy::official();
  const AttentionWeights w = make_weights(cfg, 100);
  const RopeTable rope = RopeTable::for_layer(cfg, 4, p);
  const Mat x = on_bf16_grid(random_uniform(6, cfg.dim, -2, 2, 101));
  const int64_t start_pos = 21;
  const Mat kv = window_kv(w, x, start_pos, rope, cfg, p);

  // Before the quantization: the primitives in DeepSeek's order (RMSNorm, then RoPE).
  Mat before = rms_norm(linear_fp8_weight(x, w.wkv, p), w.kv_norm, cfg.norm_eps, p);
  for (Index i = 0; i < before.rows(); ++i) apply_rope(before.row(i), 1, cfg.head_dim, start_pos + i, rope, false, p);

  const Index nope = cfg.nope_dim();
  bool some_value_moved = false;
  for (Index i = 0; i < kv.rows(); ++i) {
    for (Index b = 0; b < nope; b += 64) {
      // act_quant: s = 2^ceil(log2(f32(max(amax, 1e-4) * f32(1/448)))), x = bf16(s * e4m3(x / s))
      double amax = 0;
      for (Index c = b; c < b + 64; ++c) amax = std::max(amax, std::fabs(before(i, c)));
      const float t = std::max(static_cast<float>(amax), 1e-4f) * (1.0f / 448.0f);
      int e = 0;
      const float mant = std::frexp(t, &e);
      const double s = std::ldexp(1.0, mant == 0.5f ? e - 1 : e);
      for (Index c = b; c < b + 64; ++c) {
        const double want = bf16_round(static_cast<float>(s * fp8_e4m3_round(before(i, c) / s)));
        CHECK(kv(i, c) == want);
        CHECK(std::fabs(kv(i, c) / s) <= 448.0);
        CHECK(fp8_e4m3_round(kv(i, c) / s) == kv(i, c) / s);  // on the grid of its block
        some_value_moved |= kv(i, c) != before(i, c);
      }
    }
    for (Index c = nope; c < cfg.head_dim; ++c) {
      CHECK(kv(i, c) == before(i, c));
      CHECK(kv(i, c) == bf16_round(static_cast<float>(kv(i, c))));
    }
  }
  CHECK(some_value_moved);
}

TEST_CASE("window_kv and q_latent exact: the direct formulas") {
  const ModelConfig cfg = tiny_wide_heads();
  const PrecisionPolicy p = PrecisionPolicy::exact();
  const AttentionWeights w = make_weights(cfg, 200);
  const RopeTable rope = RopeTable::for_layer(cfg, 128, p);
  const Mat x = random_uniform(5, cfg.dim, -2, 2, 201);
  const int64_t start_pos = 1000;

  Mat want = normalized(x * w.wkv.transpose(), cfg.head_dim, &w.kv_norm, cfg.norm_eps);
  for (Index i = 0; i < want.rows(); ++i) rotate_heads(want.row(i), 1, cfg.head_dim, rope, start_pos + i, +1);
  // fp64 reassociation of 256-term dot products and of the norm: ~1e-14 on O(1) values
  CHECK((window_kv(w, x, start_pos, rope, cfg, p) - want).cwiseAbs().maxCoeff() < 1e-12);

  const Mat latent = normalized(x * w.wq_a.transpose(), cfg.q_lora_rank, &w.q_norm, cfg.norm_eps);
  CHECK((q_latent(w, x, cfg, p) - latent).cwiseAbs().maxCoeff() < 1e-12);
}

// ---------------------------------------------------------------------------------------------
// q heads

TEST_CASE("q_heads: per-head weightless RMS norm then RoPE at start_pos + i") {
  const ModelConfig cfg = ModelConfig::tiny();
  const AttentionWeights w = make_weights(cfg, 300);
  const Mat latent = random_uniform(4, cfg.q_lora_rank, -2, 2, 301);
  const int64_t start_pos = 77;

  SUBCASE("exact: the formula") {
    const PrecisionPolicy p = PrecisionPolicy::exact();
    const RopeTable rope = RopeTable::for_layer(cfg, 0, p);
    Mat want = normalized(latent * w.wq_b.transpose(), cfg.head_dim, nullptr, cfg.norm_eps);
    for (Index i = 0; i < want.rows(); ++i)
      rotate_heads(want.row(i), cfg.n_heads, cfg.head_dim, rope, start_pos + i, +1);
    CHECK((q_heads(w, latent, start_pos, rope, cfg, p) - want).cwiseAbs().maxCoeff() < 1e-12);  // fp64 reassociation
  }

  SUBCASE("official: norm before RoPE, bitwise (the order matters once bf16 rounds)") {
    const PrecisionPolicy p = PrecisionPolicy::official();
    const RopeTable rope = RopeTable::for_layer(cfg, 4, p);
    const Mat projected = linear_fp8_weight(latent, w.wq_b, p);
    Mat norm_then_rope = head_rms_norm(projected, cfg.n_heads, cfg.norm_eps, p);
    for (Index i = 0; i < norm_then_rope.rows(); ++i)
      apply_rope(norm_then_rope.row(i), cfg.n_heads, cfg.head_dim, start_pos + i, rope, false, p);
    Mat rope_then_norm = projected;
    for (Index i = 0; i < rope_then_norm.rows(); ++i)
      apply_rope(rope_then_norm.row(i), cfg.n_heads, cfg.head_dim, start_pos + i, rope, false, p);
    rope_then_norm = head_rms_norm(rope_then_norm, cfg.n_heads, cfg.norm_eps, p);

    const Mat got = q_heads(w, latent, start_pos, rope, cfg, p);
    CHECK(bitwise_equal(got, norm_then_rope));
    CHECK(!bitwise_equal(got, rope_then_norm));
    // within bf16 roundings of the exact formula on the same projection: the norm's five bf16 ops
    // and RoPE's bf16 store, each relative 2^-8 (RoPE mixes a pair, so relative to the largest value)
    Mat exact = normalized(projected, cfg.head_dim, nullptr, cfg.norm_eps);
    for (Index i = 0; i < exact.rows(); ++i)
      rotate_heads(exact.row(i), cfg.n_heads, cfg.head_dim, rope, start_pos + i, +1);
    CHECK((got - exact).cwiseAbs().maxCoeff() <= 6 * std::ldexp(exact.cwiseAbs().maxCoeff(), -8));
  }
}

// ---------------------------------------------------------------------------------------------
// output projection

TEST_CASE("inverse_rope_heads undoes RoPE and touches only the rope dims") {
  const ModelConfig cfg = ModelConfig::tiny();
  const PrecisionPolicy p = PrecisionPolicy::exact();
  const RopeTable rope = RopeTable::for_layer(cfg, 4, p);
  const Mat o = random_uniform(5, cfg.n_heads * cfg.head_dim, -1, 1, 401);
  const int64_t start_pos = 513;

  Mat rotated = o;
  for (Index i = 0; i < rotated.rows(); ++i)
    apply_rope(rotated.row(i), cfg.n_heads, cfg.head_dim, start_pos + i, rope, false, p);
  const Mat back = inverse_rope_heads(rotated, start_pos, rope, cfg, p);
  CHECK((back - o).cwiseAbs().maxCoeff() < 1e-14);  // a rotation and its inverse: a few fp64 ulps of O(1)

  // against the rotation by -angle written out, and nope dims bitwise unchanged
  Mat want = o;
  for (Index i = 0; i < want.rows(); ++i) rotate_heads(want.row(i), cfg.n_heads, cfg.head_dim, rope, start_pos + i, -1);
  const Mat got = inverse_rope_heads(o, start_pos, rope, cfg, p);
  CHECK((got - want).cwiseAbs().maxCoeff() < 1e-14);
  for (int h = 0; h < cfg.n_heads; ++h)
    CHECK(bitwise_equal(got.middleCols(h * cfg.head_dim, cfg.nope_dim()),
                        o.middleCols(h * cfg.head_dim, cfg.nope_dim())));
}

TEST_CASE("grouped_wo_a equals the dense block-diagonal product") {
  const ModelConfig cfg = ModelConfig::tiny();  // G = 2 groups of 2 heads x 128 -> rank 64 each
  const AttentionWeights w = make_weights(cfg, 500);
  const Mat o = grid_values(3, cfg.n_heads * cfg.head_dim, 501);
  const Index G = cfg.o_groups, R = cfg.o_lora_rank, width = o.cols() / G;
  Mat dense = Mat::Zero(G * R, o.cols());
  for (Index g = 0; g < G; ++g) dense.block(g * R, g * width, R, width) = w.wo_a.middleRows(g * R, R);
  const Mat want = o * dense.transpose();  // exact: grid values

  CHECK(bitwise_equal(grouped_wo_a(w, o, cfg, PrecisionPolicy::exact()), want));
  CHECK(bitwise_equal(grouped_wo_a(w, o, cfg, PrecisionPolicy::official()), on_bf16_grid(want)));

  AttentionWeights wrong = w;
  wrong.wo_a = w.wo_a.leftCols(width - 1);
  CHECK_THROWS_AS(grouped_wo_a(wrong, o, cfg, PrecisionPolicy::exact()), std::invalid_argument);
}

TEST_CASE("wo_b exact is the plain product") {
  const ModelConfig cfg = ModelConfig::tiny();
  const AttentionWeights w = make_weights(cfg, 600);
  const Mat o_lora = random_uniform(3, cfg.o_groups * cfg.o_lora_rank, -1, 1, 601);
  // fp64 reassociation of 128-term sums
  CHECK((wo_b(w, o_lora, PrecisionPolicy::exact()) - o_lora * w.wo_b.transpose()).cwiseAbs().maxCoeff() < 1e-12);
}
