// The rounded-stage comparator (verify/compare/rounded.h): hand-made bf16, FP8 and FP4 cases with
// their boundaries and ties worked out by hand; every way a quantizer goes wrong that production
// kernels have shipped (ties toward zero, truncation, no quantization, UE8M0 floor, a wrong amax
// floor, every value one step high) fails, while a producer whose pre-rounding values move within
// the bound passes with its flips explained; the quantizer check from the tested side's own input.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "reference/numerics/bf16.h"
#include "reference/numerics/block_quant.h"
#include "reference/numerics/fp4_e2m1.h"
#include "reference/numerics/fp8_e4m3.h"
#include "verify/compare/rounded.h"
#include "verify/compare/stage_rounding.h"
#include "verify/tests/buggy_quantizers.h"

using namespace dsv4;
using namespace dsv4::verify;
using testing::bf16;
using testing::bf16_up;
using testing::ElementRounding;
using testing::ScaleRounding;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Tolerance bounded(double atol, double atol_rms, double rtol) {
  Tolerance t;
  t.atol = 1e9;  // the dense elementwise rule out of the way: these tests judge the rounding
  t.pre_rounding = ErrorBound{atol, atol_rms, rtol, "test"};
  t.reason = "test";
  return t;
}

DenseMetrics rounded_1d(const std::vector<double>& pre, const std::vector<double>& got, const RoundingFormat& format,
                        const Tolerance& t) {
  std::vector<double> ref(pre.size());
  const std::vector<int64_t> shape{static_cast<int64_t>(pre.size())};
  for (size_t i = 0; i < pre.size(); ++i) ref[i] = bf16(pre[i]);
  if (format.block) {
    ref = pre;
    ref::fake_quant_row(*format.block, ref);
  }
  return compare_rounded(ref, got, shape, RoundedReference{pre, format, {}}, t);
}

// A fixed LCG and a normal deviate from it: the same numbers on every host.
struct Lcg {
  uint64_t state;
  double uniform() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  }
  double normal() {
    const double u = uniform() + 1e-300, v = uniform();
    return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

// One block quantized by the test quantizer (verify/tests/buggy_quantizers.h).
std::vector<double> quantize_block(ref::Element e, std::vector<double> x, ElementRounding mode, bool floor_scale,
                                   float amax_floor) {
  testing::quantize_block(e == ref::Element::e2m1, x, mode, floor_scale ? ScaleRounding::floor : ScaleRounding::ceil,
                          amax_floor);
  return x;
}

const float kFp8Floor = testing::kFp8AmaxFloor, kFp4Floor = testing::kFp4AmaxFloor;

}  // namespace

TEST_CASE("grid: bf16 and block grids round to nearest even and know their ties") {
  const Grid b = Grid::bf16();
  CHECK(b.round(1 + 0x1p-8) == 1.0);  // a tie, to the even neighbour
  CHECK(b.round(1 + 0x1p-8 + 0x1p-12) == 1 + 0x1p-7);
  CHECK(b.is_tie(1 + 0x1p-8));
  CHECK_FALSE(b.is_tie(1 + 0x1p-8 + 0x1p-12));
  CHECK(b.contains(1 + 0x1p-7));
  CHECK_FALSE(b.contains(1 + 0x1p-9));
  CHECK(b.ordinal(1 + 0x1p-7) - b.ordinal(1.0) == 1);
  CHECK(b.ordinal(-1.0) == -b.ordinal(1.0));
  CHECK(b.ordinal(-0.0) == 0);

  const Grid fp4 = Grid::block(ref::Element::e2m1, 0.25);  // {0, .5, 1, 1.5, 2, 3, 4, 6} / 4
  CHECK(fp4.round(0.75 * 0.25) == 1.0 * 0.25);             // 0.75 -> 1 (even)
  CHECK(fp4.round(1.75 * 0.25) == 2.0 * 0.25);
  CHECK(fp4.round(2.5 * 0.25) == 2.0 * 0.25);
  CHECK(fp4.round(5 * 0.25) == 4.0 * 0.25);
  CHECK(fp4.round(100.0) == 1.5);  // saturates at 6 * scale
  for (double tie : {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0}) CHECK(fp4.is_tie(tie * 0.25));
  for (double no : {0.5, 1.0, 2.0, 3.0, 6.0, 0.3}) CHECK_FALSE(fp4.is_tie(no * 0.25));
  CHECK(fp4.contains(0.375));        // 1.5 * 0.25
  CHECK_FALSE(fp4.contains(0.625));  // 2.5 * 0.25: not an e2m1 value
  CHECK(fp4.ordinal(6 * 0.25) == 7);
  CHECK(fp4.ordinal(-0.5 * 0.25) == -1);

  const Grid fp8 = Grid::block(ref::Element::e4m3, 1.0);
  CHECK(fp8.round(17.0) == 16.0);  // spacing 2 in [16, 32): a tie to even (16 = 8 * 2)
  CHECK(fp8.round(19.0) == 20.0);
  CHECK(fp8.is_tie(17.0));
  CHECK(fp8.is_tie(31.0));     // between 30 and 32, the top of the binade
  CHECK(fp8.is_tie(0x1p-10));  // half the smallest subnormal
  CHECK_FALSE(fp8.is_tie(18.0));
  CHECK(fp8.ordinal(448.0) == 0x7e);
}

TEST_CASE("rounded bf16: a flip is explained only by a rounding boundary within the bound") {
  // p = 1 + 2^-8 + 2^-12 rounds up to 1 + 2^-7; it lies 2^-12 above the boundary 1 + 2^-8.
  const double p = 1 + 0x1p-8 + 0x1p-12;
  const std::vector<double> pre{p, 2.0, -3.0, 0.5}, got{1.0, 2.0, -3.0, 0.5};
  DenseMetrics m = rounded_1d(pre, got, RoundingFormat::bf16(), bounded(0x1p-11, 0, 0));
  CHECK(m.status == Status::pass);
  REQUIRE(m.rounding.has_value());
  CHECK(m.rounding->format == "bf16");
  CHECK(m.rounding->elements == 4);
  CHECK(m.rounding->differing == 1);
  CHECK(m.rounding->flips == 1);
  CHECK(m.rounding->flips_explained == 1);
  CHECK(m.rounding->unexplained == 0);
  CHECK(m.rounding->down == 1);
  CHECK(m.rounding->toward_zero == 1);

  m = rounded_1d(pre, got, RoundingFormat::bf16(), bounded(0x1p-13, 0, 0));
  CHECK(m.status == Status::fail);
  CHECK(m.failed_gates == std::vector<std::string>{"rounding"});
  CHECK(m.rounding->unexplained == 1);
  const FlipAt& f = m.rounding->first_unexplained;
  CHECK(f.coord == std::vector<int64_t>{0});
  CHECK(f.ref == 1 + 0x1p-7);
  CHECK(f.got == 1.0);
  CHECK(f.pre_rounding == p);
  CHECK(f.bound == 0x1p-13);
  CHECK(f.steps == -1);
  CHECK(f.why == "no rounding boundary within the bound");
  CHECK(std::isinf(m.worst_ratio));
}

TEST_CASE("rounded bf16: an exact tie must round to nearest even unless the bound lets the value move") {
  const double tie = 1 + 0x1p-8;  // between 1 (even) and 1 + 2^-7
  const std::vector<double> pre{tie, 2.0}, got{1 + 0x1p-7, 2.0};
  DenseMetrics m = rounded_1d(pre, got, RoundingFormat::bf16(), bounded(0, 0, 0));
  CHECK(m.status == Status::fail);
  CHECK(m.rounding->ties == 1);
  CHECK(m.rounding->tie_flips == 1);
  CHECK(m.rounding->first_unexplained.why == "a tie not rounded as the format's rule (to nearest even)");
  // A bound that reaches the next fp32 value lets a producer's value sit on either side of the tie;
  // one below half an fp32 spacing does not (its fp32 value is the tie itself).
  CHECK(rounded_1d(pre, got, RoundingFormat::bf16(), bounded(0x1p-23, 0, 0)).status == Status::pass);
  CHECK(rounded_1d(pre, got, RoundingFormat::bf16(), bounded(0x1p-30, 0, 0)).status == Status::fail);
}

TEST_CASE("rounded bf16: off the grid, and more steps than the bound reaches") {
  const std::vector<double> pre{1.0, 1.0};
  DenseMetrics m = rounded_1d(pre, {1 + 0x1p-9, 1.0}, RoundingFormat::bf16(), bounded(0, 0, 0x1p-6));
  CHECK(m.status == Status::fail);
  CHECK(m.rounding->off_grid == 1);
  CHECK(m.rounding->first_unexplained.why == "off the grid");
  // Two steps up (1 + 2^-6) are within reach of a relative bound 2^-6, not of 2^-7.
  m = rounded_1d(pre, {1 + 0x1p-6, 1.0}, RoundingFormat::bf16(), bounded(0, 0, 0x1p-6));
  CHECK(m.status == Status::pass);
  CHECK(m.rounding->multi_step == 1);
  CHECK(m.rounding->multi_step_explained == 1);
  m = rounded_1d(pre, {1 + 0x1p-6, 1.0}, RoundingFormat::bf16(), bounded(0, 0, 0x1p-7));
  CHECK(m.status == Status::fail);
  CHECK(m.rounding->first_unexplained.steps == 2);
  CHECK(m.rounding->first_unexplained.why == "more grid steps than the bound reaches");
}

TEST_CASE("rounded bf16: every value one step high fails on its direction even where each step is in reach") {
  // 256 values, a relative bound of 4 bf16 flips: every element has a boundary in reach.
  Lcg lcg{7};
  std::vector<double> pre(256), ref(256), high(256), fair(256);
  for (size_t i = 0; i < pre.size(); ++i) {
    pre[i] = static_cast<float>(lcg.normal());
    ref[i] = bf16(pre[i]);
    high[i] = bf16_up(ref[i]);
    // A correct producer: its value before rounding moves by up to a quarter of the bound.
    fair[i] = bf16(pre[i] * (1 + (lcg.uniform() - 0.5) * 0x1p-6));
  }
  const Tolerance t = bounded(0, 0, 0x1p-5);
  const std::vector<int64_t> shape{256};
  DenseMetrics m = compare_rounded(ref, high, shape, RoundedReference{pre, RoundingFormat::bf16(), {}}, t);
  CHECK(m.rounding->unexplained == 0);
  CHECK(m.rounding->up == 256);
  CHECK(m.rounding->bias_direction == "up");
  CHECK(m.rounding->bias_p_value < 1e-70);
  CHECK(m.failed_gates == std::vector<std::string>{"rounding bias"});
  m = compare_rounded(ref, fair, shape, RoundedReference{pre, RoundingFormat::bf16(), {}}, t);
  CHECK(m.status == Status::pass);
  CHECK(m.rounding->differing > 20);  // it does flip, both ways
  CHECK(m.rounding->bias_share > kFlipBiasMaxMinorityShare);
  // With the tight bound a correct stage-local producer has, the same shift is unexplained.
  const Tolerance tight = bounded(0, 0, 0x1p-12);
  CHECK(compare_rounded(ref, high, shape, RoundedReference{pre, RoundingFormat::bf16(), {}}, tight)
            .rounding->unexplained > 200);
}

TEST_CASE("rounded FP8 blocks: truncation, skipped quantization and UE8M0 floor fail, in-bound flips pass") {
  // Rows of 128: dims [0, 64) one e4m3 block of 64 (UE8M0), dims [64, 128) bf16 (kv's layout at
  // the tiny dims). 16 rows of bf16 values with row scales from 2^-3 to 2^3.
  const ref::BlockFormat fp8 = ref::BlockFormat::fp8_kv();
  const RoundingFormat format = RoundingFormat::blocks(fp8, 64);
  CHECK(format.name() == "e4m3/b64/ue8m0 on dims [0,64), bf16 after");
  const std::vector<int64_t> shape{16, 128};
  Lcg lcg{11};
  std::vector<double> pre(16 * 128), ref(pre.size());
  for (int r = 0; r < 16; ++r) {
    const double scale = std::ldexp(1.0, r % 7 - 3);
    for (int k = 0; k < 128; ++k) {
      const double v = scale * lcg.normal();
      pre[r * 128 + k] = k < 64 ? bf16(v) : static_cast<float>(v);  // bf16 before FP8, fp32 before bf16
    }
  }
  auto rounded = [&](const std::vector<double>& p, ElementRounding mode, bool floor_scale, float amax_floor) {
    std::vector<double> out(p.size());
    for (int r = 0; r < 16; ++r) {
      const std::vector<double> block(p.begin() + r * 128, p.begin() + r * 128 + 64);
      const std::vector<double> q = quantize_block(ref::Element::e4m3, block, mode, floor_scale, amax_floor);
      for (int k = 0; k < 128; ++k) out[r * 128 + k] = k < 64 ? q[k] : bf16(p[r * 128 + k]);
    }
    return out;
  };
  ref = rounded(pre, ElementRounding::nearest_even, false, kFp8Floor);
  // The test quantizer is the oracle's on the correct settings.
  std::vector<double> oracle = pre;
  for (int r = 0; r < 16; ++r) ref::fake_quant_row(fp8, std::span<double>(oracle).subspan(r * 128, 64));
  for (int i = 0; i < 16 * 128; ++i)
    if (i % 128 < 64) CHECK(oracle[i] == ref[i]);

  Tolerance t = bounded(0, 0x1p-6, 3 * 0x1p-7);
  t.pre_rounding_tail = ErrorBound{0, 0.14, 3 * 0x1p-7, "test"};
  const RoundedReference reference{pre, format, {}};
  DenseMetrics m = compare_rounded(ref, ref, shape, reference, t);
  CHECK(m.status == Status::pass);
  CHECK(m.rounding->blocks == 16);
  CHECK(m.rounding->differing == 0);

  // A correct producer: its bf16 values before FP8 (and fp32 ones before bf16) moved by up to one
  // bf16 flip in 1 of 8 elements.
  std::vector<double> moved = pre;
  for (size_t i = 0; i < moved.size(); ++i) {
    if (lcg.uniform() >= 0.125) continue;
    const double v = moved[i] * (1 + (lcg.uniform() - 0.5) * 0x1p-6);
    moved[i] = i % 128 < 64 ? bf16(v) : static_cast<float>(v);
  }
  m = compare_rounded(ref, rounded(moved, ElementRounding::nearest_even, false, kFp8Floor), shape, reference, t);
  CHECK(m.status == Status::pass);
  CHECK(m.rounding->flips > 0);
  CHECK(m.rounding->flips_explained == m.rounding->flips);

  m = compare_rounded(ref, rounded(pre, ElementRounding::truncate, false, kFp8Floor), shape, reference, t);
  CHECK(m.status == Status::fail);
  CHECK(m.rounding->unexplained > 0);
  CHECK(m.rounding->away_from_zero == 0);
  CHECK(m.rounding->bias_direction == "toward zero");
  CHECK(m.failed_gates == std::vector<std::string>{"rounding", "rounding bias"});

  std::vector<double> skipped = pre;
  for (double& v : skipped) v = bf16(v);
  m = compare_rounded(ref, skipped, shape, reference, t);
  CHECK(m.status == Status::fail);
  CHECK(m.rounding->off_grid > 300);

  m = compare_rounded(ref, rounded(pre, ElementRounding::nearest_even, true, kFp8Floor), shape, reference, t);
  CHECK(m.status == Status::fail);
  CHECK(m.rounding->unexplained + m.rounding->block_scales_unexplained > 0);
}

TEST_CASE("rounded FP8 blocks: a block amax within the bound of a power-of-two boundary may take the other scale") {
  // amax = 28.125 (the bf16 above 28): amax / 448 > 2^-4 takes the scale 2^-3. A producer whose amax
  // is one bf16 flip lower, 28 = 448 * 2^-4, takes 2^-4: its block on the grid of the finer scale.
  // An e4m3 grid is floating, so the two scales differ only at the top and in the subnormals: the
  // element 3 * 2^-13 is 1.5 * 2^-9 at scale 2^-3 (a subnormal tie, to 2 * 2^-9) but 3 * 2^-9 at 2^-4.
  std::vector<double> pre(64), moved(64);
  Lcg lcg{3};
  for (int k = 0; k < 64; ++k) pre[k] = moved[k] = bf16(4 * lcg.normal());
  pre[5] = 28.125;
  moved[5] = 28;
  pre[7] = moved[7] = 3 * 0x1p-13;
  const std::vector<double> ref =
      quantize_block(ref::Element::e4m3, pre, ElementRounding::nearest_even, false, kFp8Floor);
  const std::vector<double> got =
      quantize_block(ref::Element::e4m3, moved, ElementRounding::nearest_even, false, kFp8Floor);
  CHECK(ref != got);
  const std::vector<int64_t> shape{1, 64};
  const RoundingFormat format = RoundingFormat::blocks(ref::BlockFormat::fp8_kv(), 64);
  DenseMetrics m = compare_rounded(ref, got, shape, RoundedReference{pre, format, {}}, bounded(0, 0, 3 * 0x1p-7));
  CHECK(m.status == Status::pass);
  CHECK(m.rounding->block_scales_differ == 1);
  CHECK(m.rounding->unexplained == 0);
  // With no error allowed the scale must be the reference's: the finer grid's values are flips
  // no boundary explains.
  m = compare_rounded(ref, got, shape, RoundedReference{pre, format, {}}, bounded(0, 0, 0));
  CHECK(m.status == Status::fail);
  CHECK(m.rounding->block_scales_differ == 0);
  CHECK(m.rounding->block_scales_unexplained == 1);
  CHECK(m.rounding->first_unexplained_scale.got_scale == 0x1p-4);
  CHECK(m.rounding->first_unexplained_scale.ref_scale == 0x1p-3);
}

TEST_CASE("rounded FP4 blocks: ties toward zero, a wrong amax floor, UE8M0 floor and no quantization fail") {
  // [24, 128] with FP4 e2m1 blocks of 32 on every dim (the indexer's q after the Hadamard). bf16
  // values: in every block one element 1.5 (scale 2^-2), many of the others exact e2m1 ties
  // (0.25, 0.75, ... times the scale), the rest random. Row 23 is tiny: amax 1e-5.
  const ref::BlockFormat fp4 = ref::BlockFormat::fp4_indexer();
  const RoundingFormat format = RoundingFormat::blocks(fp4);
  const std::vector<int64_t> shape{24, 128};
  Lcg lcg{5};
  std::vector<double> pre(24 * 128);
  const double ties[] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
  for (size_t i = 0; i < pre.size(); ++i) {
    const double sign = lcg.uniform() < 0.5 ? -1 : 1;
    if (i % 32 == 0)
      pre[i] = sign * 1.5;
    else if (lcg.uniform() < 0.3)
      pre[i] = sign * 0.25 * ties[static_cast<int>(lcg.uniform() * 7)];
    else
      pre[i] = bf16(0.5 * lcg.normal());
    if (i >= 23 * 128) pre[i] = bf16(pre[i] * 1e-5 / 1.5);
  }
  auto quantized = [&](ElementRounding mode, bool floor_scale, float amax_floor) {
    std::vector<double> out(pre.size());
    for (size_t b = 0; b < pre.size() / 32; ++b) {
      const std::vector<double> block(pre.begin() + b * 32, pre.begin() + (b + 1) * 32);
      const std::vector<double> q = quantize_block(ref::Element::e2m1, block, mode, floor_scale, amax_floor);
      std::copy(q.begin(), q.end(), out.begin() + b * 32);
    }
    return out;
  };
  const std::vector<double> ref = quantized(ElementRounding::nearest_even, false, kFp4Floor);
  std::vector<double> oracle = pre;
  for (int r = 0; r < 24; ++r) ref::fake_quant_row(fp4, std::span<double>(oracle).subspan(r * 128, 128));
  CHECK(oracle == ref);

  // official's indexer/q bound before FP4: one bf16 flip, 0.2 RMS of the row.
  const Tolerance t = bounded(0, 0.2, 0x1p-7);
  const RoundedReference reference{pre, format, {}};
  DenseMetrics m = compare_rounded(ref, ref, shape, reference, t);
  CHECK(m.status == Status::pass);
  CHECK(m.rounding->ties > 500);

  // Ties toward zero: each flip is at an exact tie (a boundary at distance 0), but they all go
  // toward zero.
  m = compare_rounded(ref, quantized(ElementRounding::ties_toward_zero, false, kFp4Floor), shape, reference, t);
  CHECK(m.status == Status::fail);
  CHECK(m.rounding->tie_flips == m.rounding->differing);
  CHECK(m.rounding->tie_flips > 100);
  CHECK(m.rounding->away_from_zero == 0);
  CHECK(m.rounding->bias_direction == "toward zero");
  CHECK(std::find(m.failed_gates.begin(), m.failed_gates.end(), "rounding bias") != m.failed_gates.end());

  // amax floor 1e-4 instead of 6 * 2^-126: the tiny row gets a coarser scale.
  m = compare_rounded(ref, quantized(ElementRounding::nearest_even, false, 1e-4f), shape, reference, t);
  CHECK(m.status == Status::fail);
  CHECK(m.rounding->first_unexplained.coord.front() == 23);

  m = compare_rounded(ref, quantized(ElementRounding::nearest_even, true, kFp4Floor), shape, reference, t);
  CHECK(m.status == Status::fail);
  CHECK(m.rounding->unexplained + m.rounding->block_scales_unexplained > 0);

  m = compare_rounded(ref, pre, shape, reference, t);
  CHECK(m.status == Status::fail);
  CHECK(m.rounding->off_grid > 0);
}

TEST_CASE("check_quantizer: the tested quantizer on its own input, bitwise") {
  const ref::BlockFormat fp4 = ref::BlockFormat::fp4_indexer();
  const RoundingFormat format = RoundingFormat::blocks(fp4, 32);
  const std::vector<int64_t> shape{2, 32};
  std::vector<double> pre(64);
  Lcg lcg{9};
  for (size_t i = 0; i < pre.size(); ++i) pre[i] = bf16(lcg.normal());
  pre[3] = 0.75 * 0.5;  // a tie at scale 2^-1 if the block's amax is in (1.5, 3]
  pre[0] = 2.5;         // amax 2.5: scale 2^ceil(log2(2.5 / 6)) = 2^-1
  for (int i = 1; i < 32; ++i) pre[i] = std::clamp(pre[i], -2.4, 2.4);
  std::vector<double> good(64), bad(64);
  for (int b = 0; b < 2; ++b) {
    const std::vector<double> block(pre.begin() + b * 32, pre.begin() + (b + 1) * 32);
    const std::vector<double> g =
        quantize_block(ref::Element::e2m1, block, ElementRounding::nearest_even, false, kFp4Floor);
    const std::vector<double> z =
        quantize_block(ref::Element::e2m1, block, ElementRounding::ties_toward_zero, false, kFp4Floor);
    std::copy(g.begin(), g.end(), good.begin() + b * 32);
    std::copy(z.begin(), z.end(), bad.begin() + b * 32);
  }
  CHECK(good[3] == 0.5);  // 0.75 -> 1 (even) times 2^-1
  CHECK(bad[3] == 0.25);  // 0.75 -> 0.5 toward zero
  DenseMetrics m = check_quantizer(pre, good, shape, format);
  CHECK(m.status == Status::pass);
  CHECK(m.rounding->differing == 0);
  m = check_quantizer(pre, bad, shape, format);
  CHECK(m.status == Status::fail);
  CHECK(m.rounding->unexplained == m.rounding->differing);
  CHECK(m.rounding->first_unexplained.coord == std::vector<int64_t>{0, 3});
  CHECK(m.rounding->first_unexplained.why == "a tie not rounded as the format's rule (to nearest even)");
  // A signed zero is the same value.
  std::vector<double> signed_zero = good;
  for (double& v : signed_zero)
    if (v == 0) v = -v;
  CHECK(check_quantizer(pre, signed_zero, shape, format).status == Status::pass);
}

TEST_CASE("rounded: refused inputs, NaN and empty tensors") {
  const std::vector<int64_t> shape{1, 2};
  const std::vector<double> pre{1 + 0x1p-8 + 0x1p-12, 2.0}, wrong{1.0, 2.0};
  const RoundedReference reference{pre, RoundingFormat::bf16(), {}};
  // The reference must be the rounding of its pre-rounding values.
  CHECK_THROWS_AS(compare_rounded(wrong, wrong, shape, reference, bounded(0, 0, 0)), std::invalid_argument);
  // A bound must be given.
  Tolerance no_bound;
  no_bound.reason = "test";
  const std::vector<double> ref{1 + 0x1p-7, 2.0};
  CHECK_THROWS_AS(compare_rounded(ref, ref, shape, reference, no_bound), std::invalid_argument);
  // Formats without a power-of-two grid, and blocks that do not tile the dims.
  CHECK_THROWS_AS(RoundingFormat::blocks(ref::BlockFormat::nvfp4(), 16).check(16), std::invalid_argument);
  CHECK_THROWS_AS(RoundingFormat::blocks(ref::BlockFormat::fp8_kv(), 100).check(128), std::invalid_argument);
  CHECK_NOTHROW(RoundingFormat::blocks(ref::BlockFormat::mxfp4(), 32).check(32));
  // NaN on both sides is not a match in a format that has none.
  const std::vector<double> nan_pre{kNaN, 2.0}, nan_ref{kNaN, 2.0};
  const DenseMetrics m =
      compare_rounded(nan_ref, nan_ref, shape, RoundedReference{nan_pre, RoundingFormat::bf16(), {}}, bounded(0, 0, 0));
  CHECK(m.status == Status::fail);
  CHECK(m.failed_gates == std::vector<std::string>{"nonfinite"});
  // Nothing to compare: VACUOUS.
  const std::vector<int64_t> empty{0, 128};
  const std::vector<double> none;
  CHECK(
      compare_rounded(none, none, empty, RoundedReference{none, RoundingFormat::bf16(), {}}, bounded(0, 0, 0)).status ==
      Status::vacuous);
}

TEST_CASE("rounded: a per-element bound replaces the table's") {
  const double p = 1 + 0x1p-8 + 0x1p-12;
  const std::vector<double> pre{p, p}, ref{1 + 0x1p-7, 1 + 0x1p-7}, got{1.0, 1.0}, bound{0x1p-11, 0x1p-13};
  const std::vector<int64_t> shape{2};
  const DenseMetrics m =
      compare_rounded(ref, got, shape, RoundedReference{pre, RoundingFormat::bf16(), bound}, bounded(0, 0, 0));
  CHECK(m.rounding->flips_explained == 1);
  CHECK(m.rounding->unexplained == 1);
  CHECK(m.rounding->first_unexplained.coord == std::vector<int64_t>{1});
}

TEST_CASE("two_sided_binomial_p") {
  CHECK(two_sided_binomial_p(1, 0) == 1.0);
  CHECK(two_sided_binomial_p(10, 5) == 1.0);
  CHECK(two_sided_binomial_p(20, 0) == doctest::Approx(2 * std::ldexp(1.0, -20)).epsilon(1e-12));
  CHECK(two_sided_binomial_p(10, 2) == doctest::Approx(2 * (1 + 10 + 45) / 1024.0).epsilon(1e-12));
  CHECK(two_sided_binomial_p(1000, 0) < 1e-300);
}

TEST_CASE("final_rounding: each stage's grid under a policy") {
  const ref::ModelConfig flash = ref::ModelConfig::flash();
  const ref::PrecisionPolicy official = ref::PrecisionPolicy::official();
  CHECK(final_rounding("q", official, flash)->name() == "bf16");
  CHECK(final_rounding("attn/core", official, flash)->name() == "bf16");
  CHECK(final_rounding("indexer/scores", official, flash)->name() == "bf16");
  CHECK(final_rounding("kv", official, flash)->name() == "e4m3/b64/ue8m0 on dims [0,448), bf16 after");
  CHECK(final_rounding("compressor/entries", official, flash)->block_dims == 448);
  CHECK(final_rounding("indexer/q", official, flash)->name() == "e2m1/b32/ue8m0");
  CHECK_FALSE(final_rounding("compressor/state_kv", official, flash));
  CHECK_FALSE(final_rounding("indexer/topk", official, flash));
  CHECK_FALSE(final_rounding("q", ref::PrecisionPolicy::exact(), flash));
  CHECK_FALSE(final_rounding("indexer/q", ref::PrecisionPolicy::by_name("nvfp4-indexer"), flash));
  CHECK(final_rounding("indexer/q", ref::PrecisionPolicy::by_name("mxfp4-indexer"), flash)->block->block == 32);
  CHECK(final_rounding("kv", ref::PrecisionPolicy::by_name("no-kv-quant"), flash)->name() == "bf16");
}
