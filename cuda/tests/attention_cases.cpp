// Test inputs of the CUDA sparse MQA kernels, the oracle's answer and the derived checks
// (attention_cases.h; the derivations are in docs/cuda-attention.md, "Checks").
#include "cuda/tests/attention_cases.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>

#include "reference/numerics/bf16.h"
#include "reference/numerics/block_quant.h"
#include "reference/numerics/storage.h"
#include "reference/parallel.h"
#include "reference/precision.h"
#include "reference/primitives/dot.h"
#include "reference/stages/sparse_mqa.h"

namespace dsv4::cuda::attention::testing {
namespace {

using ref::Index;
using ref::Mat;

constexpr int kD = 512;
constexpr int kNope = 448;
constexpr int kBlock = 64;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double bf16_value(uint16_t code) { return ref::bf16_decode(code); }
uint16_t bf16_code(double v) { return ref::bf16_encode(static_cast<float>(v)); }
double fp32(double v) { return static_cast<double>(static_cast<float>(v)); }

int clamp_length(const std::vector<int32_t>& lengths, int64_t which, int topk) {
  if (lengths.empty()) return topk;
  return std::clamp<int>(lengths.at(static_cast<size_t>(which)), 0, topk);
}

std::vector<uint16_t> random_q(int64_t n, std::mt19937_64& gen) {
  std::uniform_real_distribution<double> u(-2, 2);
  std::vector<uint16_t> q(static_cast<size_t>(n));
  for (auto& v : q) v = bf16_code(u(gen));
  return q;
}

// sink_kind: 0 random N(0,1), 1 none, 2 +inf, 3 -inf, 4 +80, 5 -1e4, 6 a mix of all of them.
std::vector<float> make_sink(int kind, int n_heads, std::mt19937_64& gen) {
  if (kind == 1) return {};
  std::normal_distribution<double> n01(0, 1);
  const float special[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), 80.0f,
                           -1e4f, 1e4f};
  std::vector<float> s(static_cast<size_t>(n_heads));
  for (int h = 0; h < n_heads; ++h) {
    switch (kind) {
      case 2: s[h] = special[0]; break;
      case 3: s[h] = special[1]; break;
      case 4: s[h] = special[2]; break;
      case 5: s[h] = special[3]; break;
      case 6: s[h] = h % 3 == 0 ? special[h / 3 % 5] : static_cast<float>(n01(gen)); break;
      default: s[h] = static_cast<float>(n01(gen));
    }
  }
  return s;
}

// Rows of N(0, sigma) values, some with a block much smaller or larger than the rest, on the grid.
Mat random_rows(Index n, int d, double sigma, std::mt19937_64& gen) {
  std::normal_distribution<double> g(0, sigma);
  Mat m(n, d);
  for (Index i = 0; i < n; ++i)
    for (int c = 0; c < d; ++c) {
      double v = g(gen);
      if (i % 7 == 3 && c < kBlock) v *= 1e-3;                      // a tiny block
      if (i % 7 == 5 && c >= kBlock && c < 2 * kBlock) v *= 10;     // a large block
      if (i % 11 == 4 && c >= 2 * kBlock && c < 3 * kBlock) v = 0;  // an all-zero block (amax floor)
      m(i, c) = v;
    }
  return m;
}

// An invalid entry of an index list: -1, or (out_of_range) one of the other kinds.
int32_t invalid_entry(bool out_of_range, int64_t tokens, std::mt19937_64& gen) {
  if (!out_of_range) return -1;
  const int64_t kinds[] = {
      -1, tokens, tokens + 1000, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(), -123456};
  const int64_t v = kinds[std::uniform_int_distribution<int>(0, 5)(gen)];
  return static_cast<int32_t>(
      std::clamp<int64_t>(v, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
}

// `k` distinct entries of `owned` in random order, then -1 up to `width`.
std::vector<int32_t> pick(const std::vector<int32_t>& owned, int width, std::mt19937_64& gen) {
  std::vector<int32_t> v = owned;
  std::shuffle(v.begin(), v.end(), gen);
  v.resize(static_cast<size_t>(width), -1);
  return v;
}

// Row r of list `entries` (its `width` slots at r * width).
int32_t& at(std::vector<int32_t>& entries, int64_t row, int width, int slot) {
  return entries[static_cast<size_t>(row * width + slot)];
}

}  // namespace

// ---- the cases -------------------------------------------------------------------------------

bool DecodeCase::valid(int64_t row, int slot) const {
  const int64_t b = row / s_q;
  if (slot < topk) {
    if (slot >= clamp_length(lengths, b, topk)) return false;
    const int32_t e = list[static_cast<size_t>(row * topk + slot)];
    return e >= 0 && e < pool_rows.rows();
  }
  const int k = slot - topk;
  if (k >= clamp_length(extra_lengths, b, extra_topk)) return false;
  const int32_t e = extra_list[static_cast<size_t>(row * extra_topk + k)];
  return e >= 0 && e < extra_rows.rows();
}

OracleInputs DecodeCase::oracle_inputs() const {
  OracleInputs in;
  const int64_t n_rows = rows();
  const int slots = topk + extra_topk;
  in.n_heads = n_heads;
  in.scale = scale;
  in.q.resize(n_rows, static_cast<Index>(n_heads) * kD);
  for (Index i = 0; i < in.q.size(); ++i) in.q.data()[i] = bf16_value(q[static_cast<size_t>(i)]);
  in.kv.resize(pool_rows.rows() + extra_rows.rows(), kD);
  if (pool_rows.rows() > 0) in.kv.topRows(pool_rows.rows()) = pool_rows;
  if (extra_rows.rows() > 0) in.kv.bottomRows(extra_rows.rows()) = extra_rows;
  in.sink = ref::Vec::Constant(n_heads, -kInf);
  for (int h = 0; h < static_cast<int>(sink.size()); ++h) in.sink(h) = sink[h];
  in.indices.resize(n_rows, slots);
  for (int64_t r = 0; r < n_rows; ++r)
    for (int k = 0; k < slots; ++k) {
      int32_t idx = -1;
      if (valid(r, k))
        idx = k < topk
                  ? list[static_cast<size_t>(r * topk + k)]
                  : static_cast<int32_t>(pool_rows.rows()) + extra_list[static_cast<size_t>(r * extra_topk + k - topk)];
      in.indices(r, k) = idx;
    }
  return in;
}

bool PrefillCase::valid(int64_t row, int slot) const {
  if (slot >= clamp_length(lengths, row, topk)) return false;
  const int32_t e = list[static_cast<size_t>(row * topk + slot)];
  return e >= 0 && e < kv.rows();
}

OracleInputs PrefillCase::oracle_inputs() const {
  OracleInputs in;
  in.n_heads = n_heads;
  in.scale = scale;
  in.q.resize(s_q, static_cast<Index>(n_heads) * head_dim);
  for (Index i = 0; i < in.q.size(); ++i) in.q.data()[i] = bf16_value(q[static_cast<size_t>(i)]);
  in.kv = kv;
  in.sink = ref::Vec::Constant(n_heads, -kInf);
  for (int h = 0; h < static_cast<int>(sink.size()); ++h) in.sink(h) = sink[h];
  in.indices.resize(s_q, topk);
  for (int64_t r = 0; r < s_q; ++r)
    for (int k = 0; k < topk; ++k) in.indices(r, k) = valid(r, k) ? list[static_cast<size_t>(r * topk + k)] : -1;
  return in;
}

void to_model1_grid(Mat& rows) {
  const ref::BlockFormat fp8 = ref::BlockFormat::fp8_kv();
  for (Index i = 0; i < rows.rows(); ++i) {
    ref::fake_quant_row(fp8, std::span<double>(rows.row(i).data(), kNope));
    for (int c = kNope; c < kD; ++c) rows(i, c) = ref::round_to(ref::Storage::bf16, rows(i, c));
  }
}

namespace {

// Applies `damage` to slot `slot` of row `row` of the concatenated lists: `set(row, slot, value)`.
template <class Set>
void damage_lists(const Damage& d, int64_t n_rows, int slots, const std::vector<int64_t>& tokens_of_slot, Set set,
                  std::mt19937_64& gen) {
  std::bernoulli_distribution hit(d.invalid_fraction);
  for (int64_t r = 0; r < n_rows; ++r)
    for (int k = 0; k < slots; ++k) {
      const int64_t tokens = tokens_of_slot[static_cast<size_t>(k)];
      const bool empty_row = d.empty_rows && r % 3 == 2;
      const bool leading = r % 2 == 1 && k < kBlock * d.invalid_leading_blocks;
      if (empty_row || leading || (d.invalid_fraction > 0 && hit(gen)))
        set(r, k, invalid_entry(d.out_of_range, tokens, gen));
    }
}

}  // namespace

DecodeCase make_decode_case(const DecodeShape& s, std::mt19937_64& gen) {
  DecodeCase c;
  c.name = s.name;
  c.batch = s.batch;
  c.s_q = s.s_q;
  c.n_heads = s.n_heads;
  c.page_size = s.page_size;
  c.extra_page_size = s.extra_page_size;
  c.topk = s.topk;
  c.extra_topk = s.extra_topk;
  const int64_t n_rows = c.rows();

  // Pools: every sequence owns window_tokens (extra_tokens) tokens at scrambled places; one more
  // page than needed, so that whole pages nobody references exist too.
  const auto pool_of = [&](int per_seq, int page, std::vector<std::vector<int32_t>>& owned) {
    const int64_t need = int64_t{s.batch} * per_seq;
    const int64_t tokens = (need + page - 1) / page * page + page;
    std::vector<int32_t> perm(static_cast<size_t>(tokens));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), gen);
    owned.assign(static_cast<size_t>(s.batch), {});
    for (int b = 0; b < s.batch; ++b)
      owned[b].assign(perm.begin() + int64_t{b} * per_seq, perm.begin() + int64_t{b + 1} * per_seq);
    return random_rows(tokens, kD, s.kv_sigma, gen);
  };
  std::vector<std::vector<int32_t>> owned, extra_owned;
  c.pool_rows = s.topk > 0 ? pool_of(s.window_tokens, s.page_size, owned) : Mat(0, kD);
  c.extra_rows = s.extra_topk > 0 ? pool_of(s.extra_tokens, s.extra_page_size, extra_owned) : Mat(0, kD);
  to_model1_grid(c.pool_rows);
  to_model1_grid(c.extra_rows);

  c.list.assign(static_cast<size_t>(n_rows * c.topk), -1);
  c.extra_list.assign(static_cast<size_t>(n_rows * c.extra_topk), -1);
  for (int64_t r = 0; r < n_rows; ++r) {
    const int b = static_cast<int>(r / c.s_q);
    if (c.topk > 0) {
      const std::vector<int32_t> w = pick(owned[b], c.topk, gen);
      std::copy(w.begin(), w.end(), c.list.begin() + r * c.topk);
    }
    if (c.extra_topk > 0) {
      const std::vector<int32_t> e = pick(extra_owned[b], c.extra_topk, gen);
      std::copy(e.begin(), e.end(), c.extra_list.begin() + r * c.extra_topk);
    }
  }
  std::vector<int64_t> tokens_of_slot(static_cast<size_t>(c.topk + c.extra_topk));
  for (int k = 0; k < c.topk + c.extra_topk; ++k)
    tokens_of_slot[k] = k < c.topk ? c.pool_rows.rows() : c.extra_rows.rows();
  damage_lists(
      s.damage, n_rows, c.topk + c.extra_topk, tokens_of_slot,
      [&](int64_t r, int k, int32_t v) {
        if (k < c.topk)
          at(c.list, r, c.topk, k) = v;
        else
          at(c.extra_list, r, c.extra_topk, k - c.topk) = v;
      },
      gen);
  if (s.damage.lengths) {
    // Per sequence: 0, the full list, a length that is not a multiple of 64, random.
    const auto lengths = [&](int topk) {
      std::vector<int32_t> l(static_cast<size_t>(s.batch));
      for (int b = 0; b < s.batch; ++b) {
        const int kinds[] = {0, topk, std::max(0, topk - 37), std::uniform_int_distribution<int>(0, topk)(gen)};
        l[b] = kinds[b % 4];
      }
      return l;
    };
    if (c.topk > 0) c.lengths = lengths(c.topk);
    if (c.extra_topk > 0) c.extra_lengths = lengths(c.extra_topk);
  }
  c.q = random_q(n_rows * c.n_heads * kD, gen);
  c.sink = make_sink(s.sink_kind, c.n_heads, gen);
  poison_unreferenced(c);
  return c;
}

PrefillCase make_prefill_case(const PrefillShape& s, std::mt19937_64& gen) {
  PrefillCase c;
  c.name = s.name;
  c.s_q = s.s_q;
  c.n_heads = s.n_heads;
  c.head_dim = s.head_dim;
  c.topk = s.topk;
  c.kv = random_rows(s.s_kv, s.head_dim, s.kv_sigma, gen);
  for (Index i = 0; i < c.kv.size(); ++i) c.kv.data()[i] = ref::round_to(ref::Storage::bf16, c.kv.data()[i]);
  std::vector<int32_t> all(static_cast<size_t>(s.s_kv));
  std::iota(all.begin(), all.end(), 0);
  c.list.assign(static_cast<size_t>(int64_t{s.s_q} * s.topk), -1);
  for (int r = 0; r < s.s_q; ++r) {
    const std::vector<int32_t> w = pick(all, s.topk, gen);
    std::copy(w.begin(), w.end(), c.list.begin() + int64_t{r} * s.topk);
  }
  const std::vector<int64_t> tokens_of_slot(static_cast<size_t>(s.topk), s.s_kv);
  damage_lists(
      s.damage, s.s_q, s.topk, tokens_of_slot, [&](int64_t r, int k, int32_t v) { at(c.list, r, c.topk, k) = v; }, gen);
  if (s.damage.lengths) {
    c.lengths.resize(static_cast<size_t>(s.s_q));
    for (int r = 0; r < s.s_q; ++r) {
      const int kinds[] = {0, s.topk, std::max(0, s.topk - 37), std::uniform_int_distribution<int>(0, s.topk)(gen)};
      c.lengths[r] = kinds[r % 4];
    }
  }
  c.q = random_q(int64_t{s.s_q} * s.n_heads * s.head_dim, gen);
  c.sink = make_sink(s.sink_kind, c.n_heads, gen);
  poison_unreferenced(c);
  return c;
}

void poison_unreferenced(DecodeCase& c) {
  std::vector<char> used(static_cast<size_t>(c.pool_rows.rows()), 0),
      extra_used(static_cast<size_t>(c.extra_rows.rows()), 0);
  for (int64_t r = 0; r < c.rows(); ++r)
    for (int k = 0; k < c.topk + c.extra_topk; ++k) {
      if (!c.valid(r, k)) continue;
      if (k < c.topk)
        used[static_cast<size_t>(c.list[static_cast<size_t>(r * c.topk + k)])] = 1;
      else
        extra_used[static_cast<size_t>(c.extra_list[static_cast<size_t>(r * c.extra_topk + k - c.topk)])] = 1;
    }
  for (Index i = 0; i < c.pool_rows.rows(); ++i)
    if (!used[static_cast<size_t>(i)]) c.pool_rows.row(i).setConstant(kNaN);
  for (Index i = 0; i < c.extra_rows.rows(); ++i)
    if (!extra_used[static_cast<size_t>(i)]) c.extra_rows.row(i).setConstant(kNaN);
}

void poison_unreferenced(PrefillCase& c) {
  std::vector<char> used(static_cast<size_t>(c.kv.rows()), 0);
  for (int64_t r = 0; r < c.s_q; ++r)
    for (int k = 0; k < c.topk; ++k)
      if (c.valid(r, k)) used[static_cast<size_t>(c.list[static_cast<size_t>(r * c.topk + k)])] = 1;
  for (Index i = 0; i < c.kv.rows(); ++i)
    if (!used[static_cast<size_t>(i)]) c.kv.row(i).setConstant(kNaN);
}

// ---- the oracle's answer and the bounds -------------------------------------------------------

namespace {

// How far an fp32 tensor-core dot product of bf16 vectors (products exact) may be from the exact
// one, accumulated as the mma kernels do: 16 dims per mma step, steps in dim order. A step adds 16
// products to the accumulator in an adder that aligns every term to the largest exponent among
// them and truncates: each of the 17 terms loses less than one fp32 ulp (2^-23 relative) of the
// largest magnitude in the step, which is at most max(|partial sum before|, |after|, max |product|).
double mma_dot_error(const double* q, const double* v, Index d) {
  double partial = 0, bound = 0;
  for (Index k0 = 0; k0 < d; k0 += 16) {
    double largest = std::fabs(partial);
    for (Index i = k0; i < std::min(d, k0 + 16); ++i) {
      largest = std::max(largest, std::fabs(q[i] * v[i]));
      partial += q[i] * v[i];
    }
    largest = std::max(largest, std::fabs(partial));
    bound += 17 * 0x1p-23 * largest;
  }
  return bound;
}

}  // namespace

Expected expected(const OracleInputs& in, ProbsKind probs) {
  Expected e;
  const int H = in.n_heads;
  const Index d = in.kv.cols();
  const Index rows = in.q.rows();
  const Index slots = in.indices.cols();
  e.n_heads = H;
  e.head_dim = static_cast<int>(d);
  e.probs = probs;

  ref::PrecisionPolicy policy = ref::PrecisionPolicy::official();
  if (probs == ProbsKind::fp32) policy.attn_probs = ref::Storage::fp32;
  e.out = ref::sparse_mqa(in.q, in.kv, in.sink, in.indices, H, in.scale, policy);

  e.lse = Mat::Constant(rows, H, kInf);
  e.max_logit = Mat::Constant(rows, H, -kInf);
  e.weight_abs = Mat::Zero(rows, H * d);
  e.weight_sq = Mat::Zero(rows, H * d);
  e.rho_det = Mat::Zero(rows, H);
  e.lse_bound = Mat::Zero(rows, H);
  e.logit_bound = Mat::Zero(rows, H);
  const double scale = fp32(in.scale);
  ref::parallel_for(rows * H, [&](int64_t task) {
    const Index r = task / H;
    const int h = static_cast<int>(task % H);
    const double* q = in.q.row(r).data() + h * d;
    std::vector<Index> valid;
    std::vector<double> logit;
    double D = 0;
    int n_blocks = 0;
    for (Index b0 = 0; b0 < slots; b0 += kBlock) {
      bool any = false;
      for (Index k = b0; k < std::min(slots, b0 + kBlock); ++k) {
        const int32_t idx = in.indices(r, k);
        if (idx == -1) continue;
        any = true;
        const double* v = in.kv.row(idx).data();
        const double s = fp32(scale * fp32(ref::fixed_order_dot(q, v, d)));
        D = std::max(D, scale * mma_dot_error(q, v, d) + 0x1p-22 * std::fabs(s));
        valid.push_back(idx);
        logit.push_back(s);
      }
      n_blocks += any;
    }
    if (valid.empty()) return;
    const double M = *std::max_element(logit.begin(), logit.end());
    double R = 0, W = 0;
    for (double s : logit) {
      R = std::max(R, M - s);
      W += std::exp(s - M);
    }
    const double Z = W + std::exp(in.sink(h) - M);  // may be +inf (a huge sink): every weight 0
    const double n = static_cast<double>(valid.size());
    e.lse(r, h) = M + std::log(W);
    e.max_logit(r, h) = M;
    e.logit_bound(r, h) = D;
    // Weights: a logit error D moves a weight by e^(2D) - 1 ~ 2D relative (numerator and normalizer),
    // doubled for the two sides; each exp and each rescale product costs 2 fp32 ulps plus the
    // rounding of its argument (2^-24 |s - m| <= 2^-24 R), once per block with a valid slot and once
    // at the end, on each side; P.V in the tensor cores: 4 steps of 16 slots per block, 17 terms
    // truncated per step (as mma_dot_error), relative to C; the denominators' fp32 sums of n terms
    // lose <= n ulps on each side.
    e.rho_det(r, h) = 4 * D + (n_blocks + 1) * (0x1p-20 + 0x1p-23 * R) + (68 * n_blocks + 2 * n) * 0x1p-23;
    e.lse_bound(r, h) = D + (n + 4 * (n_blocks + 1)) * 0x1p-23 + (n_blocks + 1) * 0x1p-23 * R +
                        0x1p-22 * (std::fabs(M) + std::fabs(e.lse(r, h)));
    for (size_t j = 0; j < valid.size(); ++j) {
      const double w = std::exp(logit[j] - M) / Z;
      const double* v = in.kv.row(valid[j]).data();
      double* wa = e.weight_abs.row(r).data() + h * d;
      double* ws = e.weight_sq.row(r).data() + h * d;
      for (Index c = 0; c < d; ++c) {
        wa[c] += w * std::fabs(v[c]);
        ws[c] += (w * v[c]) * (w * v[c]);
      }
    }
  });
  return e;
}

namespace {

double probs_unit(ProbsKind p) { return p == ProbsKind::bf16 ? 0x1p-8 : 0x1p-24; }

bool same_class(double a, double b) {
  return std::isnan(a) == std::isnan(b) && (std::isinf(a) == std::isinf(b)) && (!std::isinf(a) || a == b);
}

std::string fmt(const char* f, double a, double b = 0, double c = 0, double d = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c, d);
  return buf;
}

}  // namespace

Check check_out(const Expected& e, const std::vector<uint16_t>& got_codes) {
  Check ch;
  const Index rows = e.out.rows();
  const int H = e.n_heads;
  const Index d = e.head_dim;
  if (static_cast<Index>(got_codes.size()) != e.out.size()) {
    ch.ok = false;
    ch.report = "out has " + std::to_string(got_codes.size()) + " values, expected " + std::to_string(e.out.size());
    return ch;
  }
  const double u_p = probs_unit(e.probs);
  int64_t bad_rows = 0;
  for (Index r = 0; r < rows; ++r)
    for (int h = 0; h < H; ++h) {
      const double rho = 2 * u_p + e.rho_det(r, h);
      double num = 0, den = 0, var = 0, det = 0;
      for (Index c = 0; c < d; ++c) {
        const Index i = h * d + c;
        const double x = e.out(r, i);
        const double y = bf16_value(got_codes[static_cast<size_t>(r * e.out.cols() + i)]);
        if (!same_class(x, y)) {
          if (ch.bad++ == 0)
            ch.report = "row " + std::to_string(r) + " head " + std::to_string(h) + " dim " + std::to_string(c) +
                        fmt(": got %g, expected %g (inf / NaN at different places)", y, x);
          continue;
        }
        if (!std::isfinite(x)) continue;
        const double err = std::fabs(y - x);
        // Per element: both sides' weights within rho of the exact ones (relative), so the two
        // unrounded outputs differ by <= rho C; each final bf16 rounding moves its value by at most
        // 2^-8 of itself.
        const double bound = rho * e.weight_abs(r, i) * (1 + 0x1p-7) + 0x1p-8 * (std::fabs(x) + std::fabs(y));
        ch.max_abs = std::max(ch.max_abs, err);
        if (x != 0) ch.max_rel = std::max(ch.max_rel, err / std::fabs(x));
        if (bound > 0) ch.worst_ratio = std::max(ch.worst_ratio, err / bound);
        if (err > bound) {
          if (ch.bad++ == 0)
            ch.report = "row " + std::to_string(r) + " head " + std::to_string(h) + " dim " + std::to_string(c) +
                        fmt(": got %.9g, expected %.9g, |diff| %.3g > bound %.3g", y, x, err, bound);
        }
        num += (y - x) * (y - x);
        den += x * x + y * y;
        // The cos-diff's expectation under independent roundings: each probability rounding is a
        // relative error uniform in +-u_P (variance u_P^2 / 3, two sides), each output rounding an
        // absolute one uniform within an ulp <= 2^-7 |x| (variance ulp^2 / 12, two sides).
        var += (2.0 / 3.0) * u_p * u_p * e.weight_sq(r, i) + (2.0 / 12.0) * 0x1p-14 * x * x;
        det += (e.rho_det(r, h) * e.weight_abs(r, i)) * (e.rho_det(r, h) * e.weight_abs(r, i));
      }
      if (den == 0) continue;  // both all zero
      // |x - y|^2 <= 2 |random part|^2 + 2 |deterministic part|^2; the random part's squared norm,
      // a sum of independent bounded terms, stays below 32 times its expectation (for one dominant
      // term the ratio is at most 6; for many it concentrates): docs/cuda-attention.md.
      const double cos_diff = num / den;
      const double cos_bound = (64 * var + 2 * det) / den;
      if (cos_diff > cos_bound) {
        if (bad_rows++ == 0 && ch.bad == 0)
          ch.report = "row " + std::to_string(r) + " head " + std::to_string(h) +
                      fmt(": cos-diff %.3g > bound %.3g", cos_diff, cos_bound);
      }
      if (cos_bound > 0) ch.worst_ratio = std::max(ch.worst_ratio, cos_diff / cos_bound);
    }
  ch.bad += bad_rows;
  ch.ok = ch.bad == 0;
  if (ch.ok)
    ch.report = fmt("out within bounds: max |diff| %.3g, max rel %.3g, worst error/bound %.3f", ch.max_abs, ch.max_rel,
                    ch.worst_ratio);
  return ch;
}

Check check_lse(const Expected& e, const std::vector<float>& got) {
  Check ch;
  if (static_cast<Index>(got.size()) != e.lse.size()) {
    ch.ok = false;
    ch.report = "lse has " + std::to_string(got.size()) + " values, expected " + std::to_string(e.lse.size());
    return ch;
  }
  for (Index i = 0; i < e.lse.size(); ++i) {
    const double x = e.lse.data()[i], y = got[static_cast<size_t>(i)];
    const double bound = e.lse_bound.data()[i];
    const bool bad = !same_class(x, y) || (std::isfinite(x) && std::fabs(y - x) > bound);
    if (std::isfinite(x) && std::isfinite(y)) {
      ch.max_abs = std::max(ch.max_abs, std::fabs(y - x));
      if (bound > 0) ch.worst_ratio = std::max(ch.worst_ratio, std::fabs(y - x) / bound);
    }
    if (bad && ch.bad++ == 0)
      ch.report = "lse of row " + std::to_string(i / e.n_heads) + " head " + std::to_string(i % e.n_heads) +
                  fmt(": got %.9g, expected %.9g, bound %.3g", y, x, bound);
  }
  ch.ok = ch.bad == 0;
  if (ch.ok) ch.report = fmt("lse within bounds: max |diff| %.3g, worst error/bound %.3f", ch.max_abs, ch.worst_ratio);
  return ch;
}

Check check_max_logit(const Expected& e, const std::vector<float>& got) {
  Check ch;
  if (static_cast<Index>(got.size()) != e.max_logit.size()) {
    ch.ok = false;
    ch.report =
        "max_logits has " + std::to_string(got.size()) + " values, expected " + std::to_string(e.max_logit.size());
    return ch;
  }
  for (Index i = 0; i < e.max_logit.size(); ++i) {
    const double x = e.max_logit.data()[i], y = got[static_cast<size_t>(i)];
    const double bound = e.logit_bound.data()[i];
    const bool bad = !same_class(x, y) || (std::isfinite(x) && std::fabs(y - x) > bound);
    if (std::isfinite(x) && std::isfinite(y)) ch.max_abs = std::max(ch.max_abs, std::fabs(y - x));
    if (bad && ch.bad++ == 0)
      ch.report = "max_logit of row " + std::to_string(i / e.n_heads) + " head " + std::to_string(i % e.n_heads) +
                  fmt(": got %.9g, expected %.9g, bound %.3g", y, x, bound);
  }
  ch.ok = ch.bad == 0;
  if (ch.ok) ch.report = fmt("max_logits within bounds: max |diff| %.3g", ch.max_abs);
  return ch;
}

Check check_out_bitwise(const Expected& e, const std::vector<uint16_t>& got, int allowed_rows) {
  Check ch;
  const std::vector<uint16_t> want = bf16_codes(e.out);
  if (got.size() != want.size()) {
    ch.ok = false;
    ch.report = "out has " + std::to_string(got.size()) + " values, expected " + std::to_string(want.size());
    return ch;
  }
  const Index d = e.head_dim;
  int64_t rows_differing = 0;
  for (size_t head_row = 0; head_row * d < want.size(); ++head_row) {
    bool differs = false;
    for (Index c = 0; c < d; ++c) {
      const size_t i = head_row * d + c;
      if (got[i] == want[i]) continue;
      differs = true;
      // one ulp: the same sign and adjacent magnitudes (codes of one sign are ordered)
      const bool one_ulp =
          (got[i] & 0x8000) == (want[i] & 0x8000) && std::abs(int(got[i] & 0x7FFF) - int(want[i] & 0x7FFF)) == 1;
      ch.max_abs = std::max(ch.max_abs, std::fabs(bf16_value(got[i]) - bf16_value(want[i])));
      if (!one_ulp) {
        if (ch.bad++ == 0)
          ch.report = "row " + std::to_string(head_row / e.n_heads) + " head " + std::to_string(head_row % e.n_heads) +
                      " dim " + std::to_string(c) +
                      fmt(": got %.9g, the oracle %.9g (more than one ulp)", bf16_value(got[i]), bf16_value(want[i]));
      }
    }
    rows_differing += differs;
  }
  if (rows_differing > allowed_rows) {
    if (ch.bad == 0)
      ch.report = std::to_string(rows_differing) + " (row, head) pairs differ from the oracle by an ulp, at most " +
                  std::to_string(allowed_rows) + " allowed";
    ch.bad += rows_differing - allowed_rows;
  }
  ch.ok = ch.bad == 0;
  if (ch.ok)
    ch.report =
        "bitwise equal to the oracle but for " + std::to_string(rows_differing) + " (row, head) pairs at one ulp";
  return ch;
}

std::vector<uint16_t> bf16_codes(const ref::Mat& m) {
  std::vector<uint16_t> c(static_cast<size_t>(m.size()));
  for (Index i = 0; i < m.size(); ++i) c[static_cast<size_t>(i)] = bf16_code(m.data()[i]);
  return c;
}

ref::Mat bf16_values(const std::vector<uint16_t>& codes, Index rows, Index cols) {
  Mat m(rows, cols);
  for (Index i = 0; i < m.size(); ++i) m.data()[i] = bf16_value(codes[static_cast<size_t>(i)]);
  return m;
}

}  // namespace dsv4::cuda::attention::testing
