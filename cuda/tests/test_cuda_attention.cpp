// GPU tests of the CUDA sparse MQA kernels and the output path (label gpu), every version against
// the oracle (reference/stages/sparse_mqa.h, output_projection.h) on fresh random and adversarial
// inputs (docs/cuda-attention.md "Checks": -1 anywhere, whole leading 64-slot blocks invalid, rows
// without a valid slot, out-of-range entries of every kind, lengths that cut the lists, huge
// sinks, k = 0, irregular page sizes, NaN in every token no valid slot references).
//
// What is asserted, per call (attention_cases.h, docs/cuda-attention.md "Checks"):
//   v1         out bitwise equal to the oracle's bf16 codes (official policy, and official with
//              fp32 probabilities), but for at most one (row, head) at one ulp (exp's last bit);
//   v2, v3     out within the per-element bound and the per-(row, head) cos-diff bound derived for
//              each policy; inf / NaN exactly where the oracle has them;
//   all        lse (natural log, sink excluded, +inf without a valid slot) within its bound,
//              prefill max_logits within the logit bound; every output element written (outputs
//              poisoned with 0xFF first) and 256 guard bytes around each output untouched.
// Plus: a row with one valid slot gives that slot's dequantized row exactly; 20 reruns are bitwise
// identical; bad arguments throw; inverse RoPE bitwise equal to the oracle; wo_a within its bound.
// v3's pieces alone first ("v3 pieces: ..."): one wgmma QK tile and one PV tile on values whose fp32
// sums are exact (so any misplaced element shows as an exact mismatch, named by row and column),
// and the producer's gather and dequantization of decode blocks, bitwise.
// Inputs come from harness cases: a failure prints the case ID, DSV4_CASE='<ID>' reruns it alone.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda/attention/attention_mirror.h"
#include "cuda/attention/output_path.h"
#include "cuda/attention/sparse_mqa_api.h"
#include "cuda/attention/v3_probes.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"
#include "cuda/tests/attention_cases.h"
#include "cuda/tests/harness.h"
#include "reference/config.h"
#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/numerics/bf16.h"
#include "reference/precision.h"
#include "reference/primitives/rope.h"
#include "reference/stages/output_projection.h"
#include "reference/weights.h"
#include "verify/layouts/flashmla_model1.h"
#include "verify/replay/backend.h"

using namespace dsv4;
using namespace dsv4::cuda::attention;
using cuda::DeviceBuffer;
using cuda::GuardedBuffer;
using ref::Index;
using ref::Mat;
using testing::Check;
using testing::DecodeCase;
using testing::DecodeShape;
using testing::Expected;
using testing::PrefillCase;
using testing::PrefillShape;
using testing::ProbsKind;

namespace {

// A test's inputs come from a harness case (cuda/tests/harness.h): its ID, attention(test=...,
// inputs=...,seed=S), is printed with any failure, and DSV4_CASE='<ID>' reruns those inputs alone
// (every other input of the binary is skipped) with that seed; DSV4_TEST_SEED sets the base seed.
std::optional<cuda::testing::Case> inputs(const std::string& test, const std::string& which) {
  return cuda::testing::Case::select(cuda::testing::CaseId("attention").with("test", test).with("inputs", which));
}

const char* name_of(Probs p) { return p == Probs::bf16 ? "bf16 probs" : "fp32 probs"; }
ProbsKind kind_of(Probs p) { return p == Probs::bf16 ? ProbsKind::bf16 : ProbsKind::fp32; }

// MODEL1 bytes of a pool whose unreferenced rows are NaN: encoded with those rows zero, then every
// byte of theirs (codes, rope dims, scales) set to 0xFF (NaN in e4m3, bf16 and UE8M0), as are the
// page padding bytes. A kernel that reads such a token produces NaN.
std::vector<uint8_t> model1_pool(const Mat& rows, int page_size) {
  Mat clean = rows;
  std::vector<char> poisoned(static_cast<size_t>(rows.rows()), 0);
  for (Index i = 0; i < rows.rows(); ++i)
    if (std::isnan(rows(i, 0))) {
      poisoned[static_cast<size_t>(i)] = 1;
      clean.row(i).setZero();
    }
  const layouts::Model1Layout layout{page_size};
  std::vector<uint8_t> bytes = layouts::encode_model1(clean, layout);
  REQUIRE(static_cast<int64_t>(bytes.size()) == layout.pool_bytes(rows.rows() / page_size));
  for (Index i = 0; i < rows.rows(); ++i) {
    if (!poisoned[static_cast<size_t>(i)]) continue;
    std::fill_n(bytes.begin() + layout.data_offset(i), layouts::Model1Layout::kTokenDataBytes, uint8_t{0xFF});
    std::fill_n(bytes.begin() + layout.scale_offset(i), layouts::Model1Layout::kTokenScaleBytes, uint8_t{0xFF});
  }
  const int64_t used = int64_t{584} * page_size;  // data + scales of a page; the rest is padding
  for (int64_t p = 0; p < rows.rows() / page_size; ++p)
    std::fill(bytes.begin() + p * layout.page_bytes() + used, bytes.begin() + (p + 1) * layout.page_bytes(),
              uint8_t{0xFF});
  return bytes;
}

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& v) {
  return v.empty() ? DeviceBuffer<T>() : DeviceBuffer<T>(v);
}

// A decode case on the device.
struct DeviceDecode {
  const DecodeCase& c;
  DeviceBuffer<uint8_t> pool, extra_pool;
  DeviceBuffer<int32_t> list, extra_list, lengths, extra_lengths;
  DeviceBuffer<uint16_t> q;
  DeviceBuffer<float> sink;

  explicit DeviceDecode(const DecodeCase& dc)
      : c(dc),
        pool(upload(dc.pool_rows.rows() ? model1_pool(dc.pool_rows, dc.page_size) : std::vector<uint8_t>{})),
        extra_pool(
            upload(dc.extra_rows.rows() ? model1_pool(dc.extra_rows, dc.extra_page_size) : std::vector<uint8_t>{})),
        list(upload(dc.list)),
        extra_list(upload(dc.extra_list)),
        lengths(upload(dc.lengths)),
        extra_lengths(upload(dc.extra_lengths)),
        q(upload(dc.q)),
        sink(upload(dc.sink)) {}

  DecodeArgs args(Probs probs) const {
    DecodeArgs a;
    a.batch = c.batch;
    a.s_q = c.s_q;
    a.n_heads = c.n_heads;
    a.q = q.get();
    a.pool = PagedPool{pool.get(), c.page_size, c.pool_rows.rows() / c.page_size};
    a.list = IndexList{list.get(), c.topk, c.lengths.empty() ? nullptr : lengths.get()};
    a.extra_pool = PagedPool{extra_pool.get(), c.extra_page_size, c.extra_rows.rows() / c.extra_page_size};
    a.extra_list = IndexList{extra_list.get(), c.extra_topk, c.extra_lengths.empty() ? nullptr : extra_lengths.get()};
    a.sink = c.sink.empty() ? nullptr : sink.get();
    a.softmax_scale = c.scale;
    a.probs = probs;
    return a;
  }
};

struct DecodeResult {
  std::vector<uint16_t> out;
  std::vector<float> lse;  // [rows, H] (from the kernel's [batch, H, s_q])
  std::vector<float> raw_lse;
};

DecodeResult run_decode(const DeviceDecode& dd, Variant v, Probs probs) {
  const DecodeCase& c = dd.c;
  const int64_t rows = c.rows();
  GuardedBuffer<uint16_t> out(static_cast<size_t>(rows * c.n_heads * kHeadDim));
  GuardedBuffer<float> lse(static_cast<size_t>(rows * c.n_heads));
  out.poison(0xFF);
  lse.poison(0xFF);
  DecodeArgs a = dd.args(probs);
  a.out = out.get();
  a.lse = lse.get();
  const size_t ws_bytes = decode_workspace_bytes(a, v);
  DeviceBuffer<uint8_t> ws(ws_bytes);
  sparse_mqa_decode(a, v, ws.get(), ws_bytes);
  CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(out.damaged_guard_bytes() == 0);
  CHECK(lse.damaged_guard_bytes() == 0);
  DecodeResult r;
  r.out = out.download();
  r.raw_lse = lse.download();
  r.lse.resize(r.raw_lse.size());
  for (int64_t row = 0; row < rows; ++row)
    for (int h = 0; h < c.n_heads; ++h) {
      const int64_t b = row / c.s_q, i = row % c.s_q;
      r.lse[static_cast<size_t>(row * c.n_heads + h)] = r.raw_lse[static_cast<size_t>((b * c.n_heads + h) * c.s_q + i)];
    }
  return r;
}

// Every element written: no 0xFFFF code (the poison; the kernels never write a NaN) left.
void check_written(const std::vector<uint16_t>& out) {
  int64_t left = 0;
  for (uint16_t v : out) left += v == 0xFFFF;
  CHECK_MESSAGE(left == 0, left << " output elements still hold the poison");
}

void check_decode(const DecodeCase& c, Variant v, Probs probs) {
  CAPTURE(c.name);
  CAPTURE(variant_name(v));
  CAPTURE(name_of(probs));
  const DeviceDecode dd(c);
  const DecodeResult got = run_decode(dd, v, probs);  // before the oracle allocates anything
  const Expected e = testing::expected(c.oracle_inputs(), kind_of(probs));
  check_written(got.out);
  const Check out = v == Variant::v1 ? testing::check_out_bitwise(e, got.out, 1) : testing::check_out(e, got.out);
  CHECK_MESSAGE(out.ok, out.report);
  MESSAGE(c.name << " " << variant_name(v) << ", " << name_of(probs) << ": " << out.report);
  const Check lse = testing::check_lse(e, got.lse);
  CHECK_MESSAGE(lse.ok, lse.report);
}

const std::vector<Variant> kVersions = {Variant::v1, Variant::v2, Variant::v3, Variant::v4, Variant::v5, Variant::v7};

void check_prefill(const PrefillCase& c, Variant v, Probs probs);
const std::vector<Probs> kProbs = {Probs::bf16, Probs::fp32};

DecodeShape flash_shape() {
  DecodeShape s;
  s.name = "V4-Flash b2 s_q2 h64 window 128 + top-512";
  s.batch = 2;
  s.s_q = 2;
  s.n_heads = 64;
  s.topk = 128;
  s.extra_topk = 512;
  s.page_size = 256;
  s.extra_page_size = 64;
  s.extra_tokens = 1024;
  return s;
}

DecodeShape pro_shape() {
  DecodeShape s;
  s.name = "V4-Pro b1 s_q2 h128 window 128 + top-1024, compressed pages of 2";
  s.batch = 1;
  s.s_q = 2;
  s.n_heads = 128;
  s.topk = 128;
  s.extra_topk = 1024;
  s.page_size = 256;
  s.extra_page_size = 2;
  s.extra_tokens = 1536;
  s.kv_sigma = 1.0;  // wider logits: the running max moves between blocks
  return s;
}

}  // namespace

// ---- v3's pieces, each alone -------------------------------------------------------------------
namespace {

// bf16 codes of small multiples of 2^-3 in [-2, 2]: products and 512-term sums are exact in fp32.
std::vector<uint16_t> grid_codes(size_t n, std::mt19937_64& gen) {
  std::uniform_int_distribution<int> u(-16, 16);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = ref::bf16_encode(static_cast<float>(u(gen)) * 0.125f);
  return v;
}

// got [rows][cols] fp32 against the exact product, element by element; names the first mismatch.
void check_exact(const std::vector<float>& got, const std::vector<double>& want, int cols, const char* what) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i)
    if (static_cast<double>(got[i]) != want[i]) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++bad;
    }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " elements differ; first at row " << first / cols << ", column "
                               << first % cols << ": got " << (first >= 0 ? got[static_cast<size_t>(first)] : 0.0f)
                               << ", want " << (first >= 0 ? want[static_cast<size_t>(first)] : 0.0));
}

}  // namespace

TEST_CASE("v3 pieces: one wgmma QK tile (64 heads x 64 slots over 512 dims) is the exact product") {
  const auto c_in = inputs("v3_pieces", "qk tile");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  const std::vector<uint16_t> q = grid_codes(64 * 512, gen), k = grid_codes(64 * 512, gen);
  DeviceBuffer<uint16_t> dq(q), dk(k);
  GuardedBuffer<float> ds(64 * 64);
  ds.poison(0xFF);
  probes::v3_qk_tile(dq.get(), dk.get(), ds.get());
  CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(ds.damaged_guard_bytes() == 0);
  std::vector<double> want(64 * 64);
  for (int h = 0; h < 64; ++h)
    for (int j = 0; j < 64; ++j) {
      double acc = 0;
      for (int d = 0; d < 512; ++d)
        acc += static_cast<double>(ref::bf16_decode(q[static_cast<size_t>(h * 512 + d)])) *
               ref::bf16_decode(k[static_cast<size_t>(j * 512 + d)]);
      want[static_cast<size_t>(h * 64 + j)] = acc;
    }
  check_exact(ds.download(), want, 64, "S = q k^T (row: head, column: slot)");
}

TEST_CASE("v3 pieces: one wgmma PV tile (the k tile read transposed as V) is the exact product, 1 and 3 planes") {
  const auto c_in = inputs("v3_pieces", "pv tile");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  for (int planes : {1, 3}) {
    CAPTURE(planes);
    const std::vector<uint16_t> p = grid_codes(static_cast<size_t>(planes) * 64 * 64, gen),
                                v = grid_codes(64 * 512, gen);
    DeviceBuffer<uint16_t> dp(p), dv(v);
    GuardedBuffer<float> dout(64 * 512);
    dout.poison(0xFF);
    probes::v3_pv_tile(dp.get(), dv.get(), planes, dout.get());
    CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(dout.damaged_guard_bytes() == 0);
    std::vector<double> want(64 * 512, 0.0);
    for (int plane = 0; plane < planes; ++plane)
      for (int h = 0; h < 64; ++h)
        for (int j = 0; j < 64; ++j) {
          const double w = ref::bf16_decode(p[static_cast<size_t>((plane * 64 + h) * 64 + j)]);
          for (int d = 0; d < 512; ++d)
            want[static_cast<size_t>(h * 512 + d)] += w * ref::bf16_decode(v[static_cast<size_t>(j * 512 + d)]);
        }
    check_exact(dout.download(), want, 512, "O = P V (row: head, column: dim)");
  }
}

TEST_CASE("v4 pieces: each consumer's QK over all 64 slots is the exact product, both copies") {
  const auto c_in = inputs("v4_pieces", "qk tile");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  const std::vector<uint16_t> q = grid_codes(64 * 512, gen), k = grid_codes(64 * 512, gen);
  DeviceBuffer<uint16_t> dq(q), dk(k);
  GuardedBuffer<float> ds(2 * 64 * 64);
  ds.poison(0xFF);
  probes::v4_qk_tile(dq.get(), dk.get(), ds.get());
  CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(ds.damaged_guard_bytes() == 0);
  std::vector<double> want(2 * 64 * 64);
  for (int h = 0; h < 64; ++h)
    for (int j = 0; j < 64; ++j) {
      double acc = 0;
      for (int d = 0; d < 512; ++d)
        acc += static_cast<double>(ref::bf16_decode(q[static_cast<size_t>(h * 512 + d)])) *
               ref::bf16_decode(k[static_cast<size_t>(j * 512 + d)]);
      want[static_cast<size_t>(h * 64 + j)] = want[static_cast<size_t>(4096 + h * 64 + j)] = acc;
    }
  check_exact(ds.download(), want, 64, "S = q k^T (row: consumer * 64 + head, column: slot)");
}

// v7's exp: the oracle's bounds give each exp and rescale 2 fp32 ulps (2^-22 relative) besides the
// rounding of its argument (docs/cuda-attention.md, Tolerances; v7 argues ex2.approx fits). Every
// argument v7 can pass with a normal result: [-126, 0] and the small positive roundings of s c - mc
// at the row max (|x| <= 2^-20 for |c s| < 16; checked to 2^-10).
TEST_CASE("v7 pieces: ex2.approx stays within 2 fp32 ulps of 2^x on every argument from -126 to 2^-10") {
  if (!inputs("v7_pieces", "ex2 error")) return;  // DSV4_CASE names other inputs
  for (const auto& [lo, hi] : {std::pair{-126.0f, -0.0f}, std::pair{0.0f, 0x1p-10f}}) {
    const probes::Ex2Error e = probes::v7_ex2_error(lo, hi);
    MESSAGE("ex2.approx.ftz on [" << lo << ", " << hi << "]: max relative error " << e.max_rel << " = 2^"
                                  << std::log2(e.max_rel) << " at x = " << e.worst_x);
    CHECK_MESSAGE(e.max_rel <= 0x1p-22, "ex2.approx's error " << e.max_rel << " at x = " << e.worst_x
                                                              << " exceeds the 2 ulps the bounds allow");
    CHECK(e.at_minus_inf == 0.0f);
    CHECK_FALSE(std::signbit(e.at_minus_inf));
  }
}

TEST_CASE("v4 pieces: one PV tile with P from registers is the exact product, 1 and 3 planes") {
  const auto c_in = inputs("v4_pieces", "pv tile");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  for (int planes : {1, 3}) {
    CAPTURE(planes);
    // planes 1: P on the bf16 grid (k/8), V from grid_codes; every sum exact in fp32.
    // planes 3: P = u / 2^17 with 17 significant bits (so that the split needs all three planes: the
    // third carries the last bit), V in {-1/8, 0, 1/8}: products are multiples of 2^-20 and every
    // partial sum stays below 2^3, so the fp32 accumulation is exact as well.
    std::vector<float> prob(64 * 64);
    std::vector<uint16_t> v;
    if (planes == 1) {
      const std::vector<uint16_t> pc = grid_codes(64 * 64, gen);
      for (size_t i = 0; i < prob.size(); ++i) prob[i] = ref::bf16_decode(pc[i]);
      v = grid_codes(64 * 512, gen);
    } else {
      std::uniform_int_distribution<int> u(1 << 16, (1 << 17) - 1), w(-1, 1);
      for (float& x : prob) x = static_cast<float>(u(gen)) * 0x1p-17f;
      v.resize(64 * 512);
      for (uint16_t& x : v) x = ref::bf16_encode(static_cast<float>(w(gen)) * 0.125f);
    }
    DeviceBuffer<float> dp(prob);
    DeviceBuffer<uint16_t> dv(v);
    GuardedBuffer<float> dout(64 * 512);
    dout.poison(0xFF);
    probes::v4_pv_tile(dp.get(), dv.get(), planes, dout.get());
    CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(dout.damaged_guard_bytes() == 0);
    std::vector<double> want(64 * 512, 0.0);
    for (int h = 0; h < 64; ++h)
      for (int j = 0; j < 64; ++j) {
        const double w = prob[static_cast<size_t>(h * 64 + j)];  // planes 3 sum to it exactly; planes 1: on the grid
        for (int d = 0; d < 512; ++d)
          want[static_cast<size_t>(h * 512 + d)] += w * ref::bf16_decode(v[static_cast<size_t>(j * 512 + d)]);
      }
    check_exact(dout.download(), want, 512, "O = P V (row: head, column: dim)");
  }
}

TEST_CASE("v3 and v5 pieces: the producers gather and dequantize decode blocks exactly, invalid slots as zeros") {
  const auto c_in = inputs("v3_pieces", "producer blocks");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  DecodeShape s = flash_shape();
  s.name = "v3 producer probe";
  s.batch = 1;
  s.extra_page_size = 53;
  s.damage.invalid_fraction = 0.3;
  s.damage.out_of_range = true;
  s.damage.lengths = true;
  const DecodeCase c = testing::make_decode_case(s, gen);
  const DeviceDecode dd(c);
  const DecodeParams p = make_decode_params(dd.args(Probs::bf16));
  const int blocks = (c.topk + c.extra_topk + 63) / 64;
  for (int version : {3, 5})
    for (int64_t row = 0; row < c.rows(); ++row)
      for (int blk = 0; blk < blocks; ++blk) {
        CAPTURE(version);
        CAPTURE(row);
        CAPTURE(blk);
        DeviceBuffer<uint16_t> drows(64 * 512);
        DeviceBuffer<uint32_t> dmask(2);
        if (version == 3)
          probes::v3_decode_block(p, row, blk, drows.get(), dmask.get());
        else
          probes::v5_decode_block(p, row, blk, drows.get(), dmask.get());
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint16_t> got = drows.download();
        const std::vector<uint32_t> mask = dmask.download();
        int64_t bad_rows = 0, bad_bits = 0;
        for (int t = 0; t < 64; ++t) {
          const int slot = 64 * blk + t;
          const bool in_range = slot < c.topk + c.extra_topk;
          const bool extra = slot >= c.topk;
          const bool valid = in_range && c.valid(row, slot);
          bad_bits += (((mask[static_cast<size_t>(t / 32)] >> (t % 32)) & 1u) != 0) != valid;
          bool row_ok = true;
          for (int d = 0; d < 512; ++d) {
            uint16_t want = 0;
            if (valid) {
              const int32_t token = extra ? c.extra_list[static_cast<size_t>(row * c.extra_topk + slot - c.topk)]
                                          : c.list[static_cast<size_t>(row * c.topk + slot)];
              want = ref::bf16_encode(static_cast<float>(extra ? c.extra_rows(token, d) : c.pool_rows(token, d)));
            }
            row_ok = row_ok && got[static_cast<size_t>(t * 512 + d)] == want;
          }
          bad_rows += !row_ok;
        }
        CHECK_MESSAGE(bad_rows == 0,
                      bad_rows << " of 64 tile rows differ from the dequantized tokens (zeros if invalid)");
        CHECK_MESSAGE(bad_bits == 0, bad_bits << " validity bits wrong");
      }
}

// Small enough for compute-sanitizer (memcheck, racecheck, initcheck): every kernel and path once
// (the split-KV decode with its combine, the unsplit one, both probability roundings, prefill).
TEST_CASE("sanitizer: small decode and prefill on every version") {
  DecodeShape s;
  s.name = "sanitizer decode h64 b1 s_q2 topk 64 + 100";
  s.batch = 1;
  s.s_q = 2;
  s.topk = 64;
  s.extra_topk = 100;
  s.page_size = 61;
  s.extra_tokens = 256;
  s.damage.invalid_fraction = 0.2;
  s.damage.invalid_leading_blocks = 1;
  s.damage.lengths = true;
  s.sink_kind = 6;
  const auto c_in = inputs("sanitizer", "small decode and prefill");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  const DecodeCase c = testing::make_decode_case(s, gen);
  for (Variant v : kVersions)
    for (Probs p : kProbs) check_decode(c, v, p);
  PrefillShape ps;
  ps.name = "sanitizer prefill h64 s_q2 topk 128";
  ps.s_q = 2;
  ps.topk = 128;
  ps.s_kv = 200;
  ps.damage.invalid_fraction = 0.2;
  ps.damage.out_of_range = true;
  const PrefillCase pc = testing::make_prefill_case(ps, gen);
  for (Variant v : kVersions) check_prefill(pc, v, Probs::bf16);
  // the unsplit decode (a grid of >= 132 blocks: one per SM of an H200)
  DecodeShape wide = s;
  wide.name = "sanitizer decode h64 b66 s_q2 topk 64 + 64";
  wide.batch = 66;
  wide.extra_topk = 64;
  wide.damage = testing::Damage{};
  const DecodeCase cw = testing::make_decode_case(wide, gen);
  check_decode(cw, Variant::v2, Probs::bf16);
  check_decode(cw, Variant::v3, Probs::bf16);
  check_decode(cw, Variant::v3, Probs::fp32);
  check_decode(cw, Variant::v4, Probs::bf16);
  check_decode(cw, Variant::v4, Probs::fp32);
  check_decode(cw, Variant::v5, Probs::bf16);
  check_decode(cw, Variant::v5, Probs::fp32);
  check_decode(cw, Variant::v7, Probs::bf16);
  check_decode(cw, Variant::v7, Probs::fp32);
  // v5's persistent grid with several work units per CTA (q reloaded between units while the last
  // P V of the previous unit runs), rows without a valid slot among them
  DecodeShape many = wide;
  many.name = "sanitizer decode h64 b140 s_q2 topk 64 + 64, 280 work units";
  many.batch = 140;
  many.damage.invalid_fraction = 0.2;
  many.damage.empty_rows = true;
  const DecodeCase cm = testing::make_decode_case(many, gen);
  check_decode(cm, Variant::v5, Probs::bf16);
  check_decode(cm, Variant::v7, Probs::bf16);
  PrefillShape pm = ps;
  pm.name = "sanitizer prefill h64 s_q270 topk 128, 270 work units";
  pm.s_q = 270;
  const PrefillCase pcm = testing::make_prefill_case(pm, gen);
  check_prefill(pcm, Variant::v5, Probs::bf16);
  check_prefill(pcm, Variant::v7, Probs::bf16);
}

TEST_CASE("decode: V4-Flash and V4-Pro shapes, every version and probability rounding") {
  for (const DecodeShape& shape : {flash_shape(), pro_shape()}) {
    const auto c_in = inputs("decode", shape.name);
    if (!c_in) continue;  // DSV4_CASE names other inputs
    INFO(c_in->reproduce());
    std::mt19937_64 gen = c_in->rng();
    const DecodeCase c = testing::make_decode_case(shape, gen);
    for (Variant v : kVersions)
      for (Probs p : kProbs) check_decode(c, v, p);
  }
}

TEST_CASE("decode: adversarial index lists, irregular pages, lengths, mixed sinks") {
  DecodeShape s;
  s.name = "adversarial h64 b4 s_q2 topk 100 + 200, pages 61 / 53";
  s.batch = 4;
  s.s_q = 2;
  s.n_heads = 64;
  s.topk = 100;
  s.extra_topk = 200;
  s.page_size = 61;
  s.extra_page_size = 53;
  s.window_tokens = 100;
  s.extra_tokens = 300;
  s.damage.invalid_fraction = 0.3;
  s.damage.invalid_leading_blocks = 2;  // odd rows: the first 128 slots invalid (2 whole blocks)
  s.damage.empty_rows = true;
  s.damage.lengths = true;
  s.damage.out_of_range = true;
  s.sink_kind = 6;
  const auto c_in = inputs("decode", "adversarial");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  const DecodeCase c = testing::make_decode_case(s, gen);
  for (Variant v : kVersions)
    for (Probs p : kProbs) check_decode(c, v, p);
}

TEST_CASE("decode: a grid of 140 blocks (no split-KV) and s_q 1") {
  DecodeShape s;
  s.name = "h64 b70 s_q2 topk 64 + 128";
  s.batch = 70;
  s.s_q = 2;
  s.topk = 64;
  s.extra_topk = 128;
  s.extra_tokens = 256;
  s.damage.invalid_fraction = 0.05;
  const auto c_in = inputs("decode", "140 blocks and s_q 1");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  const DecodeCase c = testing::make_decode_case(s, gen);
  for (Variant v : kVersions) check_decode(c, v, Probs::bf16);
  DecodeShape one = flash_shape();
  one.name = "V4-Flash b3 s_q1";
  one.batch = 3;
  one.s_q = 1;
  const DecodeCase c1 = testing::make_decode_case(one, gen);
  for (Variant v : kVersions) check_decode(c1, v, Probs::bf16);
}

// v5 (and v7, on v5's grid) runs min(work units, SMs) CTAs that walk the units: here 2-3 units per CTA of an H200,
// whole invalid leading blocks and rows without a valid slot among them; and its outputs against v4's.
TEST_CASE("decode and prefill: several work units per CTA (v5's persistent grid)") {
  const auto c_in = inputs("decode and prefill", "several work units per CTA");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  DecodeShape s = flash_shape();
  s.name = "V4-Flash h64 b150 s_q2 topk 64 + 128, 300 work units";
  s.batch = 150;
  s.topk = 64;
  s.extra_topk = 128;
  s.extra_tokens = 256;
  s.damage.invalid_leading_blocks = 2;  // odd rows: one valid block, the third
  s.damage.empty_rows = true;
  const DecodeCase c = testing::make_decode_case(s, gen);
  for (Probs p : kProbs) check_decode(c, Variant::v5, p);
  for (Probs p : kProbs) check_decode(c, Variant::v7, p);  // v5's grid and producer, v7's consumers
  // v5's k tiles hold v4's bits (both dequantizations exact) and its consumers run v4's arithmetic:
  // its outputs are v4's, bit for bit (a misplaced or misconverted code would show here first).
  const DeviceDecode dd(c);
  for (Probs p : kProbs) {
    const DecodeResult r4 = run_decode(dd, Variant::v4, p), r5 = run_decode(dd, Variant::v5, p);
    CHECK_MESSAGE(r5.out == r4.out, "v5's out differs from v4's (" << name_of(p) << ")");
    CHECK_MESSAGE(std::memcmp(r5.raw_lse.data(), r4.raw_lse.data(), r4.raw_lse.size() * sizeof(float)) == 0,
                  "v5's lse differs from v4's (" << name_of(p) << ")");
  }
  PrefillShape ps;
  ps.name = "prefill h128 s_q 150 topk 192, 300 work units";
  ps.s_q = 150;
  ps.n_heads = 128;
  ps.topk = 192;
  ps.damage.invalid_fraction = 0.2;
  ps.damage.invalid_leading_blocks = 1;
  ps.damage.empty_rows = true;
  ps.damage.lengths = true;
  const PrefillCase pc = testing::make_prefill_case(ps, gen);
  for (Probs p : kProbs) check_prefill(pc, Variant::v5, p);
  for (Probs p : kProbs) check_prefill(pc, Variant::v7, p);
}

TEST_CASE("decode: sinks of +inf, -inf, +80, -1e4 and none") {
  for (int kind : {1, 2, 3, 4, 5}) {
    DecodeShape s = flash_shape();
    s.name = "sink kind " + std::to_string(kind);
    s.batch = 1;
    s.extra_topk = 64;
    s.extra_tokens = 128;
    s.sink_kind = kind;
    const auto c_in = inputs("decode", "sink kind " + std::to_string(kind));
    if (!c_in) continue;  // DSV4_CASE names other inputs
    INFO(c_in->reproduce());
    std::mt19937_64 gen = c_in->rng();
    const DecodeCase c = testing::make_decode_case(s, gen);
    for (Variant v : kVersions) check_decode(c, v, Probs::bf16);
  }
}

TEST_CASE("decode: k = 0 (no compressed list) and no list at all") {
  DecodeShape s = flash_shape();
  s.name = "window only";
  s.extra_topk = 0;
  const auto c_in = inputs("decode", "k = 0 and no list");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  const DecodeCase window_only = testing::make_decode_case(s, gen);
  s.name = "no slots";
  s.topk = 0;
  const DecodeCase none = testing::make_decode_case(s, gen);
  for (Variant v : kVersions) {
    check_decode(window_only, v, Probs::bf16);
    check_decode(none, v, Probs::bf16);
    const DeviceDecode dd(none);
    const DecodeResult r = run_decode(dd, v, Probs::bf16);
    for (uint16_t x : r.out) CHECK(x == 0);
    for (float x : r.lse) CHECK(x == std::numeric_limits<float>::infinity());
  }
}

TEST_CASE("decode: one valid slot gives its dequantized row exactly") {
  DecodeShape s = flash_shape();
  s.name = "one valid slot";
  s.batch = 3;
  s.sink_kind = 1;
  const auto c_in = inputs("decode", "one valid slot");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  DecodeCase c = testing::make_decode_case(s, gen);
  // Row r keeps only slot keep[r]: the first slot, one in the middle of the second block (after a
  // whole invalid block), the last extra slot.
  const int slots = c.topk + c.extra_topk;
  const int keep[] = {0, 64 + 17, slots - 1, 5, c.topk + 3, 130};
  for (int64_t r = 0; r < c.rows(); ++r)
    for (int k = 0; k < slots; ++k)
      if (k != keep[r % 6]) {
        if (k < c.topk)
          c.list[static_cast<size_t>(r * c.topk + k)] = -1;
        else
          c.extra_list[static_cast<size_t>(r * c.extra_topk + k - c.topk)] = -1;
      }
  testing::poison_unreferenced(c);
  for (Variant v : kVersions)
    for (Probs p : kProbs) {
      CAPTURE(variant_name(v));
      CAPTURE(name_of(p));
      const DeviceDecode dd(c);
      const DecodeResult r = run_decode(dd, v, p);
      for (int64_t row = 0; row < c.rows(); ++row) {
        const int k = keep[row % 6];
        REQUIRE(c.valid(row, k));
        const Eigen::RowVectorXd want =
            k < c.topk ? c.pool_rows.row(c.list[static_cast<size_t>(row * c.topk + k)]).eval()
                       : c.extra_rows.row(c.extra_list[static_cast<size_t>(row * c.extra_topk + k - c.topk)]).eval();
        for (int h = 0; h < c.n_heads; ++h)
          for (int d = 0; d < kHeadDim; ++d) {
            const double got = ref::bf16_decode(r.out[static_cast<size_t>((row * c.n_heads + h) * kHeadDim + d)]);
            if (got != want(d)) {
              FAIL_CHECK("row " << row << " head " << h << " dim " << d << ": " << got << " != " << want(d));
              break;
            }
          }
      }
    }
}

TEST_CASE("decode: 20 reruns are bitwise identical") {
  const auto c_in = inputs("decode", "reruns");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  DecodeShape s = flash_shape();
  s.damage.invalid_fraction = 0.1;
  const DecodeCase c = testing::make_decode_case(s, gen);
  const DeviceDecode dd(c);
  for (Variant v : kVersions)
    for (Probs p : kProbs) {
      CAPTURE(variant_name(v));
      CAPTURE(name_of(p));
      const DecodeResult first = run_decode(dd, v, p);
      for (int i = 0; i < 19; ++i) {
        const DecodeResult again = run_decode(dd, v, p);
        CHECK(again.out == first.out);
        CHECK(std::memcmp(again.raw_lse.data(), first.raw_lse.data(), first.raw_lse.size() * sizeof(float)) == 0);
      }
    }
}

TEST_CASE("decode: bad arguments throw before launching") {
  const auto c_in = inputs("decode", "bad arguments");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  DecodeShape s = flash_shape();
  s.batch = 1;
  const DecodeCase c = testing::make_decode_case(s, gen);
  const DeviceDecode dd(c);
  DeviceBuffer<uint16_t> out(static_cast<size_t>(c.rows() * c.n_heads * kHeadDim));
  DeviceBuffer<float> lse(static_cast<size_t>(c.rows() * c.n_heads));
  DecodeArgs a = dd.args(Probs::bf16);
  a.out = out.get();
  a.lse = lse.get();
  DecodeArgs bad = a;
  bad.n_heads = 48;  // v2 to v7 need a multiple of 64
  CHECK_THROWS_AS(sparse_mqa_decode(bad, Variant::v2), std::invalid_argument);
  CHECK_THROWS_AS(sparse_mqa_decode(bad, Variant::v3), std::invalid_argument);
  CHECK_THROWS_AS(sparse_mqa_decode(bad, Variant::v4), std::invalid_argument);
  CHECK_THROWS_AS(sparse_mqa_decode(bad, Variant::v5), std::invalid_argument);
  CHECK_THROWS_AS(sparse_mqa_decode(bad, Variant::v7), std::invalid_argument);
  // v7 takes the row max over the raw scores: a zero, negative or non-finite scale is refused, not mis-run
  bad = a;
  bad.softmax_scale = -0.5f;
  CHECK_THROWS_WITH_AS(sparse_mqa_decode(bad, Variant::v7), doctest::Contains("v7 needs a finite softmax_scale > 0"),
                       std::invalid_argument);
  bad.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(sparse_mqa_decode(bad, Variant::v7), std::invalid_argument);
  bad.softmax_scale = 0.0f;
  CHECK_THROWS_AS(sparse_mqa_decode(bad, Variant::v7), std::invalid_argument);
  bad = a;
  bad.out = nullptr;
  CHECK_THROWS_AS(sparse_mqa_decode(bad, Variant::v1), std::invalid_argument);
  bad = a;
  bad.pool.page_size = 0;
  CHECK_THROWS_AS(sparse_mqa_decode(bad, Variant::v1), std::invalid_argument);
  bad = a;
  bad.list.topk = -1;
  CHECK_THROWS_AS(sparse_mqa_decode(bad, Variant::v1), std::invalid_argument);
  // a shape that splits (b 1) without its workspace
  for (Variant v : {Variant::v2, Variant::v3, Variant::v4, Variant::v5, Variant::v7})
    if (decode_workspace_bytes(a, v) > 0) CHECK_THROWS_AS(sparse_mqa_decode(a, v), std::invalid_argument);
  PrefillArgs p;
  p.s_q = 1;
  p.n_heads = 64;
  p.head_dim = 100;
  CHECK_THROWS_AS(sparse_mqa_prefill(p, Variant::v1), std::invalid_argument);
  p.head_dim = 128;  // v1 only
  CHECK_THROWS_AS(sparse_mqa_prefill(p, Variant::v3), std::invalid_argument);
  CHECK_THROWS_AS(sparse_mqa_prefill(p, Variant::v4), std::invalid_argument);
  CHECK_THROWS_AS(sparse_mqa_prefill(p, Variant::v5), std::invalid_argument);
  CHECK_THROWS_AS(sparse_mqa_prefill(p, Variant::v7), std::invalid_argument);
  // a version the attention does not have (the indexer's decode has a v6)
  const auto no_v6 = doctest::Contains("the attention has versions v1 to v5 and v7, got v6");
  CHECK_THROWS_WITH_AS(sparse_mqa_decode(a, Variant::v6), no_v6, std::invalid_argument);
  CHECK_THROWS_WITH_AS(decode_workspace_bytes(a, Variant::v6), no_v6, std::invalid_argument);
  CHECK_THROWS_WITH_AS(sparse_mqa_prefill(p, Variant::v6), no_v6, std::invalid_argument);
}

// ---- prefill ------------------------------------------------------------------------------------

namespace {

void check_prefill(const PrefillCase& c, Variant v, Probs probs) {
  CAPTURE(c.name);
  CAPTURE(variant_name(v));
  CAPTURE(name_of(probs));
  DeviceBuffer<uint16_t> q(c.q), kv(testing::bf16_codes(c.kv));
  DeviceBuffer<int32_t> list = upload(c.list), lengths = upload(c.lengths);
  DeviceBuffer<float> sink = upload(c.sink);
  GuardedBuffer<uint16_t> out(c.q.size());
  GuardedBuffer<float> lse(static_cast<size_t>(int64_t{c.s_q} * c.n_heads)), max_logits(lse.size());
  out.poison(0xFF);
  lse.poison(0xFF);
  max_logits.poison(0xFF);
  PrefillArgs a;
  a.s_q = c.s_q;
  a.n_heads = c.n_heads;
  a.head_dim = c.head_dim;
  a.s_kv = c.kv.rows();
  a.q = q.get();
  a.kv = kv.get();
  a.list = IndexList{list.get(), c.topk, c.lengths.empty() ? nullptr : lengths.get()};
  a.sink = c.sink.empty() ? nullptr : sink.get();
  a.softmax_scale = c.scale;
  a.probs = probs;
  a.out = out.get();
  a.lse = lse.get();
  a.max_logits = max_logits.get();
  sparse_mqa_prefill(a, v);
  CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(out.damaged_guard_bytes() == 0);
  CHECK(lse.damaged_guard_bytes() == 0);
  CHECK(max_logits.damaged_guard_bytes() == 0);
  const std::vector<uint16_t> got = out.download();
  const Expected e = testing::expected(c.oracle_inputs(), kind_of(probs));
  check_written(got);
  const Check o = v == Variant::v1 ? testing::check_out_bitwise(e, got, 1) : testing::check_out(e, got);
  CHECK_MESSAGE(o.ok, o.report);
  MESSAGE(c.name << " " << variant_name(v) << ", " << name_of(probs) << ": " << o.report);
  const Check l = testing::check_lse(e, lse.download());
  CHECK_MESSAGE(l.ok, l.report);
  const Check m = testing::check_max_logit(e, max_logits.download());
  CHECK_MESSAGE(m.ok, m.report);
}

}  // namespace

TEST_CASE("prefill: V4-Flash and V4-Pro shapes with every kind of invalid entry") {
  PrefillShape flash;
  flash.name = "prefill h64 top-512 s_kv 1000";
  flash.s_q = 6;
  flash.n_heads = 64;
  flash.topk = 512;
  flash.s_kv = 1000;
  flash.damage.invalid_fraction = 0.2;
  flash.damage.invalid_leading_blocks = 1;
  flash.damage.empty_rows = true;
  flash.damage.lengths = true;
  flash.damage.out_of_range = true;
  flash.sink_kind = 6;
  PrefillShape pro;
  pro.name = "prefill h128 top-1024 s_kv 2048";
  pro.s_q = 3;
  pro.n_heads = 128;
  pro.topk = 1024;
  pro.s_kv = 2048;
  pro.kv_sigma = 1.0;
  PrefillShape few;
  few.name = "prefill s_kv 95 < topk 128";
  few.s_q = 4;
  few.topk = 128;
  few.s_kv = 95;
  few.damage.invalid_fraction = 0.1;
  few.damage.out_of_range = true;
  for (const PrefillShape& shape : {flash, pro, few}) {
    const auto c_in = inputs("prefill", shape.name);
    if (!c_in) continue;  // DSV4_CASE names other inputs
    INFO(c_in->reproduce());
    std::mt19937_64 gen = c_in->rng();
    const PrefillCase c = testing::make_prefill_case(shape, gen);
    for (Variant v : kVersions)
      for (Probs p : kProbs) check_prefill(c, v, p);
  }
}

TEST_CASE("prefill: head_dim 128 (the tiny config) on v1") {
  PrefillShape s;
  s.name = "prefill tiny dims h4 d128 topk 24";
  s.s_q = 13;
  s.n_heads = 4;
  s.head_dim = 128;
  s.topk = 24;
  s.s_kv = 40;
  s.damage.invalid_fraction = 0.2;
  const auto c_in = inputs("prefill", "head_dim 128");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  const PrefillCase c = testing::make_prefill_case(s, gen);
  for (Probs p : kProbs) check_prefill(c, Variant::v1, p);
}

TEST_CASE("prefill: the oracle-typed wrapper equals ref::sparse_mqa") {
  PrefillShape s;
  s.name = "wrapper";
  s.s_q = 5;
  s.topk = 192;
  s.s_kv = 300;
  s.damage.invalid_fraction = 0.2;
  const auto c_in = inputs("prefill", "wrapper");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  const PrefillCase c = testing::make_prefill_case(s, gen);
  const testing::OracleInputs in = c.oracle_inputs();
  const Mat got =
      cuda::attention::sparse_mqa(in.q, in.kv, in.sink, in.indices, in.n_heads, in.scale, Probs::bf16, Variant::v1);
  const Expected e = testing::expected(in, ProbsKind::bf16);
  const Check ch = testing::check_out_bitwise(e, testing::bf16_codes(got), 1);
  CHECK_MESSAGE(ch.ok, ch.report);
}

// ---- output path --------------------------------------------------------------------------------

// The CUDA replay backend's attention entry (verify/replay/cuda_backend.cpp) on decode calls: the
// sequence's cache encoded into MODEL1 pages through a reversed block table, FlashMLA's two lists in
// pool indices, the decode kernel; against the oracle on the same call's kv rows, within v2 / v3's
// bounds. A layer with V4's head (64 heads of 512) and small other dims; each ratio's decode calls
// after a prefill, one of them completing a compressed entry (ratio 4).
TEST_CASE("replay backend: decode calls run on MODEL1 pages within the bounds (ratios 0, 4, 128)") {
  ref::ModelConfig cfg = ref::ModelConfig::tiny();
  cfg.name = "tiny with V4's head: 64 heads of 512";
  cfg.n_heads = 64;
  cfg.head_dim = 512;
  const std::unique_ptr<ref::StageProvider> backend = verify::make_cuda_backend("official");
  const auto c_in = inputs("replay_backend", "decode on MODEL1 pages");
  if (!c_in) return;  // DSV4_CASE names other inputs
  INFO(c_in->reproduce());
  std::mt19937_64 gen = c_in->rng();
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int ratio : {0, 4, 128}) {
    CAPTURE(ratio);
    const ref::AttentionLayer layer(cfg, ref::AttentionWeights::random(cfg, ratio, 70 + static_cast<uint64_t>(ratio)),
                                    ref::PrecisionPolicy::official());
    const std::unique_ptr<ref::KvCache> cache = ref::make_ring_cache(cfg, ratio, 1);
    const int64_t prefill = 262;  // ratio 4: positions 262.. complete entry 65 at position 263
    Mat x(prefill, cfg.dim);
    for (Index i = 0; i < x.size(); ++i) x.data()[i] = normal(gen);
    layer.forward(x, 0, *cache, 0);
    for (int64_t pos = prefill; pos < prefill + 3; ++pos) {
      CAPTURE(pos);
      Mat xt(1, cfg.dim);
      for (Index i = 0; i < xt.size(); ++i) xt.data()[i] = normal(gen);
      const ref::StageOutputs o = layer.forward(xt, pos, *cache, 0);  // the oracle's call; the cache after it
      const ref::AttentionKv kv{*cache, 0, ref::IndexSpace::for_call(pos, 1, cfg.window_size), o.kv,
                                ratio == 0 ? 0 : (pos + 1) / ratio};
      const Mat got = backend->sparse_mqa(layer, o.q, kv, o.topk_idxs);
      testing::OracleInputs in;
      in.q = o.q;
      in.kv = kv.rows();
      in.sink = layer.weights().attn_sink;
      in.indices = o.topk_idxs;
      in.n_heads = cfg.n_heads;
      in.scale = static_cast<float>(std::pow(512.0, -0.5));  // what the kernel computes with
      const Expected e = testing::expected(in, ProbsKind::bf16);
      const Check out = testing::check_out(e, testing::bf16_codes(got));
      CHECK_MESSAGE(out.ok, out.report);
      MESSAGE("ratio " << ratio << ", decode at " << pos << " (" << o.topk_idxs.cols() << " slots): " << out.report);
    }
  }
}

TEST_CASE("output path: inverse RoPE is bitwise the oracle's") {
  for (const ref::ModelConfig& cfg : {ref::ModelConfig::flash(), ref::ModelConfig::tiny()}) {
    CAPTURE(cfg.name);
    const ref::PrecisionPolicy p = ref::PrecisionPolicy::official();
    const auto c_in = inputs("inverse_rope", cfg.name);
    if (!c_in) continue;  // DSV4_CASE names other inputs
    INFO(c_in->reproduce());
    std::mt19937_64 gen = c_in->rng();
    std::uniform_real_distribution<double> u(-2, 2);
    for (int ratio : {0, 4}) {
      const ref::RopeTable rope = ref::RopeTable::for_layer(cfg, ratio, p);
      Mat o(7, static_cast<Index>(cfg.n_heads) * cfg.head_dim);
      for (Index i = 0; i < o.size(); ++i) o.data()[i] = ref::round_to(ref::Storage::bf16, u(gen));
      for (int64_t start : {int64_t{0}, int64_t{121}, int64_t{65530}}) {
        const Mat want = ref::inverse_rope_heads(o, start, rope, cfg, p);
        const Mat got = cuda::attention::inverse_rope_heads(o, start, rope, cfg.n_heads, cfg.head_dim);
        CHECK(got == want);
      }
    }
  }
}

TEST_CASE("output path: grouped wo_a within the fp32-accumulation bound") {
  for (const ref::ModelConfig& cfg : {ref::ModelConfig::flash(), ref::ModelConfig::tiny()}) {
    CAPTURE(cfg.name);
    const ref::PrecisionPolicy p = ref::PrecisionPolicy::official();
    const auto c_in = inputs("wo_a", cfg.name);
    if (!c_in) continue;  // DSV4_CASE names other inputs
    INFO(c_in->reproduce());
    std::mt19937_64 gen = c_in->rng();
    std::normal_distribution<double> n01(0, 1);
    const Index width = static_cast<Index>(cfg.n_heads) * cfg.head_dim / cfg.o_groups;
    ref::AttentionWeights w;
    w.wo_a.resize(static_cast<Index>(cfg.o_groups) * cfg.o_lora_rank, width);
    for (Index i = 0; i < w.wo_a.size(); ++i)
      w.wo_a.data()[i] = ref::round_to(ref::Storage::bf16, n01(gen) / std::sqrt(double(width)));
    Mat o(9, static_cast<Index>(cfg.n_heads) * cfg.head_dim);
    for (Index i = 0; i < o.size(); ++i) o.data()[i] = ref::round_to(ref::Storage::bf16, 0.1 * n01(gen));
    const Mat want = ref::grouped_wo_a(w, o, cfg, p);
    const Mat got = cuda::attention::grouped_wo_a(w.wo_a, o, cfg.o_groups);
    REQUIRE(got.rows() == want.rows());
    REQUIRE(got.cols() == want.cols());
    int64_t bad = 0;
    double worst = 0;
    for (Index t = 0; t < o.rows(); ++t)
      for (int g = 0; g < cfg.o_groups; ++g)
        for (int r = 0; r < cfg.o_lora_rank; ++r) {
          double mag = 0;
          for (Index k = 0; k < width; ++k) mag += std::fabs(o(t, g * width + k) * w.wo_a(g * cfg.o_lora_rank + r, k));
          const Index col = static_cast<Index>(g) * cfg.o_lora_rank + r;
          // cuBLAS accumulates the K = width exact bf16 products in fp32 in an order (and split)
          // of its own: at most one fp32 ulp of the running magnitude per addition, K 2^-23 sum|o w|,
          // doubled for truncating adders; then both results round to bf16 (2^-8 of each).
          const double bound =
              static_cast<double>(width) * 0x1p-22 * mag + 0x1p-8 * (std::fabs(got(t, col)) + std::fabs(want(t, col)));
          const double err = std::fabs(got(t, col) - want(t, col));
          if (bound > 0) worst = std::max(worst, err / bound);
          bad += err > bound;
        }
    CHECK_MESSAGE(bad == 0, bad << " values outside the bound, worst error/bound " << worst);
    MESSAGE(cfg.name << " wo_a: worst error/bound " << worst);
  }
}
