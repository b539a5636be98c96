// GPU tests of the CUDA lightning indexer (label gpu): every kernel against the oracle
// (reference/stages/indexer.h), each case a harness case (harness.h: a failure prints its ID,
// DSV4_CASE='<ID>' reruns it alone).
//
// The references: the oracle's indexer_q / indexer_weights / indexer_scores where the call is the
// oracle's (one-hot inputs pass the projections through its exact linear), and elsewhere (ragged
// [ks, ke) ranges, paged decode) logit_serial on the host, which test_cuda_host proves bitwise
// equal to the oracle's indexer_scores. What is asserted:
//   q path     v1 and v2: values, weights bitwise; the codes and scales stand for the values;
//              every output byte written (two runs over different poisons agree), guards intact;
//   logits     v1: bitwise; v2 with FP4 codes and bf16 scores (official): bitwise (the exactness
//              argument of logits_tile.cuh; its fp4_inexact counter 0); v2 otherwise (FP8: the
//              tensor core's fp32 sum of 128 e4m3 products is not specified bit for bit; fp32
//              scores: DeepGEMM's fma and tree-order head sum): DeepGEMM's two tolerances,
//              calc_diff < 3e-5 (bf16 logits) and < 5e-6 (fp32 logits), the fraction of
//              bitwise-equal logits reported;
//              every -inf exactly where the oracle has it, nothing else -inf; guards intact;
//   decode     unreferenced pool bytes and the slots past each length hold 0xFF (NaN codes and
//              scales): a read of them would show as NaN; table entries past the pages hold -1.
//   decode v3  the same checks (every layout, format, score storage; page sizes 4, 12, 100, 256 too)
//              and v2's logits bit for bit;
//   decode v4  the same checks as v3 and v3's logits bit for bit (the same tile scoring behind a
//              producer warp and an mbarrier ring: chunks of up to 64 tiles wrap its 9-16 stages).
//   decode v5  the same checks as v4 and v4's logits bit for bit (DeepGEMM pages by bulk copies of
//              page runs, the B operand laid out by the consumers; pages of 4, 12 and 100 keys split
//              tiles into runs, lengths that are not multiples of 4 leave scale words to plain loads).
//   decode v6  the same checks as v5 and v5's logits bit for bit (DeepGEMM pages of 64 and 256 keys:
//              one producer lane a tile, 32-tile windows of table entries, chunks of 64 tiles wrapping
//              its ring; other page sizes and the interleaved layout run v5).
//   decode v7  the same checks as v6 and v6's logits bit for bit (FP8 full tiles by TMA into the
//              swizzled operand layout, the tile ending at the length as v6; pages of 64, 128 and 256
//              keys; FP4 and v6's other cases run v6).
//   prefill v3 the prefill checks above (its FP4 is v2's kernel), and v2's logits bit for bit (the
//              same MMA instruction on the same operand values, the same epilogue), also over more
//              work units than the GPU has SMs (the persistent loop, the ring's phases) and with
//              key codes that are not 16-byte aligned (v2 runs them).
//   prefill v4 every prefill v3 check, and v2's logits bit for bit (the MMA's operands swapped, v2's
//              addition tree: test_cuda_indexer_host checks the tree).
// The epilogue's hardware bf16 rounding against bf16_round over all 2^32 fp32 inputs; max.NaN.f32
// as a relu candidate over the same inputs (its zeros reported).
// The sign of a zero logit: on inputs where every logit is exact, some with 64 head terms that are
// all -0, every prefill and decode version bitwise the oracle's (+0 there: its head sum starts from +0).
// Plus 20 reruns bitwise identical, a query's logits independent of its batch neighbours (prefill v2,
// v3 and v4, decode v3 to v7), zero-length calls, argument checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"
#include "cuda/common/numerics.cuh"
#include "cuda/indexer/host_vectors.h"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/indexer_math.cuh"
#include "cuda/indexer/oracle_mirror.h"
#include "cuda/tests/bf16_rounding_check.h"
#include "cuda/tests/harness.h"
#include "cuda/tests/relu_candidate_check.h"
#include "reference/config.h"
#include "reference/precision.h"
#include "reference/stages/indexer.h"
#include "reference/weights.h"

using namespace dsv4;
using cuda::DeviceBuffer;
using cuda::GuardedBuffer;
using cuda::IndexerFormat;
using cuda::ScoreStorage;
using cuda::Variant;
using cuda::testing::Case;
using cuda::testing::CaseId;
using cuda::testing::TallyBook;
using ref::Index;
using ref::Mat;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

ref::PrecisionPolicy policy(IndexerFormat f, bool hadamard, ScoreStorage s) {
  ref::PrecisionPolicy p = ref::PrecisionPolicy::official();
  if (f == IndexerFormat::fp8) p.indexer_qk = ref::BlockFormat::fp8_per_head(128);
  p.indexer_hadamard = hadamard;
  p.indexer_scores = s == ScoreStorage::bf16 ? ref::Storage::bf16 : ref::Storage::fp32;
  p.fp8_linears = ref::LinearKind::exact;  // the projections are inputs: one-hot rows pass them through
  return p;
}

double bf16(double v) { return ref::round_to(ref::Storage::bf16, v); }

// wq_b-like projections [s, heads*128]: bf16 values, each head at its own magnitude.
Mat projection(Index s, int heads, std::mt19937_64& gen) {
  std::normal_distribution<double> n(0, 1);
  std::uniform_int_distribution<int> e(-6, 3);
  Mat m(s, heads * 128);
  for (Index i = 0; i < s; ++i)
    for (int h = 0; h < heads; ++h) {
      const double scale = std::ldexp(1.0, e(gen));
      for (int c = 0; c < 128; ++c) m(i, h * 128 + c) = bf16(n(gen) * scale);
    }
  return m;
}

// Indexer vectors through the host copy of the q path (test_cuda_host: bitwise the oracle's):
// values [n, heads*128] and their codes.
Mat vectors(const Mat& proj, int64_t start_pos, const ref::RopeTable& rope, int heads, IndexerFormat f, bool hadamard,
            cuda::HostVectors& codes) {
  const std::vector<float> table = cuda::position_rope(rope, start_pos, proj.rows());
  codes.format = f;
  codes.count = proj.rows() * heads;
  codes.codes.assign(static_cast<size_t>(codes.count * cuda::code_bytes(f)), 0);
  codes.scales.assign(static_cast<size_t>(codes.count * 4), 0);
  Mat values(proj.rows(), proj.cols());
  for (Index i = 0; i < proj.rows(); ++i)
    for (int h = 0; h < heads; ++h) {
      uint16_t x[128], v[128];
      for (int c = 0; c < 128; ++c) x[c] = cuda::bf16_bits(static_cast<float>(proj(i, h * 128 + c)));
      const int64_t vec = i * heads + h;
      cuda::q_vector_serial(x, table.data() + i * 64, hadamard, f, codes.codes.data() + vec * cuda::code_bytes(f),
                            codes.scales.data() + vec * 4, v);
      for (int c = 0; c < 128; ++c) values(i, h * 128 + c) = cuda::bf16_value(v[c]);
    }
  return values;
}

// A call's queries (codes, weights) and keys, on the host and on the device.
struct Inputs {
  int heads = 64;
  IndexerFormat format = IndexerFormat::fp4;
  cuda::HostVectors q, k;
  Mat q_values, k_values, weights;  // [s, IH*128], [n, 128], [s, IH]
  std::vector<float> w;             // weights row-major
  DeviceBuffer<uint8_t> dq_codes, dq_scales, dk_codes, dk_scales;
  DeviceBuffer<float> dw;

  Inputs(int64_t s, int64_t n_keys, int h, IndexerFormat f, int64_t start_pos, std::mt19937_64& gen)
      : heads(h), format(f) {
    const ref::RopeTable rope =
        ref::RopeTable::for_layer(ref::ModelConfig::flash(), 4, policy(f, true, ScoreStorage::bf16));
    q_values = vectors(projection(s, heads, gen), start_pos, rope, heads, f, true, q);
    k_values = vectors(projection(n_keys, 1, gen), 0, rope, 1, f, true, k);
    std::uniform_real_distribution<double> u(-1, 1);
    weights.resize(s, heads);
    for (Index i = 0; i < weights.size(); ++i) weights.data()[i] = bf16(0.1 * u(gen));  // both signs
    w.assign(weights.data(), weights.data() + weights.size());
    upload();
  }
  void upload() {
    dq_codes = DeviceBuffer<uint8_t>(q.codes);
    dq_scales = DeviceBuffer<uint8_t>(q.scales);
    dk_codes = DeviceBuffer<uint8_t>(k.codes);
    dk_scales = DeviceBuffer<uint8_t>(k.scales);
    dw = DeviceBuffer<float>(w);
  }
  int64_t s() const { return weights.rows(); }
  cuda::IndexerQueries queries() const { return {dq_codes.get(), dq_scales.get(), dw.get(), s()}; }
  cuda::DenseKeys keys() const { return {dk_codes.get(), dk_scales.get(), k.count}; }

  // The host reference logit of query i against key j (logit_serial = the oracle's order).
  float logit(int64_t i, int64_t j, ScoreStorage st) const {
    const auto head = [&](int h) {
      const int64_t vec = i * heads + h;
      return cuda::VectorView{q.codes.data() + vec * cuda::code_bytes(format), q.scales.data() + vec * 4, format,
                              false};
    };
    const cuda::VectorView key{k.codes.data() + j * cuda::code_bytes(format), k.scales.data() + j * 4, format, false};
    return cuda::logit_serial(head, w.data() + i * heads, key, heads, st);
  }
};

// DeepGEMM's metric: 1 - 2 sum(xy) / sum(x^2 + y^2) over the finite pairs.
struct Compare {
  int64_t compared = 0, differing = 0, mask_mismatch = 0, nan = 0;
  double xy = 0, xx_yy = 0;
  void add(float got, float want) {
    if (std::isnan(got)) {
      ++nan;
      return;
    }
    const bool got_inf = got == -kInf, want_inf = want == -kInf;
    if (got_inf || want_inf) {
      mask_mismatch += got_inf != want_inf;
      return;
    }
    ++compared;
    differing += std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want);
    xy += static_cast<double>(got) * want;
    xx_yy += static_cast<double>(got) * got + static_cast<double>(want) * want;
  }
  double calc_diff() const { return xx_yy == 0 ? 0.0 : 1.0 - 2.0 * xy / xx_yy; }
};

// The assertions of one logits comparison: -inf masks exact, no NaN; v1 bitwise, and v2 with FP4
// codes and bf16 scores (the official policy: logits_tile.cuh's exactness argument); otherwise
// (FP8 codes: the tensor core's fp32 sum; fp32 scores: DeepGEMM's fma and tree-order head sum)
// within DeepGEMM's calc_diff tolerance of the storage's.
void check_logits(const Compare& c, Variant v, IndexerFormat f, ScoreStorage s, TallyBook& book,
                  const std::string& what) {
  CHECK(c.compared > 0);
  CHECK(c.nan == 0);
  CHECK(c.mask_mismatch == 0);
  const bool bitwise = v == Variant::v1 || (f == IndexerFormat::fp4 && s == ScoreStorage::bf16);
  if (bitwise) {
    CHECK(c.differing == 0);
  } else {
    // DeepGEMM tests/test_attention.py: simulated-reference tolerance 5e-6 (fp32 logits), 3e-5 (bf16).
    CHECK(c.calc_diff() < (s == ScoreStorage::fp32 ? 5e-6 : 3e-5));
    MESSAGE(what << ": " << c.compared - c.differing << " of " << c.compared
                 << " logits bitwise the oracle's, calc_diff " << c.calc_diff());
  }
  cuda::testing::Tally t;
  t.compared = c.compared;
  t.differing = c.differing;
  book.at(v, what) += t;
}

std::vector<Variant> logit_variants(int heads) {
  return heads == 64 ? std::vector<Variant>{Variant::v1, Variant::v2, Variant::v3, Variant::v4}
                     : std::vector<Variant>{Variant::v1};
}

}  // namespace

// ---- q path -----------------------------------------------------------------------------------------

TEST_CASE("indexer q path v1 and v2 equal the oracle's indexer_q and indexer_weights bit for bit") {
  TallyBook book;
  for (IndexerFormat f : {IndexerFormat::fp4, IndexerFormat::fp8})
    for (bool hadamard : {true, false})
      for (Variant v : {Variant::v1, Variant::v2}) {
        const int64_t s = 37, start_pos = 4093;
        const int heads = 64;
        const auto c = Case::select(CaseId("indexer_q")
                                        .with("format", cuda::format_name(f))
                                        .with("hadamard", hadamard)
                                        .with("s", s)
                                        .with("start_pos", start_pos)
                                        .with("variant", v));
        if (!c) continue;
        INFO(c->reproduce());
        std::mt19937_64 gen = c->rng();
        ref::ModelConfig cfg = ref::ModelConfig::flash();
        const ref::PrecisionPolicy p = policy(f, hadamard, ScoreStorage::bf16);
        const ref::RopeTable rope = ref::RopeTable::for_layer(cfg, 4, p);
        const Mat q_proj = projection(s, heads, gen);
        Mat w_proj(s, heads);
        std::uniform_real_distribution<double> u(-4, 4);
        for (Index i = 0; i < w_proj.size(); ++i) w_proj.data()[i] = bf16(u(gen));
        // The oracle on the same projections (one-hot rows through its exact linear).
        ref::IndexerWeights w;
        w.wq_b = q_proj.transpose();
        w.weights_proj = w_proj.transpose();
        const Mat want_q = ref::indexer_q(w, Mat::Identity(s, s), start_pos, rope, cfg, p);
        const Mat want_w = ref::indexer_weights(w, Mat::Identity(s, s), cfg, p);

        std::vector<uint16_t> x(static_cast<size_t>(q_proj.size())), wx(static_cast<size_t>(w_proj.size()));
        for (Index i = 0; i < q_proj.size(); ++i)
          x[static_cast<size_t>(i)] = cuda::bf16_bits(static_cast<float>(q_proj.data()[i]));
        for (Index i = 0; i < w_proj.size(); ++i)
          wx[static_cast<size_t>(i)] = cuda::bf16_bits(static_cast<float>(w_proj.data()[i]));
        GuardedBuffer<uint16_t> dx(x.size()), dwx(wx.size());
        dx.upload(x);
        dwx.upload(wx);
        const DeviceBuffer<float> table(cuda::position_rope(rope, start_pos, s));
        const float multiplier =
            static_cast<float>(ref::round_to(ref::Storage::fp32, std::pow(128.0, -0.5) * std::pow(64.0, -0.5)));
        const int64_t vecs = s * heads;
        std::vector<uint8_t> codes[2], scales[2];
        std::vector<uint16_t> values[2];
        std::vector<float> weights[2];
        for (int run = 0; run < 2; ++run) {  // two poisons: a byte both runs agree on was written
          GuardedBuffer<uint8_t> dc(static_cast<size_t>(vecs * cuda::code_bytes(f))), ds(static_cast<size_t>(vecs * 4));
          GuardedBuffer<uint16_t> dv(static_cast<size_t>(vecs * 128));
          GuardedBuffer<float> dww(static_cast<size_t>(vecs));
          const uint8_t poison = run == 0 ? 0x00 : 0xFF;
          dc.poison(poison);
          ds.poison(poison);
          dv.poison(poison);
          dww.poison(poison);
          cuda::IndexerQOut out{dc.get(), ds.get(), dv.get(), dww.get()};
          cuda::indexer_q({heads, f, hadamard, multiplier}, s, dx.get(), table.get(), dwx.get(), out, v);
          CUDA_CHECK(cudaDeviceSynchronize());
          codes[run] = dc.download();
          scales[run] = ds.download();
          values[run] = dv.download();
          weights[run] = dww.download();
          CHECK(dc.damaged_guard_bytes() == 0);
          CHECK(ds.damaged_guard_bytes() == 0);
          CHECK(dv.damaged_guard_bytes() == 0);
          CHECK(dww.damaged_guard_bytes() == 0);
        }
        CHECK(codes[0] == codes[1]);
        CHECK(scales[0] == scales[1]);
        CHECK(values[0] == values[1]);
        CHECK(cuda::testing::bitwise_differences(weights[0], weights[1]) == 0);
        cuda::testing::Tally tq, tw;
        for (Index i = 0; i < want_q.size(); ++i)
          tq.bitwise(cuda::bf16_bits(static_cast<float>(want_q.data()[i])) == values[0][static_cast<size_t>(i)]);
        for (Index i = 0; i < want_w.size(); ++i)
          tw.bitwise(std::bit_cast<uint32_t>(static_cast<float>(want_w.data()[i])) ==
                     std::bit_cast<uint32_t>(weights[0][static_cast<size_t>(i)]));
        cuda::HostVectors hv{f, vecs, codes[0], scales[0]};
        int64_t code_bad = 0;
        for (int64_t vec = 0; vec < vecs; ++vec) {
          const Mat m = cuda::dequantize_vectors(hv, vec, 1);
          for (int ch = 0; ch < 128; ++ch) code_bad += m(0, ch) != want_q(vec / heads, (vec % heads) * 128 + ch);
        }
        CHECK(tq.differing == 0);
        CHECK(tw.differing == 0);
        CHECK(code_bad == 0);
        book.at(v, "q values") += tq;
        book.at(v, "weights") += tw;
      }
  MESSAGE(book.table());
}

// ---- prefill logits -------------------------------------------------------------------------------

TEST_CASE("prefill logits equal the oracle's indexer_scores with causal masks exact") {
  TallyBook book;
  for (IndexerFormat f : {IndexerFormat::fp4, IndexerFormat::fp8})
    for (ScoreStorage st : {ScoreStorage::bf16, ScoreStorage::fp32})
      for (int heads : {64, 4})
        for (Variant v : logit_variants(heads)) {
          // A chunked call: queries at 530.. see (t+1)/4 of the 150 keys; 2 full column chunks of v2 + part.
          const int64_t s = 67, start_pos = 533, ratio = 4;
          const int64_t n_keys = (start_pos + s) / ratio;
          const auto c = Case::select(CaseId("prefill_logits")
                                          .with("format", cuda::format_name(f))
                                          .with("scores", cuda::storage_name(st))
                                          .with("heads", heads)
                                          .with("s", s)
                                          .with("start_pos", start_pos)
                                          .with("variant", v));
          if (!c) continue;
          INFO(c->reproduce());
          std::mt19937_64 gen = c->rng();
          Inputs in(s, n_keys, heads, f, start_pos, gen);
          const Mat want =
              ref::indexer_scores(in.q_values, in.weights, in.k_values, start_pos, ratio, policy(f, true, st));
          std::vector<int32_t> ks(static_cast<size_t>(s), 0), ke(static_cast<size_t>(s));
          for (int64_t i = 0; i < s; ++i)
            ke[static_cast<size_t>(i)] = static_cast<int32_t>(std::min(n_keys, (start_pos + i + 1) / ratio));
          const DeviceBuffer<int32_t> dks(ks), dke(ke);
          GuardedBuffer<float> logits(static_cast<size_t>(s * n_keys));
          logits.poison(0xFF);
          DeviceBuffer<int> inexact(std::vector<int>{0});
          cuda::indexer_logits_prefill({heads, f, st}, in.queries(), in.keys(), dks.get(), dke.get(), logits.get(),
                                       n_keys, v, nullptr, inexact.get());
          CUDA_CHECK(cudaDeviceSynchronize());
          const std::vector<float> got = logits.download();
          Compare cmp;
          for (int64_t i = 0; i < s; ++i)
            for (int64_t j = 0; j < n_keys; ++j)
              cmp.add(got[static_cast<size_t>(i * n_keys + j)], static_cast<float>(want(i, j)));
          check_logits(cmp, v, f, st, book,
                       std::string("causal ") + cuda::format_name(f) + " " + cuda::storage_name(st));
          CHECK(logits.damaged_guard_bytes() == 0);
          CHECK(inexact.download()[0] == 0);
          if (v == Variant::v3 || v == Variant::v4) {  // v2's logits bit for bit
            DeviceBuffer<float> v2(static_cast<size_t>(s * n_keys));
            cuda::indexer_logits_prefill({heads, f, st}, in.queries(), in.keys(), dks.get(), dke.get(), v2.get(),
                                         n_keys, Variant::v2);
            CUDA_CHECK(cudaDeviceSynchronize());
            CHECK(cuda::testing::bitwise_differences(got, v2.download()) == 0);
          }
        }
  MESSAGE(book.table());
}

TEST_CASE("prefill logits over ragged key ranges, empty ranges, extra columns and column chunks") {
  TallyBook book;
  for (IndexerFormat f : {IndexerFormat::fp4, IndexerFormat::fp8})
    for (ScoreStorage st : {ScoreStorage::bf16, ScoreStorage::fp32})
      for (Variant v : {Variant::v1, Variant::v2, Variant::v3, Variant::v4}) {
        const int64_t s = 9, n_keys = 2600, n_cols = 2700;  // past one 2048-key chunk of v2; 100 extra columns
        const auto c = Case::select(CaseId("prefill_ragged")
                                        .with("format", cuda::format_name(f))
                                        .with("scores", cuda::storage_name(st))
                                        .with("s", s)
                                        .with("n_keys", n_keys)
                                        .with("n_cols", n_cols)
                                        .with("variant", v));
        if (!c) continue;
        INFO(c->reproduce());
        std::mt19937_64 gen = c->rng();
        Inputs in(s, n_keys, 64, f, 0, gen);
        // Context-parallel style ranges, an empty one, a single key, one past a chunk boundary, all keys.
        const std::vector<int32_t> ks{0, 100, 2047, 5, 1000, 0, 1300, 2599, 17};
        const std::vector<int32_t> ke{2600, 300, 2049, 5, 1001, 1, 2600, 2600, 2048};
        const DeviceBuffer<int32_t> dks(ks), dke(ke);
        GuardedBuffer<float> logits(static_cast<size_t>(s * n_cols));
        logits.poison(0xFF);
        cuda::indexer_logits_prefill({64, f, st}, in.queries(), in.keys(), dks.get(), dke.get(), logits.get(), n_cols,
                                     v);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> got = logits.download();
        Compare cmp;
        for (int64_t i = 0; i < s; ++i)
          for (int64_t j = 0; j < n_cols; ++j) {
            const bool in_range = j >= ks[static_cast<size_t>(i)] && j < ke[static_cast<size_t>(i)];
            cmp.add(got[static_cast<size_t>(i * n_cols + j)], in_range ? in.logit(i, j, st) : -kInf);
          }
        check_logits(cmp, v, f, st, book, std::string("ragged ") + cuda::format_name(f) + " " + cuda::storage_name(st));
        CHECK(logits.damaged_guard_bytes() == 0);
        if (v == Variant::v3 || v == Variant::v4) {  // v2's logits bit for bit
          DeviceBuffer<float> v2(static_cast<size_t>(s * n_cols));
          cuda::indexer_logits_prefill({64, f, st}, in.queries(), in.keys(), dks.get(), dke.get(), v2.get(), n_cols,
                                       Variant::v2);
          CUDA_CHECK(cudaDeviceSynchronize());
          CHECK(cuda::testing::bitwise_differences(got, v2.download()) == 0);
        }
      }
  MESSAGE(book.table());
}

TEST_CASE("prefill v3 and v4 over more work units than SMs equal v2 bit for bit and unaligned key codes are refused") {
  TallyBook book;
  for (ScoreStorage st : {ScoreStorage::bf16, ScoreStorage::fp32}) {
    // 275 groups of 4 queries x 2 column chunks = 550 units: every CTA of the persistent grid (one an
    // SM) takes several, and its ring of 6 stages wraps within and across them.
    const int64_t s = 1099, n_keys = 2600, n_cols = 2637;
    const auto c = Case::select(CaseId("prefill_v3_units")
                                    .with("scores", cuda::storage_name(st))
                                    .with("s", s)
                                    .with("n_keys", n_keys)
                                    .with("n_cols", n_cols));
    if (!c) continue;
    INFO(c->reproduce());
    std::mt19937_64 gen = c->rng();
    Inputs in(s, n_keys, 64, IndexerFormat::fp8, 0, gen);
    // Causal rows, ragged rows, empty rows (every 7th), whole groups of 4 empty (rows 400..403).
    std::vector<int32_t> ks(static_cast<size_t>(s)), ke(static_cast<size_t>(s));
    std::uniform_int_distribution<int32_t> pos(0, static_cast<int32_t>(n_keys));
    for (int64_t i = 0; i < s; ++i) {
      int32_t a = 0, b = static_cast<int32_t>(std::min<int64_t>(n_keys, i + 1));
      if (i % 3 == 1) {
        a = pos(gen);
        b = pos(gen);
        if (a > b) std::swap(a, b);
      }
      if (i % 7 == 3 || (i >= 400 && i < 404)) b = a;
      ks[static_cast<size_t>(i)] = a;
      ke[static_cast<size_t>(i)] = b;
    }
    const DeviceBuffer<int32_t> dks(ks), dke(ke);
    auto run = [&](Variant v, const cuda::DenseKeys& keys) {
      GuardedBuffer<float> logits(static_cast<size_t>(s * n_cols));
      logits.poison(0xFF);
      cuda::indexer_logits_prefill({64, IndexerFormat::fp8, st}, in.queries(), keys, dks.get(), dke.get(), logits.get(),
                                   n_cols, v);
      CUDA_CHECK(cudaDeviceSynchronize());
      CHECK(logits.damaged_guard_bytes() == 0);
      return logits.download();
    };
    const std::vector<float> v2 = run(Variant::v2, in.keys());
    for (Variant v : {Variant::v3, Variant::v4}) {
      INFO(cuda::variant_name(v));
      const std::vector<float> got_v = run(v, in.keys());
      CHECK(cuda::testing::bitwise_differences(got_v, v2) == 0);
      // Every mask exact and no NaN in every row; the scores of sampled rows against logit_serial.
      Compare cmp;
      int64_t bad_mask = 0;
      for (int64_t i = 0; i < s; ++i) {
        const bool sampled = i % 137 == 5 || i == s - 1;
        for (int64_t j = 0; j < n_cols; ++j) {
          const bool in_range = j >= ks[static_cast<size_t>(i)] && j < ke[static_cast<size_t>(i)];
          const float got = got_v[static_cast<size_t>(i * n_cols + j)];
          bad_mask += in_range ? (got == -kInf || std::isnan(got)) : got != -kInf;
          if (sampled) cmp.add(got, in_range ? in.logit(i, j, st) : -kInf);
        }
      }
      CHECK(bad_mask == 0);
      check_logits(cmp, v, IndexerFormat::fp8, st, book,
                   std::string(cuda::variant_name(v)) + " units " + cuda::storage_name(st));
    }
    // Key codes 4 bytes past a 16-byte boundary: v2, v3 and v4 (16-byte copies, TMA) refuse them with
    // a clear error before any launch (they faulted with a misaligned address before that check).
    DeviceBuffer<uint8_t> shifted(in.k.codes.size() + 16);
    CUDA_CHECK(cudaMemcpy(shifted.get() + 4, in.k.codes.data(), in.k.codes.size(), cudaMemcpyHostToDevice));
    const cuda::DenseKeys unaligned{shifted.get() + 4, in.dk_scales.get(), in.k.count};
    for (Variant v : {Variant::v2, Variant::v3, Variant::v4})
      CHECK_THROWS_WITH_AS(run(v, unaligned), doctest::Contains("must be 16-byte aligned"), std::invalid_argument);
  }
  MESSAGE(book.table());
}

// ---- decode logits --------------------------------------------------------------------------------

namespace {

struct PagedSetup {
  std::vector<int32_t> lens;
  std::vector<std::vector<int32_t>> pages;
  std::vector<int32_t> table;  // [batch, stride], -1 past each sequence's pages
  int stride = 0;
  int64_t pool_pages = 0;
};

// Pages for each length, handed out in a scrambled order from a pool with spare pages.
PagedSetup paged_setup(const std::vector<int32_t>& lens, int page_keys, std::mt19937_64& gen) {
  PagedSetup p;
  p.lens = lens;
  int64_t needed = 0;
  for (int32_t l : lens) {
    const int n = (l + page_keys - 1) / page_keys;
    needed += n;
    p.stride = std::max(p.stride, n + 1);
  }
  p.pool_pages = needed + 3;
  std::vector<int32_t> order(static_cast<size_t>(p.pool_pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), gen);
  size_t next = 0;
  p.table.assign(lens.size() * static_cast<size_t>(p.stride), -1);
  for (size_t b = 0; b < lens.size(); ++b) {
    const int n = (lens[b] + page_keys - 1) / page_keys;
    p.pages.emplace_back();
    for (int i = 0; i < n; ++i) {
      p.pages[b].push_back(order[next++]);
      p.table[b * static_cast<size_t>(p.stride) + static_cast<size_t>(i)] = p.pages[b].back();
    }
  }
  return p;
}

// One decode call's inputs: a query per sequence, each sequence's keys packed into scrambled pages
// of a pool whose unreferenced bytes (and the slots past each length) hold 0xFF, -1 in unused table
// entries; the device copies and the PagedKeys that describe them.
struct PagedCall {
  std::vector<int32_t> lens;
  Inputs in;
  std::vector<cuda::HostVectors> keys;  // per sequence
  PagedSetup ps;
  DeviceBuffer<uint8_t> dpool;
  DeviceBuffer<int32_t> dtable, dlens;
  cuda::PagedKeys pk;
  int64_t n_cols;

  PagedCall(const std::vector<int32_t>& lengths, cuda::IndexerCacheLayout layout, IndexerFormat f, int page_keys,
            int64_t columns, std::mt19937_64& gen)
      : lens(lengths), in(static_cast<int64_t>(lengths.size()), 1, 64, f, 4100, gen), n_cols(columns) {
    const ref::RopeTable rope =
        ref::RopeTable::for_layer(ref::ModelConfig::flash(), 4, policy(f, true, ScoreStorage::bf16));
    keys.resize(lens.size());
    for (size_t b = 0; b < lens.size(); ++b) (void)vectors(projection(lens[b], 1, gen), 0, rope, 1, f, true, keys[b]);
    ps = paged_setup(lens, page_keys, gen);
    dpool = DeviceBuffer<uint8_t>(cuda::pack_paged(keys, ps.pages, layout, page_keys, ps.pool_pages, 0xFF));
    dtable = DeviceBuffer<int32_t>(ps.table);
    dlens = DeviceBuffer<int32_t>(lens);
    pk.format = f;
    pk.layout = layout;
    pk.page_keys = page_keys;
    pk.pool = dpool.get();
    pk.pool_pages = ps.pool_pages;
    pk.block_table = dtable.get();
    pk.table_stride = ps.stride;
    cuda::check_decode_tables(pk, batch(), lens.data(), ps.table.data(), n_cols);
  }
  int batch() const { return static_cast<int>(lens.size()); }

  // The logits [batch, n_cols] of version v (poisoned guarded output: guards checked here).
  std::vector<float> run(ScoreStorage st, Variant v) const {
    GuardedBuffer<float> logits(static_cast<size_t>(batch() * n_cols));
    logits.poison(0xFF);
    cuda::indexer_logits_decode({64, pk.format, st}, in.queries(), pk, dlens.get(), logits.get(), n_cols, v);
    CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(logits.damaged_guard_bytes() == 0);
    return logits.download();
  }

  // got against logit_serial (the oracle's order) and -inf past each length.
  Compare compare(const std::vector<float>& got, ScoreStorage st) {
    Compare cmp;
    for (int b = 0; b < batch(); ++b) {
      in.k = keys[static_cast<size_t>(b)];  // the reference reads sequence b's keys
      for (int64_t t = 0; t < n_cols; ++t)
        cmp.add(got[static_cast<size_t>(b * n_cols + t)],
                t < lens[static_cast<size_t>(b)] ? in.logit(b, t, st) : -kInf);
    }
    return cmp;
  }
};

const char* layout_name(cuda::IndexerCacheLayout layout) {
  return layout == cuda::IndexerCacheLayout::deepgemm ? "deepgemm" : "interleaved";
}

}  // namespace

TEST_CASE("decode logits over the paged caches of both layouts equal the oracle's, unreferenced bytes never read") {
  TallyBook book;
  for (cuda::IndexerCacheLayout layout : {cuda::IndexerCacheLayout::interleaved, cuda::IndexerCacheLayout::deepgemm})
    for (IndexerFormat f : {IndexerFormat::fp4, IndexerFormat::fp8})
      for (ScoreStorage st : {ScoreStorage::bf16, ScoreStorage::fp32})
        for (Variant v : {Variant::v1, Variant::v2, Variant::v3, Variant::v4, Variant::v5, Variant::v6, Variant::v7}) {
          const int page_keys = layout == cuda::IndexerCacheLayout::deepgemm ? 64 : 32;
          const std::vector<int32_t> lens{0, 1, 63, 64, 65, 300, 4097};
          const int64_t n_cols = 4160;
          const auto c = Case::select(CaseId("decode_logits")
                                          .with("layout", layout_name(layout))
                                          .with("format", cuda::format_name(f))
                                          .with("scores", cuda::storage_name(st))
                                          .with("lens", std::vector<int64_t>(lens.begin(), lens.end()))
                                          .with("variant", v));
          if (!c) continue;
          INFO(c->reproduce());
          std::mt19937_64 gen = c->rng();
          PagedCall call(lens, layout, f, page_keys, n_cols, gen);
          const std::vector<float> got = call.run(st, v);
          check_logits(call.compare(got, st), v, f, st, book,
                       std::string(layout_name(layout)) + " " + cuda::format_name(f) + " " + cuda::storage_name(st));
          // v3 to v7 change only how the keys reach shared memory: v2's to v6's logits bit for bit.
          if (v == Variant::v3) CHECK(cuda::testing::bitwise_differences(got, call.run(st, Variant::v2)) == 0);
          if (v == Variant::v4) CHECK(cuda::testing::bitwise_differences(got, call.run(st, Variant::v3)) == 0);
          if (v == Variant::v5) CHECK(cuda::testing::bitwise_differences(got, call.run(st, Variant::v4)) == 0);
          if (v == Variant::v6) CHECK(cuda::testing::bitwise_differences(got, call.run(st, Variant::v5)) == 0);
          if (v == Variant::v7) CHECK(cuda::testing::bitwise_differences(got, call.run(st, Variant::v6)) == 0);
        }
  MESSAGE(book.table());
}

TEST_CASE(
    "decode v3 to v7 over page sizes that are not powers of two (and 4, the smallest, 128 and 256) equal v2 and the "
    "oracle") {
  TallyBook book;
  for (cuda::IndexerCacheLayout layout : {cuda::IndexerCacheLayout::interleaved, cuda::IndexerCacheLayout::deepgemm})
    for (IndexerFormat f : {IndexerFormat::fp4, IndexerFormat::fp8})
      for (int page_keys : {4, 12, 100, 128, 256}) {
        // Lengths ending inside a page, at a page's end, at a tile's end and past a 4096-key chunk.
        const std::vector<int32_t> lens{1, 11, 12, 64, 100, 129, 4200};
        const int64_t n_cols = 4224;
        const auto c = Case::select(CaseId("decode_page_sizes")
                                        .with("layout", layout_name(layout))
                                        .with("format", cuda::format_name(f))
                                        .with("page_keys", page_keys)
                                        .with("lens", std::vector<int64_t>(lens.begin(), lens.end())));
        if (!c) continue;
        INFO(c->reproduce());
        std::mt19937_64 gen = c->rng();
        PagedCall call(lens, layout, f, page_keys, n_cols, gen);
        for (ScoreStorage st : {ScoreStorage::bf16, ScoreStorage::fp32}) {
          const std::vector<float> got = call.run(st, Variant::v3), got_v4 = call.run(st, Variant::v4),
                                   got_v5 = call.run(st, Variant::v5), got_v6 = call.run(st, Variant::v6),
                                   got_v7 = call.run(st, Variant::v7);
          check_logits(call.compare(got, st), Variant::v3, f, st, book,
                       std::string(layout_name(layout)) + " " + cuda::format_name(f) + " " + cuda::storage_name(st) +
                           " pages of " + std::to_string(page_keys));
          check_logits(call.compare(got_v4, st), Variant::v4, f, st, book,
                       std::string(layout_name(layout)) + " " + cuda::format_name(f) + " " + cuda::storage_name(st) +
                           " pages of " + std::to_string(page_keys) + " v4");
          check_logits(call.compare(got_v5, st), Variant::v5, f, st, book,
                       std::string(layout_name(layout)) + " " + cuda::format_name(f) + " " + cuda::storage_name(st) +
                           " pages of " + std::to_string(page_keys) + " v5");
          check_logits(call.compare(got_v6, st), Variant::v6, f, st, book,
                       std::string(layout_name(layout)) + " " + cuda::format_name(f) + " " + cuda::storage_name(st) +
                           " pages of " + std::to_string(page_keys) + " v6");
          check_logits(call.compare(got_v7, st), Variant::v7, f, st, book,
                       std::string(layout_name(layout)) + " " + cuda::format_name(f) + " " + cuda::storage_name(st) +
                           " pages of " + std::to_string(page_keys) + " v7");
          CHECK(cuda::testing::bitwise_differences(got, call.run(st, Variant::v2)) == 0);
          CHECK(cuda::testing::bitwise_differences(got_v4, got) == 0);
          CHECK(cuda::testing::bitwise_differences(got_v5, got_v4) == 0);
          CHECK(cuda::testing::bitwise_differences(got_v6, got_v5) == 0);
          CHECK(cuda::testing::bitwise_differences(got_v7, got_v6) == 0);
        }
      }
  MESSAGE(book.table());
}

TEST_CASE("decode v3 to v7 are bitwise identical over 20 reruns and independent of a sequence's batch neighbours") {
  for (Variant v : {Variant::v3, Variant::v4, Variant::v5, Variant::v6, Variant::v7})
    for (cuda::IndexerCacheLayout layout : {cuda::IndexerCacheLayout::interleaved, cuda::IndexerCacheLayout::deepgemm})
      for (IndexerFormat f : {IndexerFormat::fp4, IndexerFormat::fp8}) {
        const std::vector<int32_t> lens{700, 0, 4097, 65, 1, 2000};
        const int64_t n_cols = 4100;
        const int page_keys = layout == cuda::IndexerCacheLayout::deepgemm ? 64 : 32;
        const auto c = Case::select(CaseId("decode_reruns")
                                        .with("layout", layout_name(layout))
                                        .with("format", cuda::format_name(f))
                                        .with("lens", std::vector<int64_t>(lens.begin(), lens.end()))
                                        .with("runs", 20)
                                        .with("variant", v));
        if (!c) continue;
        INFO(c->reproduce());
        std::mt19937_64 gen = c->rng();
        PagedCall call(lens, layout, f, page_keys, n_cols, gen);
        const std::vector<float> first = call.run(ScoreStorage::fp32, v);
        int identical = 0;
        for (int r = 0; r < 19; ++r)
          identical += cuda::testing::bitwise_differences(first, call.run(ScoreStorage::fp32, v)) == 0;
        CHECK(identical == 19);
        // The sequences in reverse order (queries, lengths and table rows; the same pool): rows reverse.
        const int batch = call.batch();
        const int64_t cb = cuda::code_bytes(f);
        cuda::HostVectors rq = call.in.q;
        std::vector<float> rw(call.in.w.size());
        std::vector<int32_t> rlens(lens.rbegin(), lens.rend()), rtable(call.ps.table.size());
        const size_t stride = static_cast<size_t>(call.ps.stride);
        for (int i = 0; i < batch; ++i) {
          const int from = batch - 1 - i;
          std::copy_n(call.in.q.codes.begin() + from * 64 * cb, 64 * cb, rq.codes.begin() + i * 64 * cb);
          std::copy_n(call.in.q.scales.begin() + from * 64 * 4, 64 * 4, rq.scales.begin() + i * 64 * 4);
          std::copy_n(call.in.w.begin() + from * 64, 64, rw.begin() + i * 64);
          std::copy_n(call.ps.table.begin() + static_cast<size_t>(from) * stride, stride,
                      rtable.begin() + static_cast<size_t>(i) * stride);
        }
        Inputs rev = std::move(call.in);
        rev.q = rq;
        rev.w = rw;
        rev.upload();
        const DeviceBuffer<int32_t> dtable(rtable), dlens(rlens);
        cuda::PagedKeys pk = call.pk;
        pk.block_table = dtable.get();
        DeviceBuffer<float> logits(static_cast<size_t>(batch * n_cols));
        cuda::indexer_logits_decode({64, f, ScoreStorage::fp32}, rev.queries(), pk, dlens.get(), logits.get(), n_cols,
                                    v);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> reversed = logits.download();
        int64_t bad = 0;
        for (int i = 0; i < batch; ++i)
          for (int64_t j = 0; j < n_cols; ++j)
            bad += std::bit_cast<uint32_t>(reversed[static_cast<size_t>(i * n_cols + j)]) !=
                   std::bit_cast<uint32_t>(first[static_cast<size_t>((batch - 1 - i) * n_cols + j)]);
        CHECK(bad == 0);
      }
}

// ---- the sign of a zero logit -----------------------------------------------------------------------

namespace {

// Inputs whose every logit is exact in every kernel's arithmetic and the oracle's, some of them 0:
// query i's head h is c_h in every dim (|c_h| 1 or 2), key j is +-1 in each dim with a sum s_j that
// is never 0 (no dot product is 0: the tensor core does not specify the sign of an exact zero),
// every scale 2^0, weights +-2^e. The dot products (c_h s_j, at most 256 in magnitude), the terms
// and the head sums are exact, so every version must give the oracle's logits bit for bit, the sign
// of a zero included. A logit is 0 where every head's dot product is negative (relu: +0), and its
// 64 terms w_h (+0) are all -0 for
//   query 0: every weight negative, at the keys with s_j < 0;
//   query 1: every weight -0, at every key (a positive dot product times -0 is -0 too);
//   query 3: query 0's weights with c_h negative, at the keys with s_j > 0;
// while query 2's weights have both signs (its zero logits have terms of both signs). A head sum
// started from the first term is -0 at the zeros of queries 0, 1 and 3 and +0 at query 2's; the
// oracle's, started from +0, is +0 at all of them.
constexpr int kZeroQueries = 4;

// 128 values on the e2m1 / e4m3 grid -> one vector's codes and 2^0 scales.
void encode_exact(const double* values, IndexerFormat f, uint8_t* codes, uint8_t* scales) {
  for (int c = 0; c < 128; ++c) {
    const float v = static_cast<float>(values[c]);
    if (f == IndexerFormat::fp8)
      codes[c] = cuda::e4m3_code(v);
    else
      codes[c / 2] = static_cast<uint8_t>(codes[c / 2] | (cuda::e2m1_code(v) << (4 * (c % 2))));
  }
  for (int b = 0; b < 4; ++b) scales[b] = f == IndexerFormat::fp8 && b > 0 ? 0 : cuda::ue8m0_code(0);
}

cuda::HostVectors encode_rows(const Mat& values, int per_row, IndexerFormat f) {
  cuda::HostVectors v;
  v.format = f;
  v.count = values.rows() * per_row;
  v.codes.assign(static_cast<size_t>(v.count * cuda::code_bytes(f)), 0);
  v.scales.assign(static_cast<size_t>(v.count * 4), 0);
  for (Index i = 0; i < values.rows(); ++i)
    for (int h = 0; h < per_row; ++h) {
      double row[128];
      for (int c = 0; c < 128; ++c) row[c] = values(i, h * 128 + c);
      const int64_t vec = i * per_row + h;
      encode_exact(row, f, v.codes.data() + vec * cuda::code_bytes(f), v.scales.data() + vec * 4);
    }
  return v;
}

// n keys of +-1 dims: key 0 all -1, key 1 all +1, the others a random count of -1 (never 64) at
// random dims.
Mat zero_logit_keys(int64_t n, std::mt19937_64& gen) {
  std::uniform_int_distribution<int> negatives(0, 127);
  Mat k(n, 128);
  for (Index j = 0; j < n; ++j) {
    int neg = j == 0 ? 128 : j == 1 ? 0 : negatives(gen);
    if (j > 1 && neg >= 64) ++neg;  // 0..63, 65..128
    std::vector<double> row(128, 1.0);
    std::fill_n(row.begin(), neg, -1.0);
    std::shuffle(row.begin(), row.end(), gen);
    for (int c = 0; c < 128; ++c) k(j, c) = row[static_cast<size_t>(c)];
  }
  return k;
}

// The four queries above (64 heads) in format f into in, and in's host vectors to the device.
void set_zero_logit_queries(Inputs& in, IndexerFormat f, std::mt19937_64& gen) {
  std::uniform_int_distribution<int> exponent(-3, 1), coin(0, 1);
  in.heads = 64;
  in.format = f;
  in.q_values.resize(kZeroQueries, 64 * 128);
  in.weights.resize(kZeroQueries, 64);
  for (int i = 0; i < kZeroQueries; ++i)
    for (int h = 0; h < 64; ++h) {
      const double c = (h % 3 == 0 ? 2.0 : 1.0) * (i == 3 ? -1.0 : 1.0);
      for (int d = 0; d < 128; ++d) in.q_values(i, h * 128 + d) = c;
      const double magnitude = std::ldexp(1.0, exponent(gen));
      in.weights(i, h) = i == 1 ? -0.0 : i == 2 && coin(gen) == 1 ? magnitude : -magnitude;
    }
  in.w.assign(in.weights.data(), in.weights.data() + in.weights.size());
  in.q = encode_rows(in.q_values, 64, f);
  in.upload();
}

// The zero logits of want: how many, and how many of them are -0 (the oracle has none).
struct Zeros {
  int64_t zeros = 0, negative = 0;
};
Zeros count_zeros(const std::vector<float>& want) {
  Zeros z;
  for (float x : want)
    if (x == 0.0f) {
      ++z.zeros;
      z.negative += std::signbit(x);
    }
  return z;
}

}  // namespace

TEST_CASE("a logit whose 64 head terms are all -0 is +0 as the oracle's, in every prefill and decode version") {
  TallyBook book;
  const auto check_bitwise = [&](const std::vector<float>& got, const std::vector<float>& want, Variant v,
                                 const std::string& what) {
    cuda::testing::Tally t;
    t.compared = static_cast<int64_t>(want.size());
    t.differing = cuda::testing::bitwise_differences(got, want);
    CHECK(t.differing == 0);
    CHECK(count_zeros(got).negative == 0);
    book.at(v, what) += t;
  };
  for (IndexerFormat f : {IndexerFormat::fp4, IndexerFormat::fp8})
    for (ScoreStorage st : {ScoreStorage::bf16, ScoreStorage::fp32}) {
      // Prefill against the oracle's indexer_scores: every key visible (ratio 1), 3 tiles of 128.
      const int64_t n_keys = 300;
      for (Variant v : {Variant::v1, Variant::v2, Variant::v3, Variant::v4}) {
        const auto c = Case::select(CaseId("zero_logit_sign_prefill")
                                        .with("format", cuda::format_name(f))
                                        .with("scores", cuda::storage_name(st))
                                        .with("n_keys", n_keys)
                                        .with("variant", v));
        if (!c) continue;
        INFO(c->reproduce());
        std::mt19937_64 gen = c->rng();
        Inputs in(kZeroQueries, 1, 64, f, 0, gen);
        in.k_values = zero_logit_keys(n_keys, gen);
        in.k = encode_rows(in.k_values, 1, f);
        set_zero_logit_queries(in, f, gen);
        const Mat oracle = ref::indexer_scores(in.q_values, in.weights, in.k_values, n_keys, 1, policy(f, true, st));
        std::vector<float> want(static_cast<size_t>(kZeroQueries * n_keys));
        for (int64_t i = 0; i < kZeroQueries; ++i)
          for (int64_t j = 0; j < n_keys; ++j)
            want[static_cast<size_t>(i * n_keys + j)] = static_cast<float>(oracle(i, j));
        const Zeros z = count_zeros(want);
        CHECK(z.zeros >= n_keys);  // query 1's row, and queries 0, 2 and 3 at about half the keys
        CHECK(z.negative == 0);    // the oracle's head sum starts from +0
        const std::vector<int32_t> ks(kZeroQueries, 0), ke(kZeroQueries, static_cast<int32_t>(n_keys));
        const DeviceBuffer<int32_t> dks(ks), dke(ke);
        GuardedBuffer<float> logits(want.size());
        logits.poison(0xFF);
        cuda::indexer_logits_prefill({64, f, st}, in.queries(), in.keys(), dks.get(), dke.get(), logits.get(), n_keys,
                                     v);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<float> got = logits.download();
        CHECK(logits.damaged_guard_bytes() == 0);
        check_bitwise(got, want, v, std::string("prefill ") + cuda::format_name(f) + " " + cuda::storage_name(st));
      }
      // Decode against logit_serial (the oracle's order, test_cuda_host) over both cache layouts.
      for (cuda::IndexerCacheLayout layout :
           {cuda::IndexerCacheLayout::interleaved, cuda::IndexerCacheLayout::deepgemm})
        for (Variant v : {Variant::v1, Variant::v2, Variant::v3, Variant::v4, Variant::v5, Variant::v6, Variant::v7}) {
          const std::vector<int32_t> lens{300, 64, 1, 130};
          const int64_t n_cols = 320;
          const int page_keys = layout == cuda::IndexerCacheLayout::deepgemm ? 64 : 32;
          const auto c = Case::select(CaseId("zero_logit_sign_decode")
                                          .with("layout", layout_name(layout))
                                          .with("format", cuda::format_name(f))
                                          .with("scores", cuda::storage_name(st))
                                          .with("lens", std::vector<int64_t>(lens.begin(), lens.end()))
                                          .with("variant", v));
          if (!c) continue;
          INFO(c->reproduce());
          std::mt19937_64 gen = c->rng();
          PagedCall call(lens, layout, f, page_keys, n_cols, gen);
          set_zero_logit_queries(call.in, f, gen);  // query b: sequence b's
          std::vector<float> want(static_cast<size_t>(call.batch() * n_cols));
          for (int b = 0; b < call.batch(); ++b) {
            const int32_t len = lens[static_cast<size_t>(b)];
            call.keys[static_cast<size_t>(b)] = encode_rows(zero_logit_keys(len, gen), 1, f);
            call.in.k = call.keys[static_cast<size_t>(b)];  // the reference reads sequence b's keys
            for (int64_t t = 0; t < n_cols; ++t)
              want[static_cast<size_t>(b * n_cols + t)] = t < len ? call.in.logit(b, t, st) : -kInf;
          }
          call.dpool = DeviceBuffer<uint8_t>(
              cuda::pack_paged(call.keys, call.ps.pages, layout, page_keys, call.ps.pool_pages, 0xFF));
          call.pk.pool = call.dpool.get();
          const Zeros z = count_zeros(want);
          CHECK(z.zeros >= lens[1]);  // query 1's row at least
          CHECK(z.negative == 0);
          const std::vector<float> got = call.run(st, v);
          check_bitwise(
              got, want, v,
              std::string("decode ") + layout_name(layout) + " " + cuda::format_name(f) + " " + cuda::storage_name(st));
        }
    }
  MESSAGE(book.table());
}

// ---- invariances, edges, arguments ------------------------------------------------------------------

TEST_CASE("v2, v3 and v4 prefill logits are bitwise identical over 20 reruns and independent of batch neighbours") {
  for (IndexerFormat f : {IndexerFormat::fp4, IndexerFormat::fp8})
    for (Variant v : {Variant::v2, Variant::v3, Variant::v4}) {
      const int64_t s = 13, n_keys = 700;
      const auto c = Case::select(CaseId("logits_reruns")
                                      .with("format", cuda::format_name(f))
                                      .with("s", s)
                                      .with("n_keys", n_keys)
                                      .with("runs", 20)
                                      .with("variant", v));
      if (!c) continue;
      INFO(c->reproduce());
      std::mt19937_64 gen = c->rng();
      Inputs in(s, n_keys, 64, f, 0, gen);
      std::vector<int32_t> ks(static_cast<size_t>(s)), ke(static_cast<size_t>(s));
      std::uniform_int_distribution<int32_t> pos(0, static_cast<int32_t>(n_keys));
      for (int64_t i = 0; i < s; ++i) {
        const int32_t a = pos(gen), b = pos(gen);
        ks[static_cast<size_t>(i)] = std::min(a, b);
        ke[static_cast<size_t>(i)] = std::max(a, b);
      }
      auto run = [&](const Inputs& x, const std::vector<int32_t>& lo, const std::vector<int32_t>& hi) {
        const DeviceBuffer<int32_t> dks(lo), dke(hi);
        DeviceBuffer<float> logits(static_cast<size_t>(s * n_keys));
        cuda::indexer_logits_prefill({64, f, ScoreStorage::bf16}, x.queries(), x.keys(), dks.get(), dke.get(),
                                     logits.get(), n_keys, v);
        CUDA_CHECK(cudaDeviceSynchronize());
        return logits.download();
      };
      const std::vector<float> first = run(in, ks, ke);
      int identical = 0;
      for (int r = 0; r < 19; ++r) identical += cuda::testing::bitwise_differences(first, run(in, ks, ke)) == 0;
      CHECK(identical == 19);
      // The queries in reverse order (each query's CTA neighbour changes): rows reverse, bit for bit.
      std::vector<int64_t> order(static_cast<size_t>(s));
      std::iota(order.rbegin(), order.rend(), 0);
      const int64_t cb = cuda::code_bytes(f);
      cuda::HostVectors rq = in.q;
      std::vector<float> rw(in.w.size());
      std::vector<int32_t> rks(ks.size()), rke(ke.size());
      for (int64_t i = 0; i < s; ++i) {
        const int64_t from = order[static_cast<size_t>(i)];
        std::copy_n(in.q.codes.begin() + from * 64 * cb, 64 * cb, rq.codes.begin() + i * 64 * cb);
        std::copy_n(in.q.scales.begin() + from * 64 * 4, 64 * 4, rq.scales.begin() + i * 64 * 4);
        std::copy_n(in.w.begin() + from * 64, 64, rw.begin() + i * 64);
        rks[static_cast<size_t>(i)] = ks[static_cast<size_t>(from)];
        rke[static_cast<size_t>(i)] = ke[static_cast<size_t>(from)];
      }
      Inputs rev = std::move(in);
      rev.q = rq;
      rev.w = rw;
      rev.upload();
      const std::vector<float> reversed = run(rev, rks, rke);
      int64_t bad = 0;
      for (int64_t i = 0; i < s; ++i)
        for (int64_t j = 0; j < n_keys; ++j)
          bad += std::bit_cast<uint32_t>(reversed[static_cast<size_t>(i * n_keys + j)]) !=
                 std::bit_cast<uint32_t>(first[static_cast<size_t>(order[static_cast<size_t>(i)] * n_keys + j)]);
      CHECK(bad == 0);
    }
}

// The epilogue's inner bf16 roundings use the hardware conversion (tile_math.cuh bf16_round_hw2):
// bit for bit bf16_round on every non-NaN fp32 (so the logits stay bitwise what they were: the
// rounded values feed arithmetic only), NaN kept NaN. All 2^32 inputs; cvt.rz or cvt.rn.relu in
// place of cvt.rn would fail it.
TEST_CASE("the epilogue's hardware bf16 rounding equals bf16_round on all 2^32 fp32 inputs") {
  const auto m = cuda::testing::bf16_rounding_mismatches();
  CHECK(m.non_nan_bits_differ == 0);
  CHECK(m.nan_not_kept == 0);
}

TEST_CASE("the epilogue's one-instruction relu (max.NaN.f32 with +0) is the oracle's on all 2^32 inputs but zeros") {
  const auto m = cuda::testing::relu_candidate_mismatches();
  CHECK(m.nonzero_differ == 0);  // the relu of every non-zero number
  CHECK(m.nan_not_kept == 0);    // .NaN: a NaN in, a NaN out
  // The sign of a relu'd zero cannot reach a logit (finish turns a sum of zeros into +0; the test
  // "a logit whose 64 head terms are all -0 ..." checks it bitwise): reported, not asserted.
  MESSAGE("max.NaN.f32(x, +0) gives the other zero than the oracle's relu for " << m.zero_sign << " of {-0, +0}");
}

TEST_CASE("FP4 v2 counts query blocks whose relative scale leaves the e4m3 grid") {
  const auto c = Case::select(CaseId("fp4_inexact").with("s", 2).with("n_keys", 64));
  if (c) {
    INFO(c->reproduce());
    std::mt19937_64 gen = c->rng();
    Inputs in(2, 64, 64, IndexerFormat::fp4, 0, gen);
    // Query 0, head 3: block 0 scaled down by 2^12 (a 12-binade spread inside the head: exact
    // values, but its elements times 2^-12 are below e4m3's grid).
    uint8_t* sc = in.q.scales.data() + 3 * 4;
    sc[0] = static_cast<uint8_t>(sc[0] - 12);
    in.upload();
    const DeviceBuffer<int32_t> dks(std::vector<int32_t>{0, 0}), dke(std::vector<int32_t>{64, 64});
    DeviceBuffer<float> logits(2 * 64);
    DeviceBuffer<int> inexact(std::vector<int>{0});
    cuda::indexer_logits_prefill({64, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), in.keys(), dks.get(),
                                 dke.get(), logits.get(), 64, Variant::v2, nullptr, inexact.get());
    CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(inexact.download()[0] > 0);
  }
}

TEST_CASE("zero-length calls: no queries, no keys, empty ranges and empty sequences") {
  const auto c = Case::select(CaseId("indexer_zero_length"));
  if (!c) return;
  INFO(c->reproduce());
  std::mt19937_64 gen = c->rng();
  for (Variant v : {Variant::v1, Variant::v2, Variant::v3, Variant::v4}) {
    Inputs in(3, 1, 64, IndexerFormat::fp8, 0, gen);
    // No queries: nothing launched, nothing written.
    GuardedBuffer<float> untouched(8);
    untouched.poison(0x5A);
    const DeviceBuffer<int32_t> zero(std::vector<int32_t>{0, 0, 0});
    cuda::IndexerQueries none = in.queries();
    none.count = 0;
    cuda::indexer_logits_prefill({64, IndexerFormat::fp8, ScoreStorage::bf16}, none, in.keys(), zero.get(), zero.get(),
                                 untouched.get(), 8, v);
    // Every range empty: every column -inf, no key read (the key buffer holds one key).
    GuardedBuffer<float> logits(3 * 40);
    logits.poison(0xFF);
    cuda::indexer_logits_prefill({64, IndexerFormat::fp8, ScoreStorage::bf16}, in.queries(), in.keys(), zero.get(),
                                 zero.get(), logits.get(), 40, v);
    // Decode rows of length 0 over an empty pool.
    cuda::PagedKeys pk;
    pk.format = IndexerFormat::fp8;
    pk.layout = cuda::IndexerCacheLayout::deepgemm;
    pk.page_keys = 64;
    const DeviceBuffer<uint8_t> pool(static_cast<size_t>(pk.page_bytes()));
    const DeviceBuffer<int32_t> table(std::vector<int32_t>{-1, -1, -1});
    pk.pool = pool.get();
    pk.pool_pages = 1;
    pk.block_table = table.get();
    pk.table_stride = 1;
    // Decode has a v5 to a v7 (prefill stops at v4): the v4 round runs them too.
    GuardedBuffer<float> decoded(3 * 70), decoded_v5(3 * 70), decoded_v6(3 * 70), decoded_v7(3 * 70);
    decoded.poison(0xFF);
    decoded_v5.poison(0xFF);
    decoded_v6.poison(0xFF);
    decoded_v7.poison(0xFF);
    cuda::indexer_logits_decode({64, IndexerFormat::fp8, ScoreStorage::bf16}, in.queries(), pk, zero.get(),
                                decoded.get(), 70, v);
    if (v == Variant::v4) {
      cuda::indexer_logits_decode({64, IndexerFormat::fp8, ScoreStorage::bf16}, in.queries(), pk, zero.get(),
                                  decoded_v5.get(), 70, Variant::v5);
      cuda::indexer_logits_decode({64, IndexerFormat::fp8, ScoreStorage::bf16}, in.queries(), pk, zero.get(),
                                  decoded_v6.get(), 70, Variant::v6);
      cuda::indexer_logits_decode({64, IndexerFormat::fp8, ScoreStorage::bf16}, in.queries(), pk, zero.get(),
                                  decoded_v7.get(), 70, Variant::v7);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    for (float x : untouched.download()) CHECK(std::bit_cast<uint32_t>(x) == 0x5A5A5A5Au);
    for (float x : logits.download()) CHECK(x == -kInf);
    for (float x : decoded.download()) CHECK(x == -kInf);
    if (v == Variant::v4) {
      for (float x : decoded_v5.download()) CHECK(x == -kInf);
      for (float x : decoded_v6.download()) CHECK(x == -kInf);
      for (float x : decoded_v7.download()) CHECK(x == -kInf);
    }
    CHECK(logits.damaged_guard_bytes() == 0);
    CHECK(decoded.damaged_guard_bytes() == 0);
    CHECK(decoded_v5.damaged_guard_bytes() == 0);
    CHECK(decoded_v6.damaged_guard_bytes() == 0);
    CHECK(decoded_v7.damaged_guard_bytes() == 0);
  }
}

TEST_CASE("the oracle-typed wrappers equal the oracle (indexer_q, indexer_weights, indexer_scores)") {
  TallyBook book;
  for (IndexerFormat f : {IndexerFormat::fp4, IndexerFormat::fp8}) {
    const auto c = Case::select(CaseId("indexer_wrappers").with("format", cuda::format_name(f)));
    if (!c) continue;
    INFO(c->reproduce());
    std::mt19937_64 gen = c->rng();
    const ref::ModelConfig cfg = ref::ModelConfig::flash();
    ref::PrecisionPolicy p = policy(f, true, ScoreStorage::bf16);
    const ref::RopeTable rope = ref::RopeTable::for_layer(cfg, 4, p);
    const int64_t s = 21, start_pos = 40;
    const Mat q_proj = projection(s, 64, gen);
    Mat w_proj(s, 64);
    std::uniform_real_distribution<double> u(-4, 4);
    for (Index i = 0; i < w_proj.size(); ++i) w_proj.data()[i] = bf16(u(gen));
    ref::IndexerWeights w;
    w.wq_b = q_proj.transpose();
    w.weights_proj = w_proj.transpose();
    const Mat q = ref::indexer_q(w, Mat::Identity(s, s), start_pos, rope, cfg, p);
    const Mat weights = ref::indexer_weights(w, Mat::Identity(s, s), cfg, p);
    CHECK(cuda::indexer_q(q_proj, start_pos, rope, cfg, p) == q);
    CHECK(cuda::indexer_weights(w_proj, cfg, p) == weights);
    cuda::HostVectors kc;
    const Mat keys = vectors(projection((start_pos + s) / 4, 1, gen), 0, rope, 1, f, true, kc);
    const Mat want = ref::indexer_scores(q, weights, keys, start_pos, 4, p);
    for (Variant v : {Variant::v1, Variant::v2}) {
      const Mat got = cuda::indexer_scores(q, weights, keys, start_pos, 4, p, v);
      Compare cmp;
      for (Index i = 0; i < got.size(); ++i)
        cmp.add(static_cast<float>(got.data()[i]), static_cast<float>(want.data()[i]));
      check_logits(cmp, v, f, ScoreStorage::bf16, book, std::string("wrapper ") + cuda::format_name(f));
    }
  }
  MESSAGE(book.table());
}

TEST_CASE("bad arguments throw before anything is launched (indexer)") {
  std::mt19937_64 gen(1);
  Inputs in(2, 4, 64, IndexerFormat::fp4, 0, gen);
  const DeviceBuffer<int32_t> r(std::vector<int32_t>{0, 4});
  DeviceBuffer<float> logits(8);
  CHECK_THROWS_AS(cuda::indexer_logits_prefill({4, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), in.keys(),
                                               r.get(), r.get(), logits.get(), 4, Variant::v2),
                  std::invalid_argument);  // v2 needs 64 heads
  CHECK_THROWS_AS(cuda::indexer_logits_prefill({4, IndexerFormat::fp8, ScoreStorage::bf16}, in.queries(), in.keys(),
                                               r.get(), r.get(), logits.get(), 4, Variant::v3),
                  std::invalid_argument);  // v3 needs 64 heads
  CHECK_THROWS_AS(cuda::indexer_logits_prefill({4, IndexerFormat::fp8, ScoreStorage::bf16}, in.queries(), in.keys(),
                                               r.get(), r.get(), logits.get(), 4, Variant::v4),
                  std::invalid_argument);  // v4 needs 64 heads
  CHECK_THROWS_AS(cuda::indexer_logits_prefill({64, IndexerFormat::fp8, ScoreStorage::bf16}, in.queries(), in.keys(),
                                               r.get(), r.get(), logits.get(), 4, Variant::v5),
                  std::invalid_argument);  // prefill stops at v4
  cuda::PagedKeys pk;
  pk.format = IndexerFormat::fp8;  // the call computes FP4
  CHECK_THROWS_AS(cuda::indexer_logits_decode({64, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), pk, r.get(),
                                              logits.get(), 4, Variant::v1),
                  std::invalid_argument);
  pk.format = IndexerFormat::fp4;
  CHECK_THROWS_AS(cuda::indexer_logits_decode({4, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), pk, r.get(),
                                              logits.get(), 4, Variant::v3),
                  std::invalid_argument);  // v3 needs 64 heads
  CHECK_THROWS_AS(cuda::indexer_logits_decode({4, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), pk, r.get(),
                                              logits.get(), 4, Variant::v4),
                  std::invalid_argument);  // v4 needs 64 heads
  CHECK_THROWS_AS(cuda::indexer_logits_decode({4, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), pk, r.get(),
                                              logits.get(), 4, Variant::v5),
                  std::invalid_argument);  // v5 needs 64 heads
  CHECK_THROWS_AS(cuda::indexer_logits_decode({4, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), pk, r.get(),
                                              logits.get(), 4, Variant::v6),
                  std::invalid_argument);  // v6 needs 64 heads
  CHECK_THROWS_AS(cuda::indexer_logits_decode({4, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), pk, r.get(),
                                              logits.get(), 4, Variant::v7),
                  std::invalid_argument);  // v7 needs 64 heads
  pk.page_keys = 30;
  pk.table_stride = 1;
  CHECK_THROWS_AS(cuda::indexer_logits_decode({64, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), pk, r.get(),
                                              logits.get(), 4, Variant::v3),
                  std::invalid_argument);  // pages of 30 keys are not 16-byte aligned
  CHECK_THROWS_AS(cuda::indexer_logits_decode({64, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), pk, r.get(),
                                              logits.get(), 4, Variant::v4),
                  std::invalid_argument);
  CHECK_THROWS_AS(cuda::indexer_logits_decode({64, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), pk, r.get(),
                                              logits.get(), 4, Variant::v5),
                  std::invalid_argument);
  CHECK_THROWS_AS(cuda::indexer_logits_decode({64, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), pk, r.get(),
                                              logits.get(), 4, Variant::v6),
                  std::invalid_argument);
  CHECK_THROWS_AS(cuda::indexer_logits_decode({64, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), pk, r.get(),
                                              logits.get(), 4, Variant::v7),
                  std::invalid_argument);
  {
    // v2 to v7 copy DeepGEMM pages in 16-byte units (v5 to v7: bulk copies): 4 bytes past a boundary is refused.
    cuda::PagedKeys shifted;
    shifted.format = IndexerFormat::fp4;
    shifted.layout = cuda::IndexerCacheLayout::deepgemm;
    shifted.page_keys = 64;
    const DeviceBuffer<uint8_t> pool(static_cast<size_t>(shifted.page_bytes()) + 16);
    const DeviceBuffer<int32_t> table(std::vector<int32_t>{0, 0});
    shifted.pool = pool.get() + 4;
    shifted.pool_pages = 1;
    shifted.block_table = table.get();
    shifted.table_stride = 1;
    for (Variant v : {Variant::v2, Variant::v3, Variant::v4, Variant::v5, Variant::v6, Variant::v7})
      CHECK_THROWS_AS(cuda::indexer_logits_decode({64, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), shifted,
                                                  r.get(), logits.get(), 4, v),
                      std::invalid_argument);
    // The interleaved layout's 4-byte copies: 2 bytes past a boundary is refused.
    shifted.layout = cuda::IndexerCacheLayout::interleaved;
    shifted.pool = pool.get() + 2;
    for (Variant v : {Variant::v2, Variant::v3, Variant::v4, Variant::v5, Variant::v6, Variant::v7})
      CHECK_THROWS_AS(cuda::indexer_logits_decode({64, IndexerFormat::fp4, ScoreStorage::bf16}, in.queries(), shifted,
                                                  r.get(), logits.get(), 4, v),
                      std::invalid_argument);
  }
  pk.page_keys = 32;
  pk.pool_pages = 1;
  pk.table_stride = 1;
  const int32_t lens[2] = {33, 0}, table[2] = {0, 0};
  CHECK_THROWS_AS(cuda::check_decode_tables(pk, 2, lens, table, 64), std::invalid_argument);  // 33 keys need 2 pages
  const int32_t lens2[2] = {3, 0}, bad_table[2] = {5, 0};
  CHECK_THROWS_AS(cuda::check_decode_tables(pk, 2, lens2, bad_table, 64), std::invalid_argument);  // page 5 of 1
  CHECK_THROWS_AS(cuda::indexer_scores(Mat::Zero(1, 64 * 128), Mat::Zero(1, 64), Mat::Zero(1, 128), 3, 4,
                                       ref::PrecisionPolicy::by_name("nvfp4-indexer")),
                  std::invalid_argument);
}

TEST_CASE("sanitizer sweep: one small call of every indexer kernel and version (prefill v3, v4, decode v3 to v7)") {
  // Small on purpose: compute-sanitizer (memcheck, racecheck, initcheck) runs this case.
  const auto c = Case::select(CaseId("indexer_sanitizer_sweep"));
  if (!c) return;
  INFO(c->reproduce());
  std::mt19937_64 gen = c->rng();
  for (IndexerFormat f : {IndexerFormat::fp4, IndexerFormat::fp8})
    for (Variant v : {Variant::v1, Variant::v2}) {
      Inputs in(3, 200, 64, f, 0, gen);
      const DeviceBuffer<int32_t> dks(std::vector<int32_t>{0, 150, 7}), dke(std::vector<int32_t>{200, 150, 135});
      DeviceBuffer<float> logits(3 * 260);
      cuda::indexer_logits_prefill({64, f, ScoreStorage::bf16}, in.queries(), in.keys(), dks.get(), dke.get(),
                                   logits.get(), 260, v);
      DeviceBuffer<float> logits_v3(3 * 260), logits_v4(3 * 260);
      if (v == Variant::v2) {  // prefill v3 and v4 (FP8: the TMA kernels; FP4: v2 again)
        cuda::indexer_logits_prefill({64, f, ScoreStorage::fp32}, in.queries(), in.keys(), dks.get(), dke.get(),
                                     logits_v3.get(), 260, Variant::v3);
        cuda::indexer_logits_prefill({64, f, ScoreStorage::fp32}, in.queries(), in.keys(), dks.get(), dke.get(),
                                     logits_v4.get(), 260, Variant::v4);
      }
      // q path on the same tokens.
      std::vector<uint16_t> x(3 * 64 * 128, cuda::bf16_bits(0.5f)), wx(3 * 64, cuda::bf16_bits(1.0f));
      const DeviceBuffer<uint16_t> dx(x), dwx(wx);
      const DeviceBuffer<float> table(std::vector<float>(3 * 64, 0.5f));
      DeviceBuffer<uint8_t> codes(3 * 64 * static_cast<size_t>(cuda::code_bytes(f))), scales(3 * 64 * 4);
      DeviceBuffer<uint16_t> values(3 * 64 * 128);
      DeviceBuffer<float> weights(3 * 64);
      cuda::indexer_q({64, f, true, 0.01f}, 3, dx.get(), table.get(), dwx.get(),
                      {codes.get(), scales.get(), values.get(), weights.get()}, v);
      for (cuda::IndexerCacheLayout layout :
           {cuda::IndexerCacheLayout::interleaved, cuda::IndexerCacheLayout::deepgemm}) {
        const int page_keys = layout == cuda::IndexerCacheLayout::deepgemm ? 64 : 32;
        const PagedCall call({0, 5, 70}, layout, f, page_keys, 72, gen);
        for (float x : call.run(ScoreStorage::fp32, v)) CHECK(!std::isnan(x));
        if (v == Variant::v2)  // decode has a v3 to a v7 (the other entries stop at v2)
          for (Variant later : {Variant::v3, Variant::v4, Variant::v5, Variant::v6, Variant::v7})
            for (float x : call.run(ScoreStorage::fp32, later)) CHECK(!std::isnan(x));
      }
      CUDA_CHECK(cudaDeviceSynchronize());
      for (float x : logits.download()) CHECK(!std::isnan(x));
      if (v == Variant::v2) {
        for (float x : logits_v3.download()) CHECK(!std::isnan(x));
        for (float x : logits_v4.download()) CHECK(!std::isnan(x));
      }
    }
}
