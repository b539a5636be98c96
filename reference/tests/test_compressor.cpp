// Tests of the compressor stage (docs/math.md "compressor/entries"; reference/stages/compressor.h).
// The independent computations here are: a brute-force fp64 formula per entry written from the
// spec's mathematics (no state machine), DeepSeek's own prefill formulation (overlap_transform over
// all blocks at once) and its prefill state layout, and a brute-force exact post-processing.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "reference/config.h"
#include "reference/numerics/block_quant.h"
#include "reference/numerics/fp4_e2m1.h"
#include "reference/numerics/fp8_e4m3.h"
#include "reference/stages/compressor.h"

using namespace dsv4::ref;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kFp32UnitRoundoff = 0x1p-24;  // |fl32(y) - y| <= u |y| for round-to-nearest

double bf16(double v) { return round_to(Storage::bf16, v); }
double fp32(double v) { return round_to(Storage::fp32, v); }

// ---- random inputs ---------------------------------------------------------------------------

// x on the bf16 grid (DeepSeek's attention input is bf16), uniform in [-2, 2).
Mat random_x(Index s, Index dim, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-2, 2);
  Mat x(s, dim);
  for (Index i = 0; i < x.size(); ++i) x.data()[i] = bf16(u(gen));
  return x;
}

// Compressor weights with the checkpoint's numerics: wkv / wgate / norm bf16 values (stored bf16,
// upcast to fp32 on load), ape fp32. The gate is scaled so logits spread over several units and the
// softmax is far from uniform.
CompressorWeights random_weights(int ratio, int d, int dim, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  CompressorWeights w;
  w.ratio = ratio;
  w.head_dim = d;
  const int width = w.coff() * d;
  const double fan_in = std::sqrt(3.0 / dim);
  w.wkv.resize(width, dim);
  w.wgate.resize(width, dim);
  for (Index i = 0; i < w.wkv.size(); ++i) w.wkv.data()[i] = bf16(u(gen) * fan_in);
  for (Index i = 0; i < w.wgate.size(); ++i) w.wgate.data()[i] = bf16(2 * u(gen) * fan_in);
  w.ape.resize(ratio, width);
  for (Index i = 0; i < w.ape.size(); ++i) w.ape.data()[i] = fp32(u(gen));
  w.norm.resize(d);
  for (Index i = 0; i < d; ++i) w.norm(i) = bf16(1 + 0.5 * u(gen));
  return w;
}

// One compressor under test: its weights, kind and the layer's RoPE table for a policy.
struct Setup {
  ModelConfig cfg;
  CompressorKind kind;
  CompressorWeights w;
  int r() const { return w.ratio; }
  int d() const { return w.head_dim; }
  RopeTable rope(const PrecisionPolicy& p) const { return RopeTable::for_layer(cfg, w.ratio, p); }
};

// The three compressors of a V4 layer at tiny dims: CSA main (ratio 4, d = head_dim), CSA indexer
// (ratio 4, d = index_head_dim) and HCA (ratio 128, d = head_dim).
std::vector<Setup> tiny_setups(uint64_t seed) {
  const ModelConfig cfg = ModelConfig::tiny();
  return {
      {cfg, CompressorKind::main, random_weights(4, cfg.head_dim, cfg.dim, seed)},
      {cfg, CompressorKind::indexer, random_weights(4, cfg.index_head_dim, cfg.dim, seed + 1)},
      {cfg, CompressorKind::main, random_weights(128, cfg.head_dim, cfg.dim, seed + 2)},
  };
}

std::vector<PrecisionPolicy> exact_and_official() { return {PrecisionPolicy::exact(), PrecisionPolicy::official()}; }

// ---- comparisons -----------------------------------------------------------------------------

bool bitwise_equal(const Mat& a, const Mat& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Index i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint64_t>(a.data()[i]) != std::bit_cast<uint64_t>(b.data()[i])) return false;
  return true;
}

bool rows_bitwise_equal(const Mat& a, const Mat& b, const std::vector<int>& rows) {
  for (int i : rows)
    if (!bitwise_equal(a.row(i), b.row(i))) return false;
  return true;
}

template <typename Derived>
bool on_storage_grid(const Eigen::MatrixBase<Derived>& m, Storage storage) {
  for (Index i = 0; i < m.rows(); ++i)
    for (Index c = 0; c < m.cols(); ++c)
      if (round_to(storage, m(i, c)) != m(i, c)) return false;
  return true;
}

double fp32_ulp(double v) {
  const float f = static_cast<float>(std::fabs(v));
  return static_cast<double>(std::nextafter(f, std::numeric_limits<float>::infinity())) - f;
}

Mat stack(const Mat& top, const Mat& bottom) {
  Mat m(top.rows() + bottom.rows(), top.cols() == 0 ? bottom.cols() : top.cols());
  m.topRows(top.rows()) = top;
  m.bottomRows(bottom.rows()) = bottom;
  return m;
}

// ---- running a sequence through the state machine in chunks ----------------------------------

struct Run {
  Mat pooled, entries;
  CompressorState state;
};

// Feeds x in chunks of the given lengths (sum = x.rows()), checking each call's entry count and
// first_entry, and concatenates the outputs.
Run run_chunks(const Setup& su, const Mat& x, const std::vector<Index>& lengths, const PrecisionPolicy& p) {
  Run run{Mat(0, su.d()), Mat(0, su.d()), CompressorState::fresh(su.r(), su.d())};
  const RopeTable rope = su.rope(p);
  int64_t pos = 0;
  for (Index len : lengths) {
    const CompressorOutput out =
        compress(su.w, su.kind, x.middleRows(pos, len), pos, run.state, rope, su.cfg.norm_eps, p);
    CHECK(out.first_entry == pos / su.r());
    CHECK(out.pooled.rows() == (pos + len) / su.r() - pos / su.r());
    CHECK(out.entries.rows() == out.pooled.rows());
    run.pooled = stack(run.pooled, out.pooled);
    run.entries = stack(run.entries, out.entries);
    pos += len;
  }
  return run;
}

std::vector<Index> one_by_one(Index s) { return std::vector<Index>(s, 1); }

std::vector<Index> random_split(Index s, Index max_len, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<Index> len(1, max_len);
  std::vector<Index> lengths;
  for (Index left = s; left > 0;) {
    const Index l = std::min(left, len(gen));
    lengths.push_back(l);
    left -= l;
  }
  return lengths;
}

// ---- brute force from the spec's mathematics ---------------------------------------------------

// kv_t = wkv x_t and z_t = wgate x_t + ape[t mod r], each a plain fp64 dot product rounded to the
// fp32 storage where DeepSeek holds fp32 tensors (the linear output, then the + ape).
struct GateInputs {
  Mat kv, z;  // [s, coff*d]
};
GateInputs brute_gate_inputs(const CompressorWeights& w, const Mat& x, Storage fp32_storage) {
  const Index width = w.wkv.rows();
  GateInputs g{Mat(x.rows(), width), Mat(x.rows(), width)};
  for (Index t = 0; t < x.rows(); ++t)
    for (Index c = 0; c < width; ++c) {
      double kv = 0, gate = 0;
      for (Index k = 0; k < x.cols(); ++k) {
        kv += x(t, k) * w.wkv(c, k);
        gate += x(t, k) * w.wgate(c, k);
      }
      g.kv(t, c) = round_to(fp32_storage, kv);
      g.z(t, c) = round_to(fp32_storage, round_to(fp32_storage, gate) + w.ape(t % w.ratio, c));
    }
  return g;
}

// Entry j, channel c: the softmax over the logits of its tokens, written without a max shift
// (logits here are O(10), far from overflow) and without any state:
//   ratio 4: tokens of block j-1 through channel c ("a" half) and of block j through d + c ("b");
//   otherwise: tokens of block j through channel c.
// scale(j, c) = max |kv| over the pooled terms: the size the rounding errors are relative to.
struct BruteEntries {
  Mat pooled, scale;  // [n, d]
};
BruteEntries brute_force_entries(const CompressorWeights& w, const GateInputs& g) {
  const int r = w.ratio, d = w.head_dim;
  const Index n = g.kv.rows() / r;
  BruteEntries e{Mat(n, d), Mat(n, d)};
  for (Index j = 0; j < n; ++j)
    for (int c = 0; c < d; ++c) {
      double num = 0, den = 0, scale = 0;
      auto term = [&](Index t, Index channel) {
        const double weight = std::exp(g.z(t, channel));
        num += g.kv(t, channel) * weight;
        den += weight;
        scale = std::max(scale, std::fabs(g.kv(t, channel)));
      };
      if (w.coff() == 2) {
        if (j > 0)
          for (Index t = (j - 1) * r; t < j * r; ++t) term(t, c);
        for (Index t = j * r; t < (j + 1) * r; ++t) term(t, d + c);
      } else {
        for (Index t = j * r; t < (j + 1) * r; ++t) term(t, c);
      }
      e.pooled(j, c) = num / den;
      e.scale(j, c) = scale;
    }
  return e;
}

// Compares pooled entries with the brute force.
// exact: both are fp64 evaluations of the same sums of <= 2r = 256 terms (r = 128: 128 terms) in a
//   different order and with a different softmax shift; each term carries a few units of 2^-53
//   relative error, so the difference is below ~256 * 4 * 2^-53 * scale = 1.1e-13 * scale; 1e-12
//   leaves room for exp's own last-bit error.
// official: both start from the same fp32 inputs; the implementation rounds the (fp64-accurate)
//   value once to fp32, the brute force is rounded here the same way. They can differ only where
//   the true value lies within the fp64 evaluation error (~1e-13 * scale) of an fp32 rounding
//   boundary, i.e. by at most one fp32 ulp; the 1e-12 * scale term covers results that are tiny
//   next to their terms (cancellation), where one fp32 ulp is smaller than the fp64 error.
void check_against_brute_force(const Mat& pooled, const BruteEntries& bf, const PrecisionPolicy& p) {
  REQUIRE(pooled.rows() == bf.pooled.rows());
  REQUIRE(pooled.cols() == bf.pooled.cols());
  const bool exact = p.fp32_tensors == Storage::fp64;
  int64_t bad = 0;
  for (Index j = 0; j < pooled.rows(); ++j)
    for (Index c = 0; c < pooled.cols(); ++c) {
      const double expected = exact ? bf.pooled(j, c) : fp32(bf.pooled(j, c));
      const double tol = (exact ? 0.0 : fp32_ulp(expected)) + 1e-12 * bf.scale(j, c);
      if (!(std::fabs(pooled(j, c) - expected) <= tol)) ++bad;
    }
  CHECK(bad == 0);
  // official: DeepSeek's pooled tensor is fp32 (the tolerance above alone would admit fp64 values)
  if (!exact) CHECK(on_storage_grid(pooled, Storage::fp32));
}

// ---- checks of the number grids -------------------------------------------------------------

// True when every value of the block is s * (a value of the element grid) for one power-of-two s.
// The finest candidate scale is s = 2^ceil(log2(amax / qmax)): a block on the grid of a coarser
// power-of-two scale is also on this one (doubling an e4m3 / e2m1 value below qmax stays on the grid).
bool on_pow2_block_grid(std::span<const double> block, double qmax, double (*round_element_fn)(double)) {
  double amax = 0;
  for (double v : block) amax = std::max(amax, std::fabs(v));
  if (amax == 0) return true;
  const double s = std::exp2(std::ceil(std::log2(amax / qmax)));
  for (double v : block)
    if (round_element_fn(v / s) != v / s) return false;
  return true;
}

double fp8_round(double v) { return fp8_e4m3_round(v); }
double fp4_round(double v) { return fp4_e2m1_round(v); }

}  // namespace

// ================================================================================================

TEST_CASE("overlap_transform puts block j's b half below block j-1's a half") {
  const int r = 3, d = 2, n = 3;
  std::vector<Mat> blocks;
  for (int j = 0; j < n; ++j) {
    Mat b(r, 2 * d);
    for (int i = 0; i < r; ++i)
      for (int c = 0; c < 2 * d; ++c) b(i, c) = 100 * j + 10 * i + c;  // value names (block, row, channel)
    blocks.push_back(b);
  }
  const std::vector<Mat> out = overlap_transform(blocks, -7.5);
  REQUIRE(out.size() == static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    REQUIRE(out[j].rows() == 2 * r);
    REQUIRE(out[j].cols() == d);
    for (int i = 0; i < 2 * r; ++i)
      for (int c = 0; c < d; ++c) {
        // spec 6.2: new[:, :, r:] = t[:, :, :, d:]; new[:, 1:, :r] = t[:, :-1, :, :d]; block 0 gets fill
        const double expected =
            i >= r ? 100 * j + 10 * (i - r) + (d + c) : (j == 0 ? -7.5 : 100 * (j - 1) + 10 * i + c);
        CHECK(out[j](i, c) == expected);
      }
  }
  CHECK(overlap_transform({}, 0).empty());
  CHECK_THROWS_AS(overlap_transform({Mat::Zero(r, 3)}, 0), std::invalid_argument);  // odd 2d
  CHECK_THROWS_AS(overlap_transform({Mat::Zero(r, 4), Mat::Zero(r + 1, 4)}, 0), std::invalid_argument);
}

TEST_CASE("softmax_pool is a per-channel softmax where a -inf logit weighs exactly 0") {
  const PrecisionPolicy exact = PrecisionPolicy::exact();
  Mat kv(3, 2), score(3, 2);
  kv << 1, 5, 2, 6, 3, 7;
  score << 0, -kInf, std::log(2.0), 0, std::log(3.0), 0;
  const Eigen::RowVectorXd out = softmax_pool(kv, score, exact);
  CHECK(out(0) == doctest::Approx((1 * 1 + 2 * 2 + 3 * 3) / 6.0).epsilon(1e-15));  // weights 1:2:3
  CHECK(out(1) == 6.5);                                                            // weights 0, 1/2, 1/2 exactly
  score(1, 1) = score(2, 1) = -kInf;
  CHECK_THROWS_AS(softmax_pool(kv, score, exact), std::invalid_argument);
  CHECK_THROWS_AS(softmax_pool(kv, Mat::Zero(2, 2), exact), std::invalid_argument);
}

TEST_CASE("pooled entries equal the brute-force softmax formula at tiny dims") {
  for (const Setup& su : tiny_setups(11)) {
    const Index s = 3 * su.r() + 2;  // three completed blocks and a partial one
    const Mat x = random_x(s, su.cfg.dim, 21);
    for (const PrecisionPolicy& p : exact_and_official()) {
      CAPTURE(p.name);
      CAPTURE(su.r());
      CAPTURE(su.d());
      CompressorState st = CompressorState::fresh(su.r(), su.d());
      const CompressorOutput out = compress(su.w, su.kind, x, 0, st, su.rope(p), su.cfg.norm_eps, p);
      CHECK(out.first_entry == 0);
      check_against_brute_force(out.pooled, brute_force_entries(su.w, brute_gate_inputs(su.w, x, p.fp32_tensors)), p);
    }
  }
}

TEST_CASE("V4-Flash dims match the brute force and prefill equals decode") {
  const ModelConfig flash = ModelConfig::flash();
  const PrecisionPolicy p = PrecisionPolicy::official();
  SUBCASE("CSA main, ratio 4: 9 tokens, prefill vs one by one") {
    const Setup su{flash, CompressorKind::main, random_weights(4, flash.head_dim, flash.dim, 31)};
    const Mat x = random_x(9, flash.dim, 32);
    const Run prefill = run_chunks(su, x, {9}, p);
    check_against_brute_force(prefill.pooled, brute_force_entries(su.w, brute_gate_inputs(su.w, x, p.fp32_tensors)), p);
    const Run decode = run_chunks(su, x, one_by_one(9), p);
    CHECK(bitwise_equal(prefill.entries, decode.entries));
    CHECK(bitwise_equal(prefill.state.kv, decode.state.kv));
    CHECK(bitwise_equal(prefill.state.score, decode.state.score));
  }
  SUBCASE("HCA, ratio 128: 130 tokens, prefill vs three chunks") {
    const Setup su{flash, CompressorKind::main, random_weights(128, flash.head_dim, flash.dim, 33)};
    const Mat x = random_x(130, flash.dim, 34);
    const Run prefill = run_chunks(su, x, {130}, p);
    check_against_brute_force(prefill.pooled, brute_force_entries(su.w, brute_gate_inputs(su.w, x, p.fp32_tensors)), p);
    const Run chunks = run_chunks(su, x, {100, 28, 2}, p);
    CHECK(bitwise_equal(prefill.entries, chunks.entries));
    CHECK(bitwise_equal(prefill.state.kv, chunks.state.kv));
    CHECK(bitwise_equal(prefill.state.score, chunks.state.score));
  }
}

TEST_CASE("prefill equals decode one by one and chunked splits bitwise in entries and state") {
  for (const Setup& su : tiny_setups(41)) {
    const Index s = su.r() == 4 ? 37 : 2 * 128 + 37;
    const Mat x = random_x(s, su.cfg.dim, 42);
    for (const PrecisionPolicy& p : exact_and_official()) {
      CAPTURE(p.name);
      CAPTURE(su.r());
      CAPTURE(su.d());
      const Run prefill = run_chunks(su, x, {s}, p);
      REQUIRE(prefill.entries.rows() == s / su.r());
      std::vector<std::vector<Index>> splits = {one_by_one(s)};
      for (uint64_t seed = 0; seed < 4; ++seed) splits.push_back(random_split(s, 2 * su.r() + 3, seed));
      for (const std::vector<Index>& lengths : splits) {
        const Run run = run_chunks(su, x, lengths, p);
        CHECK(bitwise_equal(run.pooled, prefill.pooled));
        CHECK(bitwise_equal(run.entries, prefill.entries));
        CHECK(bitwise_equal(run.state.kv, prefill.state.kv));
        CHECK(bitwise_equal(run.state.score, prefill.state.score));
      }
    }
  }
}

TEST_CASE("entry count and first_entry at the block boundaries") {
  const PrecisionPolicy p = PrecisionPolicy::official();
  for (const Setup& su : tiny_setups(51)) {
    if (su.kind == CompressorKind::indexer) continue;  // same state machine as the main C4
    const int m = su.r();
    const Mat x = random_x(3 * m + 1, su.cfg.dim, 52);
    for (Index s : {m - 2, m - 1, m, m + 1, 2 * m - 1, 2 * m}) {
      for (Index prefix : {Index{0}, Index{1}, Index{m - 1}, Index{m}}) {
        CAPTURE(m);
        CAPTURE(s);
        CAPTURE(prefix);
        CompressorState st = CompressorState::fresh(m, su.d());
        const RopeTable rope = su.rope(p);
        if (prefix > 0) compress(su.w, su.kind, x.topRows(prefix), 0, st, rope, su.cfg.norm_eps, p);
        const CompressorOutput out =
            compress(su.w, su.kind, x.middleRows(prefix, s), prefix, st, rope, su.cfg.norm_eps, p);
        CHECK(out.pooled.rows() == (prefix + s) / m - prefix / m);
        CHECK(out.entries.rows() == out.pooled.rows());
        CHECK(out.entries.cols() == su.d());
        CHECK(out.first_entry == prefix / m);
        if (prefix == 0 && s < m) CHECK(out.entries.rows() == 0);
      }
    }
  }
}

TEST_CASE("the first C4 entry pools only block 0's b half") {
  for (const PrecisionPolicy& p : exact_and_official()) {
    const Setup su = tiny_setups(61)[0];
    const int r = su.r(), d = su.d();
    const Mat x = random_x(r, su.cfg.dim, 62);
    const Run run = run_chunks(su, x, {r}, p);
    REQUIRE(run.pooled.rows() == 1);
    // Block 0's own rows through the b channels, nothing else: adding exact zeros (kv 0 times
    // weight exp(-inf) = 0) to the sums changes no bit, so this is bitwise the same value.
    const CompressorProjections proj = compressor_projections(su.w, x, p);
    Mat score_b(r, d);
    for (int t = 0; t < r; ++t)
      for (int c = 0; c < d; ++c) score_b(t, c) = round_to(p.fp32_tensors, proj.score(t, d + c) + su.w.ape(t, d + c));
    const Mat kv_b = proj.kv.rightCols(d);
    CHECK(bitwise_equal(run.pooled, softmax_pool(kv_b, score_b, p)));
    CHECK(run.pooled.allFinite());
  }
}

TEST_CASE("DeepSeek's prefill formulation gives the same bits") {
  for (const Setup& su : tiny_setups(71)) {
    const int r = su.r(), d = su.d();
    const Index s = 3 * r + 1;
    const Mat x = random_x(s, su.cfg.dim, 72);
    for (const PrecisionPolicy& p : exact_and_official()) {
      CAPTURE(p.name);
      CAPTURE(r);
      const Run run = run_chunks(su, x, {s}, p);
      const CompressorProjections proj = compressor_projections(su.w, x, p);
      const Index n = s / r;
      std::vector<Mat> kv_blocks, score_blocks;
      for (Index j = 0; j < n; ++j) {
        kv_blocks.push_back(proj.kv.middleRows(j * r, r));
        Mat z = proj.score.middleRows(j * r, r) + su.w.ape;  // score.unflatten(1, (-1, r)) + ape
        round_in_place(p.fp32_tensors, z);
        score_blocks.push_back(z);
      }
      if (su.w.coff() == 2) {
        kv_blocks = overlap_transform(kv_blocks, 0);
        score_blocks = overlap_transform(score_blocks, -kInf);
      }
      Mat pooled(n, d);
      for (Index j = 0; j < n; ++j) pooled.row(j) = softmax_pool(kv_blocks[j], score_blocks[j], p);
      CHECK(bitwise_equal(run.pooled, pooled));
    }
  }
}

TEST_CASE("meaningful_rows lists the previous block and the partial rows") {
  const CompressorState c4 = CompressorState::fresh(4, 8);
  CHECK(c4.meaningful_rows(0) == std::vector<int>{});
  CHECK(c4.meaningful_rows(3) == std::vector<int>{4, 5, 6});
  CHECK(c4.meaningful_rows(4) == std::vector<int>{0, 1, 2, 3});
  CHECK(c4.meaningful_rows(6) == std::vector<int>{0, 1, 2, 3, 4, 5});
  const CompressorState c128 = CompressorState::fresh(128, 8);
  CHECK(c128.meaningful_rows(128).empty());
  CHECK(c128.meaningful_rows(130) == std::vector<int>{0, 1});
  CHECK_THROWS_AS(c4.meaningful_rows(-1), std::out_of_range);
}

TEST_CASE("state after a prefill equals DeepSeek's prefill layout on the meaningful rows") {
  for (const Setup& su : tiny_setups(81)) {
    const int r = su.r();
    const bool overlap = su.w.coff() == 2;
    const int offset = overlap ? r : 0;
    for (const PrecisionPolicy& p : exact_and_official()) {
      for (Index s : {Index{r - 1}, Index{r}, Index{2 * r + 1}, Index{3 * r - 1}}) {
        CAPTURE(p.name);
        CAPTURE(r);
        CAPTURE(s);
        const Mat x = random_x(s, su.cfg.dim, 82);
        const Run run = run_chunks(su, x, {s}, p);
        // spec 6.2 prefill: the last full block (with + ape) in rows [0, r) when overlapping, the
        // remainder at rows offset + i; everything else keeps its initial value.
        const CompressorProjections proj = compressor_projections(su.w, x, p);
        const Index rem = s % r, cutoff = s - rem;
        CompressorState expected = CompressorState::fresh(r, su.d());
        auto put = [&](Index row, Index token) {
          expected.kv.row(row) = proj.kv.row(token);
          for (Index c = 0; c < expected.score.cols(); ++c)
            expected.score(row, c) = round_to(p.fp32_tensors, proj.score(token, c) + su.w.ape(token % r, c));
        };
        if (overlap && cutoff >= r)
          for (Index i = 0; i < r; ++i) put(i, cutoff - r + i);
        for (Index i = 0; i < rem; ++i) put(offset + i, cutoff + i);
        const std::vector<int> rows = run.state.meaningful_rows(s);
        CHECK(rows_bitwise_equal(run.state.kv, expected.kv, rows));
        CHECK(rows_bitwise_equal(run.state.score, expected.score, rows));
        // The rows outside the list are where the layouts may differ: token by token, overlap row
        // r + rem holds a stale copy of the previous block, DeepSeek's prefill its initial value.
        if (overlap && s == 2 * r + 1) CHECK(run.state.score(r + rem, 0) != -kInf);
      }
    }
  }
}

TEST_CASE("NaN in state rows that are not meaningful never reaches the output") {
  const PrecisionPolicy p = PrecisionPolicy::official();
  for (const Setup& su : tiny_setups(91)) {
    const Index s = su.r() == 4 ? 29 : 2 * 128 + 5;
    const Mat x = random_x(s, su.cfg.dim, 92);
    const Run clean = run_chunks(su, x, {s}, p);
    std::vector<Index> lengths = random_split(s, 2 * su.r() + 3, 93);
    lengths.insert(lengths.begin(), 1);  // poison also right after the first token
    lengths.back() -= 1;
    if (lengths.back() == 0) lengths.pop_back();
    CompressorState st = CompressorState::fresh(su.r(), su.d());
    const RopeTable rope = su.rope(p);
    Mat entries(0, su.d()), pooled(0, su.d());
    int64_t pos = 0;
    for (Index len : lengths) {
      const std::vector<int> keep = st.meaningful_rows(pos);
      for (Index row = 0; row < st.kv.rows(); ++row)
        if (std::find(keep.begin(), keep.end(), row) == keep.end()) {
          st.kv.row(row).setConstant(std::nan(""));
          st.score.row(row).setConstant(std::nan(""));
        }
      const CompressorOutput out = compress(su.w, su.kind, x.middleRows(pos, len), pos, st, rope, su.cfg.norm_eps, p);
      entries = stack(entries, out.entries);
      pooled = stack(pooled, out.pooled);
      pos += len;
    }
    CAPTURE(su.r());
    CHECK(entries.allFinite());
    CHECK(bitwise_equal(pooled, clean.pooled));
    CHECK(bitwise_equal(entries, clean.entries));
    const std::vector<int> rows = st.meaningful_rows(s);
    CHECK(rows_bitwise_equal(st.kv, clean.state.kv, rows));
    CHECK(rows_bitwise_equal(st.score, clean.state.score, rows));
  }
}

TEST_CASE("main nope dims on the FP8 grid and indexer entries on the FP4 grid only when official") {
  const ModelConfig cfg = ModelConfig::tiny();
  const int rope_dim = cfg.rope_head_dim;
  // Main at the real d = 512 (seven 64-blocks of nope dims) and the indexer at the real d = 128;
  // a small model dim keeps it cheap.
  const Setup main{cfg, CompressorKind::main, random_weights(4, 512, cfg.dim, 101)};
  const Setup indexer{cfg, CompressorKind::indexer, random_weights(4, 128, cfg.dim, 102)};
  const Mat x = random_x(4 * 6, cfg.dim, 103);
  const PrecisionPolicy official = PrecisionPolicy::official();
  const PrecisionPolicy exact = PrecisionPolicy::exact();
  REQUIRE(official.kv_nope.has_value());
  REQUIRE(official.indexer_qk.has_value());
  const int nope_block = official.kv_nope->block, qk_block = official.indexer_qk->block;

  auto count_off_grid = [](const Mat& m, Index first, Index width, int block, double qmax, double (*fn)(double)) {
    int off = 0;
    for (Index i = 0; i < m.rows(); ++i)
      for (Index b = first; b < first + width; b += block)
        if (!on_pow2_block_grid(std::span<const double>(m.row(i).data() + b, block), qmax, fn)) ++off;
    return off;
  };

  SUBCASE("main") {
    const Run off = run_chunks(main, x, {x.rows()}, official);
    const int nope = main.d() - rope_dim;
    CHECK(count_off_grid(off.entries, 0, nope, nope_block, kFp8E4m3Max, fp8_round) == 0);
    for (Index i = 0; i < off.entries.rows(); ++i)
      for (Index c = nope; c < main.d(); ++c) CHECK(bf16(off.entries(i, c)) == off.entries(i, c));
    // The same pipeline without the FP8 step: identical rope dims, and its nope dims fake-quantized
    // with DeepSeek's format give the official ones (quantization after norm and RoPE).
    PrecisionPolicy no_quant = official;
    no_quant.kv_nope.reset();
    const Run raw = run_chunks(main, x, {x.rows()}, no_quant);
    CHECK(bitwise_equal(raw.entries.rightCols(rope_dim), off.entries.rightCols(rope_dim)));
    CHECK(count_off_grid(raw.entries, 0, nope, nope_block, kFp8E4m3Max, fp8_round) > 0);  // check can fail
    Mat requant = raw.entries;
    for (Index i = 0; i < requant.rows(); ++i)
      fake_quant_row(*official.kv_nope, std::span<double>(requant.row(i).data(), static_cast<size_t>(nope)));
    CHECK(bitwise_equal(requant, off.entries));
    const Run ex = run_chunks(main, x, {x.rows()}, exact);
    CHECK(count_off_grid(ex.entries, 0, nope, nope_block, kFp8E4m3Max, fp8_round) ==
          ex.entries.rows() * (nope / nope_block));
  }
  SUBCASE("indexer") {
    const Run off = run_chunks(indexer, x, {x.rows()}, official);
    CHECK(count_off_grid(off.entries, 0, indexer.d(), qk_block, kFp4E2m1Max, fp4_round) == 0);
    const Run ex = run_chunks(indexer, x, {x.rows()}, exact);
    CHECK(count_off_grid(ex.entries, 0, indexer.d(), qk_block, kFp4E2m1Max, fp4_round) ==
          ex.entries.rows() * (indexer.d() / qk_block));
  }
}

TEST_CASE("official post-processing sees the pooled entry only through its bf16 rounding") {
  const PrecisionPolicy p = PrecisionPolicy::official();
  for (const Setup& su : tiny_setups(151)) {
    std::mt19937_64 gen(152);
    std::uniform_real_distribution<double> u(-3, 3);
    Mat pooled(5, su.d());
    for (Index i = 0; i < pooled.size(); ++i) pooled.data()[i] = fp32(u(gen));
    Mat pooled_bf16 = pooled;
    round_in_place(Storage::bf16, pooled_bf16);
    REQUIRE(!bitwise_equal(pooled, pooled_bf16));
    const RopeTable rope = su.rope(p);
    CHECK(bitwise_equal(postprocess_entries(su.w, su.kind, pooled, 2, rope, su.cfg.norm_eps, p),
                        postprocess_entries(su.w, su.kind, pooled_bf16, 2, rope, su.cfg.norm_eps, p)));
  }
}

TEST_CASE("exact post-processing equals a brute-force RMSNorm then RoPE at j*r then Hadamard") {
  const PrecisionPolicy p = PrecisionPolicy::exact();
  for (const Setup& su : tiny_setups(111)) {
    const int d = su.d(), r = su.r();
    const RopeTable rope = su.rope(p);
    const int rope_dim = rope.rope_dim;
    const int64_t first_entry = 3;
    std::mt19937_64 gen(112);
    std::uniform_real_distribution<double> u(-3, 3);
    Mat pooled(4, d);
    for (Index i = 0; i < pooled.size(); ++i) pooled.data()[i] = u(gen);
    const Mat entries = postprocess_entries(su.w, su.kind, pooled, first_entry, rope, su.cfg.norm_eps, p);
    REQUIRE(entries.rows() == pooled.rows());
    for (Index i = 0; i < pooled.rows(); ++i) {
      Eigen::RowVectorXd y = pooled.row(i);
      const double rms = std::sqrt(y.squaredNorm() / d + su.cfg.norm_eps);
      for (int c = 0; c < d; ++c) y(c) = su.w.norm(c) * (pooled(i, c) / rms);
      const double position = static_cast<double>((first_entry + i) * r);
      for (int k = 0; k < rope_dim / 2; ++k) {
        const int c = d - rope_dim + 2 * k;
        const double angle = position * rope.freqs(k);
        const double a = y(c), b = y(c + 1);
        y(c) = a * std::cos(angle) - b * std::sin(angle);
        y(c + 1) = a * std::sin(angle) + b * std::cos(angle);
      }
      if (su.kind == CompressorKind::indexer && p.indexer_hadamard) {
        Eigen::RowVectorXd h(d);
        for (int a = 0; a < d; ++a) {
          double acc = 0;
          for (int b = 0; b < d; ++b) acc += (std::popcount(static_cast<unsigned>(a & b)) % 2 ? -1.0 : 1.0) * y(b);
          h(a) = acc / std::sqrt(static_cast<double>(d));
        }
        y = h;
      }
      // fp64 evaluations of the same O(1) quantities in a different order: a sum of d <= 512 terms
      // (norm, Hadamard) and a rotation, each a few 2^-53 relative per term: below 1e-12 absolute.
      for (int c = 0; c < d; ++c) CHECK(std::fabs(entries(i, c) - y(c)) <= 1e-12);
    }
  }
}

TEST_CASE("online C128 equals the stored C128 within the fp32 error of 127 online steps") {
  const ModelConfig cfg = ModelConfig::tiny();
  const Setup su{cfg, CompressorKind::main, random_weights(128, 256, cfg.dim, 121)};
  const Index s = 4 * 128 + 3;  // 4 blocks x 256 channels = 1024 channel-blocks, and a partial block
  const Mat x = random_x(s, cfg.dim, 122);
  for (const PrecisionPolicy& p : exact_and_official()) {
    CAPTURE(p.name);
    const Run stored = run_chunks(su, x, {s}, p);
    OnlineC128State st = OnlineC128State::fresh(su.d());
    const CompressorOutput online = compress_online_c128(su.w, x, 0, st, su.rope(p), cfg.norm_eps, p);
    REQUIRE(online.pooled.rows() == stored.pooled.rows());
    CHECK(online.first_entry == 0);
    const BruteEntries bf = brute_force_entries(su.w, brute_gate_inputs(su.w, x, p.fp32_tensors));
    // Error bound (K = max |kv| of the block's channel, u = unit roundoff of the storage). The
    // running mean is a convex combination of kv values, so |mean| <= K. Per step, rounding mean'
    // costs u K and rounding l' (by which mean' is divided) another u K. The relative error E of the
    // stored l grows as E' <= alpha E + u (alpha = l e^(m-m') / l', beta = 1 - alpha the new token's
    // weight) and shifts mean' by at most 2 alpha beta E K; since alpha beta E <= E - E' + u, these
    // terms telescope to at most 2 n u K over n steps. With n = 127 update steps: 4 n u K, plus the
    // stored result's own rounding u K: (4 * 127 + 1) u K = 3.0e-5 K for fp32 (u = 2^-24).
    // Exact (u = 2^-53) the same bound is 5.7e-14 K; 1e-12 K also covers exp's last-bit error.
    const bool exact = p.fp32_tensors == Storage::fp64;
    double worst = 0;
    for (Index j = 0; j < online.pooled.rows(); ++j)
      for (Index c = 0; c < su.d(); ++c) {
        const double rel = std::fabs(online.pooled(j, c) - stored.pooled(j, c)) / bf.scale(j, c);
        worst = std::max(worst, rel);
      }
    MESSAGE(p.name << ": max |online - stored| / K = " << worst);
    // Measured (this seed): official 2.9e-7 (4.9 u, 1% of the bound), exact 1.1e-15.
    CHECK(worst <= (exact ? 1e-12 : (4 * 127 + 1) * kFp32UnitRoundoff));
    if (!exact) {  // the online state and its emitted means are fp32 values, as sglang holds them
      CHECK(on_storage_grid(online.pooled, Storage::fp32));
      CHECK(on_storage_grid(st.mean, Storage::fp32));
      CHECK(on_storage_grid(st.sum, Storage::fp32));
    }
    // Online and stored post-process the same way.
    CHECK(bitwise_equal(online.entries, postprocess_entries(su.w, CompressorKind::main, online.pooled, 0, su.rope(p),
                                                            cfg.norm_eps, p)));
  }
}

TEST_CASE("online C128 prefill equals decode one by one and chunked splits bitwise") {
  const ModelConfig cfg = ModelConfig::tiny();
  const Setup su{cfg, CompressorKind::main, random_weights(128, cfg.head_dim, cfg.dim, 131)};
  const Index s = 2 * 128 + 9;
  const Mat x = random_x(s, cfg.dim, 132);
  for (const PrecisionPolicy& p : exact_and_official()) {
    CAPTURE(p.name);
    const RopeTable rope = su.rope(p);
    auto run = [&](const std::vector<Index>& lengths) {
      OnlineC128State st = OnlineC128State::fresh(su.d());
      Mat entries(0, su.d());
      int64_t pos = 0;
      for (Index len : lengths) {
        const CompressorOutput out = compress_online_c128(su.w, x.middleRows(pos, len), pos, st, rope, cfg.norm_eps, p);
        CHECK(out.first_entry == pos / 128);
        CHECK(out.entries.rows() == (pos + len) / 128 - pos / 128);
        entries = stack(entries, out.entries);
        pos += len;
      }
      return std::make_pair(entries, st);
    };
    const auto [entries, st] = run({s});
    REQUIRE(entries.rows() == 2);
    for (const std::vector<Index>& lengths : {one_by_one(s), random_split(s, 200, 133), random_split(s, 7, 134)}) {
      const auto [e2, st2] = run(lengths);
      CHECK(bitwise_equal(e2, entries));
      CHECK(bitwise_equal(st2.max, st.max));
      CHECK(bitwise_equal(st2.sum, st.sum));
      CHECK(bitwise_equal(st2.mean, st.mean));
    }
  }
}

TEST_CASE("bad input throws") {
  const Setup su = tiny_setups(141)[0];
  const PrecisionPolicy p = PrecisionPolicy::official();
  const RopeTable rope = su.rope(p);
  const Mat x = random_x(2, su.cfg.dim, 142);
  CompressorState wrong_ratio = CompressorState::fresh(128, su.d());
  CHECK_THROWS_AS(compress(su.w, su.kind, x, 0, wrong_ratio, rope, su.cfg.norm_eps, p), std::invalid_argument);
  CompressorState st = CompressorState::fresh(su.r(), su.d());
  CHECK_THROWS_AS(compress(su.w, su.kind, random_x(2, su.cfg.dim + 1, 1), 0, st, rope, su.cfg.norm_eps, p),
                  std::invalid_argument);
  CHECK_THROWS_AS(compress(su.w, su.kind, x, -1, st, rope, su.cfg.norm_eps, p), std::out_of_range);
  CompressorWeights bad = su.w;
  bad.ape.resize(su.r() + 1, bad.ape.cols());
  CHECK_THROWS_AS(compress(bad, su.kind, x, 0, st, rope, su.cfg.norm_eps, p), std::invalid_argument);
  OnlineC128State online = OnlineC128State::fresh(su.d());
  CHECK_THROWS_AS(compress_online_c128(su.w, x, 0, online, rope, su.cfg.norm_eps, p),
                  std::invalid_argument);  // ratio 4
  CHECK_THROWS_AS(CompressorState::fresh(0, 8), std::invalid_argument);
}
