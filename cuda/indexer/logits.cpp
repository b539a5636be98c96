// The indexer logits entry points (indexer_api.h): argument checks, then the version asked for.
#include <cstdint>
#include <string>

#include "cuda/common/launch_checks.h"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/logits_launch.h"

namespace dsv4::cuda {
namespace {

// newest: the entry's newest version (prefill v4, decode v7).
void check_common(const LogitsParams& p, const IndexerQueries& q, int64_t n_cols, Variant v, const char* who,
                  Variant newest) {
  const std::string w(who);
  detail::require_variant(static_cast<int>(v) <= static_cast<int>(newest), v, who,
                          newest == Variant::v7 ? "v1, v2, v3, v4, v5, v6, v7" : "v1, v2, v3, v4");
  detail::require(p.heads >= 1, w + ": heads must be >= 1, got " + std::to_string(p.heads));
  detail::require(v == Variant::v1 || p.heads == 64, w + " " + variant_name(v) +
                                                         ": computes 64 heads per query (one wgmma M tile), got " +
                                                         std::to_string(p.heads) + " heads: use v1");
  detail::require(q.count >= 0 && n_cols >= 0, w + ": negative sizes (queries " + std::to_string(q.count) +
                                                   ", columns " + std::to_string(n_cols) + ")");
  detail::require(q.count == 0 || (q.codes && q.scales && q.weights),
                  w + ": the query codes, scales and weights must be device pointers, got a nullptr");
}

}  // namespace

void indexer_logits_prefill(const LogitsParams& p, const IndexerQueries& q, const DenseKeys& keys, const int32_t* ks,
                            const int32_t* ke, float* logits, int64_t n_cols, Variant v, cudaStream_t stream,
                            int* fp4_inexact) {
  check_common(p, q, n_cols, v, "indexer_logits_prefill", Variant::v4);
  if (q.count == 0 || n_cols == 0) return;
  detail::require(ks && ke && logits,
                  "indexer_logits_prefill: ks, ke and logits must be device pointers, got a nullptr");
  detail::require(keys.count == 0 || (keys.codes && keys.scales),
                  "indexer_logits_prefill: the key codes and scales must be device pointers, got a nullptr");
  detail::require(v == Variant::v1 || keys.count == 0 || reinterpret_cast<uintptr_t>(keys.codes) % 16 == 0,
                  std::string("indexer_logits_prefill ") + variant_name(v) +
                      ": the key codes must be 16-byte aligned (16-byte copies, TMA), got an address " +
                      std::to_string(reinterpret_cast<uintptr_t>(keys.codes) % 16) + " bytes past a boundary: use v1");
  if (v == Variant::v1)
    detail::prefill_logits_v1(p, q, keys, ks, ke, logits, n_cols, stream);
  else if (v == Variant::v2)
    detail::prefill_logits_v2(p, q, keys, ks, ke, logits, n_cols, fp4_inexact, stream);
  else if (v == Variant::v3)
    detail::prefill_logits_v3(p, q, keys, ks, ke, logits, n_cols, fp4_inexact, stream);
  else
    detail::prefill_logits_v4(p, q, keys, ks, ke, logits, n_cols, fp4_inexact, stream);
}

void indexer_logits_decode(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                           const int32_t* context_lens, float* logits, int64_t n_cols, Variant v, cudaStream_t stream,
                           int* fp4_inexact) {
  check_common(p, q, n_cols, v, "indexer_logits_decode", Variant::v7);
  detail::require(keys.format == p.format, "indexer_logits_decode: the cache holds " +
                                               std::string(format_name(keys.format)) + " keys, the call computes " +
                                               format_name(p.format));
  detail::require(keys.page_keys >= 1 && keys.table_stride >= 1,
                  "indexer_logits_decode: page_keys and table_stride must be >= 1, got " +
                      std::to_string(keys.page_keys) + " and " + std::to_string(keys.table_stride));
  detail::require(v == Variant::v1 || keys.page_keys % 4 == 0,
                  "indexer_logits_decode " + std::string(variant_name(v)) +
                      ": page_keys must be a multiple of 4 (16-byte aligned pages), got " +
                      std::to_string(keys.page_keys));
  if (q.count == 0 || n_cols == 0) return;
  detail::require(context_lens && logits && keys.pool && keys.block_table,
                  "indexer_logits_decode: context_lens, logits, the pool and the block table must be device pointers, "
                  "got a nullptr");
  // v2 and later copy DeepGEMM pages in 16-byte units (v5 to v7: bulk copies; v7 also TMA), interleaved ones in 4-byte
  // units.
  const uintptr_t pool_align = keys.layout == IndexerCacheLayout::deepgemm ? 16 : 4;
  detail::require(v == Variant::v1 || reinterpret_cast<uintptr_t>(keys.pool) % pool_align == 0,
                  "indexer_logits_decode " + std::string(variant_name(v)) + ": the pool must be " +
                      std::to_string(pool_align) + "-byte aligned for the " +
                      (keys.layout == IndexerCacheLayout::deepgemm ? "DeepGEMM" : "interleaved") +
                      " layout, got an address " + std::to_string(reinterpret_cast<uintptr_t>(keys.pool) % pool_align) +
                      " bytes past a boundary: use v1");
  if (v == Variant::v1)
    detail::decode_logits_v1(p, q, keys, context_lens, logits, n_cols, stream);
  else if (v == Variant::v2)
    detail::decode_logits_v2(p, q, keys, context_lens, logits, n_cols, fp4_inexact, stream);
  else if (v == Variant::v3)
    detail::decode_logits_v3(p, q, keys, context_lens, logits, n_cols, fp4_inexact, stream);
  else if (v == Variant::v4)
    detail::decode_logits_v4(p, q, keys, context_lens, logits, n_cols, fp4_inexact, stream);
  else if (v == Variant::v5)
    detail::decode_logits_v5(p, q, keys, context_lens, logits, n_cols, fp4_inexact, stream);
  else if (v == Variant::v6)
    detail::decode_logits_v6(p, q, keys, context_lens, logits, n_cols, fp4_inexact, stream);
  else
    detail::decode_logits_v7(p, q, keys, context_lens, logits, n_cols, fp4_inexact, stream);
}

void check_decode_tables(const PagedKeys& keys, int batch, const int32_t* context_lens_host,
                         const int32_t* block_table_host, int64_t n_cols) {
  for (int b = 0; b < batch; ++b) {
    const int64_t len = context_lens_host[b];
    const std::string row = "indexer_logits_decode row " + std::to_string(b);
    detail::require(len >= 0 && len <= n_cols, row + ": context length " + std::to_string(len) +
                                                   " outside [0, n_cols = " + std::to_string(n_cols) + "]");
    const int64_t pages = (len + keys.page_keys - 1) / keys.page_keys;
    detail::require(pages <= keys.table_stride, row + ": " + std::to_string(len) + " keys need " +
                                                    std::to_string(pages) + " pages, the block table row holds " +
                                                    std::to_string(keys.table_stride));
    for (int64_t p = 0; p < pages; ++p) {
      const int64_t page = block_table_host[static_cast<int64_t>(b) * keys.table_stride + p];
      detail::require(page >= 0 && page < keys.pool_pages, row + ": page " + std::to_string(p) + " maps to pool page " +
                                                               std::to_string(page) + ", the pool has " +
                                                               std::to_string(keys.pool_pages));
    }
  }
}

}  // namespace dsv4::cuda
