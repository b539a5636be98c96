// The per-element bound of attn/core under DeepSeek's probability convention (docs/tolerances.md
// "Probability flips"; the formula is in the header).
#include "verify/tolerance/probability_flips.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "reference/numerics/bf16.h"
#include "reference/parallel.h"

namespace dsv4::verify {

namespace {

// DeepSeek's kernel walks the index list in blocks of this many slots (reference/stages/sparse_mqa.cpp).
constexpr ref::Index kIndexBlock = 64;
constexpr double kU32 = 0x1p-24;  // the unit roundoff of fp32

double bf16(double x) { return static_cast<double>(ref::bf16_round(static_cast<float>(x))); }

// One head of one token row: its d bound values into `out`.
ProbabilityFlipCounts head_bound(const double* q_h, const ref::Mat& kv, const int32_t* slots,
                                 const ref::HeadSoftmax& hs, double scale, const double* pre, double* out) {
  const ref::Index d = kv.cols();
  ProbabilityFlipCounts counts;
  std::fill(out, out + d, 0.0);
  if (hs.slots.empty()) return counts;
  const size_t n = hs.slots.size();
  counts.heads = 1;
  counts.keys = static_cast<int64_t>(n);

  // The logit error of each slot: the producer's fp32 dot product in another order. Its d
  // roundings are each at most 2^-24 of a partial sum, with independent signs: a random walk of
  // size 2^-24 sqrt(sum_k S_k^2). Partial sums of terms t_c = q_c kv_c of mixed signs stay near
  // sqrt(k/d) ||t||_2, of aligned ones near (k/d) |dot|: sqrt(sum_k S_k^2) <= sqrt(d) (||t||_2 +
  // |dot|) covers both. Times the scale, plus the fp32 roundings of the dot and of its product with
  // the scale (2 ulps of s_j).
  std::vector<double> logit_error(n);
  const double spread = kLogitSpread * kU32 * std::sqrt(static_cast<double>(d)) * scale;
  for (size_t k = 0; k < n; ++k) {
    const double* key = kv.row(slots[hs.slots[k].slot]).data();
    double sum_squares = 0, dot = 0;
    for (ref::Index c = 0; c < d; ++c) {
      const double t = q_h[c] * key[c];
      sum_squares += t * t;
      dot += t;
    }
    logit_error[k] = spread * (std::sqrt(sum_squares) + std::fabs(dot)) + 2 * kU32 * std::fabs(hs.slots[k].logit);
  }
  // The running max after a block is the largest logit seen so far; the producer's is the largest
  // of its own logits, so it moves by the error of a logit that is, or could overtake, the max:
  // those within twice the largest logit error of it.
  std::vector<double> max_error(n);
  {
    double running_max = -std::numeric_limits<double>::infinity(), widest = 0;
    size_t k = 0;
    while (k < n) {
      const ref::Index block = hs.slots[k].slot / kIndexBlock;
      size_t end = k;
      for (; end < n && hs.slots[end].slot / kIndexBlock == block; ++end) {
        running_max = std::max(running_max, hs.slots[end].logit);
        widest = std::max(widest, logit_error[end]);
      }
      double error = 0;
      for (size_t j = 0; j < end; ++j)
        if (hs.slots[j].logit >= running_max - 2 * widest) error = std::max(error, logit_error[j]);
      for (; k < end; ++k) max_error[k] = error;
    }
  }
  const double final_max_error = max_error.back();
  int64_t blocks = 0;
  for (size_t k = 0; k < n; ++k)
    blocks += k == 0 || hs.slots[k].slot / kIndexBlock != hs.slots[k - 1].slot / kIndexBlock;

  // Each probability's relative error, and the grid step its bf16 cast may land off by.
  std::vector<double> flip(n, 0.0);
  double max_relative = 0;
  for (size_t k = 0; k < n; ++k) {
    const ref::SlotProbability& sp = hs.slots[k];
    const double relative = logit_error[k] + max_error[k] + 2 * kU32 * std::fabs(sp.exponent) + kExpRelativeError;
    max_relative = std::max(max_relative, relative);
    const double e = sp.prob * std::expm1(relative);
    flip[k] = bf16(sp.prob + e) - bf16(sp.prob - e);
    counts.eligible_keys += flip[k] > 0;
  }
  counts.heads_with_eligible = counts.eligible_keys > 0;

  // The producer's rescales telescope to e^(m'_j - m'_final), each factor's exp within 2^-21.
  const double carry_error = 2 * final_max_error + static_cast<double>(blocks) * kExpRelativeError;
  const double accumulation = carry_error + kU32 * (kSumSpread * std::sqrt(static_cast<double>(n)) + 2.0 * blocks);
  const double denominator_error =
      max_relative + carry_error + kSumSpread * kU32 * std::sqrt(static_cast<double>(n + 1));
  for (size_t k = 0; k < n; ++k) {
    const ref::SlotProbability& sp = hs.slots[k];
    const double* key = kv.row(slots[sp.slot]).data();
    const double mass = bf16(sp.prob) * sp.carry;
    const double flip_mass = flip[k] * sp.carry;
    for (ref::Index c = 0; c < d; ++c) out[c] += (flip_mass + accumulation * mass) * std::fabs(key[c]);
  }
  for (ref::Index c = 0; c < d; ++c)
    out[c] = out[c] / hs.denominator + std::fabs(pre[c]) * (denominator_error + 2 * kU32);
  return counts;
}

}  // namespace

std::string to_string(ProbsConvention c) { return c == ProbsConvention::deepseek ? "deepseek" : "any"; }

ProbsConvention probs_convention_from_string(const std::string& name) {
  if (name == "deepseek") return ProbsConvention::deepseek;
  if (name == "any") return ProbsConvention::any;
  throw std::invalid_argument("probability convention '" + name + "': expected deepseek or any");
}

bool follows_deepseek_probabilities(const ref::PrecisionPolicy& p) {
  return p.attn_online_blocks && p.attn_probs == ref::Storage::bf16 && p.activations == ref::Storage::bf16;
}

ProbabilityFlipCounts& ProbabilityFlipCounts::operator+=(const ProbabilityFlipCounts& o) {
  heads += o.heads;
  keys += o.keys;
  eligible_keys += o.eligible_keys;
  heads_with_eligible += o.heads_with_eligible;
  return *this;
}

ProbabilityFlipBound probability_flip_bound(const ref::Mat& q, const ref::Mat& kv, const ref::IndexMat& indices,
                                            const std::vector<ref::HeadSoftmax>& softmax, double scale,
                                            const ref::Mat& pre_rounding) {
  const ref::Index d = kv.cols();
  const ref::Index s = q.rows();
  const int64_t heads = d > 0 ? q.cols() / d : 0;
  if (d == 0 || q.cols() != heads * d || indices.rows() != s || pre_rounding.rows() != s ||
      pre_rounding.cols() != q.cols() || static_cast<int64_t>(softmax.size()) != s * heads)
    throw std::invalid_argument(
        "probability_flip_bound: expected q [s, H*d], kv [n, d], indices [s, K], pre_rounding [s, H*d] and the "
        "softmax of s*H heads; got q [" +
        std::to_string(q.rows()) + ", " + std::to_string(q.cols()) + "], kv [" + std::to_string(kv.rows()) + ", " +
        std::to_string(d) + "], indices [" + std::to_string(indices.rows()) + ", " + std::to_string(indices.cols()) +
        "], pre_rounding [" + std::to_string(pre_rounding.rows()) + ", " + std::to_string(pre_rounding.cols()) + "], " +
        std::to_string(softmax.size()) + " heads");
  ProbabilityFlipBound result{ref::Mat::Zero(s, q.cols()), {}};
  std::vector<ProbabilityFlipCounts> per_row(static_cast<size_t>(s));
  ref::parallel_for(s, [&](int64_t i) {
    const int32_t* slots = indices.data() + i * indices.cols();  // row-major: row i's slots
    for (int64_t h = 0; h < heads; ++h)
      per_row[static_cast<size_t>(i)] +=
          head_bound(q.row(i).data() + h * d, kv, slots, softmax[static_cast<size_t>(i * heads + h)], scale,
                     pre_rounding.row(i).data() + h * d, result.bound.row(i).data() + h * d);
  });
  for (const ProbabilityFlipCounts& c : per_row) result.counts += c;
  return result;
}

}  // namespace dsv4::verify
