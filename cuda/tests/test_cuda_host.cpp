// Host-only tests of the CUDA kernels' scalar code (no GPU needed, so CI runs them): the number
// formats of cuda/common/numerics.cuh against reference/numerics/ (every code), the serial
// post-processing the v1 compressor kernels run (postprocess_serial.cuh, here compiled for the
// CPU) bit for bit against the oracle's postprocess_entries, and the RoPE table the kernels read.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/common/numerics.cuh"
#include "cuda/compressor/oracle_mirror.h"
#include "cuda/compressor/postprocess_serial.cuh"
#include "reference/config.h"
#include "reference/numerics/bf16.h"
#include "reference/numerics/fp4_e2m1.h"
#include "reference/numerics/fp8_e4m3.h"
#include "reference/precision.h"
#include "reference/stages/compressor.h"

using namespace dsv4;
using ref::Index;
using ref::Mat;

namespace {

ref::CompressorWeights weights(int ratio, int d, std::mt19937_64& gen) {
  std::uniform_real_distribution<double> u(-1, 1);
  ref::CompressorWeights w;
  w.ratio = ratio;
  w.head_dim = d;
  const int width = w.coff() * d;
  w.wkv = Mat::Zero(width, 1);
  w.wgate = Mat::Zero(width, 1);
  w.ape = Mat::Zero(ratio, width);
  w.norm.resize(d);
  for (int c = 0; c < d; ++c) w.norm(c) = ref::round_to(ref::Storage::bf16, 1 + 0.5 * u(gen));
  return w;
}

// Pooled values of several kinds: plain random, a wide magnitude spread (tiny and large values in
// one entry), an all-zero entry, and entries whose FP8 block amax is a power of two.
Mat pooled_values(Index n, int d, std::mt19937_64& gen) {
  std::uniform_real_distribution<double> u(-2, 2);
  std::uniform_int_distribution<int> e(-30, 10);
  Mat m(n, d);
  for (Index i = 0; i < n; ++i)
    for (int c = 0; c < d; ++c) {
      double v = u(gen);
      if (i % 4 == 1) v = std::ldexp(u(gen), e(gen));
      if (i % 4 == 2) v = 0;
      if (i % 4 == 3 && c % 64 == 5) v = 4.0;
      m(i, c) = static_cast<float>(v);
    }
  return m;
}

void check_serial_equals_oracle(ref::CompressorKind kind, int ratio, int d) {
  std::mt19937_64 gen(static_cast<uint64_t>(d * 131 + ratio));
  const ref::CompressorWeights w = weights(ratio, d, gen);
  const ref::ModelConfig cfg = ref::ModelConfig::flash();
  const ref::PrecisionPolicy p = ref::PrecisionPolicy::official();
  const ref::RopeTable rope = ref::RopeTable::for_layer(cfg, ratio, p);
  const Index n = 64;
  const int64_t first_entry = 1000;  // positions far from 0: RoPE angles of many turns
  const Mat pooled = pooled_values(n, d, gen);
  const Mat want = ref::postprocess_entries(w, kind, pooled, first_entry, rope, cfg.norm_eps, p);
  const std::vector<float> table = cuda::rope_table(rope, ratio, first_entry + n);
  std::vector<float> norm(static_cast<size_t>(d)), row(static_cast<size_t>(d));
  for (int c = 0; c < d; ++c) norm[static_cast<size_t>(c)] = static_cast<float>(w.norm(c));
  int64_t differing = 0;
  for (Index i = 0; i < n; ++i) {
    for (int c = 0; c < d; ++c) row[static_cast<size_t>(c)] = static_cast<float>(pooled(i, c));
    std::vector<uint16_t> out(static_cast<size_t>(d));
    cuda::postprocess_entry_serial(row.data(), d, cuda::to_kind(kind), norm.data(), cfg.norm_eps,
                                   table.data() + (first_entry + i) * cuda::kRopeDim, out.data());
    for (int c = 0; c < d; ++c)
      differing += cuda::bf16_bits(static_cast<float>(want(i, c))) != out[static_cast<size_t>(c)];
  }
  CHECK(differing == 0);
}

}  // namespace

TEST_CASE("serial post-processing equals the oracle bitwise for main d512 and d128 and the indexer") {
  check_serial_equals_oracle(ref::CompressorKind::main, 4, 512);
  check_serial_equals_oracle(ref::CompressorKind::main, 128, 512);
  check_serial_equals_oracle(ref::CompressorKind::main, 4, 128);
  check_serial_equals_oracle(ref::CompressorKind::indexer, 4, 128);
}

TEST_CASE("element roundings equal the oracle's number formats on a dense sweep") {
  // Every bf16 value in [2^-12, 2^10) and its negative, scaled onto the FP8 / FP4 grids.
  int64_t fp8_bad = 0, fp4_bad = 0;
  for (uint32_t code = 0x3980; code < 0x4480; ++code)
    for (float sign : {1.0f, -1.0f}) {
      const float x = sign * cuda::bf16_value(static_cast<uint16_t>(code));
      const float s8 = std::fmin(std::fmax(x, -448.0f), 448.0f);
      fp8_bad += cuda::e4m3_round(s8) != static_cast<float>(ref::fp8_e4m3_round(s8));
      const float s4 = std::fmin(std::fmax(x / 64, -6.0f), 6.0f);
      fp4_bad += cuda::e2m1_round(s4) != static_cast<float>(ref::fp4_e2m1_round(s4));
    }
  CHECK(fp8_bad == 0);
  CHECK(fp4_bad == 0);
  // Midpoint ties go to even (0.75 -> 1, 2.5 -> 2, 5 -> 4 on the FP4 grid; 0.5 + 2^-5 style on FP8).
  CHECK(cuda::e2m1_round(0.75f) == 1.0f);
  CHECK(cuda::e2m1_round(2.5f) == 2.0f);
  CHECK(cuda::e2m1_round(5.0f) == 4.0f);
  CHECK(cuda::e4m3_round(1.0625f) == 1.0f);
  CHECK(cuda::e4m3_round(1.1875f) == 1.25f);
}

TEST_CASE("the kernels' RoPE table holds the oracle's fp32 cos and sin at positions j times ratio") {
  const ref::RopeTable rope =
      ref::RopeTable::for_layer(ref::ModelConfig::flash(), 128, ref::PrecisionPolicy::official());
  const std::vector<float> t = cuda::rope_table(rope, 128, 300);
  for (int64_t j : {0, 1, 299})
    for (int i : {0, 17, 31}) {
      CHECK(t[static_cast<size_t>(j * 64 + 2 * i)] == static_cast<float>(rope.cos_at(j * 128, i)));
      CHECK(t[static_cast<size_t>(j * 64 + 2 * i + 1)] == static_cast<float>(rope.sin_at(j * 128, i)));
    }
}

TEST_CASE("stored codes: every e4m3 and e2m1 code decodes to the oracle's value and encodes back") {
  int64_t bad = 0;
  for (int code = 0; code < 256; ++code) {
    const auto c = static_cast<uint8_t>(code);
    const double want = ref::fp8_e4m3_decode(c);
    const float got = cuda::e4m3_value(c);
    if (std::isnan(want)) {
      bad += !std::isnan(got);
      bad += cuda::e4m3_code(got) != 0x7f;  // NaN encodes as 0x7f whatever its sign
      continue;
    }
    bad += static_cast<double>(got) != want || std::signbit(got) != std::signbit(want);
    bad += cuda::e4m3_code(got) != c;
    bad += cuda::e4m3_code(got) != ref::fp8_e4m3_encode(want);
  }
  for (int code = 0; code < 16; ++code) {
    const auto c = static_cast<uint8_t>(code);
    const float got = cuda::e2m1_value(c);
    bad += static_cast<double>(got) != ref::fp4_e2m1_decode(c) || std::signbit(got) != ((c & 0x8) != 0);
    bad += cuda::e2m1_code(got) != c;
  }
  CHECK(bad == 0);
  // Rounded values of a dense sweep encode as the oracle encodes them.
  int64_t sweep_bad = 0;
  for (uint32_t b = 0x3000; b < 0x4500; ++b)
    for (float sign : {1.0f, -1.0f}) {
      const float x = sign * ref::bf16_decode(static_cast<uint16_t>(b));
      const float r8 = cuda::e4m3_round(std::fmin(std::fmax(x, -448.0f), 448.0f));
      sweep_bad += cuda::e4m3_code(r8) != ref::fp8_e4m3_encode(r8);
      const float r4 = cuda::e2m1_round(std::fmin(std::fmax(x, -6.0f), 6.0f));
      sweep_bad += cuda::e2m1_code(r4) != ref::fp4_e2m1_encode(r4);
    }
  CHECK(sweep_bad == 0);
}

TEST_CASE("UE8M0 codes hold the exponent biased by 127 and decode to the power of two") {
  for (int e : {-127, -126, -20, -1, 0, 1, 7, 127}) {
    CHECK(cuda::ue8m0_exponent(cuda::ue8m0_code(e)) == e);
    CHECK(static_cast<double>(cuda::ue8m0_value(cuda::ue8m0_code(e))) == std::ldexp(1.0, e));
  }
}
