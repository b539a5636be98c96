#pragma once
// The per-element bound of attn/core's value before its bf16 rounding, for a producer that follows
// DeepSeek's probability convention (docs/tolerances.md 4.11, "Probability flips"): the slots walked
// in blocks of 64 in index order with a running max m, p_j = e^(s_j - m) cast to bf16 before P.V,
// the denominator summed from the fp32 p_j. Such a producer's own softmax (another fp32 order of the
// logit's dot product, exp2 with the scale folded, its running max) moves each p_j by a relative
// eps_j at most; its bf16 cast lands on the oracle's bf16(p_j) except where p_j lies within
// eps_j * p_j of a bf16 rounding boundary (key j is then *eligible to flip*, by the grid step
// there). For output element (row i, head h, dim c):
//   bound = sum_{j eligible} step_j |kv_j[c]| carry_j / den                    (probability flips)
//         + A_c (eps_carry + 2^-24 (lambda sqrt(n) + 2 n_blocks))             (fp32 P.V accumulation)
//         + |o_c| (eps_den + 2^-23)                                            (denominator, division)
// with A_c = sum_j |bf16(p_j) kv_j[c]| carry_j / den over the n valid slots, carry_j the rescales
// applied after the slot's block, den the oracle's denominator. A probability that is not cast to
// bf16 moves the output by sum_j (p_j - bf16(p_j)) kv_j[c] carry_j / den over EVERY slot, which the
// eligible few do not cover: the elements it carries across a bf16 boundary are unexplained flips.
#include <cstdint>
#include <string>
#include <vector>

#include "reference/precision.h"
#include "reference/stages/sparse_mqa.h"
#include "reference/tensor.h"

namespace dsv4::verify {

// The probability convention a producer of attn/core follows: `deepseek` (the one above: the bound
// below applies), or `any` (another block size or order, split-KV, probabilities at another max:
// they round on another grid, and attn/core keeps the tolerance row's bound). A capture says which
// in its root attribute `probs_convention` (docs/capture-format.md); absent means `any`.
enum class ProbsConvention { deepseek, any };
std::string to_string(ProbsConvention c);                               // "deepseek", "any"
ProbsConvention probs_convention_from_string(const std::string& name);  // throws std::invalid_argument
// The policy computes attn/core by that convention with bf16 probabilities and a bf16 output (the
// oracle under `official`): the oracle's softmax is one the bound can be derived from.
bool follows_deepseek_probabilities(const ref::PrecisionPolicy& p);

// What the bound rests on, counted over one call: (row, head) pairs with a valid slot, the valid
// slots, the keys eligible to flip, and the pairs with at least one.
struct ProbabilityFlipCounts {
  int64_t heads = 0;
  int64_t keys = 0;
  int64_t eligible_keys = 0;
  int64_t heads_with_eligible = 0;
  ProbabilityFlipCounts& operator+=(const ProbabilityFlipCounts& o);
};

struct ProbabilityFlipBound {
  ref::Mat bound;  // [s, H*d], in the layout of attn/core's rows
  ProbabilityFlipCounts counts;
};

// The parts of the relative error eps_j a convention-following producer's probability may carry
// against the oracle's p_j (docs/tolerances.md "Probability flips").
// The tail of an fp32 dot product's random walk of rounding errors, in units of
// 2^-24 sqrt(d) (||q * kv||_2 + |q . kv|) (F2's lambda; the walk's RMS is 0.2 to 0.4 of that unit).
inline constexpr double kLogitSpread = 8.0;
// exp of the producer (__expf / ex2.approx with the log2(e) product rounded: ~2^-22 each) and the
// fp32 roundings of both sides' p_j (2^-24 each): 2^-21 covers them with a factor of ~1.5.
inline constexpr double kExpRelativeError = 0x1p-21;
// Spread of the fp32 sums over the slots (P.V per dim, the denominator): F2's lambda.
inline constexpr double kSumSpread = 8.0;

// q [s, H*d], kv [n, d], indices [s, K], softmax: the oracle's (ref::sparse_mqa_before_rounding's
// `softmax` output, [s*H]), scale: the softmax scale, pre_rounding: the oracle's output before its
// bf16 rounding [s, H*d]. Throws std::invalid_argument when the shapes disagree.
ProbabilityFlipBound probability_flip_bound(const ref::Mat& q, const ref::Mat& kv, const ref::IndexMat& indices,
                                            const std::vector<ref::HeadSoftmax>& softmax, double scale,
                                            const ref::Mat& pre_rounding);

}  // namespace dsv4::verify
