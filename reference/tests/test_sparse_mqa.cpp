// sparse_mqa against an independent fp64 softmax written with a log-sum-exp, and the adversarial
// inputs the engines' kernels are known to fail on (docs/tolerances.md): invalid slots anywhere (whole 64-blocks, the
// first one included: vLLM #48364), NaN in unreferenced kv rows, duplicate indices, sinks of +-inf and out-of-range
// indices.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/numerics/bf16.h"
#include "reference/precision.h"
#include "reference/stages/sparse_mqa.h"

using namespace dsv4::ref;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Uniform values in [-range, range], on the bf16 grid (DeepSeek's q and kv are bf16 tensors).
Mat random_bf16(Index rows, Index cols, double range, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-range, range);
  Mat m(rows, cols);
  for (Index i = 0; i < rows; ++i)
    for (Index j = 0; j < cols; ++j) m(i, j) = bf16_round(static_cast<float>(u(gen)));
  return m;
}

// Random index lists over [0, n) with -1 sprinkled in (about one slot in five) and repeats allowed.
IndexMat random_indices(Index rows, Index cols, int n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> pick(0, n - 1);
  std::uniform_int_distribution<int> hole(0, 4);
  IndexMat idx(rows, cols);
  for (Index i = 0; i < rows; ++i)
    for (Index c = 0; c < cols; ++c) idx(i, c) = hole(gen) == 0 ? -1 : pick(gen);
  return idx;
}

// The brute force: for each row and head, the valid keys' weights e^(s_j - lse) with
// lse = log(sum_j e^s_j + e^sink) (the sink a zero-value logit), all in fp64; o = sum_j w_j kv_j.
Mat brute_force(const Mat& q, const Mat& kv, const Vec& sink, const IndexMat& idx, int heads, double scale) {
  const Index d = kv.cols();
  Mat out = Mat::Zero(q.rows(), heads * d);
  for (Index i = 0; i < q.rows(); ++i) {
    std::vector<int> keys;
    for (Index c = 0; c < idx.cols(); ++c)
      if (idx(i, c) >= 0) keys.push_back(idx(i, c));
    if (keys.empty()) continue;
    for (int h = 0; h < heads; ++h) {
      std::vector<double> logit;
      for (int key : keys) {
        double dot = 0;
        for (Index c = 0; c < d; ++c) dot += q(i, h * d + c) * kv(key, c);
        logit.push_back(scale * dot);
      }
      double shift = logit[0];
      for (double l : logit) shift = std::max(shift, l);
      double total = std::exp(sink(h) - shift);
      for (double l : logit) total += std::exp(l - shift);
      const double lse = shift + std::log(total);
      for (size_t k = 0; k < keys.size(); ++k)
        for (Index c = 0; c < d; ++c) out(i, h * d + c) += std::exp(logit[k] - lse) * kv(keys[k], c);
    }
  }
  return out;
}

// Keeps only the valid slots of each row (rows padded with -1 at the end to a common width).
IndexMat without_invalid(const IndexMat& idx) {
  Index width = 0;
  for (Index i = 0; i < idx.rows(); ++i) width = std::max<Index>(width, (idx.row(i).array() != -1).count());
  IndexMat out = IndexMat::Constant(idx.rows(), width, -1);
  for (Index i = 0; i < idx.rows(); ++i) {
    Index c = 0;
    for (Index k = 0; k < idx.cols(); ++k)
      if (idx(i, k) != -1) out(i, c++) = idx(i, k);
  }
  return out;
}

double max_abs_diff(const Mat& a, const Mat& b) { return (a - b).cwiseAbs().maxCoeff(); }

bool bitwise_equal(const Mat& a, const Mat& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Index i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint64_t>(a.data()[i]) != std::bit_cast<uint64_t>(b.data()[i])) return false;
  return true;
}

PrecisionPolicy exact_online() {
  PrecisionPolicy p = PrecisionPolicy::exact();
  p.attn_online_blocks = true;
  return p;
}

// A small problem: 3 heads of 16 dims, 40 kv rows, 150 slots per row (three 64-blocks, the last partial).
struct Problem {
  int heads = 3;
  double scale = 0.25;  // 16^-1/2
  Mat q, kv;
  Vec sink;
  IndexMat idx;
};

Problem small_problem(uint64_t seed) {
  Problem pr;
  pr.q = random_bf16(5, pr.heads * 16, 2.0, seed);
  pr.kv = random_bf16(40, 16, 2.0, seed + 1);
  pr.sink = Vec::Zero(pr.heads);
  pr.sink << 0.5, -1.0, 2.0;
  pr.idx = random_indices(5, 150, 40, seed + 2);
  return pr;
}

}  // namespace

TEST_CASE("sparse_mqa: exact policy equals the fp64 log-sum-exp brute force") {
  const Problem pr = small_problem(11);
  const Mat want = brute_force(pr.q, pr.kv, pr.sink, pr.idx, pr.heads, pr.scale);
  // fp64 reassociation only (sums of <= 150 terms of size O(10)): far below 1e-12.
  CHECK(max_abs_diff(sparse_mqa(pr.q, pr.kv, pr.sink, pr.idx, pr.heads, pr.scale, PrecisionPolicy::exact()), want) <
        1e-12);
  // The online walk is the same mathematics; its rescalings add fp64 roundings only.
  CHECK(max_abs_diff(sparse_mqa(pr.q, pr.kv, pr.sink, pr.idx, pr.heads, pr.scale, exact_online()), want) < 1e-12);
}

TEST_CASE("sparse_mqa: official policy within the bf16-derived bound of the fp64 result") {
  const Problem pr = small_problem(21);
  const Mat got = sparse_mqa(pr.q, pr.kv, pr.sink, pr.idx, pr.heads, pr.scale, PrecisionPolicy::official());
  const Mat want = brute_force(pr.q, pr.kv, pr.sink, pr.idx, pr.heads, pr.scale);
  // Official roundings (bf16 unit roundoff u = 2^-8): each probability cast to bf16 before P.V
  // (relative u) moves o by at most u * max|kv| (the weights sum to <= 1); the bf16 output adds
  // u * |o| <= u * max|kv|; the fp32 logits, sums and rescalings add O(150 * 2^-24) relative, < 1e-5.
  const double max_kv = pr.kv.cwiseAbs().maxCoeff();
  const double bound = 2 * std::ldexp(max_kv, -8) + 1e-5;
  CHECK(max_abs_diff(got, want) <= bound);
  // and it is not the exact result (the roundings are really there)
  CHECK(max_abs_diff(got, want) > 0);
  // every output is on the bf16 grid
  for (Index i = 0; i < got.size(); ++i) CHECK(got.data()[i] == bf16_round(static_cast<float>(got.data()[i])));
}

// The fp64 weights of brute_force's softmax for one row: weights[h][k] of the valid keys, in order.
std::vector<std::vector<double>> brute_force_weights(const Mat& q, const Mat& kv, const Vec& sink, const IndexMat& idx,
                                                     Index row, int heads, double scale) {
  const Index d = kv.cols();
  std::vector<std::vector<double>> w(heads);
  for (int h = 0; h < heads; ++h) {
    std::vector<double> logit;
    for (Index c = 0; c < idx.cols(); ++c) {
      if (idx(row, c) < 0) continue;
      double dot = 0;
      for (Index k = 0; k < d; ++k) dot += q(row, h * d + k) * kv(idx(row, c), k);
      logit.push_back(scale * dot);
    }
    double shift = logit[0];
    for (double l : logit) shift = std::max(shift, l);
    double total = std::exp(sink(h) - shift);
    for (double l : logit) total += std::exp(l - shift);
    for (double l : logit) w[h].push_back(std::exp(l - shift) / total);
  }
  return w;
}

// Elements of `got` (one row) outside the official policy's elementwise bound around the fp64 `want`:
//   |got_c - want_c| <= 2^-9 sum_j p_j |kv_jc| + 2^-9 |want_c| + (K + 4) 2^-24 sum_j p_j |kv_jc|.
// The probabilities are cast to bf16 before P.V (each off by at most half a bf16 ulp, 2^-9 of
// itself), the output is rounded to bf16 (2^-9 of itself), and the fp32 logits, exponentials,
// sums of K terms and the division add at most (K + 4) fp32 roundings relative to the sum of
// |terms|. p_j are the fp64 weights (their fp32 errors are in the last term).
int64_t outside_official_bound(const Mat& got, const Mat& want, const Mat& kv, const IndexMat& idx,
                               const std::vector<std::vector<double>>& weights) {
  const Index d = kv.cols();
  const double K = static_cast<double>(idx.cols());
  int64_t outside = 0;
  for (size_t h = 0; h < weights.size(); ++h) {
    std::vector<double> spread(static_cast<size_t>(d), 0.0);  // sum_j p_j |kv_jc|
    size_t k = 0;
    for (Index c = 0; c < idx.cols(); ++c) {
      if (idx(0, c) < 0) continue;
      for (Index ch = 0; ch < d; ++ch) spread[ch] += weights[h][k] * std::abs(kv(idx(0, c), ch));
      ++k;
    }
    for (Index ch = 0; ch < d; ++ch) {
      const Index e = static_cast<Index>(h) * d + ch;
      const double bound = 0x1p-9 * spread[ch] + 0x1p-9 * std::abs(want(0, e)) + (K + 4) * 0x1p-24 * spread[ch];
      outside += std::abs(got(0, e) - want(0, e)) > bound;
    }
  }
  return outside;
}

TEST_CASE("sparse_mqa: V4-Flash dims (64 heads of 512 and window 128 + top-512) official vs fp64") {
  const int heads = 64;
  const double scale = std::pow(512.0, -0.5);
  // Logits with a spread (q up to 3, kv up to 1: a logit standard deviation near 1) and per-head
  // sinks near the log-sum of the logits, so that the sink takes a large share of every head's
  // mass: the bound below must tell a dropped sink and a wrong scale from the official roundings.
  const Mat q = random_bf16(1, heads * 512, 3.0, 31);
  const Mat kv = random_bf16(700, 512, 1.0, 32);
  IndexMat idx = random_indices(1, 640, 700, 33);
  idx.leftCols(64).setConstant(-1);  // a first 64-block with no valid index
  const Vec no_sink = Vec::Constant(heads, -kInf);
  Vec sink(heads);
  for (int h = 0; h < heads; ++h) {
    // The log-sum-exp of the head's logits, plus a spread of +-1 over the heads.
    std::vector<double> logit;
    for (Index c = 0; c < idx.cols(); ++c) {
      if (idx(0, c) < 0) continue;
      double dot = 0;
      for (Index j = 0; j < 512; ++j) dot += q(0, h * 512 + j) * kv(idx(0, c), j);
      logit.push_back(scale * dot);
    }
    const double top = *std::max_element(logit.begin(), logit.end());
    double total = 0;
    for (double l : logit) total += std::exp(l - top);
    sink(h) = top + std::log(total) + (2.0 * h / (heads - 1) - 1.0);
  }
  const Mat want = brute_force(q, kv, sink, idx, heads, scale);
  const auto weights = brute_force_weights(q, kv, sink, idx, 0, heads, scale);
  const Mat got = sparse_mqa(q, kv, sink, idx, heads, scale, PrecisionPolicy::official());
  CHECK(outside_official_bound(got, want, kv, idx, weights) == 0);
  // The bound can fail: the sink dropped, or the scale taken from a 128-wide head, put most
  // elements outside it.
  const int64_t n = static_cast<int64_t>(heads) * 512;
  const Mat dropped_sink = sparse_mqa(q, kv, no_sink, idx, heads, scale, PrecisionPolicy::official());
  CHECK(outside_official_bound(dropped_sink, want, kv, idx, weights) > n / 2);
  const Mat wrong_scale = sparse_mqa(q, kv, sink, idx, heads, std::pow(128.0, -0.5), PrecisionPolicy::official());
  CHECK(outside_official_bound(wrong_scale, want, kv, idx, weights) > n / 2);
}

TEST_CASE("sparse_mqa: the official walk rescales at 64-slot block boundaries as kernel.py does") {
  // One head, d = 2: kv [0, 1] has logit 0, kv [1, -3.5] has logit 2 (q = [2, 0], scale 1), no sink.
  // 27 slots of logit 0, then one slot of logit 2, either in the same 64-block (slot 40) or in the
  // next one (slot 69). E = f32(e^-2), Eb = bf16(E) (the probability cast before P.V).
  // Same block:  one max (2): acc = [1, f32(27 Eb - 3.5)],                  l = f32(27 E + 1).
  // Next block:  block 0 at max 0 (p = 1), then rescaled by E:
  //              acc = [1, f32(f32(27 E) - 3.5)],                           l = f32(f32(27 E) + 1).
  // Activations in fp32 so that the difference (E vs Eb, ~2^-9 relative) is not rounded away; the
  // -3.5 cancels most of 27 E, so that the rescale factor's own fp32 rounding shows too
  // (f32(27 E) != f32(27 e^-2)).
  PrecisionPolicy p = PrecisionPolicy::official();
  p.activations = Storage::fp32;
  Mat q(1, 2);
  q << 2, 0;
  Mat kv(2, 2);
  kv << 0, 1, 1, -3.5;
  const Vec no_sink = Vec::Constant(1, -kInf);
  const float E = static_cast<float>(std::exp(-2.0));
  const double Eb = bf16_round(E);
  const auto slots = [](Index peak_slot) {
    IndexMat idx = IndexMat::Constant(1, 128, -1);
    idx.leftCols(27).setConstant(0);
    idx(0, peak_slot) = 1;
    return idx;
  };
  const auto f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };

  const double l_same = f32(27.0 * E + 1.0);
  const Mat same_block = sparse_mqa(q, kv, no_sink, slots(40), 1, 1.0, p);
  CHECK(same_block(0, 0) == f32(1.0 / l_same));
  CHECK(same_block(0, 1) == f32(f32(27.0 * Eb - 3.5) / l_same));

  const double l_next = f32(f32(27.0 * E) + 1.0);
  const Mat next_block = sparse_mqa(q, kv, no_sink, slots(69), 1, 1.0, p);
  CHECK(next_block(0, 0) == f32(1.0 / l_next));
  CHECK(next_block(0, 1) == f32(f32(f32(27.0 * E) - 3.5) / l_next));

  // One pass (no online blocks): the global max first, wherever the peak sits.
  p.attn_online_blocks = false;
  CHECK(bitwise_equal(sparse_mqa(q, kv, no_sink, slots(69), 1, 1.0, p), same_block));
}

TEST_CASE("sparse_mqa: the logit is f32(f32(scale) * f32(q.kv)) with the scale a float constant of the kernel") {
  // One head, d = 1, query i attends to kv row i alone (value D_i = 200 + i): with p = 1,
  // o = D / f32(1 + f32(e^f32(sink - s))), s = f32(f32(512^-1/2) * D). fp32 activations keep the
  // last bits visible.
  PrecisionPolicy p = PrecisionPolicy::official();
  p.activations = Storage::fp32;
  const double scale = std::pow(512.0, -0.5);
  const Index n = 64;
  Mat kv(n, 1);
  IndexMat idx(n, 1);
  for (Index i = 0; i < n; ++i) {
    kv(i, 0) = static_cast<double>(200 + i);
    idx(i, 0) = static_cast<int32_t>(i);
  }
  const Mat q = Mat::Ones(n, 1);
  const float sink = 7.0f;
  const Mat got = sparse_mqa(q, kv, Vec::Constant(1, sink), idx, 1, scale, p);
  const auto expected = [&](float D, float s) {
    const float term = static_cast<float>(std::exp(static_cast<double>(sink - s)));
    return D / (1.0f + term);
  };
  int differs_from_double_scale = 0;
  for (Index i = 0; i < n; ++i) {
    const float D = static_cast<float>(kv(i, 0));
    CHECK(got(i, 0) == expected(D, static_cast<float>(scale) * D));
    differs_from_double_scale += got(i, 0) != expected(D, static_cast<float>(scale * D));
  }
  CHECK(differs_from_double_scale > 0);  // the test can tell the two scales apart
}

TEST_CASE("sparse_mqa: a sink of -inf gives the plain softmax") {
  Problem pr = small_problem(41);
  pr.sink.setConstant(-kInf);
  const Mat got = sparse_mqa(pr.q, pr.kv, pr.sink, pr.idx, pr.heads, pr.scale, PrecisionPolicy::exact());
  // plain softmax written directly: weights e^s_j / sum e^s_k
  const Index d = pr.kv.cols();
  Mat want = Mat::Zero(pr.q.rows(), pr.q.cols());
  for (Index i = 0; i < pr.q.rows(); ++i)
    for (int h = 0; h < pr.heads; ++h) {
      double total = 0;
      Eigen::RowVectorXd num = Eigen::RowVectorXd::Zero(d);
      for (Index c = 0; c < pr.idx.cols(); ++c) {
        if (pr.idx(i, c) < 0) continue;
        const double e = std::exp(pr.scale * pr.q.row(i).segment(h * d, d).dot(pr.kv.row(pr.idx(i, c))));
        total += e;
        num += e * pr.kv.row(pr.idx(i, c));
      }
      want.row(i).segment(h * d, d) = num / total;
    }
  CHECK(max_abs_diff(got, want) < 1e-12);  // fp64 rounding only, |logits| <= 16
}

TEST_CASE("sparse_mqa: a huge sink drives the output to 0") {
  Problem pr = small_problem(51);
  for (const double sink : {1e30, kInf}) {
    pr.sink.setConstant(sink);
    for (const PrecisionPolicy& p : {PrecisionPolicy::exact(), PrecisionPolicy::official(), exact_online()}) {
      const Mat got = sparse_mqa(pr.q, pr.kv, pr.sink, pr.idx, pr.heads, pr.scale, p);
      CHECK(got.cwiseAbs().maxCoeff() == 0.0);
    }
  }
}

TEST_CASE("sparse_mqa: -1 slots are skipped wherever they are") {
  const Mat q = random_bf16(4, 2 * 16, 2.0, 61);
  const Mat kv = random_bf16(30, 16, 2.0, 62);
  const Vec sink = Vec::Constant(2, 0.3);
  const double scale = 0.25;
  // row 0: -1 at the front, row 1: in the middle, row 2: at the end, row 3: a mix
  IndexMat idx(4, 8);
  idx << -1, -1, 3, 7, 9, 2, 11, 5, 3, 7, -1, -1, -1, 9, 2, 11, 3, 7, 9, 2, 11, -1, -1, -1, -1, 3, -1, 7, 9, -1, 2, -1;
  const IndexMat compact = without_invalid(idx);
  // One pass (exact policy): the same terms in the same order, bitwise.
  CHECK(bitwise_equal(sparse_mqa(q, kv, sink, idx, 2, scale, PrecisionPolicy::exact()),
                      sparse_mqa(q, kv, sink, compact, 2, scale, PrecisionPolicy::exact())));
  // All within one 64-block in the official walk too: bitwise.
  CHECK(bitwise_equal(sparse_mqa(q, kv, sink, idx, 2, scale, PrecisionPolicy::official()),
                      sparse_mqa(q, kv, sink, compact, 2, scale, PrecisionPolicy::official())));
}

TEST_CASE("sparse_mqa: whole 64-blocks of -1 including the first one (vLLM #48364)") {
  const Mat q = random_bf16(2, 2 * 16, 2.0, 71);
  const Mat kv = random_bf16(50, 16, 2.0, 72);
  const Vec sink = Vec::Constant(2, -0.5);
  const double scale = 0.25;
  const IndexMat valid = random_indices(2, 100, 50, 73).unaryExpr([](int32_t v) { return v < 0 ? 7 : v; });
  // [64 x -1 | valid 0..63 | 64 x -1 | valid 64..99 | 28 x -1]
  IndexMat idx = IndexMat::Constant(2, 320, -1);
  idx.block(0, 64, 2, 64) = valid.leftCols(64);
  idx.block(0, 192, 2, 36) = valid.rightCols(36);
  const Mat got = sparse_mqa(q, kv, sink, idx, 2, scale, PrecisionPolicy::official());
  CHECK(got.allFinite());
  // The valid slots form the same 64-blocks as in the compact list, so even the official walk
  // (running max per block) gives the same bits.
  CHECK(bitwise_equal(got, sparse_mqa(q, kv, sink, valid, 2, scale, PrecisionPolicy::official())));
  CHECK(bitwise_equal(sparse_mqa(q, kv, sink, idx, 2, scale, PrecisionPolicy::exact()),
                      sparse_mqa(q, kv, sink, valid, 2, scale, PrecisionPolicy::exact())));
}

TEST_CASE("sparse_mqa: rows without a valid index give 0 and do not disturb the others") {
  const Problem pr = small_problem(81);
  IndexMat idx = pr.idx;
  idx.row(1).setConstant(-1);
  for (const PrecisionPolicy& p : {PrecisionPolicy::exact(), PrecisionPolicy::official()}) {
    const Mat got = sparse_mqa(pr.q, pr.kv, pr.sink, idx, pr.heads, pr.scale, p);
    CHECK(got.row(1).cwiseAbs().maxCoeff() == 0.0);
    const Mat full = sparse_mqa(pr.q, pr.kv, pr.sink, pr.idx, pr.heads, pr.scale, p);
    CHECK(bitwise_equal(got.row(0), full.row(0)));
    CHECK(bitwise_equal(got.bottomRows(3), full.bottomRows(3)));
  }
  // A call with no slot at all (K = 0).
  const Mat none = sparse_mqa(pr.q, pr.kv, pr.sink, IndexMat(5, 0), pr.heads, pr.scale, PrecisionPolicy::official());
  CHECK(none.cwiseAbs().maxCoeff() == 0.0);
}

TEST_CASE("sparse_mqa: NaN in kv rows no valid index references never reaches the output") {
  const Problem pr = small_problem(91);
  IndexMat idx = pr.idx;
  // free rows 0..4 of every reference, then poison them
  for (Index i = 0; i < idx.size(); ++i)
    if (idx.data()[i] >= 0 && idx.data()[i] < 5) idx.data()[i] = -1;
  Mat poisoned = pr.kv;
  poisoned.topRows(5).setConstant(std::numeric_limits<double>::quiet_NaN());
  for (const PrecisionPolicy& p : {PrecisionPolicy::exact(), PrecisionPolicy::official(), exact_online()}) {
    const Mat got = sparse_mqa(pr.q, poisoned, pr.sink, idx, pr.heads, pr.scale, p);
    CHECK(got.allFinite());
    CHECK(bitwise_equal(got, sparse_mqa(pr.q, pr.kv, pr.sink, idx, pr.heads, pr.scale, p)));
  }
}

TEST_CASE("sparse_mqa: a duplicated index counts twice") {
  const Mat q = random_bf16(1, 16, 2.0, 101);
  const Mat kv = random_bf16(4, 16, 2.0, 102);
  const Vec sink = Vec::Constant(1, 0.7);
  const double scale = 0.25;
  IndexMat twice(1, 3);
  twice << 2, 2, 3;
  const Mat got = sparse_mqa(q, kv, sink, twice, 1, scale, PrecisionPolicy::exact());
  // written out: o = (2 e^a kv_2 + e^b kv_3) / (2 e^a + e^b + e^sink)
  const double a = scale * q.row(0).dot(kv.row(2));
  const double b = scale * q.row(0).dot(kv.row(3));
  const Eigen::RowVectorXd want =
      (2 * std::exp(a) * kv.row(2) + std::exp(b) * kv.row(3)) / (2 * std::exp(a) + std::exp(b) + std::exp(0.7));
  CHECK((got.row(0) - want).cwiseAbs().maxCoeff() < 1e-13);  // fp64 rounding of a 16-term dot
  IndexMat once(1, 2);
  once << 2, 3;
  CHECK(max_abs_diff(got, sparse_mqa(q, kv, sink, once, 1, scale, PrecisionPolicy::exact())) > 1e-6);
}

TEST_CASE("sparse_mqa: one valid index returns kv * 1 / (1 + e^(sink - s))") {
  const Mat q = random_bf16(1, 2 * 16, 2.0, 111);
  const Mat kv = random_bf16(6, 16, 2.0, 112);
  Vec sink(2);
  sink << -0.25, 1.5;
  IndexMat idx = IndexMat::Constant(1, 130, -1);
  idx(0, 77) = 4;  // alone in the second 64-block
  for (const PrecisionPolicy& p : {PrecisionPolicy::exact(), exact_online()}) {
    const Mat got = sparse_mqa(q, kv, sink, idx, 2, 0.25, p);
    for (int h = 0; h < 2; ++h) {
      const double s = 0.25 * q.row(0).segment(16 * h, 16).dot(kv.row(4));
      const Eigen::RowVectorXd want = kv.row(4) / (1 + std::exp(sink(h) - s));
      CHECK((got.row(0).segment(16 * h, 16) - want).cwiseAbs().maxCoeff() < 1e-14);  // a few fp64 ulps of O(2)
    }
  }
}

TEST_CASE("sparse_mqa: an index outside -1..n-1 throws before any arithmetic") {
  const Problem pr = small_problem(121);
  for (const int32_t bad : {-2, 40, 41, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()}) {
    IndexMat idx = pr.idx;
    idx(3, 100) = bad;
    CHECK_THROWS_AS(sparse_mqa(pr.q, pr.kv, pr.sink, idx, pr.heads, pr.scale, PrecisionPolicy::official()),
                    std::out_of_range);
    try {
      sparse_mqa(pr.q, pr.kv, pr.sink, idx, pr.heads, pr.scale, PrecisionPolicy::official());
    } catch (const std::out_of_range& e) {
      const std::string what = e.what();
      CHECK(what.find("row 3") != std::string::npos);
      CHECK(what.find("column 100") != std::string::npos);
      CHECK(what.find(std::to_string(bad)) != std::string::npos);
    }
  }
  // shapes that do not fit
  CHECK_THROWS_AS(sparse_mqa(pr.q, pr.kv, pr.sink, pr.idx, pr.heads + 1, pr.scale, PrecisionPolicy::exact()),
                  std::invalid_argument);
  CHECK_THROWS_AS(sparse_mqa(pr.q, pr.kv, Vec::Zero(2), pr.idx, pr.heads, pr.scale, PrecisionPolicy::exact()),
                  std::invalid_argument);
}
