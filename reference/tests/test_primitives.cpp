// Primitives (RMSNorm, RoPE, Hadamard, linear) and layer weights, each checked against an
// independent brute-force formula, an invariant, or a table value, never against the
// implementation's own arithmetic.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <complex>
#include <cstdint>
#include <functional>
#include <limits>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/config.h"
#include "reference/numerics/fp8_e4m3.h"
#include "reference/numerics/storage.h"
#include "reference/precision.h"
#include "reference/primitives/hadamard.h"
#include "reference/primitives/linear.h"
#include "reference/primitives/rmsnorm.h"
#include "reference/primitives/rope.h"
#include "reference/weights.h"

using namespace dsv4::ref;

namespace {

constexpr double kDoubleEps = 0x1p-52;  // one double ulp at 1
constexpr double kFloatEps = 0x1p-23;   // one fp32 ulp at 1

// Uniform values in [-scale, scale), reproducible.
Mat random_mat(Index rows, Index cols, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  Mat m(rows, cols);
  for (Index r = 0; r < rows; ++r)
    for (Index c = 0; c < cols; ++c) m(r, c) = u(rng);
  return m;
}

Mat to_storage(Storage s, Mat m) {
  round_in_place(s, m);
  return m;
}

bool same_bits(const Mat& a, const Mat& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Index i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint64_t>(a.data()[i]) != std::bit_cast<uint64_t>(b.data()[i])) return false;
  return true;
}

// On the bf16 grid: a float whose low 16 bits are zero.
bool on_bf16_grid(double v) {
  const float f = static_cast<float>(v);
  return static_cast<double>(f) == v && (std::bit_cast<uint32_t>(f) & 0xffffu) == 0;
}
bool all_on_bf16_grid(const Mat& m) {
  for (Index i = 0; i < m.size(); ++i)
    if (!on_bf16_grid(m.data()[i])) return false;
  return true;
}

// On the e4m3 grid (|v| <= 448): normals have 4 significant bits (m * 2^e, 8 <= m <= 15, e >= -9),
// subnormals are multiples of 2^-9 below 2^-6.
bool on_e4m3_grid(double v) {
  const double a = std::fabs(v);
  if (a == 0) return true;
  if (a > 448) return false;
  if (a < 0x1p-6) return std::floor(a / 0x1p-9) == a / 0x1p-9;
  int e = 0;
  const double f = std::frexp(a, &e);  // a = f 2^e, f in [0.5, 1)
  return std::floor(f * 16) == f * 16;
}

// Runs f with the OpenMP thread count set to `threads`, restoring the previous count.
template <typename F>
auto with_threads(int threads, F&& f) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto result = f();
  omp_set_num_threads(before);
  return result;
}

// The UE8M0 scale of DeepSeek's act_quant written with log2/ceil (the implementation reads the
// IEEE bits): s = 2^ceil(log2(fp32(max(amax, 1e-4) * fp32(1/448)))).
double ue8m0_scale_brute(double amax) {
  const float t = std::max(static_cast<float>(amax), 1e-4f) * (1.0f / 448.0f);
  return std::exp2(std::ceil(std::log2(static_cast<double>(t))));
}

}  // namespace

// ------------------------------------------------------------------------------------- RMSNorm

TEST_CASE("rms_norm exact mode is w * x / sqrt(mean(x^2) + eps)") {
  const Index n = 256;
  const Mat x = random_mat(5, n, 1, 3.0);
  const Vec w = random_mat(n, 1, 2).col(0).array() + 1.0;
  const double eps = 1e-6;
  const Mat y = rms_norm(x, w, eps, PrecisionPolicy::exact());
  for (Index r = 0; r < x.rows(); ++r) {
    const double rms = std::sqrt(x.row(r).squaredNorm() / n + eps);
    for (Index k = 0; k < n; ++k) {
      const double expected = w(k) * x(r, k) / rms;
      // both sides are double formulas of ~n + 5 roundings of 2^-53 relative each
      CHECK(std::fabs(y(r, k) - expected) <= (n + 8) * kDoubleEps * std::fabs(expected) + 1e-300);
    }
  }
}

TEST_CASE("rms_norm official output is bf16 and within bf16 rounding of the mathematics") {
  const Index n = 128;
  const Mat x = to_storage(Storage::bf16, random_mat(7, n, 3, 2.0));
  const Vec w = to_storage(Storage::bf16, (random_mat(n, 1, 4, 0.2).array() + 1.0).matrix()).col(0);
  const Mat official = rms_norm(x, w, 1e-6, PrecisionPolicy::official());
  const Mat exact = rms_norm(x, w, 1e-6, PrecisionPolicy::exact());
  CHECK(all_on_bf16_grid(official));
  for (Index i = 0; i < exact.size(); ++i)
    // the final bf16 rounding (unit roundoff 2^-8) and the five fp32 roundings before it
    // (5 * 2^-24, the first two halved by the rsqrt): 2^-8 + 2^-21 covers both
    CHECK(std::fabs(official.data()[i] - exact.data()[i]) <= (0x1p-8 + 0x1p-21) * std::fabs(exact.data()[i]));
}

TEST_CASE("rms_norm rejects a weight of the wrong length") {
  CHECK_THROWS_AS(rms_norm(Mat::Ones(2, 8), Vec::Ones(7), 1e-6, PrecisionPolicy::exact()), std::invalid_argument);
}

TEST_CASE("head_rms_norm normalises each head on its own") {
  const int heads = 3;
  const Index d = 64;
  Mat x = random_mat(4, heads * d, 5);
  x.middleCols(d, d) *= 100.0;  // head 1 is 100x larger: a whole-row norm would shrink heads 0 and 2
  const Mat y = head_rms_norm(x, heads, 1e-6, PrecisionPolicy::exact());
  for (Index r = 0; r < x.rows(); ++r)
    for (int h = 0; h < heads; ++h) {
      const auto xh = x.row(r).segment(h * d, d);
      const double rms = std::sqrt(xh.squaredNorm() / d + 1e-6);
      for (Index k = 0; k < d; ++k) {
        const double expected = xh(k) / rms;
        // ~d + 4 double roundings on either side
        CHECK(std::fabs(y(r, h * d + k) - expected) <= (d + 8) * kDoubleEps * std::fabs(expected) + 1e-300);
      }
    }
}

TEST_CASE("head_rms_norm official runs bf16 ops: output on the grid, within the five roundings") {
  const int heads = 4;
  const Index d = 128;
  const Mat x = to_storage(Storage::bf16, random_mat(6, heads * d, 6, 4.0));
  const Mat official = head_rms_norm(x, heads, 1e-6, PrecisionPolicy::official());
  const Mat exact = head_rms_norm(x, heads, 1e-6, PrecisionPolicy::exact());
  CHECK(all_on_bf16_grid(official));
  for (Index i = 0; i < exact.size(); ++i)
    // bf16 roundings, unit roundoff 2^-8 each: squares (into the mean), mean and + eps enter
    // rsqrt's argument and come out halved (3 * 2^-9), then rsqrt and the product (2 * 2^-8):
    // 3.5 * 2^-8 plus second-order terms, below 2^-6
    CHECK(std::fabs(official.data()[i] - exact.data()[i]) <= 0x1p-6 * std::fabs(exact.data()[i]));
  CHECK_THROWS_AS(head_rms_norm(x, 3, 1e-6, PrecisionPolicy::exact()), std::invalid_argument);
}

// ------------------------------------------------------------------------------------- RoPE

TEST_CASE("YaRN correction range of V4 (base 160000, L 65536, beta 32 / 1) is low 15, high 25") {
  // the spec's formula, as a table check: corr(32) = 15.45, corr(1) = 24.71
  const auto corr = [](double r) {
    return 64 * std::log(65536 / (r * 2 * std::numbers::pi)) / (2 * std::log(160000.0));
  };
  CHECK(corr(32) == doctest::Approx(15.45).epsilon(1e-3));
  CHECK(corr(1) == doctest::Approx(24.71).epsilon(1e-3));

  // The table shows the range: pairs i <= low keep the plain frequency bitwise (ramp 0), pairs
  // i >= high are exactly plain / 16 (ramp 1, a power-of-two division), pairs in between are
  // strictly between. low = 14 or high = 26 would make pair 15 or 25 strictly between; low = 16
  // or high = 24 would make pair 16 or 24 an end value.
  const RopeTable plain = RopeTable::make(64, 160000, 0, 0, 0, 0, Storage::fp32);
  const RopeTable yarn = RopeTable::make(64, 160000, 65536, 16, 32, 1, Storage::fp32);
  for (int i = 0; i < 32; ++i) {
    CAPTURE(i);
    if (i <= 15)
      CHECK(yarn.freqs(i) == plain.freqs(i));
    else if (i >= 25)
      CHECK(yarn.freqs(i) == plain.freqs(i) / 16);
    else {
      CHECK(yarn.freqs(i) < plain.freqs(i));
      CHECK(yarn.freqs(i) > plain.freqs(i) / 16);
      // the blend with ramp = (i - 15) / 10, in double: the table's seven fp32 roundings stay
      // within 8 fp32 ulps
      const double ramp = (i - 15) / 10.0;
      const double expected = plain.freqs(i) / 16 * ramp + plain.freqs(i) * (1 - ramp);
      CHECK(std::fabs(yarn.freqs(i) - expected) <= 8 * kFloatEps * expected);
    }
  }
  // for_layer: compressed layers of Flash use this table, window-only layers the plain base 10000
  const ModelConfig flash = ModelConfig::flash();
  const RopeTable csa = RopeTable::for_layer(flash, 4, PrecisionPolicy::official());
  const RopeTable hca = RopeTable::for_layer(flash, 128, PrecisionPolicy::official());
  CHECK(same_bits(Mat(csa.freqs), Mat(yarn.freqs)));
  CHECK(same_bits(Mat(hca.freqs), Mat(yarn.freqs)));
  CHECK(csa.storage == Storage::fp32);
  const RopeTable window = RopeTable::for_layer(flash, 0, PrecisionPolicy::official());
  CHECK(same_bits(Mat(window.freqs), Mat(RopeTable::make(64, 10000, 0, 0, 0, 0, Storage::fp32).freqs)));
}

TEST_CASE("plain RoPE table values") {
  const RopeTable t = RopeTable::make(64, 10000, 0, 0, 0, 0, Storage::fp32);
  REQUIRE(t.freqs.size() == 32);
  CHECK(t.freqs(0) == 1.0);
  CHECK(t.freqs(16) == static_cast<double>(0.01f));  // 10000^-(32/64) = 1/100, rounded to fp32
  CHECK(t.freqs(8) == static_cast<double>(0.1f));    // 10000^-(16/64) = 1/10
  for (int i = 0; i < 32; ++i) {
    CHECK(t.freqs(i) == static_cast<double>(static_cast<float>(t.freqs(i))));  // fp32 storage
    // exp(-(2i/64) ln base): a different formula; the table's pow and reciprocal are each rounded
    // to fp32, so the two agree within 2 fp32 ulps
    CHECK(std::fabs(t.freqs(i) - std::exp(-(2.0 * i / 64) * std::log(10000.0))) <= 2 * kFloatEps * t.freqs(i));
  }
  const RopeTable e = RopeTable::for_layer(ModelConfig::flash(), 0, PrecisionPolicy::exact());
  CHECK(e.storage == Storage::fp64);
  for (int i = 0; i < 32; ++i)  // double pow and reciprocal vs exp/log: a few double ulps
    CHECK(std::fabs(e.freqs(i) - std::exp(-(2.0 * i / 64) * std::log(10000.0))) <= 8 * kDoubleEps * e.freqs(i));
}

TEST_CASE("RoPE cos/sin are fp32 functions of the fp32 angle t * freq") {
  const RopeTable t = RopeTable::for_layer(ModelConfig::flash(), 4, PrecisionPolicy::official());
  for (int64_t pos : {0, 1, 7, 4095, 65535, 1000003})
    for (int i : {0, 5, 15, 20, 31}) {
      const float angle = static_cast<float>(pos) * static_cast<float>(t.freqs(i));  // fp32 multiply
      CHECK(t.cos_at(pos, i) == static_cast<double>(static_cast<float>(std::cos(static_cast<double>(angle)))));
      CHECK(t.sin_at(pos, i) == static_cast<double>(static_cast<float>(std::sin(static_cast<double>(angle)))));
    }
  CHECK_THROWS_AS(t.cos_at(0, 32), std::out_of_range);
  CHECK_THROWS_AS(t.sin_at(-1, 0), std::out_of_range);
}

TEST_CASE("apply_rope rotates interleaved pairs of the last rope_dim dims of every head") {
  const int heads = 3, d = 128, rope = 64;
  const RopeTable table = RopeTable::make(rope, 160000, 65536, 16, 32, 1, Storage::fp64);
  const PrecisionPolicy exact = PrecisionPolicy::exact();
  const Mat x = random_mat(1, heads * d, 7);
  const int64_t pos = 1234;
  Mat y = x;
  apply_rope(y.row(0), heads, d, pos, table, false, exact);
  for (int h = 0; h < heads; ++h) {
    // the nope dims are untouched, bitwise
    CHECK(same_bits(Mat(y.row(0).segment(h * d, d - rope)), Mat(x.row(0).segment(h * d, d - rope))));
    for (int i = 0; i < rope / 2; ++i) {
      // pair i = dims (d - 64 + 2i, d - 64 + 2i + 1) of the head, rotated by pos * freq_i
      const Index k = h * d + (d - rope) + 2 * i;
      const double angle = pos * table.freqs(i);
      const std::complex<double> expected = std::complex<double>(x(0, k), x(0, k + 1)) * std::polar(1.0, angle);
      // |x| <= 1; cos/sin and the products in double: a few 1e-16
      CHECK(std::fabs(y(0, k) - expected.real()) <= 1e-14);
      CHECK(std::fabs(y(0, k + 1) - expected.imag()) <= 1e-14);
      // a rotation keeps each pair's norm
      CHECK(std::hypot(y(0, k), y(0, k + 1)) == doctest::Approx(std::hypot(x(0, k), x(0, k + 1))).epsilon(1e-12));
    }
  }
  // inverse rotation brings it back (angles up to ~1234 rad: cos/sin errors ~1e-16, products 1e-16)
  apply_rope(y.row(0), heads, d, pos, table, true, exact);
  CHECK((y - x).cwiseAbs().maxCoeff() <= 1e-12);
}

TEST_CASE("apply_rope official: complex64 product, written back as bf16") {
  const int heads = 2, d = 128;
  const PrecisionPolicy official = PrecisionPolicy::official();
  const RopeTable table = RopeTable::for_layer(ModelConfig::tiny(), 4, official);
  const Mat x = to_storage(Storage::bf16, random_mat(1, heads * d, 8, 3.0));
  for (bool inverse : {false, true}) {
    Mat y = x;
    apply_rope(y.row(0), heads, d, 777, table, inverse, official);
    CHECK(all_on_bf16_grid(y));
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < 32; ++i) {
        const Index k = h * d + 64 + 2 * i;
        const double s = inverse ? -table.sin_at(777, i) : table.sin_at(777, i);
        const std::complex<double> z =
            std::complex<double>(x(0, k), x(0, k + 1)) * std::complex<double>(table.cos_at(777, i), s);
        CHECK(y(0, k) == round_to(Storage::bf16, round_to(Storage::fp32, z.real())));
        CHECK(y(0, k + 1) == round_to(Storage::bf16, round_to(Storage::fp32, z.imag())));
      }
  }
  Mat bad = x;
  CHECK_THROWS_AS(apply_rope(bad.row(0), heads, 32, 0, table, false, official), std::invalid_argument);
  CHECK_THROWS_AS(apply_rope(bad.row(0), heads + 1, d, 0, table, false, official), std::invalid_argument);
}

// ------------------------------------------------------------------------------------- Hadamard

namespace {
// H[i][j] = (-1)^popcount(i & j), natural (Sylvester) order
Mat sylvester(int n) {
  Mat H(n, n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) H(i, j) = std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0;
  return H;
}
}  // namespace

TEST_CASE("hadamard_rows is x H^T n^-1/2 with the natural-order Sylvester matrix") {
  const PrecisionPolicy exact = PrecisionPolicy::exact();
  for (int n : {1, 2, 8, 128}) {
    CAPTURE(n);
    const Mat H = sylvester(n);
    CHECK((H * H.transpose() - n * Mat::Identity(n, n)).cwiseAbs().maxCoeff() == 0);  // H H^T = n I
    const Mat x = random_mat(5, 3 * n, 9 + n);                                        // three blocks per row
    const Mat y = hadamard_rows(x, n, exact);
    for (int b = 0; b < 3; ++b) {
      const Mat expected = x.middleCols(b * n, n) * H.transpose() / std::sqrt(double(n));
      // n-term sums of |x| <= 1: error <= n 2^-53 n^-1/2 per entry on either side
      CHECK((y.middleCols(b * n, n) - expected).cwiseAbs().maxCoeff() <= 2 * n * kDoubleEps);
    }
    // H/sqrt(n) is symmetric and orthogonal: applying it twice is the identity
    CHECK((hadamard_rows(y, n, exact) - x).cwiseAbs().maxCoeff() <= 4 * n * kDoubleEps);
    // the transform of the identity is H / sqrt(n), rows in natural order
    CHECK((hadamard_rows(Mat::Identity(n, n), n, exact) * std::sqrt(double(n)) - H).cwiseAbs().maxCoeff() <=
          4 * kDoubleEps);
  }
}

TEST_CASE("hadamard_rows official: bf16 output within rounding of the exact transform") {
  const Mat x = to_storage(Storage::bf16, random_mat(4, 256, 10));
  const Mat official = hadamard_rows(x, 128, PrecisionPolicy::official());
  const Mat exact = hadamard_rows(x, 128, PrecisionPolicy::exact());
  CHECK(all_on_bf16_grid(official));
  for (Index i = 0; i < x.size(); ++i)  // fp32 then bf16 rounding: unit roundoffs 2^-24 + 2^-8
    CHECK(std::fabs(official.data()[i] - exact.data()[i]) <= (0x1p-8 + 0x1p-23) * std::fabs(exact.data()[i]));
  CHECK_THROWS_AS(hadamard_rows(x, 96, PrecisionPolicy::exact()), std::invalid_argument);   // not a power of 2
  CHECK_THROWS_AS(hadamard_rows(x, 512, PrecisionPolicy::exact()), std::invalid_argument);  // 256 % 512 != 0
}

// ------------------------------------------------------------------------------------- linear

namespace {
struct Shape {
  Index N, K;
};
// K not a multiple of 48, 4 or 128 in some; N crossing the 256-row W panel in some
const std::vector<Shape> kExactShapes = {{37, 53}, {300, 130}, {64, 256}, {5, 1}};
const std::vector<Shape> kFp8Shapes = {{37, 128}, {300, 384}, {1, 256}};

// x W^T by a triple loop in long double.
Mat naive_product(const Mat& x, const Mat& W) {
  Mat y(x.rows(), W.rows());
  for (Index m = 0; m < x.rows(); ++m)
    for (Index n = 0; n < W.rows(); ++n) {
      long double sum = 0;
      for (Index k = 0; k < x.cols(); ++k) sum += static_cast<long double>(x(m, k)) * W(n, k);
      y(m, n) = static_cast<double>(sum);
    }
  return y;
}

// Every row of a linear on M rows equals the same linear of that row alone (M = 1), bitwise.
void check_rows_independent_of_m(const Mat& x, const Mat& W, const std::function<Mat(const Mat&, const Mat&)>& f) {
  const Mat all = f(x, W);
  for (Index m = 0; m < x.rows(); ++m) {
    CAPTURE(m);
    CHECK(same_bits(f(x.middleRows(m, 1), W), all.middleRows(m, 1)));
  }
  // and the same with one and with two threads
  const Mat one = with_threads(1, [&] { return f(x, W); });
  const Mat two = with_threads(2, [&] { return f(x, W); });
  CHECK(same_bits(one, all));
  CHECK(same_bits(two, all));
}

// DeepSeek's fp8_gemm, written from the formula: act_quant each 128-block of x (UE8M0 scale, e4m3
// values), C = sum_kb fp32(sum_k a_q w) * sa in fp32, in K-block order; the output rounded to bf16.
Mat fp8_gemm_brute(const Mat& x, const Mat& W) {
  Mat y(x.rows(), W.rows());
  for (Index m = 0; m < x.rows(); ++m)
    for (Index n = 0; n < W.rows(); ++n) {
      float acc = 0;
      for (Index kb = 0; kb < x.cols() / 128; ++kb) {
        const double sa = ue8m0_scale_brute(x.row(m).segment(kb * 128, 128).cwiseAbs().maxCoeff());
        long double partial = 0;
        for (Index k = kb * 128; k < (kb + 1) * 128; ++k)
          partial += static_cast<long double>(fp8_e4m3_round(std::clamp(x(m, k) / sa, -448.0, 448.0))) * W(n, k);
        acc = acc + static_cast<float>(partial) * static_cast<float>(sa);
      }
      y(m, n) = round_to(Storage::bf16, acc);
    }
  return y;
}
}  // namespace

TEST_CASE("linear_exact is x W^T") {
  for (const Shape& s : kExactShapes) {
    CAPTURE(s.N);
    CAPTURE(s.K);
    const Mat x = random_mat(61, s.K, 11);
    const Mat W = random_mat(s.N, s.K, 12);
    const Mat y = linear_exact(x, W, Storage::fp64);
    // |x|, |W| <= 1: K-term double sums in any order differ from the long double sum by at most
    // K 2^-53 K (each partial sum is below K)
    CHECK((y - naive_product(x, W)).cwiseAbs().maxCoeff() <= double(s.K) * s.K * kDoubleEps);
    // the rounding to `out` is of that same product
    CHECK(same_bits(linear_exact(x, W, Storage::bf16), to_storage(Storage::bf16, y)));
  }
  CHECK_THROWS_AS(linear_exact(Mat::Ones(2, 3), Mat::Ones(4, 5), Storage::fp64), std::invalid_argument);
  CHECK(linear_exact(Mat(0, 8), Mat::Ones(3, 8), Storage::fp64).rows() == 0);
}

TEST_CASE("linear_exact: a token's row does not depend on M (every chunk position) or the thread count") {
  for (const Shape& s : kExactShapes) {
    CAPTURE(s.N);
    CAPTURE(s.K);
    // 100 rows: every position of a 48-row chunk twice, and a partial last chunk
    check_rows_independent_of_m(random_mat(100, s.K, 13), random_mat(s.N, s.K, 14),
                                [](const Mat& x, const Mat& W) { return linear_exact(x, W, Storage::fp64); });
  }
}

TEST_CASE("linear_fp8_block128 equals DeepSeek's formula bitwise") {
  for (const Shape& s : kFp8Shapes) {
    CAPTURE(s.N);
    CAPTURE(s.K);
    // rows with very different block magnitudes exercise the per-block scales
    Mat x = to_storage(Storage::bf16, random_mat(9, s.K, 15, 4.0));
    x.row(1) *= 1e-3;
    x.block(2, 0, 1, 128) *= 300.0;
    const Mat W = fp8_weight_fake_quant(random_mat(s.N, s.K, 16, 0.05));
    CHECK(same_bits(linear_fp8_block128(x, W, Storage::bf16), fp8_gemm_brute(x, W)));
  }
  CHECK_THROWS_AS(linear_fp8_block128(Mat::Ones(2, 100), Mat::Ones(3, 100), Storage::bf16), std::invalid_argument);
}

TEST_CASE("linear_fp8_block128: a token's row does not depend on M or the thread count") {
  for (const Shape& s : kFp8Shapes) {
    CAPTURE(s.N);
    check_rows_independent_of_m(to_storage(Storage::bf16, random_mat(60, s.K, 17)),
                                fp8_weight_fake_quant(random_mat(s.N, s.K, 18, 0.1)),
                                [](const Mat& x, const Mat& W) { return linear_fp8_block128(x, W, Storage::bf16); });
  }
}

TEST_CASE("linear_fp8_weight follows the policy") {
  const Mat x = to_storage(Storage::bf16, random_mat(3, 256, 19));
  const Mat W = fp8_weight_fake_quant(random_mat(20, 256, 20, 0.1));
  CHECK(same_bits(linear_fp8_weight(x, W, PrecisionPolicy::exact()), linear_exact(x, W, Storage::fp64)));
  CHECK(same_bits(linear_fp8_weight(x, W, PrecisionPolicy::official()), linear_fp8_block128(x, W, Storage::bf16)));
}

TEST_CASE("fp8_weight_fake_quant: e4m3 values times one power-of-two scale per 128x128 block") {
  Mat W = random_mat(200, 300, 21, 0.02);  // edge blocks of 72 rows and 44 columns
  W.block(128, 256, 72, 44) *= 1e4;        // one block of large values
  W.block(0, 128, 128, 128).setZero();     // one zero block
  const Mat q = fp8_weight_fake_quant(W);
  for (Index rb = 0; rb < 2; ++rb)
    for (Index cb = 0; cb < 3; ++cb) {
      const Index r0 = rb * 128, c0 = cb * 128;
      const Index nr = std::min<Index>(128, W.rows() - r0), nc = std::min<Index>(128, W.cols() - c0);
      const double s = ue8m0_scale_brute(W.block(r0, c0, nr, nc).cwiseAbs().maxCoeff());
      for (Index r = r0; r < r0 + nr; ++r)
        for (Index c = c0; c < c0 + nc; ++c) {
          CHECK(on_e4m3_grid(q(r, c) / s));
          // e4m3 keeps 4 significant bits (error <= 2^-4 relative) down to the subnormal
          // spacing 2^-9 s (error <= 2^-10 s)
          CHECK(std::fabs(q(r, c) - W(r, c)) <= std::max(0x1p-4 * std::fabs(W(r, c)), 0x1p-10 * s));
        }
    }
  CHECK(same_bits(fp8_weight_fake_quant(q), q));  // idempotent
}

// ------------------------------------------------------------------------------------- weights

namespace {
std::vector<std::pair<std::string, Mat>> all_tensors(const AttentionWeights& w) {
  std::vector<std::pair<std::string, Mat>> t = {{"wq_a", w.wq_a},
                                                {"q_norm", w.q_norm},
                                                {"wq_b", w.wq_b},
                                                {"wkv", w.wkv},
                                                {"kv_norm", w.kv_norm},
                                                {"attn_sink", w.attn_sink},
                                                {"wo_a", w.wo_a},
                                                {"wo_b", w.wo_b},
                                                {"compressor/wkv", w.compressor.wkv},
                                                {"compressor/wgate", w.compressor.wgate},
                                                {"compressor/ape", w.compressor.ape},
                                                {"compressor/norm", w.compressor.norm},
                                                {"indexer/wq_b", w.indexer.wq_b},
                                                {"indexer/weights_proj", w.indexer.weights_proj},
                                                {"indexer/compressor/wkv", w.indexer.compressor.wkv},
                                                {"indexer/compressor/wgate", w.indexer.compressor.wgate},
                                                {"indexer/compressor/ape", w.indexer.compressor.ape},
                                                {"indexer/compressor/norm", w.indexer.compressor.norm}};
  return t;
}

// The message of the std::invalid_argument f throws ("" when it throws nothing).
std::string thrown_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("random weights: checkpoint grids and shapes, deterministic by seed and thread count") {
  const ModelConfig cfg = ModelConfig::tiny();
  for (int ratio : {0, 4, 128}) {
    CAPTURE(ratio);
    const AttentionWeights w = AttentionWeights::random(cfg, ratio, 42);
    CHECK_NOTHROW(w.validate(cfg));
    CHECK(w.compressor.wkv.size() == (ratio == 0 ? 0 : (ratio == 4 ? 2 : 1) * cfg.head_dim * cfg.dim));
    CHECK(w.indexer.wq_b.size() == (ratio == 4 ? Index(cfg.index_n_heads) * cfg.index_head_dim * cfg.q_lora_rank : 0));
    for (const Mat* fp8 : {&w.wq_a, &w.wq_b, &w.wkv, &w.wo_b, &w.indexer.wq_b, &w.wo_a})
      CHECK(same_bits(fp8_weight_fake_quant(*fp8), *fp8));  // on the e4m3 x block-scale grid
    for (const Mat& bf16 : {w.wo_a, w.indexer.weights_proj, w.compressor.wkv, w.compressor.wgate,
                            w.indexer.compressor.wkv, Mat(w.q_norm), Mat(w.kv_norm), Mat(w.compressor.norm)})
      CHECK(all_on_bf16_grid(bf16));
    CHECK(same_bits(to_storage(Storage::fp32, w.compressor.ape), w.compressor.ape));
    CHECK(same_bits(to_storage(Storage::fp32, Mat(w.attn_sink)), Mat(w.attn_sink)));
    // fan-in scaling: a unit-variance input gives O(1) projections
    const double rms =
        (random_mat(16, cfg.dim, 43) * std::sqrt(3.0) * w.wq_a.transpose()).norm() / std::sqrt(16.0 * cfg.q_lora_rank);
    CHECK(rms > 0.5);
    CHECK(rms < 2.0);
    CHECK(std::fabs(w.q_norm.mean() - 1) < 0.1);

    const AttentionWeights same = with_threads(1, [&] { return AttentionWeights::random(cfg, ratio, 42); });
    const AttentionWeights other = AttentionWeights::random(cfg, ratio, 43);
    const auto a = all_tensors(w), b = all_tensors(same), c = all_tensors(other);
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(a[i].first);
      CHECK(same_bits(a[i].second, b[i].second));
      if (a[i].second.size() > 0) CHECK(!same_bits(a[i].second, c[i].second));
    }
  }
  CHECK_THROWS_AS(AttentionWeights::random(cfg, 5, 1), std::invalid_argument);
}

TEST_CASE("validate names the tensor, the expected and the actual shape") {
  const ModelConfig cfg = ModelConfig::tiny();
  const AttentionWeights good = AttentionWeights::random(cfg, 4, 1);

  AttentionWeights w = good;
  w.wq_b = Mat::Zero(good.wq_b.rows() + 1, good.wq_b.cols());
  std::string msg = thrown_message([&] { w.validate(cfg); });
  CHECK(msg.find("wq_b") != std::string::npos);
  CHECK(msg.find("[513, 128]") != std::string::npos);  // actual
  CHECK(msg.find("[512, 128]") != std::string::npos);  // expected: n_heads * head_dim = 4 * 128

  w = good;
  w.indexer.compressor.ape = Mat::Zero(4, cfg.index_head_dim);  // coff = 2 missing
  msg = thrown_message([&] { w.validate(cfg); });
  CHECK(msg.find("indexer/compressor/ape") != std::string::npos);

  w = good;
  w.kv_norm = Vec::Zero(cfg.head_dim - 1);
  CHECK(thrown_message([&] { w.validate(cfg); }).find("kv_norm") != std::string::npos);

  w = good;
  w.compress_ratio = 128;  // an HCA layer has no indexer and an un-overlapped compressor
  msg = thrown_message([&] { w.validate(cfg); });
  CHECK(msg.find("compressor/") != std::string::npos);

  AttentionWeights window = AttentionWeights::random(cfg, 0, 1);
  window.compressor = good.compressor;  // a window-only layer has no compressor
  CHECK(thrown_message([&] { window.validate(cfg); }).find("compressor/") != std::string::npos);
}
