// The indexer (q, weights, scores), top-k and the index lists, against brute force written
// independently (triple loops, hand-written tables) and the cases production kernels got wrong:
// ties at the k-th score (ROCm aiter #4376), -1 padding, the causal boundary (t+1)/4.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "reference/config.h"
#include "reference/numerics/bf16.h"
#include "reference/numerics/fp4_e2m1.h"
#include "reference/precision.h"
#include "reference/primitives/hadamard.h"
#include "reference/primitives/linear.h"
#include "reference/primitives/rope.h"
#include "reference/stages/index_lists.h"
#include "reference/stages/indexer.h"
#include "reference/stages/topk.h"

using namespace dsv4::ref;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Values k/16 with |k| <= 32: on the bf16 grid, and every product and dot product of up to
// thousands of them is exact in fp64, so a brute force and the stage agree bitwise.
Mat grid_values(Index rows, Index cols, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> k(-32, 32);
  Mat m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = k(gen) / 16.0;
  return m;
}

Mat random_uniform(Index rows, Index cols, double range, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-range, range);
  Mat m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = u(gen);
  return m;
}

double bf16_of(double x) { return bf16_round(static_cast<float>(x)); }

// Triple loop over queries, entries and heads. `round` is applied where DeepSeek's bf16 tensor ops
// store: the q.k einsum, relu * w, and the head sum.
template <typename Round>
Mat brute_scores(const Mat& q, const Mat& w, const Mat& keys, int64_t start_pos, int ratio, Round round) {
  const Index heads = w.cols(), head_dim = keys.cols();
  Mat out(q.rows(), keys.rows());
  for (Index i = 0; i < q.rows(); ++i)
    for (Index j = 0; j < keys.rows(); ++j) {
      const int64_t t = start_pos + i;
      if ((j + 1) * ratio > t + 1) {  // block j ends at position (j+1)*ratio - 1 > t: not complete
        out(i, j) = -kInf;
        continue;
      }
      double sum = 0;
      for (Index h = 0; h < heads; ++h) {
        double dot = 0;
        for (Index c = 0; c < head_dim; ++c) dot += q(i, h * head_dim + c) * keys(j, c);
        sum += round(round(w(i, h)) * std::max(0.0, round(dot)));
      }
      out(i, j) = round(sum);
    }
  return out;
}

bool bitwise_equal(const Mat& a, const Mat& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Index i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint64_t>(a.data()[i]) != std::bit_cast<uint64_t>(b.data()[i])) return false;
  return true;
}

IndexMat rows_of(std::initializer_list<std::initializer_list<int32_t>> rows) {
  IndexMat m(static_cast<Index>(rows.size()), static_cast<Index>(rows.begin()->size()));
  Index i = 0;
  for (const auto& r : rows) {
    Index j = 0;
    for (int32_t v : r) m(i, j++) = v;
    ++i;
  }
  return m;
}

// The FP4 e2m1 fake-quant of DeepSeek's fp4_act_quant, written from docs/math.md ("indexer/q"): blocks
// of 32, s = 2^ceil(log2(f32(max(amax, 6*2^-126) * f32(1/6)))), x = s * e2m1(x / s).
void brute_fp4_quant(Mat& m) {
  for (Index i = 0; i < m.rows(); ++i)
    for (Index b = 0; b < m.cols(); b += 32) {
      double amax = 0;
      for (Index c = b; c < b + 32; ++c) amax = std::max(amax, std::fabs(m(i, c)));
      const float t = std::max(static_cast<float>(amax), 6.0f * std::ldexp(1.0f, -126)) * (1.0f / 6.0f);
      int e = 0;
      const float mant = std::frexp(t, &e);  // t = mant * 2^e, mant in [0.5, 1)
      const double s = std::ldexp(1.0, mant == 0.5f ? e - 1 : e);
      for (Index c = b; c < b + 32; ++c) m(i, c) = s * fp4_e2m1_round(m(i, c) / s);
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// indexer_scores

TEST_CASE("indexer_scores: exact and official equal the triple loop bitwise") {
  const int heads = 3, head_dim = 8, ratio = 4;
  for (const auto& [start_pos, s] : {std::pair<int64_t, int64_t>{0, 13}, {5, 7}, {11, 1}, {14, 1}}) {
    CAPTURE(start_pos);
    const Index n_keys = (start_pos + s) / ratio;
    const Mat q = grid_values(s, heads * head_dim, 1 + start_pos);
    const Mat w = grid_values(s, heads, 2 + start_pos);
    const Mat keys = grid_values(n_keys, head_dim, 3 + start_pos);

    const Mat exact = indexer_scores(q, w, keys, start_pos, ratio, PrecisionPolicy::exact());
    CHECK(bitwise_equal(exact, brute_scores(q, w, keys, start_pos, ratio, [](double v) { return v; })));

    const Mat official = indexer_scores(q, w, keys, start_pos, ratio, PrecisionPolicy::official());
    CHECK(bitwise_equal(official, brute_scores(q, w, keys, start_pos, ratio, bf16_of)));

    PrecisionPolicy fp32_scores = PrecisionPolicy::official();
    fp32_scores.indexer_scores = Storage::fp32;
    CHECK(bitwise_equal(indexer_scores(q, w, keys, start_pos, ratio, fp32_scores),
                        brute_scores(q, w, keys, start_pos, ratio,
                                     [](double v) { return static_cast<double>(static_cast<float>(v)); })));
  }
  // the bf16 roundings are real: 13-bit dot products do not fit bf16
  const Mat q = grid_values(13, 24, 1), w = grid_values(13, 3, 2), keys = grid_values(3, 8, 3);
  CHECK(!bitwise_equal(indexer_scores(q, w, keys, 0, 4, PrecisionPolicy::exact()),
                       indexer_scores(q, w, keys, 0, 4, PrecisionPolicy::official())));
}

TEST_CASE("indexer_scores: V4 dims (64 heads of 128) equal the triple loop") {
  const Mat q = grid_values(4, 64 * 128, 7);
  const Mat w = grid_values(4, 64, 8);
  const Mat keys = grid_values(11, 128, 9);  // positions 40..43: (43+1)/4 = 11 entries
  CHECK(bitwise_equal(indexer_scores(q, w, keys, 40, 4, PrecisionPolicy::official()),
                      brute_scores(q, w, keys, 40, 4, bf16_of)));
}

TEST_CASE("indexer_scores: causal visibility j < (t+1)/4 in prefill and chunked and decode calls") {
  const auto visible_pattern = [](int64_t start_pos, int64_t s) -> Mat {
    const Index n_keys = (start_pos + s) / 4;
    const Mat q = Mat::Ones(s, 2 * 4), w = Mat::Ones(s, 2), keys = Mat::Ones(n_keys, 4);
    return indexer_scores(q, w, keys, start_pos, 4, PrecisionPolicy::official()).unaryExpr([](double v) {
      return std::isfinite(v) ? 1.0 : 0.0;
    });
  };
  // prefill of 9 tokens: rows 0-2 see nothing, 3-6 entry 0, 7-8 entries 0 and 1
  Mat want(9, 2);
  want << 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1, 1, 1;
  CHECK(visible_pattern(0, 9) == want);
  // chunk of positions 5..11: (t+1)/4 = 1, 1, 2, 2, 2, 2, 3
  Mat chunk(7, 3);
  chunk << 1, 0, 0, 1, 0, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1;
  CHECK(visible_pattern(5, 7) == chunk);
  // decode: every one of the (pos+1)/4 entries is visible, including one completed at this step
  for (const int64_t pos : {3, 4, 7, 10, 11, 12, 99}) {
    CAPTURE(pos);
    const Mat row = visible_pattern(pos, 1);
    CHECK(row.cols() == (pos + 1) / 4);
    CHECK(row.sum() == static_cast<double>(row.cols()));
  }
}

TEST_CASE("indexer_scores: bad shapes throw") {
  const Mat q = Mat::Ones(2, 8), w = Mat::Ones(2, 2), keys = Mat::Ones(1, 4);
  CHECK_THROWS_AS(indexer_scores(q, w, Mat::Ones(1, 3), 4, 4, PrecisionPolicy::exact()), std::invalid_argument);
  CHECK_THROWS_AS(indexer_scores(q, Mat::Ones(3, 2), keys, 4, 4, PrecisionPolicy::exact()), std::invalid_argument);
  CHECK_THROWS_AS(indexer_scores(q, w, keys, 4, 0, PrecisionPolicy::exact()), std::invalid_argument);
  // no key yet (a prefill shorter than one block): an empty score matrix
  CHECK(indexer_scores(q, w, Mat(0, 4), 0, 4, PrecisionPolicy::exact()).cols() == 0);
}

// ---------------------------------------------------------------------------------------------
// indexer_weights and indexer_q

TEST_CASE("indexer_weights: weights_proj(x) times ID^-1/2 IH^-1/2 = 2^-6.5 for V4") {
  ModelConfig cfg = ModelConfig::tiny();
  cfg.index_n_heads = 64;  // V4's 64 heads of 128: the multiplier of docs/math.md "indexer/weights"
  cfg.index_head_dim = 128;
  IndexerWeights w;
  w.weights_proj = grid_values(64, 32, 11);
  const Mat x = grid_values(3, 32, 12);
  const Mat projected = x * w.weights_proj.transpose();  // exact: grid values

  const double multiplier = 0.011048543456039806;  // 2^-6.5 as DeepSeek's code writes it
  const Mat exact = indexer_weights(w, x, cfg, PrecisionPolicy::exact());
  CHECK(((exact - projected * multiplier).cwiseAbs().array() <= 1e-16 * projected.cwiseAbs().array()).all());

  // Official: bf16 linear output, times the Python float in torch's fp32 opmath, stored bf16.
  const Mat official = indexer_weights(w, x, cfg, PrecisionPolicy::official());
  for (Index i = 0; i < official.rows(); ++i)
    for (Index h = 0; h < official.cols(); ++h) {
      const float y = bf16_round(static_cast<float>(projected(i, h)));
      CHECK(official(i, h) == bf16_round(y * static_cast<float>(multiplier)));
    }
}

TEST_CASE("indexer_q: rope then Hadamard then FP4 per 32-block") {
  const ModelConfig cfg = ModelConfig::tiny();  // IH = 4 heads of ID = 128 (V4's head dim)
  const int heads = cfg.index_n_heads, head_dim = cfg.index_head_dim, rope_dim = cfg.rope_head_dim;
  IndexerWeights w;
  w.wq_b = fp8_weight_fake_quant(random_uniform(heads * head_dim, cfg.q_lora_rank, 0.1, 21));
  const Mat q_latent = grid_values(5, cfg.q_lora_rank, 22);
  const int64_t start_pos = 37;

  SUBCASE("exact: the formula with a hand-built Hadamard matrix and rotation") {
    const PrecisionPolicy p = PrecisionPolicy::exact();
    const RopeTable rope = RopeTable::for_layer(cfg, 4, p);
    Mat want = q_latent * w.wq_b.transpose();
    for (Index i = 0; i < want.rows(); ++i)
      for (int h = 0; h < heads; ++h)
        for (int k = 0; k < rope_dim / 2; ++k) {
          const Index c = h * head_dim + head_dim - rope_dim + 2 * k;
          const double angle = static_cast<double>(start_pos + i) * rope.freqs(k);
          const double re = want(i, c), im = want(i, c + 1);
          want(i, c) = re * std::cos(angle) - im * std::sin(angle);
          want(i, c + 1) = re * std::sin(angle) + im * std::cos(angle);
        }
    Mat hadamard(head_dim, head_dim);
    for (int a = 0; a < head_dim; ++a)
      for (int b = 0; b < head_dim; ++b)
        hadamard(a, b) = (std::popcount(static_cast<unsigned>(a & b)) % 2 ? -1.0 : 1.0) / std::sqrt(128.0);
    for (int h = 0; h < heads; ++h)
      want.middleCols(h * head_dim, head_dim) = (want.middleCols(h * head_dim, head_dim) * hadamard.transpose()).eval();
    const Mat got = indexer_q(w, q_latent, start_pos, rope, cfg, p);
    // fp64 reassociation in 128-term sums of O(1) values
    CHECK((got - want).cwiseAbs().maxCoeff() < 1e-12);
  }

  SUBCASE("official: the stage equals its primitives composed in DeepSeek's order, then FP4") {
    const PrecisionPolicy p = PrecisionPolicy::official();
    const RopeTable rope = RopeTable::for_layer(cfg, 4, p);
    Mat want = linear_fp8_weight(q_latent, w.wq_b, p);
    for (Index i = 0; i < want.rows(); ++i) apply_rope(want.row(i), heads, head_dim, start_pos + i, rope, false, p);
    want = hadamard_rows(want, head_dim, p);
    brute_fp4_quant(want);
    const Mat got = indexer_q(w, q_latent, start_pos, rope, cfg, p);
    CHECK(bitwise_equal(got, want));
    // and FP4 really happened: at most 8 distinct magnitudes per 32-block (the e2m1 grid times one scale)
    for (Index b = 0; b < got.cols(); b += 32) {
      std::vector<double> mags;
      for (Index c = b; c < b + 32; ++c) mags.push_back(std::fabs(got(0, c)));
      std::sort(mags.begin(), mags.end());
      CHECK(std::unique(mags.begin(), mags.end()) - mags.begin() <= 8);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// top-k

TEST_CASE("topk: prefill rows with fewer visible entries than k are -1 padded and the offset applied") {
  // scores of a 9-token prefill over 2 entries: rows 0-2 see none, rows 3-6 entry 0, rows 7-8 both
  Mat scores(9, 2);
  scores << -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, 0.5, -kInf, -2.0, -kInf, 1.0, -kInf, 3.0, -kInf, 0.25, 0.75, 0.75,
      0.25;
  const int k = std::min(8, 2);  // k = min(index_topk, n_keys), one value for the call
  const IndexMat got = topk_indices(scores, k, /*offset=*/9);
  const IndexMat want = rows_of({{-1, -1}, {-1, -1}, {-1, -1}, {9, -1}, {9, -1}, {9, -1}, {9, -1}, {10, 9}, {9, 10}});
  CHECK(got == want);
  // a smaller k keeps the best entry of the full rows only
  CHECK(topk_indices(scores, 1, 0).col(0).transpose() == Eigen::RowVector<int32_t, 9>(-1, -1, -1, 0, 0, 0, 0, 1, 0));
}

TEST_CASE("topk: ties go to the lower entry index") {
  Mat scores(4, 7);
  scores << 1, 3, 3, 2, 3, -kInf, 3,  // four 3s: entries 1, 2, 4, 6
      2, 2, 2, 2, 2, 2, 2,            // all equal
      -1, -1, 5, -1, 5, -1, -kInf,    // two leaders then ties
      kInf, 0, kInf, 0, -kInf, 0, 0;  // +inf ranks first (torch.topk), -inf is the mask
  CHECK(topk_indices(scores, 3, 0) == rows_of({{1, 2, 4}, {0, 1, 2}, {2, 4, 0}, {0, 2, 1}}));
  CHECK(topk_indices(scores, 5, 100) == rows_of({{101, 102, 104, 106, 103},
                                                 {100, 101, 102, 103, 104},
                                                 {102, 104, 100, 101, 103},
                                                 {100, 102, 101, 103, 105}}));
  CHECK(topk_indices(scores, 7, 0).row(0) == Eigen::RowVector<int32_t, 7>(1, 2, 4, 6, 3, 0, -1));
}

TEST_CASE("topk: random bf16 scores with many ties equal a full sort by score desc then index asc") {
  std::mt19937_64 gen(5);
  std::uniform_int_distribution<int> level(-6, 6);  // 13 levels over 300 entries: many ties at the k-th
  Mat scores(20, 300);
  for (Index i = 0; i < scores.size(); ++i) scores.data()[i] = level(gen) == -6 ? -kInf : level(gen) / 4.0;
  const int k = 64;
  const IndexMat got = topk_indices(scores, k, 7);
  for (Index i = 0; i < scores.rows(); ++i) {
    std::vector<std::pair<double, int>> order;  // (-score, index): ascending sort = the rule
    for (int j = 0; j < scores.cols(); ++j)
      if (scores(i, j) > -kInf) order.emplace_back(-scores(i, j), j);
    std::sort(order.begin(), order.end());
    for (int c = 0; c < k; ++c) {
      const int32_t want = c < static_cast<int>(order.size()) ? order[c].second + 7 : -1;
      CHECK(got(i, c) == want);
    }
  }
}

TEST_CASE("topk: NaN scores and bad k throw") {
  Mat scores = Mat::Zero(3, 5);
  scores(2, 4) = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(topk_indices(scores, 2, 0), std::invalid_argument);
  try {
    topk_indices(scores, 2, 0);
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find("row 2") != std::string::npos);
    CHECK(what.find("entry 4") != std::string::npos);
  }
  CHECK_THROWS_AS(topk_indices(Mat::Zero(3, 5), 6, 0), std::invalid_argument);
  CHECK_THROWS_AS(topk_indices(Mat::Zero(3, 5), -1, 0), std::invalid_argument);
  CHECK(topk_indices(Mat::Zero(3, 0), 0, 3).cols() == 0);  // no entries yet
}

// ---------------------------------------------------------------------------------------------
// index lists

TEST_CASE("window_indices: prefill matrix of s = 5 and W = 3 (model.py get_window_topk_idxs) written by hand") {
  const IndexSpace space = IndexSpace::for_call(0, 5, 3);
  CHECK(space.kind == IndexSpace::Kind::prefill);
  CHECK(window_indices(space) == rows_of({{0, -1, -1}, {0, 1, -1}, {0, 1, 2}, {1, 2, 3}, {2, 3, 4}}));
  // shorter than the window: width s
  CHECK(window_indices(IndexSpace::for_call(0, 2, 3)) == rows_of({{0, -1}, {0, 1}}));
  CHECK(space.compressed_offset() == 5);
  CHECK(space.rows(2) == 7);
}

TEST_CASE("window_indices: decode ring slots for pos below and at and above W-1") {
  const int W = 4;
  const auto decode = [&](int64_t pos) {
    const IndexSpace space = IndexSpace::for_call(pos, 1, W);
    CHECK(space.kind == IndexSpace::Kind::decode);
    CHECK(space.compressed_offset() == W);
    return window_indices(space);
  };
  CHECK(decode(1) == rows_of({{0, 1, -1, -1}}));
  CHECK(decode(2) == rows_of({{0, 1, 2, -1}}));
  CHECK(decode(3) == rows_of({{0, 1, 2, 3}}));  // pos = W-1: arange(0, 4)
  CHECK(decode(4) == rows_of({{1, 2, 3, 0}}));  // oldest (pos 1 in slot 1) .. newest (pos 4 in slot 0)
  CHECK(decode(6) == rows_of({{3, 0, 1, 2}}));
  CHECK(decode(11) == rows_of({{0, 1, 2, 3}}));  // slot 3 holds the newest
}

TEST_CASE("window_indices: every call kind lists the rows of positions t-W+1..t (brute-force kv layout)") {
  // The kv matrix of the call, built row by row from the IndexSpace layout of index_lists.h, as a
  // map row -> position; the listed rows must map back to the window positions, oldest first.
  for (const int W : {3, 5, 16})
    for (const int64_t start_pos : {0, 1, 2, 4, 5, 9, 17, 40})
      for (const int64_t s : {1, 2, 3, 7, 20}) {
        CAPTURE(W);
        CAPTURE(start_pos);
        CAPTURE(s);
        const IndexSpace space = IndexSpace::for_call(start_pos, s, W);
        std::vector<int64_t> position_of_row(static_cast<size_t>(space.compressed_offset()), -1);
        if (space.kind == IndexSpace::Kind::prefill) {
          for (int64_t p = 0; p < s; ++p) position_of_row[p] = p;
        } else if (space.kind == IndexSpace::Kind::decode) {  // ring after the write
          for (int64_t p = std::max<int64_t>(0, start_pos - W + 1); p <= start_pos; ++p) position_of_row[p % W] = p;
        } else {  // ring before the call, then the call's fresh rows
          for (int64_t p = std::max<int64_t>(0, start_pos - W); p < start_pos; ++p) position_of_row[p % W] = p;
          for (int64_t p = start_pos; p < start_pos + s; ++p) position_of_row[W + (p - start_pos)] = p;
        }
        const IndexMat idx = window_indices(space);
        CHECK(idx.rows() == s);
        CHECK(idx.cols() == (space.kind == IndexSpace::Kind::prefill ? std::min<int64_t>(s, W) : W));
        for (int64_t i = 0; i < s; ++i) {
          const int64_t t = start_pos + i;
          std::vector<int64_t> listed, want;
          for (Index c = 0; c < idx.cols(); ++c)
            listed.push_back(idx(i, c) < 0 ? -1 : position_of_row[static_cast<size_t>(idx(i, c))]);
          for (int64_t p = std::max<int64_t>(0, t - W + 1); p <= t; ++p) want.push_back(p);
          want.resize(static_cast<size_t>(idx.cols()), -1);
          CHECK(listed == want);
        }
        for (int64_t p = std::max<int64_t>(0, start_pos + s - W); p < start_pos + s; ++p)
          CHECK(position_of_row[static_cast<size_t>(space.raw_row(p))] == p);
      }
}

TEST_CASE("IndexSpace: kinds and offsets and positions it does not hold") {
  CHECK(IndexSpace::for_call(0, 1, 8).kind == IndexSpace::Kind::prefill);
  CHECK(IndexSpace::for_call(3, 1, 8).kind == IndexSpace::Kind::decode);
  const IndexSpace chunk = IndexSpace::for_call(10, 4, 8);
  CHECK(chunk.kind == IndexSpace::Kind::chunked);
  CHECK(chunk.compressed_offset() == 12);
  CHECK(chunk.rows(3) == 15);
  CHECK(chunk.raw_row(2) == 2);  // oldest ring position (10 - 8)
  CHECK(chunk.raw_row(9) == 1);
  CHECK(chunk.raw_row(10) == 8);  // first fresh row
  CHECK(chunk.raw_row(13) == 11);
  CHECK_THROWS_AS(chunk.raw_row(1), std::out_of_range);   // left the ring before the call
  CHECK_THROWS_AS(chunk.raw_row(14), std::out_of_range);  // not yet computed
  CHECK_THROWS_AS(IndexSpace::for_call(5, 1, 8).raw_row(-1), std::out_of_range);
  CHECK_THROWS_AS(IndexSpace::for_call(20, 1, 8).raw_row(12), std::out_of_range);
  CHECK_THROWS_AS(IndexSpace::for_call(-1, 1, 8), std::invalid_argument);
  CHECK_THROWS_AS(IndexSpace::for_call(0, 0, 8), std::invalid_argument);
}

TEST_CASE("hca_indices: prefill and decode and chunked (model.py get_compress_topk_idxs)") {
  // prefill s = 9, r = 4: [9, 2], offset s = 9
  CHECK(hca_indices(IndexSpace::for_call(0, 9, 3), 4) ==
        rows_of({{-1, -1}, {-1, -1}, {-1, -1}, {9, -1}, {9, -1}, {9, -1}, {9, -1}, {9, 10}, {9, 10}}));
  // decode: [1, (pos+1)/r], every completed block, offset W
  CHECK(hca_indices(IndexSpace::for_call(11, 1, 3), 4) == rows_of({{3, 4, 5}}));
  CHECK(hca_indices(IndexSpace::for_call(12, 1, 3), 4) == rows_of({{3, 4, 5}}));
  CHECK(hca_indices(IndexSpace::for_call(2, 1, 3), 4).cols() == 0);  // nothing completed yet
  CHECK(hca_indices(IndexSpace::for_call(255, 1, 128), 128) == rows_of({{128, 129}}));
  // chunked positions 5..8, W = 3, r = 4: [(5+4)/4 = 2 columns], offset W + s = 7
  CHECK(hca_indices(IndexSpace::for_call(5, 4, 3), 4) == rows_of({{7, -1}, {7, -1}, {7, 8}, {7, 8}}));
}

TEST_CASE("concat_indices: window first then compressed") {
  const IndexMat window = rows_of({{0, -1}, {0, 1}});
  const IndexMat compressed = rows_of({{-1, -1, -1}, {2, -1, -1}});
  CHECK(concat_indices(window, compressed) == rows_of({{0, -1, -1, -1, -1}, {0, 1, 2, -1, -1}}));
  CHECK(concat_indices(window, IndexMat(2, 0)) == window);
  CHECK_THROWS_AS(concat_indices(window, IndexMat(3, 1)), std::invalid_argument);
}
