#pragma once
// Where a query row's slots point: the index arithmetic both kernel versions share, written once
// for the GPU and for the host test. A slot is valid when its entry is >= 0, below its pool's token
// count and before its row's length (sparse_mqa_api.h); only valid slots are ever dereferenced.
//
//   decode:  slots [0, topk) come from the window list and pool, [topk, topk + extra_topk) from the
//            extra list and pool; entry = page * page_size + offset (no block table).
//   prefill: slots [0, topk) are row numbers of one bf16 kv matrix.
#include <cstdint>

#include "cuda/attention/model1_codec.cuh"

namespace dsv4::cuda::attention {

struct PoolView {
  const uint8_t* bytes;
  int page_size;
  int64_t page_bytes;
  int64_t tokens;
};

// The two lists of one decode query row (batch b, query token i).
struct DecodeRowSlots {
  const int32_t* list;        // this row's topk entries
  const int32_t* extra_list;  // this row's extra_topk entries (nullptr when extra_topk == 0)
  int topk, extra_topk;
  int length, extra_length;  // valid prefix of each list (topk / extra_topk without lengths)
  PoolView pool, extra_pool;

  DSV4_HD int total() const { return topk + extra_topk; }

  // slot -> its token's 576 data bytes and 8 scale bytes; false (and nothing read past the index
  // entry) for an invalid slot or one past total().
  DSV4_HD bool resolve(int slot, const uint8_t*& data, const uint8_t*& scales) const {
    const bool extra = slot >= topk;
    const int k = extra ? slot - topk : slot;
    if (slot < 0 || k >= (extra ? extra_length : length)) return false;
    const int32_t token = extra ? extra_list[k] : list[k];
    // field by field (a reference to one of the two pools would put them in local memory)
    const int64_t tokens = extra ? extra_pool.tokens : pool.tokens;
    if (token < 0 || token >= tokens) return false;
    const uint8_t* bytes = extra ? extra_pool.bytes : pool.bytes;
    const int page_size = extra ? extra_pool.page_size : pool.page_size;
    const int64_t page_bytes = extra ? extra_pool.page_bytes : pool.page_bytes;
    data = bytes + model1_data_offset(token, page_size, page_bytes);
    scales = bytes + model1_scale_offset(token, page_size, page_bytes);
    return true;
  }
};

// Valid prefix of a list: its length entry clamped to [0, topk], or topk without lengths.
DSV4_HD inline int list_length(const int32_t* lengths, int64_t which, int topk) {
  if (lengths == nullptr) return topk;
  const int32_t n = lengths[which];
  return n < 0 ? 0 : (n > topk ? topk : n);
}

// One prefill query row: row numbers of a bf16 kv [s_kv, head_dim].
struct PrefillRowSlots {
  const int32_t* list;  // this row's topk entries
  int topk;
  int length;
  int64_t s_kv;

  DSV4_HD int total() const { return topk; }

  // slot -> the kv row it names, or -1 when invalid.
  DSV4_HD int64_t resolve(int slot) const {
    if (slot < 0 || slot >= length) return -1;
    const int32_t row = list[slot];
    return row < 0 || row >= s_kv ? -1 : row;
  }
};

}  // namespace dsv4::cuda::attention
