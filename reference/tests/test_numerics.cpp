// Number formats, UE8M0 / MX / NVFP4 / fp32 block scales and block fake-quant, checked against
// tables written by hand and against brute-force nearest-grid-point searches (never against the
// implementation's own arithmetic).
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "reference/numerics/bf16.h"
#include "reference/numerics/block_quant.h"
#include "reference/numerics/fp4_e2m1.h"
#include "reference/numerics/fp8_e4m3.h"
#include "reference/numerics/scale_rules.h"
#include "reference/numerics/storage.h"

using namespace dsv4::ref;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

// The positive finite grid of a format as (value, code), ascending, written from the format's
// definition: e4m3 has subnormals k * 2^-9 (k = 0..7) and normals (8 + m) * 2^(e - 10) for
// exponent field e = 1..15, mantissa m = 0..7, except e = 15, m = 7 (NaN).
std::vector<std::pair<double, int>> e4m3_grid() {
  std::vector<std::pair<double, int>> g;
  for (int k = 0; k < 8; ++k) g.push_back({k * 0x1p-9, k});
  for (int e = 1; e <= 15; ++e)
    for (int m = 0; m < 8; ++m)
      if (!(e == 15 && m == 7)) g.push_back({(8 + m) * std::ldexp(1.0, e - 10), (e << 3) | m});
  return g;
}

std::vector<std::pair<double, int>> e2m1_grid() {
  return {{0, 0}, {0.5, 1}, {1, 2}, {1.5, 3}, {2, 4}, {3, 5}, {4, 6}, {6, 7}};
}

// Brute force: the grid point nearest to x, ties to the even code, saturating at the top.
double nearest_on_grid(const std::vector<std::pair<double, int>>& grid, double x) {
  const double a = std::fabs(x);
  double best = grid.back().first;
  if (a < best) {
    for (size_t i = 0; i + 1 < grid.size(); ++i) {
      const auto [lo, lo_code] = grid[i];
      const auto [hi, hi_code] = grid[i + 1];
      if (a >= lo && a <= hi) {
        const double dlo = a - lo, dhi = hi - a;  // exact: neighbours of a short grid
        best = dlo < dhi ? lo : (dhi < dlo ? hi : (lo_code % 2 == 0 ? lo : hi));
        break;
      }
    }
  }
  return std::copysign(best, x);
}

// Values spread log-uniformly over [2^lo, 2^hi) with random sign, as floats widened to double.
std::vector<double> random_values(int n, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> e(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = static_cast<float>((rng() & 1 ? -1.0 : 1.0) * std::exp2(e(rng)));
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// FP8 E4M3

TEST_CASE("e4m3: all 256 codes decode to the format's values and re-encode to themselves") {
  int finite = 0;
  for (int c = 0; c < 256; ++c) {
    CAPTURE(c);
    const double v = fp8_e4m3_decode(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      CHECK(std::isnan(v));
      CHECK(std::isnan(fp8_e4m3_round(v)));
      CHECK(fp8_e4m3_encode(v) == 0x7f);
      continue;
    }
    ++finite;
    CHECK(std::signbit(v) == ((c & 0x80) != 0));
    CHECK(fp8_e4m3_encode(v) == c);
    CHECK(same_bits(fp8_e4m3_round(v), v));
  }
  CHECK(finite == 254);
  // The positive codes decode to the grid written from the definition, in code order.
  for (const auto& [value, code] : e4m3_grid()) CHECK(fp8_e4m3_decode(static_cast<uint8_t>(code)) == value);
  // A few values known by heart.
  CHECK(fp8_e4m3_decode(0x7e) == 448);
  CHECK(fp8_e4m3_decode(0x7d) == 416);
  CHECK(fp8_e4m3_decode(0x78) == 256);
  CHECK(fp8_e4m3_decode(0x77) == 240);
  CHECK(fp8_e4m3_decode(0x38) == 1);
  CHECK(fp8_e4m3_decode(0x3f) == 1.875);
  CHECK(fp8_e4m3_decode(0x08) == 0x1p-6);
  CHECK(fp8_e4m3_decode(0x01) == 0x1p-9);
  CHECK(fp8_e4m3_decode(0xfe) == -448);
}

TEST_CASE("e4m3: every midpoint between neighbours rounds to the even code, off-midpoint to the nearer") {
  const auto grid = e4m3_grid();
  for (size_t i = 0; i + 1 < grid.size(); ++i) {
    const auto [lo, lo_code] = grid[i];
    const auto [hi, hi_code] = grid[i + 1];
    const double mid = (lo + hi) / 2;  // exact in double
    const double even = lo_code % 2 == 0 ? lo : hi;
    CAPTURE(lo);
    CAPTURE(hi);
    CHECK(fp8_e4m3_round(mid) == even);
    CHECK(fp8_e4m3_round(-mid) == -even);
    CHECK(fp8_e4m3_round(std::nextafter(mid, 0.0)) == lo);
    CHECK(fp8_e4m3_round(std::nextafter(mid, kInf)) == hi);
    CHECK(fp8_e4m3_round(-std::nextafter(mid, kInf)) == -hi);
  }
}

TEST_CASE("e4m3: saturation to +-448, signed zero, subnormals, NaN") {
  // Above 448 the next step would be 480, so 464 is the midpoint: it ties to 448 (code 0x7e is
  // even) and everything above saturates (satfinite).
  for (double x : {448.0, 447.0, 449.0, 463.99, 464.0, 464.1, 480.0, 1e9, kInf}) {
    CAPTURE(x);
    CHECK(fp8_e4m3_round(x) == 448);
    CHECK(fp8_e4m3_round(-x) == -448);
    CHECK(fp8_e4m3_encode(x) == 0x7e);
    CHECK(fp8_e4m3_encode(-x) == 0xfe);
  }
  CHECK(fp8_e4m3_round(432) == 448);  // midpoint of 416 (0x7d, odd) and 448 (0x7e, even)
  CHECK(fp8_e4m3_round(431.9) == 416);

  CHECK(same_bits(fp8_e4m3_round(0.0), 0.0));
  CHECK(same_bits(fp8_e4m3_round(-0.0), -0.0));
  CHECK(same_bits(fp8_e4m3_round(-1e-5), -0.0));  // underflows to a zero that keeps its sign
  CHECK(fp8_e4m3_encode(-0.0) == 0x80);

  // Subnormal steps are 2^-9 (codes 1..7); 2^-10 is the tie between 0 (even) and 2^-9 (odd).
  CHECK(fp8_e4m3_round(0x1p-10) == 0);
  CHECK(fp8_e4m3_round(0x1p-10 + 0x1p-30) == 0x1p-9);
  CHECK(fp8_e4m3_round(0x1p-9) == 0x1p-9);
  CHECK(fp8_e4m3_round(3 * 0x1p-10) == 0x1p-8);         // 1.5 * 2^-9: tie of codes 1 and 2 -> 2
  CHECK(fp8_e4m3_round(5 * 0x1p-10) == 0x1p-8);         // 2.5 * 2^-9: tie of codes 2 and 3 -> 2
  CHECK(fp8_e4m3_round(7.5 * 0x1p-9) == 0x1p-6);        // tie of codes 7 and 8 (the first normal) -> 8
  CHECK(fp8_e4m3_round(15.5 * 0x1p-9) == 0x1p-5);       // tie of codes 15 and 16 -> 16
  CHECK(fp8_e4m3_round(17.5 * 0x1p-9) == 18 * 0x1p-9);  // above 2^-5 the step is 2^-8: 16, 18, ...

  CHECK(std::isnan(fp8_e4m3_round(kNaN)));
  CHECK(std::isnan(fp8_e4m3_round(-kNaN)));
}

TEST_CASE("e4m3: 200k random values equal the brute-force nearest grid point") {
  const auto grid = e4m3_grid();
  for (double x : random_values(200000, -14, 10, 1)) {
    CAPTURE(x);
    REQUIRE(fp8_e4m3_round(x) == nearest_on_grid(grid, x));
  }
}

// ---------------------------------------------------------------------------------------------
// FP4 E2M1

TEST_CASE("e2m1: all 16 codes decode and re-encode, the grid") {
  for (int c = 0; c < 16; ++c) {
    CAPTURE(c);
    const double v = fp4_e2m1_decode(static_cast<uint8_t>(c));
    CHECK(std::signbit(v) == ((c & 0x8) != 0));
    CHECK(fp4_e2m1_encode(v) == c);
    CHECK(same_bits(fp4_e2m1_round(v), v));
  }
  for (const auto& [value, code] : e2m1_grid()) {
    CHECK(fp4_e2m1_decode(static_cast<uint8_t>(code)) == value);
    CHECK(fp4_e2m1_decode(static_cast<uint8_t>(code | 0x8)) == -value);
  }
}

TEST_CASE("e2m1: the spec's tie table, every midpoint, saturation, NaN") {
  // DeepSeek's fp4_act_quant and CUDA's cvt.rn.satfinite both round to nearest even (docs/math.md).
  const std::pair<double, double> ties[] = {{0.25, 0}, {0.75, 1}, {1.25, 1}, {1.75, 2}, {2.5, 2}, {3.5, 4}, {5, 4}};
  for (auto [x, expected] : ties) {
    CAPTURE(x);
    CHECK(fp4_e2m1_round(x) == expected);
    CHECK(fp4_e2m1_round(-x) == -expected);
  }
  const auto grid = e2m1_grid();
  for (size_t i = 0; i + 1 < grid.size(); ++i) {
    const auto [lo, lo_code] = grid[i];
    const auto [hi, hi_code] = grid[i + 1];
    const double mid = (lo + hi) / 2;
    CAPTURE(mid);
    CHECK(fp4_e2m1_round(mid) == (lo_code % 2 == 0 ? lo : hi));
    CHECK(fp4_e2m1_round(std::nextafter(mid, 0.0)) == lo);
    CHECK(fp4_e2m1_round(std::nextafter(mid, kInf)) == hi);
  }
  for (double x : {6.0, 6.5, 7.0, 100.0, 1e300, kInf}) {
    CAPTURE(x);
    CHECK(fp4_e2m1_round(x) == 6);
    CHECK(fp4_e2m1_round(-x) == -6);
  }
  CHECK(same_bits(fp4_e2m1_round(-0.1), -0.0));
  CHECK(fp4_e2m1_encode(-0.1) == 0x8);
  CHECK(fp4_e2m1_round(kNaN) == 6);  // CUDA's __nv_cvt_float_to_fp4 gives +6 for NaN
  CHECK(fp4_e2m1_encode(kNaN) == 0x7);
}

TEST_CASE("e2m1: 100k random values equal the brute-force nearest grid point") {
  const auto grid = e2m1_grid();
  for (double x : random_values(100000, -4, 4, 2)) {
    CAPTURE(x);
    REQUIRE(fp4_e2m1_round(x) == nearest_on_grid(grid, x));
  }
}

// ---------------------------------------------------------------------------------------------
// BF16 and storage rounding

TEST_CASE("bf16: all 65536 codes round-trip, NaN codes stay NaN") {
  for (uint32_t c = 0; c < 65536; ++c) {
    const float v = bf16_decode(static_cast<uint16_t>(c));
    CAPTURE(c);
    CHECK(std::bit_cast<uint32_t>(v) == c << 16);  // bf16 is the upper half of an fp32
    if (std::isnan(v)) {
      CHECK(std::isnan(bf16_round(v)));
      CHECK((bf16_encode(v) & 0x7fc0) == 0x7fc0);  // a quiet NaN
    } else {
      CHECK(bf16_encode(v) == c);
    }
  }
}

TEST_CASE("bf16: every midpoint between neighbours rounds to the even code, overflow to inf") {
  // Positive finite codes c and c + 1 (c + 1 = 0x7f80 is inf); the midpoint of the two is the
  // fp32 with bits c:0x8000, and its fp32 neighbours fall to the nearer side.
  for (uint32_t c = 0; c < 0x7f80; ++c) {
    const uint32_t mid_bits = (c << 16) | 0x8000u;
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float mid = std::bit_cast<float>(sign | mid_bits);
      const float below = std::bit_cast<float>(sign | (mid_bits - 1));
      const float above = std::bit_cast<float>(sign | (mid_bits + 1));
      const uint16_t s = static_cast<uint16_t>(sign >> 16);
      CAPTURE(c);
      REQUIRE(bf16_encode(mid) == (s | (c % 2 == 0 ? c : c + 1)));
      REQUIRE(bf16_encode(below) == (s | c));
      REQUIRE(bf16_encode(above) == (s | (c + 1)));
    }
  }
  CHECK(std::isinf(bf16_round(std::numeric_limits<float>::max())));
  CHECK(bf16_round(std::bit_cast<float>(0x7f7f7fffu)) == std::bit_cast<float>(0x7f7f0000u));  // max bf16
  CHECK(bf16_round(-std::numeric_limits<float>::infinity()) == -std::numeric_limits<float>::infinity());
}

TEST_CASE("storage: round_to and names") {
  const double x = 1 + 0x1p-8 + 0x1p-40;  // just above the bf16 midpoint of 1 and 1 + 2^-7
  CHECK(round_to(Storage::fp64, x) == x);
  CHECK(round_to(Storage::fp32, x) == 1 + 0x1p-8);  // 2^-40 is below half an fp32 ulp of 1
  // bf16 rounds the fp32 value (as torch casts an fp32 result): the fp32 value is the exact
  // midpoint, which ties to even (1.0), although x itself lies above the midpoint.
  CHECK(round_to(Storage::bf16, x) == 1.0);
  CHECK(round_to(Storage::bf16, 1 + 0x1p-8 + 0x1p-20) == 1 + 0x1p-7);

  Eigen::Matrix<double, 1, 2> m{x, -3.0};
  round_in_place(Storage::bf16, m);
  CHECK(m(0) == 1.0);
  CHECK(m(1) == -3.0);

  for (Storage s : {Storage::fp64, Storage::fp32, Storage::bf16}) CHECK(storage_from_string(to_string(s)) == s);
  CHECK(to_string(Storage::bf16) == "bf16");
  CHECK_THROWS_AS(storage_from_string("fp16"), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// Block scales

TEST_CASE("UE8M0 ceil (DeepSeek): powers of two exactly, the next float up, the floors") {
  const BlockFormat fp8 = BlockFormat::fp8_kv();
  const BlockFormat fp4 = BlockFormat::fp4_indexer();
  // 448 * fp32(1/448) = 1 + 4.5e-8 rounds to exactly 1 in fp32 (half an ulp is 6e-8), so
  // amax = 448 * 2^k gives t = 2^k exactly and s = 2^k. The next float up gives
  // t = 2^k (1 + 6.8e-8 + 4.5e-8), which rounds to 2^k (1 + 2^-23): s = 2^(k+1).
  // 448 * 2^-22 ~ 1.07e-4 is the smallest such amax above the floor 1e-4.
  for (int k = -22; k <= 100; ++k) {
    CAPTURE(k);
    const float amax = static_cast<float>(std::ldexp(448.0, k));
    CHECK(block_scale(fp8, amax, 0) == std::ldexp(1.0, k));
    CHECK(block_scale(fp8, std::nextafter(amax, INFINITY), 0) == std::ldexp(1.0, k + 1));
  }
  // Likewise 6 * fp32(1/6) = 1 + 3e-8 rounds to 1: amax = 6 * 2^k gives 2^k.
  for (int k = -126; k <= 100; ++k) {
    CAPTURE(k);
    const float amax = static_cast<float>(std::ldexp(6.0, k));
    CHECK(block_scale(fp4, amax, 0) == std::ldexp(1.0, k));
    CHECK(block_scale(fp4, std::nextafter(amax, INFINITY), 0) == std::ldexp(1.0, k + 1));
  }
  // All-zero block, FP8: t = fp32(1e-4) * fp32(1/448) ~ 2.23e-7 lies in (2^-23, 2^-22) = (1.19e-7,
  // 2.38e-7), so s = 2^-22. FP4: t = 6 * 2^-126 * fp32(1/6) rounds to 2^-126, so s = 2^-126.
  CHECK(block_scale(fp8, 0, 0) == 0x1p-22);
  CHECK(block_scale(fp8, 1e-6, 0) == 0x1p-22);
  CHECK(block_scale(fp4, 0, 0) == 0x1p-126);
  CHECK(ue8m0_ceil_exponent(0.0f, 1e-4f, 448.0f) == -22);
  // 7.5 / 6 = 1.25: ceil(log2) = 1.
  CHECK(block_scale(fp4, 7.5, 0) == 2);

  // The scale never clips: for random fp32 amax, s is the least power of two >= amax / 448.
  // amax / 448 in double is within 1e-16 relative of the truth, and an fp32 amax that is not
  // 448 * 2^k lies at least 2^-33 (relative) away from a power of two, so frexp is exact here.
  for (double amax : random_values(100000, -13, 60, 3)) {
    int e = 0;
    const double m = std::frexp(std::fabs(amax) / 448, &e);  // amax / 448 = m 2^e, m in [0.5, 1)
    const int ceil_log2 = m == 0.5 ? e - 1 : e;
    CAPTURE(amax);
    REQUIRE(block_scale(fp8, std::fabs(amax), 0) == std::ldexp(1.0, ceil_log2));
  }
}

TEST_CASE("e8m0 floor (OCP MX): 2^(floor(log2 amax) - emax_elem), the block top clips") {
  const BlockFormat mx = BlockFormat::mxfp4();
  CHECK(block_scale(mx, 7.5, 0) == 1);       // floor(log2 7.5) = 2, emax(e2m1) = 2
  CHECK(block_scale(mx, 8.0, 0) == 2);       // floor(log2 8) = 3
  CHECK(block_scale(mx, 0.75, 0) == 0.125);  // floor(log2 0.75) = -1
  CHECK(block_scale(mx, 0, 0) == 0x1p-127);  // the smallest E8M0 value
  const BlockFormat mx8{Element::e4m3, 32, ScaleRule::e8m0_floor};
  CHECK(block_scale(mx8, 500, 0) == 1);  // floor(log2 500) = 8, emax(e4m3) = 8
  CHECK(block_scale(mx8, 1, 0) == 0x1p-8);

  // amax 7.5 with scale 1: 7.5 clips to 6. Each other element by hand on the e2m1 grid.
  std::vector<double> row(32, 0.0);
  row[0] = 7.5;
  row[1] = 0.3;   // above the 0.25 midpoint -> 0.5
  row[2] = -5.2;  // above the 5 midpoint -> -6
  row[3] = 2.4;   // below the 2.5 midpoint -> 2
  row[4] = 1.3;   // above the 1.25 midpoint -> 1.5
  row[5] = 0.75;  // tie -> 1 (even)
  fake_quant_row(mx, row);
  CHECK(row[0] == 6);
  CHECK(row[1] == 0.5);
  CHECK(row[2] == -6);
  CHECK(row[3] == 2);
  CHECK(row[4] == 1.5);
  CHECK(row[5] == 1);
  CHECK(row[6] == 0);
}

// ---------------------------------------------------------------------------------------------
// Block fake-quant

TEST_CASE("fake-quant UE8M0: values already on s * grid are unchanged") {
  // Block amax 448 * 2^-3 makes s = 2^-3 exactly; every value g * 2^-3 with g on the e4m3 grid
  // is then a fixed point (x / s = g is already an e4m3 value).
  const auto grid = e4m3_grid();
  std::vector<double> row(128);
  for (size_t i = 0; i < row.size(); ++i) row[i] = (i % 3 == 0 ? -1 : 1) * grid[(i * 37) % grid.size()].first * 0.125;
  row[5] = 448 * 0.125;
  row[64 + 7] = -448 * 0.125;
  const std::vector<double> before = row;
  fake_quant_row(BlockFormat::fp8_kv(), row);
  for (size_t i = 0; i < row.size(); ++i) CHECK(same_bits(row[i], before[i]));

  std::vector<double> row4(32);
  const auto grid4 = e2m1_grid();
  for (size_t i = 0; i < row4.size(); ++i) row4[i] = (i % 2 ? -1 : 1) * grid4[i % 8].first * 4;
  const std::vector<double> before4 = row4;
  fake_quant_row(BlockFormat::fp4_indexer(), row4);  // amax 24 = 6 * 4: s = 4
  for (size_t i = 0; i < row4.size(); ++i) CHECK(same_bits(row4[i], before4[i]));
}

TEST_CASE("fake-quant UE8M0: every result is s * (nearest grid point of x / s), s per block") {
  for (const BlockFormat& f : {BlockFormat::fp8_kv(), BlockFormat::fp4_indexer(), BlockFormat::fp8_per_head(128)}) {
    CAPTURE(f.name());
    const auto grid = f.element == Element::e4m3 ? e4m3_grid() : e2m1_grid();
    for (uint32_t seed = 10; seed < 20; ++seed) {
      // Blocks of widely different magnitudes (2^-20 .. 2^20) so that the scales differ.
      std::vector<double> row = random_values(256, -4, 4, seed);
      for (size_t i = 0; i < row.size(); ++i)
        row[i] = static_cast<float>(row[i] * std::ldexp(1.0, static_cast<int>(i / f.block) * 9 - 20));
      std::vector<double> out = row;
      fake_quant_row(f, out);
      const QuantizedRow q = quantize_row(f, row);
      for (size_t b = 0; b < row.size() / f.block; ++b) {
        double amax = 0;
        for (int i = 0; i < f.block; ++i) amax = std::max(amax, std::fabs(row[b * f.block + i]));
        int e = 0;
        const double m = std::frexp(amax / f.qmax(), &e);  // exact ceil(log2), see the UE8M0 case
        const double s = std::ldexp(1.0, std::max(m == 0.5 ? e - 1 : e, f.element == Element::e4m3 ? -22 : -126));
        CHECK(q.scales[b] == s);
        for (int i = 0; i < f.block; ++i) {
          const size_t j = b * f.block + i;
          REQUIRE(out[j] == s * nearest_on_grid(grid, row[j] / s));
          REQUIRE(q.q[j] * q.scales[b] == out[j]);
        }
      }
    }
  }
}

TEST_CASE("fake-quant UE8M0: an all-zero block stays zero, signs of zeros kept, NaN stays NaN") {
  std::vector<double> row(64, 0.0);
  row[3] = -0.0;
  fake_quant_row(BlockFormat::fp8_kv(), row);
  for (double v : row) CHECK(v == 0);
  CHECK(std::signbit(row[3]));
  CHECK(quantize_row(BlockFormat::fp8_kv(), row).scales[0] == 0x1p-22);

  std::vector<double> poisoned(32, 1.0);
  poisoned[7] = kNaN;
  fake_quant_row(BlockFormat::fp4_indexer(), poisoned);
  CHECK(std::isnan(poisoned[7]));
  CHECK(poisoned[0] == 1);  // amax 1 skips the NaN: s = 2^ceil(log2(1/6)) = 2^-2, 1 / s = 4 on grid
}

TEST_CASE("fake-quant NVFP4: an example by hand, and the tensor scale") {
  // Row of 4 blocks of 16, row amax 2688 = 6 * 448, so g = 1 exactly.
  std::vector<double> row(64, 0.0);
  // Block 0: amax 2688 -> scale e4m3(2688 / 6) = 448.
  row[0] = 2688;   // 6 * 448
  row[1] = 1344;   // 3 * 448
  row[2] = 100;    // 0.223 -> 0
  row[3] = 560;    // 1.25: tie -> 1 -> 448
  row[4] = -1000;  // -2.23 -> -2 -> -896
  // Block 1: amax 30 -> scale e4m3(5) = 5 (1.25 * 4 is an e4m3 value).
  row[16] = 30;    // 6 -> 30
  row[17] = 12.5;  // 2.5: tie -> 2 -> 10
  row[18] = -17;   // -3.4 -> -3 -> -15
  row[19] = 0.3;   // 0.06 -> 0
  // Block 2: amax 0.001 -> 0.001 / 6 = 1.7e-4 is below 2^-10, half the smallest e4m3 subnormal:
  // the scale rounds to 0 and becomes 1.0; 0.001 / 1 -> 0.
  row[32] = 0.001;
  // Block 3: amax 7 -> 7 / 6 = 1.1667 lies between e4m3 1.125 and 1.25, nearer 1.125.
  row[48] = 7;    // 6.22 -> 6 -> 6.75
  row[49] = 3.9;  // 3.47 -> 3 -> 3.375
  row[50] = -2;   // -1.78 -> -2 -> -2.25
  const BlockFormat f = BlockFormat::nvfp4();
  const QuantizedRow q = quantize_row(f, row);
  CHECK(q.tensor_scale == 1);
  CHECK(q.scales == std::vector<double>{448, 5, 1, 1.125});

  std::vector<double> out = row;
  fake_quant_row(f, out);
  const std::vector<std::pair<int, double>> expected = {{0, 2688},  {1, 1344},   {2, 0},      {3, 448}, {4, -896},
                                                        {16, 30},   {17, 10},    {18, -15},   {19, 0},  {32, 0},
                                                        {48, 6.75}, {49, 3.375}, {50, -2.25}, {63, 0}};
  for (auto [i, v] : expected) {
    CAPTURE(i);
    CHECK(out[i] == v);
  }

  // Scaling the row by 2^-10 scales g by 2^-10 exactly and leaves the block scales alone.
  std::vector<double> scaled = row;
  for (double& v : scaled) v *= 0x1p-10;
  const QuantizedRow qs = quantize_row(f, scaled);
  CHECK(qs.tensor_scale == 0x1p-10);
  CHECK(qs.scales == q.scales);
  fake_quant_row(f, scaled);
  for (size_t i = 0; i < row.size(); ++i) CHECK(scaled[i] == out[i] * 0x1p-10);

  // An all-zero row: g = 0, every block scale 1, every value 0.
  std::vector<double> zeros(16, 0.0);
  const QuantizedRow qz = quantize_row(f, zeros);
  CHECK(qz.tensor_scale == 0);
  CHECK(qz.scales[0] == 1);
  fake_quant_row(f, zeros);
  for (double v : zeros) CHECK(v == 0);
}

TEST_CASE("fake-quant NVFP4: random rows follow ModelOpt's recipe step by step") {
  // The recipe (verification-practice 2.6) written out with brute-force grid searches:
  // g = fp32(row_amax / 2688); scale_b = e4m3(fp32(amax_b / fp32(6 g))), 0 -> 1;
  // S_b = fp32(scale_b * g); q = e2m1(fp32(x / S_b)); value = fp32(q * S_b).
  const BlockFormat f = BlockFormat::nvfp4();
  const auto grid8 = e4m3_grid();
  const auto grid4 = e2m1_grid();
  int order_matters = 0;  // elements where fp32((q * scale) * g) differs from fp32(q * S)
  for (uint32_t seed = 30; seed < 60; ++seed) {
    std::vector<double> row = random_values(64, -12, 3, seed);
    std::vector<double> out = row;
    fake_quant_row(f, out);
    double row_amax = 0;
    for (double x : row) row_amax = std::max(row_amax, std::fabs(x));
    const float g = static_cast<float>(row_amax) / 2688.0f;
    for (size_t b = 0; b < 4; ++b) {
      double amax = 0;
      for (size_t i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(row[b * 16 + i]));
      double scale = nearest_on_grid(grid8, static_cast<float>(amax) / (6.0f * g));
      if (scale == 0) scale = 1;
      const float S = static_cast<float>(scale) * g;
      for (size_t i = 0; i < 16; ++i) {
        const size_t j = b * 16 + i;
        const double q = nearest_on_grid(grid4, static_cast<float>(row[j]) / S);
        CAPTURE(j);
        REQUIRE(out[j] == static_cast<float>(q) * S);
        if (static_cast<float>(q * scale) * g != static_cast<float>(q) * S) ++order_matters;
      }
    }
  }
  CHECK(order_matters > 0);  // the rows do tell the two dequantization orders apart
}

TEST_CASE("fake-quant NVFP4: amax / (6 g) and x / S are fp32 divisions (cases where fp64 would differ)") {
  // Row amax 1 (block 0) gives g = fp32(1 / 2688) and d = fp32(6 g). Probes look for floats whose
  // exact quotient lies just above a midpoint that ties down while the fp32 quotient is the
  // midpoint itself: fp32 gives the lower (even) neighbour, fp64 the upper one.
  const BlockFormat f = BlockFormat::nvfp4();
  const float g = 1.0f / 2688.0f;
  const float d = 6.0f * g;
  int found_scale = 0, found_element = 0;
  // Block scale: e4m3 midpoints 1.0625 (1 | 1.125), 1.3125 (1.25 | 1.375), 3.25 (3 | 3.5).
  for (auto [mid, lo] : {std::pair{1.0625, 1.0}, {1.3125, 1.25}, {3.25, 3.0}}) {
    float amax = static_cast<float>(mid * d);
    for (int k = 0; k < 8; ++k, amax = std::nextafter(amax, INFINITY)) {
      if (amax / d != mid || static_cast<double>(amax) / d <= mid) continue;
      std::vector<double> row(32, 0.0);
      row[0] = 1;
      row[16] = amax;
      CAPTURE(amax);
      CHECK(quantize_row(f, row).scales[1] == lo);
      ++found_scale;
    }
  }
  // Element: block 1 has amax d, so its scale is e4m3(1) = 1 and S = g; e2m1 midpoints that tie
  // down: 0.25 (0 | 0.5), 1.25 (1 | 1.5), 2.5 (2 | 3), 5 (4 | 6).
  for (auto [mid, lo] : {std::pair{0.25, 0.0}, {1.25, 1.0}, {2.5, 2.0}, {5.0, 4.0}}) {
    float x = static_cast<float>(mid * g);
    for (int k = 0; k < 8; ++k, x = std::nextafter(x, INFINITY)) {
      if (x / g != mid || static_cast<double>(x) / g <= mid) continue;
      std::vector<double> row(32, 0.0);
      row[0] = 1;
      row[16] = d;
      row[17] = x;
      fake_quant_row(f, row);
      CAPTURE(x);
      CHECK(row[17] == static_cast<float>(lo) * g);
      ++found_element;
    }
  }
  CHECK(found_scale > 0);
  CHECK(found_element > 0);
}

TEST_CASE("fake-quant fp32 amax: x / s is an fp32 division (a case where fp64 would differ)") {
  // Look for x whose quotient x / s lies just above an e4m3 midpoint that ties down, but whose
  // fp32 quotient is the midpoint itself: fp32 gives the lower (even) neighbour, fp64 the upper.
  const BlockFormat f{Element::e4m3, 2, ScaleRule::fp32_amax};
  const auto grid = e4m3_grid();
  int found = 0;
  for (float amax : {1.0f, 3.0f, 5.0f, 7.0f, 0.3f}) {
    const float s = amax / 448.0f;
    for (size_t i = 40; i + 1 < grid.size(); ++i) {
      const auto [lo, lo_code] = grid[i];
      const double mid = (lo + grid[i + 1].first) / 2;
      if (lo_code % 2 != 0 || mid >= amax / s) continue;
      float x = static_cast<float>(mid * s);
      for (int k = 0; k < 8; ++k, x = std::nextafter(x, INFINITY)) {
        if (x / s != mid || static_cast<double>(x) / s <= mid) continue;
        std::vector<double> row = {amax, x};
        fake_quant_row(f, row);
        CAPTURE(x);
        CHECK(row[1] == static_cast<float>(lo) * s);
        ++found;
      }
    }
  }
  CHECK(found > 0);
}

TEST_CASE("fake-quant fp32 amax: s = fp32(amax / 448), x / s in fp32, q * s in fp32") {
  const BlockFormat f{Element::e4m3, 4, ScaleRule::fp32_amax};
  std::vector<double> row = {1.0, 0.5, -0.25, 0.1};
  const float s = 1.0f / 448.0f;
  CHECK(block_scale(f, 1.0, 0) == static_cast<double>(s));
  const QuantizedRow q = quantize_row(f, row);
  // 1 / s = 448 (1 - 4.5e-8) rounds to 448 in fp32 (spacing 2^-15 there), 0.5 / s to 224;
  // 0.25 / s -> 112; 0.1 / s = 44.8 -> e4m3 44 (step 4 in [32, 64)).
  CHECK(q.q == std::vector<double>{448, 224, -112, 44});
  fake_quant_row(f, row);
  // 448 * fp32(1/448) = 1 + 4.5e-8 rounds to 1 in fp32; 224 s and 112 s likewise (power-of-two
  // multiples). 44 s misses 44 / 448 by the relative error 4.5e-8 of fp32(1/448), plus the final
  // fp32 rounding, at most half an ulp (2^-28 at 0.098).
  CHECK(row[0] == 1.0);
  CHECK(row[1] == 0.5);
  CHECK(row[2] == -0.25);
  CHECK(std::fabs(row[3] - 44.0 / 448.0) <= 44.0 / 448.0 * 4.5e-8 + 0x1p-28);
  CHECK(row[3] == static_cast<double>(static_cast<float>(row[3])));

  // An all-zero block uses the floor: s = fp32(1e-4) / 448 in fp32.
  CHECK(block_scale(f, 0, 0) == static_cast<double>(1e-4f / 448.0f));
}

TEST_CASE("block formats: qmax, floors, names, bad lengths throw") {
  CHECK(BlockFormat::fp8_kv().qmax() == 448);
  CHECK(BlockFormat::fp4_indexer().qmax() == 6);
  CHECK(BlockFormat::fp8_kv().amax_floor() == 1e-4f);
  CHECK(BlockFormat::fp4_indexer().amax_floor() == 6 * 0x1p-126f);
  CHECK(BlockFormat::fp8_kv().name() == "e4m3/b64/ue8m0");
  CHECK(BlockFormat::fp4_indexer().name() == "e2m1/b32/ue8m0");
  CHECK(BlockFormat::mxfp4().name() == "e2m1/b32/e8m0-floor");
  CHECK(BlockFormat::nvfp4().name() == "e2m1/b16/nvfp4-e4m3");
  CHECK(BlockFormat::fp8_per_head(128).name() == "e4m3/b128/ue8m0");
  CHECK(round_element(Element::e4m3, 465) == 448);
  CHECK(round_element(Element::e2m1, -2.5) == -2);

  std::vector<double> row(100, 1.0);
  CHECK_THROWS_WITH_AS(fake_quant_row(BlockFormat::fp8_kv(), row),
                       "fake_quant_row: row length 100 is not a multiple of the block 64 of e4m3/b64/ue8m0",
                       std::invalid_argument);
  CHECK_THROWS_AS(quantize_row(BlockFormat::fp4_indexer(), row), std::invalid_argument);
  const BlockFormat zero_block{Element::e4m3, 0, ScaleRule::ue8m0_ceil};
  CHECK_THROWS_AS(fake_quant_row(zero_block, row), std::invalid_argument);
  std::vector<double> empty;
  CHECK_NOTHROW(fake_quant_row(BlockFormat::fp8_kv(), empty));
}
