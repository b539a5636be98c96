#pragma once
// Where a key of a paged indexer cache lives (indexer_api.h PagedKeys), for host and device code:
// the byte offset of its code bytes and of its scale word within the pool. The DeepGEMM offsets
// are those of verify/layouts/deepgemm_indexer_cache.h (test_cuda_host checks them against it).
#include <cstdint>

#include "cuda/common/numerics.cuh"
#include "cuda/indexer/formats.h"
#include "cuda/indexer/indexer_api.h"

namespace dsv4::cuda {

struct KeyOffsets {
  int64_t codes;
  int64_t scale_word;
};

// Slot `slot` of pool page `page`.
DSV4_HD inline KeyOffsets key_offsets(IndexerCacheLayout layout, IndexerFormat format, int page_keys, int64_t page,
                                      int slot) {
  const int64_t cb = code_bytes(format);
  const int64_t page_start = page * page_keys * (cb + kIndexerScaleBytes);
  if (layout == IndexerCacheLayout::interleaved) {
    const int64_t at = page_start + slot * (cb + kIndexerScaleBytes);
    return {at, at + cb};
  }
  return {page_start + slot * cb, page_start + page_keys * cb + int64_t{slot} * kIndexerScaleBytes};
}

}  // namespace dsv4::cuda
