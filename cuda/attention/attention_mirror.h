#pragma once
// The CUDA attention kernels behind the oracle's own types (reference/stages/sparse_mqa.h,
// reference/stages/output_projection.h), so that a verifier can run these stages on either
// backend: same inputs, same output type. One call = one upload, one launch, one download.
#include <cstdint>
#include <vector>

#include "cuda/attention/sparse_mqa_api.h"
#include "reference/primitives/rope.h"
#include "reference/tensor.h"

namespace dsv4::cuda::attention {

// The oracle's RoPE table rows for positions [0, n_positions): row t holds (cos, sin) of pair i at
// [t * 64 + 2i], the fp32 values of rope.cos_at(t, i), rope.sin_at(t, i). -> [n_positions * 64]
std::vector<float> rope_rows(const ref::RopeTable& rope, int64_t n_positions);

// ref::sparse_mqa on the prefill kernel (kv as bf16 rows): q [s, H*d], kv [n, d], sink [H] (-inf:
// none), indices [s, K] (-1: skip) -> [s, H*d]. probs: bf16 = the official policy, fp32 = official
// with fp32 probabilities. Throws std::invalid_argument when q or kv holds a value that is not a
// bf16 value (the kernels read bf16), an index outside [-1, n), or a shape the variant cannot run.
ref::Mat sparse_mqa(const ref::Mat& q, const ref::Mat& kv, const ref::Vec& sink, const ref::IndexMat& indices,
                    int n_heads, double softmax_scale, Probs probs, Variant variant);

// One decode call on FlashMLA's MODEL1 pages (flash_mla_with_kvcache, one sequence): a pool of pages
// in the byte layout of verify/layouts/flashmla_model1.h (page p at p * page bytes) and its page size.
struct Model1Pool {
  std::vector<uint8_t> bytes;
  int page_size = 0;
};
// q [s_q, H*512] (the sequence's query tokens), the window pool with its list [s_q, topk] and the
// compressed pool with its list [s_q, extra_topk] (pool indices page * page_size + offset, -1: skip;
// extra_topk 0: none), sink [H] -> out [s_q, H*512] bf16 values. Variant v2 or v3 (n_heads a
// multiple of 64). Throws std::invalid_argument as sparse_mqa_decode does.
ref::Mat sparse_mqa_decode(const ref::Mat& q, const Model1Pool& window, const ref::IndexMat& window_list,
                           const Model1Pool& compressed, const ref::IndexMat& compressed_list, const ref::Vec& sink,
                           int n_heads, double softmax_scale, Probs probs, Variant variant);

// ref::inverse_rope_heads (official policy): o [s, H*d] at positions start_pos.. -> [s, H*d].
ref::Mat inverse_rope_heads(const ref::Mat& o, int64_t start_pos, const ref::RopeTable& rope, int n_heads,
                            int head_dim);

// ref::grouped_wo_a (official policy) on cuBLAS: o [s, G*K] bf16 values, wo_a [G*R, K] bf16 values
// -> [s, G*R] bf16 values (fp32 accumulation: docs/cuda-attention.md gives the bound).
ref::Mat grouped_wo_a(const ref::Mat& wo_a, const ref::Mat& o, int groups);

}  // namespace dsv4::cuda::attention
