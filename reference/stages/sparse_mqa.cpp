// Sparse shared-KV attention with a sink (docs/math.md "attn/core", kernel.py sparse_attn).
#include "reference/stages/sparse_mqa.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/parallel.h"
#include "reference/primitives/dot.h"

namespace dsv4::ref {
namespace {

// kernel.py walks the index list in blocks of this many slots.
constexpr Index kIndexBlock = 64;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Every index must be -1 or a row of kv; checked before any arithmetic (and outside the parallel
// loop, which an exception must not leave).
void check_indices(const IndexMat& indices, Index n_rows) {
  for (Index i = 0; i < indices.rows(); ++i)
    for (Index c = 0; c < indices.cols(); ++c) {
      const int32_t idx = indices(i, c);
      if (idx < -1 || idx >= n_rows)
        throw std::out_of_range("sparse_mqa: index " + std::to_string(idx) + " at row " + std::to_string(i) +
                                ", column " + std::to_string(c) + " is outside [-1, " + std::to_string(n_rows) + ")");
    }
}

// The logits of one head over the slots of one token row: f32(scale * f32(q_h . kv_idx)), -inf for
// -1 slots. Only referenced kv rows are read.
std::vector<double> head_logits(const double* q_h, const Mat& kv, const int32_t* slots, Index n_slots, double scale,
                                const PrecisionPolicy& p) {
  std::vector<double> logits(static_cast<size_t>(n_slots), kNegInf);
  for (Index c = 0; c < n_slots; ++c)
    if (slots[c] != -1) {
      const double dot = round_to(p.fp32_tensors, fixed_order_dot(q_h, kv.row(slots[c]).data(), kv.cols()));
      logits[static_cast<size_t>(c)] = round_to(p.fp32_tensors, scale * dot);
    }
  return logits;
}

// The running state of one head's softmax: max m, denominator l and unnormalised output acc.
struct SoftmaxState {
  double max = kNegInf;
  double denominator = 0;
  Eigen::RowVectorXd acc;
};

// Folds the valid slots [begin, end) into the state at the common max `m_new` (>= the state's max):
//   acc <- f32(f32(acc * e^(m - m_new)) + sum_j P(p_j) kv_j),  l <- f32(f32(l * e^(m - m_new)) + f32(sum_j p_j)),
// p_j = f32(e^(f32(s_j - m_new))), P = p.attn_probs (the cast before the P.V product); the sums are fp64.
// trace (optional) receives each slot's exponent and p_j, and the rescales applied to earlier slots.
void fold_slots(SoftmaxState& st, double m_new, const std::vector<double>& logits, const int32_t* slots, Index begin,
                Index end, const Mat& kv, const PrecisionPolicy& p, HeadSoftmax* trace) {
  const Storage f32 = p.fp32_tensors;
  if (st.max != kNegInf) {  // before the first valid slot acc and l are 0: nothing to rescale
    const double rescale = round_to(f32, std::exp(round_to(f32, st.max - m_new)));
    st.acc = st.acc.unaryExpr([&](double v) { return round_to(f32, v * rescale); });
    st.denominator = round_to(f32, st.denominator * rescale);
    if (trace)
      for (SlotProbability& earlier : trace->slots) earlier.carry *= rescale;
  }
  Eigen::RowVectorXd block_acc = Eigen::RowVectorXd::Zero(kv.cols());
  double block_sum = 0;
  for (Index c = begin; c < end; ++c) {
    if (slots[c] == -1) continue;
    const double exponent = round_to(f32, logits[static_cast<size_t>(c)] - m_new);
    const double prob = round_to(f32, std::exp(exponent));
    block_acc += round_to(p.attn_probs, prob) * kv.row(slots[c]);
    block_sum += prob;
    if (trace) trace->slots.push_back({c, logits[static_cast<size_t>(c)], exponent, prob, 1.0});
  }
  st.acc = (st.acc + block_acc).unaryExpr([&](double v) { return round_to(f32, v); });
  st.denominator = round_to(f32, st.denominator + round_to(f32, block_sum));
  st.max = m_new;
}

double max_valid(const std::vector<double>& logits, const int32_t* slots, Index begin, Index end) {
  double m = kNegInf;
  for (Index c = begin; c < end; ++c)
    if (slots[c] != -1) m = std::max(m, logits[static_cast<size_t>(c)]);
  return m;
}

bool any_valid(const int32_t* slots, Index begin, Index end) {
  return std::any_of(slots + begin, slots + end, [](int32_t idx) { return idx != -1; });
}

}  // namespace

// q [s, H*d], kv [n, d], sink [H], indices [s, K] -> [s, H*d]
Mat sparse_mqa_before_rounding(const Mat& q, const Mat& kv, const Vec& sink, const IndexMat& indices, int n_heads,
                               double softmax_scale, const PrecisionPolicy& p, std::vector<HeadSoftmax>* softmax) {
  const Index d = kv.cols();
  if (n_heads < 1 || q.cols() != n_heads * d || sink.size() != n_heads || indices.rows() != q.rows())
    throw std::invalid_argument(
        "sparse_mqa: expected q [s, H*d], kv [n, d], sink [H], indices [s, K] with H = " + std::to_string(n_heads) +
        "; got q [" + std::to_string(q.rows()) + ", " + std::to_string(q.cols()) + "], kv [" +
        std::to_string(kv.rows()) + ", " + std::to_string(d) + "], sink [" + std::to_string(sink.size()) +
        "], indices [" + std::to_string(indices.rows()) + ", " + std::to_string(indices.cols()) + "]");
  check_indices(indices, kv.rows());

  const Storage f32 = p.fp32_tensors;
  const double scale = round_to(f32, softmax_scale);  // a float constant in the kernel
  const Index n_slots = indices.cols();
  Mat out = Mat::Zero(q.rows(), q.cols());
  if (softmax) softmax->assign(static_cast<size_t>(q.rows() * n_heads), HeadSoftmax{});
  parallel_for(q.rows(), [&](int64_t i) {
    const int32_t* slots = indices.data() + i * n_slots;  // row-major: row i's slots
    if (!any_valid(slots, 0, n_slots)) return;  // no key: output 0 (the window makes this impossible in DeepSeek)
    for (Index h = 0; h < n_heads; ++h) {
      const std::vector<double> logits = head_logits(q.row(i).data() + h * d, kv, slots, n_slots, scale, p);
      SoftmaxState st{kNegInf, 0, Eigen::RowVectorXd::Zero(d)};
      HeadSoftmax* trace = softmax ? &(*softmax)[static_cast<size_t>(i * n_heads + h)] : nullptr;
      if (p.attn_online_blocks) {
        // kernel.py: blocks of 64 slots with a running max; a block without a valid index changes nothing.
        for (Index begin = 0; begin < n_slots; begin += kIndexBlock) {
          const Index end = std::min(n_slots, begin + kIndexBlock);
          if (!any_valid(slots, begin, end)) continue;
          fold_slots(st, std::max(st.max, max_valid(logits, slots, begin, end)), logits, slots, begin, end, kv, p,
                     trace);
        }
      } else {
        fold_slots(st, max_valid(logits, slots, 0, n_slots), logits, slots, 0, n_slots, kv, p, trace);
      }
      // The sink: one more logit with a zero value vector, in the denominator only.
      const double sink_term = round_to(f32, std::exp(round_to(f32, sink(h) - st.max)));
      const double denominator = round_to(f32, st.denominator + sink_term);
      if (trace) trace->denominator = denominator;
      for (Index c = 0; c < d; ++c) out(i, h * d + c) = st.acc(c) / denominator;
    }
  });
  return out;
}

Mat sparse_mqa(const Mat& q, const Mat& kv, const Vec& sink, const IndexMat& indices, int n_heads, double softmax_scale,
               const PrecisionPolicy& p) {
  return rounded(p.activations, sparse_mqa_before_rounding(q, kv, sink, indices, n_heads, softmax_scale, p));
}

}  // namespace dsv4::ref
