// GPU tests of the CUDA compressors (label gpu): every kernel diffed against the oracle
// (reference/stages/compressor.h) on fresh random inputs, each case a harness case (harness.h):
// a failure prints the case's ID, and DSV4_CASE='<that ID>' runs that case alone with its seed.
//
// How the oracle is run on the kernels' inputs: the kernels take the projections kv, score; the
// oracle's compress() takes x and weights. A sequence of S tokens with projections kv, score
// [S, coff*d] is fed to the oracle as x = rows of the S x S identity with wkv = kv^T and
// wgate = score^T: the oracle's exact linear of a one-hot row is that row of kv / score, bit for
// bit, so the oracle runs its own state machine and post-processing on exactly the kernels' inputs.
//
// What is asserted, per call:
//   pooled   fp32 kernel vs the oracle's fp64-then-rounded pooling, within the fp32 error bound
//            derived at pooled_bound() (a few ulps per pooled term);
//   entries  bitwise against ref::postprocess_entries applied to the kernel's own pooled values.
//            v1 kernels sum RMSNorm's squares in the oracle's order: no difference allowed.
//            v2 / v3 kernels sum them as a tree: at most 1 entry per case may differ (derived
//            rate in docs/cuda-compressor.md: about 2^-26 per entry);
//   state    the rows the oracle's meaningful_rows() lists, bitwise (online C128: max bitwise,
//            sum and mean within the online bound);
//   canaries outputs poisoned with 0xFF before the call: every row the call owns is written, the
//            two rows after them and the decode rows that complete nothing keep the poison, and
//            256 guard bytes on both sides of every output and state buffer are intact;
//   unread   every state row the oracle does not list as meaningful is set to NaN before the call.
// Plus: prefill == decode one by one == chunked on the GPU (bitwise), 20 reruns bitwise identical,
// argument checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"
#include "cuda/common/numerics.cuh"
#include "cuda/compressor/compressor_api.h"
#include "cuda/compressor/oracle_mirror.h"
#include "cuda/tests/harness.h"
#include "reference/config.h"
#include "reference/precision.h"
#include "reference/primitives/rope.h"
#include "reference/stages/compressor.h"

using namespace dsv4;
using cuda::GuardedBuffer;
using cuda::Variant;
using cuda::testing::Case;
using cuda::testing::CaseId;
using cuda::testing::TallyBook;
using ref::Index;
using ref::Mat;

namespace {

constexpr double kU = 0x1p-24;  // fp32 unit roundoff
constexpr int kRopeEntries = 4096;

struct Setup {
  std::string name;
  int ratio;
  int d;
  ref::CompressorKind kind;
  int coff() const { return ratio == 4 ? 2 : 1; }
  int width() const { return coff() * d; }
  // The case ID of an operation on this setup: op(ratio=r,kind=k,d=d).
  CaseId id(const std::string& op) const {
    return CaseId(op).with("ratio", ratio).with("kind", cuda::kind_name(cuda::to_kind(kind))).with("d", d);
  }
};

// The real V4 dims (C4 main d = 512 with coff 2, C4 indexer d = 128, C128 d = 512) and the tiny
// config's main d = 128.
std::vector<Setup> all_setups() {
  return {{"C4 main d512", 4, 512, ref::CompressorKind::main},
          {"C4 indexer d128", 4, 128, ref::CompressorKind::indexer},
          {"C128 main d512", 128, 512, ref::CompressorKind::main},
          {"C4 main d128", 4, 128, ref::CompressorKind::main},
          {"C128 main d128", 128, 128, ref::CompressorKind::main}};
}

// Every version of a setup's prefill kernels: the C4 prefill has three (v1, v2, v3); the others
// two (v1, v3).
std::vector<Variant> variants(int ratio) {
  if (ratio == 4) return {Variant::v1, Variant::v2, Variant::v3};
  return {Variant::v1, Variant::v3};
}

// The decode kernels have v1 and v3: a v2 prefill is followed by v3 decode steps.
Variant decode_variant(Variant prefill) { return prefill == Variant::v2 ? Variant::v3 : prefill; }

double fp32(double v) { return static_cast<double>(static_cast<float>(v)); }
double bf16(double v) { return ref::round_to(ref::Storage::bf16, v); }

Mat random_mat(Index rows, Index cols, double lo, double hi, std::mt19937_64& gen) {
  std::uniform_real_distribution<double> u(lo, hi);
  Mat m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = fp32(u(gen));
  return m;
}

std::vector<float> floats(const Mat& m) {
  std::vector<float> v(static_cast<size_t>(m.size()));
  for (Index i = 0; i < m.size(); ++i) v[static_cast<size_t>(i)] = static_cast<float>(m.data()[i]);
  return v;
}

// ---- one sequence: its projections and the oracle's state ------------------------------------

struct Sequence {
  Mat kv, score;             // [S, width] fp32 values: the projections of all its tokens
  ref::CompressorWeights w;  // one-hot weights (see the file comment), shared ape and norm
  ref::CompressorState state;
  ref::OnlineC128State online;
  int64_t pos = 0;
};

// The shared weights of a setup and the layer's RoPE table (official policy).
struct Layer {
  Setup su;
  Mat ape;        // [r, width] fp32
  ref::Vec norm;  // [d] bf16 values
  ref::RopeTable rope;
  double eps;
  ref::PrecisionPolicy policy = ref::PrecisionPolicy::official();

  Layer(const Setup& s, std::mt19937_64& gen) : su(s) {
    const ref::ModelConfig cfg = ref::ModelConfig::flash();
    ape = random_mat(s.ratio, s.width(), -1, 1, gen);
    std::uniform_real_distribution<double> u(-1, 1);
    norm.resize(s.d);
    for (int c = 0; c < s.d; ++c) norm(c) = bf16(1 + 0.5 * u(gen));
    rope = ref::RopeTable::for_layer(cfg, s.ratio, policy);
    eps = cfg.norm_eps;
  }

  // Logits spread over about 6 units so that softmaxes are far from uniform; kv in [-2, 2).
  Sequence sequence(Index s, std::mt19937_64& gen) const {
    Sequence q;
    q.kv = random_mat(s, su.width(), -2, 2, gen);
    q.score = random_mat(s, su.width(), -3, 3, gen);
    q.w.ratio = su.ratio;
    q.w.head_dim = su.d;
    q.w.wkv = q.kv.transpose();
    q.w.wgate = q.score.transpose();
    q.w.ape = ape;
    q.w.norm = norm;
    q.state = ref::CompressorState::fresh(su.ratio, su.d);
    q.online = ref::OnlineC128State::fresh(su.d);
    return q;
  }

  // The oracle on tokens [pos, pos + len) of q (advances neither q.pos nor anything else but state).
  Mat one_hot_rows(const Sequence& q, int64_t len) const {
    Mat x = Mat::Zero(len, q.kv.rows());
    for (int64_t i = 0; i < len; ++i) x(i, q.pos + i) = 1;
    return x;
  }
  ref::CompressorOutput oracle(Sequence& q, int64_t len) const {
    return ref::compress(q.w, su.kind, one_hot_rows(q, len), q.pos, q.state, rope, eps, policy);
  }
  ref::CompressorOutput oracle_online(Sequence& q, int64_t len) const {
    return ref::compress_online_c128(q.w, one_hot_rows(q, len), q.pos, q.online, rope, eps, policy);
  }
};

// ---- tolerances ------------------------------------------------------------------------------

// The logits and kv of the pooled rows of entry j, channel c (brute force from the spec).
struct Window {
  std::vector<double> kv, logit;  // finite rows only (ratio 4's block-0 "previous" rows weigh 0)
};
Window window(const Layer& L, const Sequence& q, int64_t j, int c) {
  Window w;
  const int r = L.su.ratio, d = L.su.d;
  auto add = [&](int64_t t, int col) {
    w.kv.push_back(q.kv(t, col));
    w.logit.push_back(fp32(q.score(t, col) + L.ape(t % r, col)));
  };
  if (r == 4) {
    if (j > 0)
      for (int i = 0; i < 4; ++i) add(4 * (j - 1) + i, c);
    for (int i = 0; i < 4; ++i) add(4 * j + i, d + c);
  } else {
    for (int i = 0; i < 128; ++i) add(128 * j + i, c);
  }
  return w;
}

// Bound on |kernel - oracle| for one pooled value of n rows. With M the max logit, G the largest
// |logit - M|, w_i the exact softmax weights and A = sum_i w_i |kv_i|:
//   each e_i = expf(fl(s_i - M)) carries <= 2 ulp (CUDA's expf, <= 4u relative) plus G u (the
//   rounding of the argument); the sums of n terms add <= (n - 1) u relative each; kv_i e_i and the
//   final division add u each. First order: |kernel - exact| <= (n + 5 + G) u (A + |exact|).
//   The v3 C128 kernel also rescales its running sums once per chunk of 4 rows (8 times a slab)
//   and merges 4 slabs, each rescale an expf (4 + G) u and a product u: 9 (5 + G) u more, counted
//   for every kernel.
//   The oracle itself is within u |exact|.
double pooled_bound(const Window& w, double oracle_value) {
  const double m = *std::max_element(w.logit.begin(), w.logit.end());
  double g = 0, den = 0, a = 0;
  for (size_t i = 0; i < w.logit.size(); ++i) {
    g = std::max(g, m - w.logit[i]);
    den += std::exp(w.logit[i] - m);
  }
  for (size_t i = 0; i < w.logit.size(); ++i) a += std::exp(w.logit[i] - m) / den * std::fabs(w.kv[i]);
  const double n = static_cast<double>(w.logit.size());
  const double k = n + 5 + g + 9 * (5 + g);
  return k * kU * (a + std::fabs(oracle_value)) + kU * std::fabs(oracle_value);
}

// Online C128, after steps over rows with logit range G and kv up to K: each fp32 step adds at most
// (11 + 2G) u K to the mean (two expf with their arguments, 5 products / sums, a division) and
// (6 + G) u relative to the running sum, which moves the mean by at most that much of 2K; earlier
// errors are carried with weight <= 1. The oracle's own step rounds once (u K). Over n steps:
//   |kernel mean - oracle mean| <= n (24 + 4G) u K,  |kernel sum - oracle sum| <= n (8 + G) u sum.
struct OnlineBound {
  double mean, sum_rel;
};
OnlineBound online_bound(const Window& w) {
  const auto [lo, hi] = std::minmax_element(w.logit.begin(), w.logit.end());
  const double g = *hi - *lo;
  double k = 0;
  for (double v : w.kv) k = std::max(k, std::fabs(v));
  const double n = static_cast<double>(w.logit.size());
  return {n * (24 + 4 * g) * kU * k, n * (8 + g) * kU};
}

// ---- GPU side ---------------------------------------------------------------------------------

struct Gpu {
  const Layer& L;
  Variant variant;
  int n_states;
  cuda::DeviceBuffer<float> ape, norm, rope;
  GuardedBuffer<float> state_kv, state_score, online_state;
  cuda::CompressorParams params;

  Gpu(const Layer& layer, Variant v, int states)
      : L(layer),
        variant(v),
        n_states(states),
        ape(floats(layer.ape)),
        norm(floats(Mat(layer.norm.transpose()))),
        rope(cuda::rope_table(layer.rope, layer.su.ratio, kRopeEntries)),
        state_kv(static_cast<size_t>(states * cuda::state_floats(layer.su.ratio, layer.su.d))),
        state_score(static_cast<size_t>(states * cuda::state_floats(layer.su.ratio, layer.su.d))),
        online_state(static_cast<size_t>(states * cuda::online_state_floats(layer.su.d))) {
    params.ratio = layer.su.ratio;
    params.head_dim = layer.su.d;
    params.kind = cuda::to_kind(layer.su.kind);
    params.norm_eps = layer.eps;
    params.ape = ape.get();
    params.norm = norm.get();
    params.rope = rope.get();
    params.rope_entries = kRopeEntries;
  }

  int64_t state_size() const { return cuda::state_floats(L.su.ratio, L.su.d); }

  // Every state row the oracle does not list as meaningful becomes NaN (kv and score).
  void poison_unread_rows(const std::vector<Sequence>& seqs) {
    std::vector<float> kv = state_kv.download(), sc = state_score.download();
    const int width = L.su.width();
    const int rows = L.su.coff() * L.su.ratio;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const std::vector<int> keep = seqs[s].state.meaningful_rows(seqs[s].pos);
      for (int r = 0; r < rows; ++r) {
        if (std::find(keep.begin(), keep.end(), r) != keep.end()) continue;
        for (int c = 0; c < width; ++c) {
          const size_t i = static_cast<size_t>(s * state_size() + r * width + c);
          kv[i] = std::numeric_limits<float>::quiet_NaN();
          sc[i] = std::numeric_limits<float>::quiet_NaN();
        }
      }
    }
    state_kv.upload(kv);
    state_score.upload(sc);
  }

  // The GPU state of sequence s must equal the oracle's on its meaningful rows, bitwise.
  void check_state(const std::vector<Sequence>& seqs) const {
    const std::vector<float> kv = state_kv.download(), sc = state_score.download();
    const int width = L.su.width();
    for (size_t s = 0; s < seqs.size(); ++s) {
      size_t bad = 0;
      for (int r : seqs[s].state.meaningful_rows(seqs[s].pos))
        for (int c = 0; c < width; ++c) {
          const size_t i = static_cast<size_t>(s * state_size() + r * width + c);
          bad += std::bit_cast<uint32_t>(kv[i]) != std::bit_cast<uint32_t>(static_cast<float>(seqs[s].state.kv(r, c)));
          bad +=
              std::bit_cast<uint32_t>(sc[i]) != std::bit_cast<uint32_t>(static_cast<float>(seqs[s].state.score(r, c)));
        }
      CHECK_MESSAGE(bad == 0, "sequence " << s << " at position " << seqs[s].pos << ": " << bad
                                          << " state values differ from the oracle");
    }
    CHECK(state_kv.damaged_guard_bytes() == 0);
    CHECK(state_score.damaged_guard_bytes() == 0);
  }
};

// Outputs of one call in guarded, poisoned buffers with 2 spare rows after the rows the call owns.
struct Outputs {
  int d;
  int64_t rows;
  GuardedBuffer<uint16_t> entries;
  GuardedBuffer<float> pooled;
  Outputs(int64_t n, int dim)
      : d(dim), rows(n), entries(static_cast<size_t>((n + 2) * dim)), pooled(static_cast<size_t>((n + 2) * dim)) {
    entries.poison(0xFF);
    pooled.poison(0xFF);
  }
  // written[i]: row i must be written; the others (and the 2 spare rows) must keep the poison.
  void check_canaries(const std::vector<bool>& written, std::vector<uint16_t>& e, std::vector<float>& p) {
    e = entries.download();
    p = pooled.download();
    int64_t unwritten = 0, overwritten = 0;
    for (int64_t i = 0; i < rows + 2; ++i) {
      const bool must = i < rows && written[static_cast<size_t>(i)];
      for (int c = 0; c < d; ++c) {
        const size_t k = static_cast<size_t>(i * d + c);
        const bool poisoned = e[k] == 0xFFFF && std::bit_cast<uint32_t>(p[k]) == 0xFFFFFFFFu;
        const bool any_poison = e[k] == 0xFFFF || std::bit_cast<uint32_t>(p[k]) == 0xFFFFFFFFu;
        if (must && any_poison) ++unwritten;
        if (!must && !poisoned) ++overwritten;
      }
    }
    CHECK_MESSAGE(unwritten == 0, unwritten << " output values the call owns were not written");
    CHECK_MESSAGE(overwritten == 0, overwritten << " output values the call does not own were written");
    CHECK(entries.damaged_guard_bytes() == 0);
    CHECK(pooled.damaged_guard_bytes() == 0);
  }
};

Mat rows_to_mat(const std::vector<float>& v, int64_t first, int64_t n, int d) {
  Mat m(n, d);
  for (int64_t i = 0; i < n; ++i)
    for (int c = 0; c < d; ++c) m(i, c) = v[static_cast<size_t>((first + i) * d + c)];
  return m;
}

// Tallies of one case: pooled values against their bound, entries bitwise.
struct Tally {
  cuda::testing::Tally pooled, entries;
};

// Compares the kernel's rows [first, first + n) of one call with the oracle's output for that
// sequence (its entries j = out.first_entry ...).
void compare_entries(const Layer& L, const Sequence& q, const ref::CompressorOutput& oracle,
                     const std::vector<uint16_t>& e, const std::vector<float>& p, int64_t first, bool online,
                     Tally& tally) {
  const int d = L.su.d;
  const int64_t n = oracle.pooled.rows();
  const Mat kernel_pooled = rows_to_mat(p, first, n, d);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = oracle.first_entry + i;
    for (int c = 0; c < d; ++c) {
      const Window w = window(L, q, j, c);
      const double bound = online ? online_bound(w).mean : pooled_bound(w, oracle.pooled(i, c));
      tally.pooled.bounded(kernel_pooled(i, c) - oracle.pooled(i, c), bound);
    }
  }
  // The oracle's post-processing of the kernel's own pooled values, against the kernel's entries.
  const Mat expect =
      ref::postprocess_entries(q.w, L.su.kind, kernel_pooled, oracle.first_entry, L.rope, L.eps, L.policy);
  for (int64_t i = 0; i < n; ++i) {
    bool same = true;
    for (int c = 0; c < d; ++c)
      same &= std::bit_cast<uint16_t>(cuda::bf16_bits(static_cast<float>(expect(i, c)))) ==
              e[static_cast<size_t>((first + i) * d + c)];
    tally.entries.bitwise(same);
  }
}

// The assertions on one case's tally; the tally then joins the test case's book under its version.
void check_tally(const Tally& t, Variant v, TallyBook& book) {
  CHECK(t.entries.compared > 0);
  CHECK(t.pooled.over_bound == 0);
  // v1 kernels follow the oracle's order everywhere; v2 / v3 may flip the fp32 mean of squares of
  // RMSNorm with probability ~2^-26 per entry (docs/cuda-compressor.md): at most 1 per case.
  if (v == Variant::v1)
    CHECK(t.entries.differing == 0);
  else
    CHECK(t.entries.differing <= 1);
  book.at(v, "pooled (bound)") += t.pooled;
  book.at(v, "entries (bitwise)") += t.entries;
}

// One ragged prefill / extend call: chunk i feeds `lengths[i]` tokens of seqs[i] (0 allowed).
void prefill_call(Gpu& g, std::vector<Sequence>& seqs, const std::vector<int64_t>& lengths, Tally& tally) {
  const Layer& L = g.L;
  const int width = L.su.width(), d = L.su.d;
  std::vector<cuda::SequenceChunk> chunks;
  std::vector<float> kv, sc;
  int64_t row = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    chunks.push_back({seqs[i].pos, static_cast<int32_t>(lengths[i]), row, static_cast<int32_t>(i)});
    for (int64_t t = seqs[i].pos; t < seqs[i].pos + lengths[i]; ++t)
      for (int c = 0; c < width; ++c) {
        kv.push_back(static_cast<float>(seqs[i].kv(t, c)));
        sc.push_back(static_cast<float>(seqs[i].score(t, c)));
      }
    row += lengths[i];
  }
  const cuda::BatchPlan plan(chunks, L.su.ratio);
  GuardedBuffer<float> dkv(kv.size()), dsc(sc.size());
  dkv.upload(kv);
  dsc.upload(sc);
  g.poison_unread_rows(seqs);
  Outputs out(plan.n_entries(), d);
  if (L.su.ratio == 4)
    cuda::c4_prefill(g.params, plan, dkv.get(), dsc.get(), g.state_kv.get(), g.state_score.get(), out.entries.get(),
                     out.pooled.get(), g.variant);
  else
    cuda::c128_prefill(g.params, plan, dkv.get(), dsc.get(), g.state_kv.get(), g.state_score.get(), out.entries.get(),
                       out.pooled.get(), g.variant);
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> e;
  std::vector<float> p;
  out.check_canaries(std::vector<bool>(static_cast<size_t>(plan.n_entries()), true), e, p);
  CHECK(dkv.damaged_guard_bytes() == 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const ref::CompressorOutput oracle = L.oracle(seqs[i], lengths[i]);
    REQUIRE(oracle.pooled.rows() ==
            plan.entry_offset(static_cast<int>(i) + 1) - plan.entry_offset(static_cast<int>(i)));
    compare_entries(L, seqs[i], oracle, e, p, plan.entry_offset(static_cast<int>(i)), false, tally);
    seqs[i].pos += lengths[i];
  }
  g.check_state(seqs);
}

// One decode step of every sequence.
void decode_call(Gpu& g, std::vector<Sequence>& seqs, Tally& tally) {
  const Layer& L = g.L;
  const int width = L.su.width(), d = L.su.d;
  std::vector<int64_t> positions;
  std::vector<int32_t> states;
  std::vector<float> kv, sc;
  for (size_t i = 0; i < seqs.size(); ++i) {
    positions.push_back(seqs[i].pos);
    states.push_back(static_cast<int32_t>(i));
    for (int c = 0; c < width; ++c) {
      kv.push_back(static_cast<float>(seqs[i].kv(seqs[i].pos, c)));
      sc.push_back(static_cast<float>(seqs[i].score(seqs[i].pos, c)));
    }
  }
  const cuda::DecodePlan plan(positions, states, L.su.ratio);
  GuardedBuffer<float> dkv(kv.size()), dsc(sc.size());
  dkv.upload(kv);
  dsc.upload(sc);
  g.poison_unread_rows(seqs);
  Outputs out(plan.batch(), d);
  if (L.su.ratio == 4)
    cuda::c4_decode(g.params, plan, dkv.get(), dsc.get(), g.state_kv.get(), g.state_score.get(), out.entries.get(),
                    out.pooled.get(), decode_variant(g.variant));
  else
    cuda::c128_decode(g.params, plan, dkv.get(), dsc.get(), g.state_kv.get(), g.state_score.get(), out.entries.get(),
                      out.pooled.get(), decode_variant(g.variant));
  CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<bool> written;
  for (int b = 0; b < plan.batch(); ++b) written.push_back(plan.completes(b));
  std::vector<uint16_t> e;
  std::vector<float> p;
  out.check_canaries(written, e, p);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const ref::CompressorOutput oracle = L.oracle(seqs[i], 1);
    REQUIRE(oracle.pooled.rows() == (plan.completes(static_cast<int>(i)) ? 1 : 0));
    compare_entries(L, seqs[i], oracle, e, p, static_cast<int64_t>(i), false, tally);
    seqs[i].pos += 1;
  }
  g.check_state(seqs);
}

std::vector<Sequence> make_sequences(const Layer& L, const std::vector<int64_t>& totals, std::mt19937_64& gen) {
  std::vector<Sequence> seqs;
  for (int64_t s : totals) seqs.push_back(L.sequence(s, gen));
  return seqs;
}

// Block-boundary lengths: m-2, m-1, m, m+1, 2m-1, 2m, the first C4 blocks, and a longer one.
std::vector<int64_t> boundary_lengths(int r) {
  if (r == 4) return {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 0, 33};
  return {1, 126, 127, 128, 129, 255, 0, 256, 300};
}

}  // namespace

TEST_CASE("ragged prefill matches the oracle at block boundaries for every setup and variant") {
  TallyBook book;
  for (const Setup& su : all_setups())
    for (Variant v : variants(su.ratio)) {
      const std::vector<int64_t> lengths = boundary_lengths(su.ratio);
      const auto c = Case::select(su.id("compressor_prefill").with("lengths", lengths).with("variant", v));
      if (!c) continue;
      INFO(c->reproduce());
      std::mt19937_64 gen = c->rng();
      const Layer L(su, gen);
      std::vector<Sequence> seqs = make_sequences(L, lengths, gen);
      Gpu g(L, v, static_cast<int>(seqs.size()));
      Tally tally;
      prefill_call(g, seqs, lengths, tally);
      check_tally(tally, v, book);
    }
  MESSAGE(book.table());
}

TEST_CASE("extend from mid-block and block-boundary positions in one ragged batch") {
  TallyBook book;
  for (const Setup& su : all_setups())
    for (Variant v : variants(su.ratio)) {
      const int r = su.ratio;
      // First calls end before, on and after block boundaries; second calls cross one or two.
      const std::vector<int64_t> first =
          r == 4 ? std::vector<int64_t>{2, 3, 4, 5, 8, 1, 6} : std::vector<int64_t>{126, 127, 128, 129, 1, 200};
      const std::vector<int64_t> second =
          r == 4 ? std::vector<int64_t>{1, 2, 5, 7, 4, 0, 9} : std::vector<int64_t>{2, 1, 128, 255, 127, 56};
      const auto c =
          Case::select(su.id("compressor_extend").with("first", first).with("second", second).with("variant", v));
      if (!c) continue;
      INFO(c->reproduce());
      std::mt19937_64 gen = c->rng();
      const Layer L(su, gen);
      std::vector<int64_t> totals;
      for (size_t i = 0; i < first.size(); ++i) totals.push_back(first[i] + second[i]);
      std::vector<Sequence> seqs = make_sequences(L, totals, gen);
      Gpu g(L, v, static_cast<int>(seqs.size()));
      Tally tally;
      prefill_call(g, seqs, first, tally);
      prefill_call(g, seqs, second, tally);
      check_tally(tally, v, book);
    }
  MESSAGE(book.table());
}

TEST_CASE("prefill then decode steps across block boundaries with ragged positions") {
  TallyBook book;
  for (const Setup& su : all_setups())
    for (Variant v : variants(su.ratio)) {
      const int r = su.ratio;
      const std::vector<int64_t> prefill = r == 4 ? std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}
                                                  : std::vector<int64_t>{0, 1, 125, 126, 127, 128, 200, 255};
      const int steps = r == 4 ? 9 : 3;
      const auto c = Case::select(su.id("compressor_prefill_decode")
                                      .with("prefill", prefill)
                                      .with("steps", steps)
                                      .with("variant", v)
                                      .with("decode_variant", decode_variant(v)));
      if (!c) continue;
      INFO(c->reproduce());
      std::mt19937_64 gen = c->rng();
      const Layer L(su, gen);
      std::vector<int64_t> totals;
      for (int64_t p : prefill) totals.push_back(p + steps);
      std::vector<Sequence> seqs = make_sequences(L, totals, gen);
      Gpu g(L, v, static_cast<int>(seqs.size()));
      Tally tally;
      prefill_call(g, seqs, prefill, tally);
      for (int s = 0; s < steps; ++s) decode_call(g, seqs, tally);
      check_tally(tally, v, book);
    }
  MESSAGE(book.table());
}

TEST_CASE("online C128 prefill extend and decode match the oracle's online form") {
  TallyBook book;
  for (int d : {512, 128}) {
    const Setup su{"C128 online", 128, d, ref::CompressorKind::main};
    const std::vector<int64_t> first{1, 126, 127, 128, 129, 255, 0, 256};
    const std::vector<int64_t> second{2, 1, 128, 3, 127, 1, 130, 0};
    const int steps = 3;
    const auto c = Case::select(
        CaseId("c128_online").with("d", d).with("first", first).with("second", second).with("steps", steps));
    if (!c) continue;
    INFO(c->reproduce());
    std::mt19937_64 gen = c->rng();
    const Layer L(su, gen);
    std::vector<int64_t> totals;
    for (size_t i = 0; i < first.size(); ++i) totals.push_back(first[i] + second[i] + steps);
    std::vector<Sequence> seqs = make_sequences(L, totals, gen);
    Gpu g(L, Variant::v3, static_cast<int>(seqs.size()));
    {  // the oracle's fresh online state, on the GPU
      std::vector<float> st(g.online_state.size());
      for (size_t s = 0; s < seqs.size(); ++s)
        for (int c = 0; c < d; ++c) {
          st[s * 3 * d + c] = -std::numeric_limits<float>::infinity();
          st[s * 3 * d + d + c] = 0;
          st[s * 3 * d + 2 * d + c] = 0;
        }
      g.online_state.upload(st);
    }
    Tally tally;
    int64_t state_violations = 0;
    auto check_online_state = [&] {
      const std::vector<float> st = g.online_state.download();
      for (size_t s = 0; s < seqs.size(); ++s) {
        if (seqs[s].pos == 0) continue;
        const int64_t block = (seqs[s].pos - 1) / 128;
        for (int c = 0; c < d; ++c) {
          Window w;  // rows of the current block so far
          for (int64_t t = block * 128; t < seqs[s].pos; ++t) {
            w.kv.push_back(seqs[s].kv(t, c));
            w.logit.push_back(fp32(seqs[s].score(t, c) + L.ape(t % 128, c)));
          }
          const OnlineBound b = online_bound(w);
          const float m = st[s * 3 * d + c], l = st[s * 3 * d + d + c], mean = st[s * 3 * d + 2 * d + c];
          state_violations += m != static_cast<float>(seqs[s].online.max(c));
          state_violations += !(std::fabs(l - seqs[s].online.sum(c)) <= b.sum_rel * seqs[s].online.sum(c));
          state_violations += !(std::fabs(mean - seqs[s].online.mean(c)) <= b.mean);
        }
      }
      CHECK(g.online_state.damaged_guard_bytes() == 0);
    };
    // A sequence at a block boundary that gets tokens must not read its state (its first token
    // resets it): NaN there.
    auto poison_boundary_states = [&](const std::vector<int64_t>& lengths) {
      std::vector<float> st = g.online_state.download();
      for (size_t s = 0; s < seqs.size(); ++s)
        if (seqs[s].pos % 128 == 0 && lengths[s] > 0)
          for (int c = 0; c < 3 * d; ++c) st[s * 3 * d + c] = std::numeric_limits<float>::quiet_NaN();
      g.online_state.upload(st);
    };
    auto prefill = [&](const std::vector<int64_t>& lengths) {
      poison_boundary_states(lengths);
      std::vector<cuda::SequenceChunk> chunks;
      std::vector<float> kv, sc;
      int64_t row = 0;
      for (size_t i = 0; i < seqs.size(); ++i) {
        chunks.push_back({seqs[i].pos, static_cast<int32_t>(lengths[i]), row, static_cast<int32_t>(i)});
        for (int64_t t = seqs[i].pos; t < seqs[i].pos + lengths[i]; ++t)
          for (int c = 0; c < d; ++c) {
            kv.push_back(static_cast<float>(seqs[i].kv(t, c)));
            sc.push_back(static_cast<float>(seqs[i].score(t, c)));
          }
        row += lengths[i];
      }
      const cuda::BatchPlan plan(chunks, 128);
      GuardedBuffer<float> dkv(kv.size()), dsc(sc.size());
      dkv.upload(kv);
      dsc.upload(sc);
      Outputs out(plan.n_entries(), d);
      cuda::c128_online_prefill(g.params, plan, dkv.get(), dsc.get(), g.online_state.get(), out.entries.get(),
                                out.pooled.get());
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<uint16_t> e;
      std::vector<float> p;
      out.check_canaries(std::vector<bool>(static_cast<size_t>(plan.n_entries()), true), e, p);
      for (size_t i = 0; i < seqs.size(); ++i) {
        const ref::CompressorOutput oracle = L.oracle_online(seqs[i], lengths[i]);
        REQUIRE(oracle.pooled.rows() ==
                plan.entry_offset(static_cast<int>(i) + 1) - plan.entry_offset(static_cast<int>(i)));
        compare_entries(L, seqs[i], oracle, e, p, plan.entry_offset(static_cast<int>(i)), true, tally);
        seqs[i].pos += lengths[i];
      }
      check_online_state();
    };
    prefill(first);
    prefill(second);
    for (int s = 0; s < steps; ++s) {
      std::vector<int64_t> positions;
      std::vector<int32_t> states;
      std::vector<float> kv, sc;
      for (size_t i = 0; i < seqs.size(); ++i) {
        positions.push_back(seqs[i].pos);
        states.push_back(static_cast<int32_t>(i));
        for (int c = 0; c < d; ++c) {
          kv.push_back(static_cast<float>(seqs[i].kv(seqs[i].pos, c)));
          sc.push_back(static_cast<float>(seqs[i].score(seqs[i].pos, c)));
        }
      }
      const cuda::DecodePlan plan(positions, states, 128);
      GuardedBuffer<float> dkv(kv.size()), dsc(sc.size());
      dkv.upload(kv);
      dsc.upload(sc);
      poison_boundary_states(std::vector<int64_t>(seqs.size(), 1));
      Outputs out(plan.batch(), d);
      cuda::c128_online_decode(g.params, plan, dkv.get(), dsc.get(), g.online_state.get(), out.entries.get(),
                               out.pooled.get());
      CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<bool> written;
      for (int b = 0; b < plan.batch(); ++b) written.push_back(plan.completes(b));
      std::vector<uint16_t> e;
      std::vector<float> p;
      out.check_canaries(written, e, p);
      for (size_t i = 0; i < seqs.size(); ++i) {
        const ref::CompressorOutput oracle = L.oracle_online(seqs[i], 1);
        compare_entries(L, seqs[i], oracle, e, p, static_cast<int64_t>(i), true, tally);
        seqs[i].pos += 1;
      }
      check_online_state();
    }
    check_tally(tally, Variant::v3,
                book);  // one version: held to the v3 allowance (its post-processing sums as a tree)
    CHECK(state_violations == 0);
  }
  MESSAGE(book.table());
}

namespace {

// The GPU's own results for one sequence fed in the given call lengths (0 = one decode launch).
struct GpuRun {
  std::vector<uint16_t> entries;
  std::vector<float> pooled, state;
};

GpuRun run_split(const Layer& L, Variant v, bool online, const Sequence& q, const std::vector<int64_t>& calls) {
  Gpu g(L, v, 1);
  const int d = L.su.d, width = L.su.width(), r = L.su.ratio;
  {  // fresh state (NaN where DeepSeek's fresh state is never read: every row before position 0)
    std::vector<float> st(g.online_state.size());
    for (int c = 0; c < d; ++c) {
      st[c] = -std::numeric_limits<float>::infinity();
      st[d + c] = 0;
      st[2 * d + c] = 0;
    }
    g.online_state.upload(st);
    g.state_kv.poison(0xFF);
    g.state_score.poison(0xFF);
  }
  GpuRun run;
  int64_t pos = 0;
  for (int64_t len : calls) {
    const bool decode = len == 0;
    const int64_t n_tokens = decode ? 1 : len;
    REQUIRE(pos + n_tokens <= q.kv.rows());  // the calls must not run past the sequence
    std::vector<float> kv, sc;
    for (int64_t t = pos; t < pos + n_tokens; ++t)
      for (int c = 0; c < width; ++c) {
        kv.push_back(static_cast<float>(q.kv(t, c)));
        sc.push_back(static_cast<float>(q.score(t, c)));
      }
    cuda::DeviceBuffer<float> dkv(kv), dsc(sc);
    const int64_t n = (pos + n_tokens) / r - pos / r;
    cuda::DeviceBuffer<uint16_t> e(static_cast<size_t>(std::max<int64_t>(n, 1) * d));
    cuda::DeviceBuffer<float> p(static_cast<size_t>(std::max<int64_t>(n, 1) * d));
    if (decode) {
      const cuda::DecodePlan plan({pos}, {0}, r);
      // v2 is a C4 prefill only: its decode steps run on v3, as an engine pairs its prefill kernel
      // with the decode kernel it has.
      const Variant decode_version = v == Variant::v2 ? Variant::v3 : v;
      if (online)
        cuda::c128_online_decode(g.params, plan, dkv.get(), dsc.get(), g.online_state.get(), e.get(), p.get());
      else if (r == 4)
        cuda::c4_decode(g.params, plan, dkv.get(), dsc.get(), g.state_kv.get(), g.state_score.get(), e.get(), p.get(),
                        decode_version);
      else
        cuda::c128_decode(g.params, plan, dkv.get(), dsc.get(), g.state_kv.get(), g.state_score.get(), e.get(), p.get(),
                          v);
    } else {
      const cuda::BatchPlan plan({{pos, static_cast<int32_t>(len), 0, 0}}, r);
      if (online)
        cuda::c128_online_prefill(g.params, plan, dkv.get(), dsc.get(), g.online_state.get(), e.get(), p.get());
      else if (r == 4)
        cuda::c4_prefill(g.params, plan, dkv.get(), dsc.get(), g.state_kv.get(), g.state_score.get(), e.get(), p.get(),
                         v);
      else
        cuda::c128_prefill(g.params, plan, dkv.get(), dsc.get(), g.state_kv.get(), g.state_score.get(), e.get(),
                           p.get(), v);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    if (n > 0) {
      const std::vector<uint16_t> he = e.download();
      const std::vector<float> hp = p.download();
      run.entries.insert(run.entries.end(), he.begin(), he.begin() + n * d);
      run.pooled.insert(run.pooled.end(), hp.begin(), hp.begin() + n * d);
    }
    pos += n_tokens;
  }
  if (online) {
    run.state = g.online_state.download();
  } else {  // the meaningful rows only
    const std::vector<float> kv = g.state_kv.download(), sc = g.state_score.download();
    for (int row : q.state.meaningful_rows(pos))
      for (int c = 0; c < width; ++c) {
        run.state.push_back(kv[static_cast<size_t>(row * width + c)]);
        run.state.push_back(sc[static_cast<size_t>(row * width + c)]);
      }
  }
  return run;
}

bool same_bits(const GpuRun& a, const GpuRun& b) {
  auto eq = [](const std::vector<float>& x, const std::vector<float>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (std::bit_cast<uint32_t>(x[i]) != std::bit_cast<uint32_t>(y[i])) return false;
    return true;
  };
  return a.entries == b.entries && eq(a.pooled, b.pooled) && eq(a.state, b.state);
}

}  // namespace

// The setups of the bitwise-invariance cases: the three V4 shapes and online C128.
struct SplitSetup {
  Setup su;
  bool online;
  CaseId id(const std::string& op) const { return su.id(op).with("online", online); }
};
std::vector<SplitSetup> split_setups() {
  return {{{"C4 main d512", 4, 512, ref::CompressorKind::main}, false},
          {{"C4 indexer d128", 4, 128, ref::CompressorKind::indexer}, false},
          {{"C128 main d512", 128, 512, ref::CompressorKind::main}, false},
          {{"C128 online d512", 128, 512, ref::CompressorKind::main}, true}};
}

TEST_CASE("on the GPU prefill equals decode one by one and chunked splits bitwise") {
  for (const SplitSetup& k : split_setups())
    for (Variant v : variants(k.su.ratio)) {
      if (k.online && v != Variant::v3) continue;  // online C128 has one version
      const int64_t s = k.su.ratio == 4 ? 37 : 300;
      const std::vector<int64_t> chunked = k.su.ratio == 4 ? std::vector<int64_t>{5, 0, 3, 11, 0, 0, 15}
                                                           : std::vector<int64_t>{100, 27, 0, 1, 129, 0, 41};
      const auto c = Case::select(k.id("compressor_splits").with("s", s).with("chunked", chunked).with("variant", v));
      if (!c) continue;
      INFO(c->reproduce());
      std::mt19937_64 gen = c->rng();
      const Layer L(k.su, gen);
      const Sequence q = L.sequence(s, gen);
      const GpuRun whole = run_split(L, v, k.online, q, {s});
      REQUIRE(whole.entries.size() == static_cast<size_t>(s / k.su.ratio * k.su.d));
      const std::vector<int64_t> one_by_one(static_cast<size_t>(s), 0);
      CHECK(same_bits(whole, run_split(L, v, k.online, q, one_by_one)));
      CHECK(same_bits(whole, run_split(L, v, k.online, q, chunked)));
    }
}

TEST_CASE("20 reruns of the v3 prefills are bitwise identical") {
  for (const SplitSetup& k : split_setups()) {
    const auto c = Case::select(k.id("compressor_reruns").with("runs", 20).with("variant", Variant::v3));
    if (!c) continue;
    INFO(c->reproduce());
    std::mt19937_64 gen = c->rng();
    const Layer L(k.su, gen);
    const Sequence q = L.sequence(k.su.ratio == 4 ? 1001 : 1030, gen);
    const std::vector<int64_t> calls{static_cast<int64_t>(q.kv.rows()) - 3, 0, 0, 0};
    const GpuRun first = run_split(L, Variant::v3, k.online, q, calls);
    int identical = 0;
    for (int i = 0; i < 19; ++i) identical += same_bits(first, run_split(L, Variant::v3, k.online, q, calls));
    CHECK(identical == 19);
  }
}

TEST_CASE("bad arguments throw before anything is launched") {
  std::mt19937_64 gen(1);
  const Layer L({"C4 main d512", 4, 512, ref::CompressorKind::main}, gen);
  Gpu g(L, Variant::v3, 2);
  const cuda::BatchPlan plan({{0, 8, 0, 0}}, 4);
  cuda::CompressorParams p = g.params;
  p.rope_entries = 1;  // the call writes entry 1
  CHECK_THROWS_AS(cuda::c4_prefill(p, plan, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, Variant::v3),
                  std::invalid_argument);
  p = g.params;
  p.head_dim = 256;
  CHECK_THROWS_AS(cuda::c4_prefill(p, plan, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, Variant::v3),
                  std::invalid_argument);
  CHECK_THROWS_AS(cuda::c128_prefill(g.params, plan, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, Variant::v3),
                  std::invalid_argument);
  // Versions an entry point does not have: v2 exists for the C4 prefill only.
  const cuda::DecodePlan step({3}, {0}, 4);
  CHECK_THROWS_AS(cuda::c4_decode(g.params, step, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, Variant::v2),
                  std::invalid_argument);
  CHECK_THROWS_AS(cuda::BatchPlan({{0, 4, 0, 1}, {0, 4, 4, 1}}, 4), std::invalid_argument);
  CHECK_THROWS_AS(cuda::BatchPlan({{0, 4, 0, 0}}, 3), std::invalid_argument);
  CHECK_THROWS_AS(cuda::DecodePlan({3, 7}, {0, 0}, 4), std::invalid_argument);
}

TEST_CASE("the oracle-typed wrapper equals the oracle at V4-Flash dims") {
  // cuda::compress mirrors ref::compress with the projections in place of x.
  TallyBook book;
  for (const Setup& su : all_setups()) {
    const auto c = Case::select(su.id("compressor_wrapper").with("variant", Variant::v3));
    if (!c) continue;
    INFO(c->reproduce());
    std::mt19937_64 gen = c->rng();
    const Layer L(su, gen);
    Sequence q = L.sequence(su.ratio == 4 ? 21 : 260, gen);
    ref::CompressorState gpu_state = ref::CompressorState::fresh(su.ratio, su.d);
    const ref::CompressorProjections proj{q.kv, q.score};
    const ref::CompressorOutput got = cuda::compress(q.w, su.kind, proj, 0, gpu_state, L.rope, L.eps);
    const ref::CompressorOutput want = L.oracle(q, q.kv.rows());
    q.pos = q.kv.rows();
    REQUIRE(got.pooled.rows() == want.pooled.rows());
    CHECK(got.first_entry == want.first_entry);
    Tally tally;
    std::vector<uint16_t> e;
    std::vector<float> p;
    for (Index i = 0; i < got.entries.size(); ++i)
      e.push_back(cuda::bf16_bits(static_cast<float>(got.entries.data()[i])));
    for (Index i = 0; i < got.pooled.size(); ++i) p.push_back(static_cast<float>(got.pooled.data()[i]));
    compare_entries(L, q, want, e, p, 0, false, tally);
    check_tally(tally, Variant::v3, book);
    for (int r : q.state.meaningful_rows(q.pos)) {
      CHECK(gpu_state.kv.row(r) == q.state.kv.row(r));
      CHECK(gpu_state.score.row(r) == q.state.score.row(r));
    }
  }
  MESSAGE(book.table());
}
