#pragma once
// The kernels' by-value views of DecodeArgs and PrefillArgs (sparse_mqa_api.h): one query row's
// slots, q and outputs. A query row is (batch b, query token i) in decode, row = b * s_q + i, and a
// query token in prefill.
#include <cstdint>

#include "cuda/attention/slot_source.cuh"
#include "cuda/attention/sparse_mqa_api.h"

namespace dsv4::cuda::attention {

struct DecodeParams {
  int batch, s_q, n_heads;
  const uint16_t* q;
  PoolView pool, extra_pool;
  const int32_t* list;
  const int32_t* lengths;
  const int32_t* extra_list;
  const int32_t* extra_lengths;
  int topk, extra_topk;
  const float* sink;
  float scale;
  uint16_t* out;
  float* lse;

  static constexpr int kHeadDimMax = kHeadDim;
  DSV4_HD int head_dim() const { return kHeadDim; }
  DSV4_HD int64_t rows() const { return int64_t{batch} * s_q; }
  DSV4_HD int total_slots() const { return topk + extra_topk; }

  DSV4_HD DecodeRowSlots row_slots(int64_t row) const {
    const int64_t b = row / s_q;
    DecodeRowSlots r;
    r.list = list + row * topk;
    r.extra_list = extra_topk > 0 ? extra_list + row * extra_topk : nullptr;
    r.topk = topk;
    r.extra_topk = extra_topk;
    r.length = list_length(lengths, b, topk);
    r.extra_length = extra_topk > 0 ? list_length(extra_lengths, b, extra_topk) : 0;
    r.pool = pool;
    r.extra_pool = extra_pool;
    return r;
  }
  // q of (row, head): 512 bf16 codes.
  DSV4_HD const uint16_t* q_row(int64_t row, int head) const { return q + (row * n_heads + head) * kHeadDim; }
  DSV4_HD uint16_t* out_row(int64_t row, int head) const { return out + (row * n_heads + head) * kHeadDim; }
  // lse [batch, n_heads, s_q]
  DSV4_HD float* lse_at(int64_t row, int head) const {
    const int64_t b = row / s_q, i = row % s_q;
    return lse + (b * n_heads + head) * s_q + i;
  }
  DSV4_HD float* max_logit_at(int64_t, int) const { return nullptr; }
};

struct PrefillParams {
  int s_q, n_heads, d;
  int64_t s_kv;
  const uint16_t* q;
  const uint16_t* kv;
  const int32_t* list;
  const int32_t* lengths;
  int topk;
  const float* sink;
  float scale;
  uint16_t* out;
  float* max_logits;
  float* lse;

  static constexpr int kHeadDimMax = kHeadDim;
  DSV4_HD int head_dim() const { return d; }
  DSV4_HD int64_t rows() const { return s_q; }
  DSV4_HD int total_slots() const { return topk; }

  DSV4_HD PrefillRowSlots row_slots(int64_t row) const {
    PrefillRowSlots r;
    r.list = list + row * topk;
    r.topk = topk;
    r.length = list_length(lengths, row, topk);
    r.s_kv = s_kv;
    return r;
  }
  DSV4_HD const uint16_t* q_row(int64_t row, int head) const { return q + (row * n_heads + head) * d; }
  DSV4_HD uint16_t* out_row(int64_t row, int head) const { return out + (row * n_heads + head) * d; }
  // lse, max_logits [s_q, n_heads] (nullptr when not asked for)
  DSV4_HD float* lse_at(int64_t row, int head) const { return lse ? lse + row * n_heads + head : nullptr; }
  DSV4_HD float* max_logit_at(int64_t row, int head) const {
    return max_logits ? max_logits + row * n_heads + head : nullptr;
  }
};

DecodeParams make_decode_params(const DecodeArgs& a);
PrefillParams make_prefill_params(const PrefillArgs& a);

}  // namespace dsv4::cuda::attention
