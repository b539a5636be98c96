// v1 of the indexer logits: one thread per (query, column) running logit_serial (indexer_math.cuh):
// the dot products and the head sum in double in the oracle's order, every rounding the oracle's,
// so the scores equal the oracle's bit for bit on the same codes. Columns outside the query's key
// range get -inf and read nothing. Slow on purpose: the reference point of the version ladder.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/indexer/cache_layout.cuh"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/indexer_math.cuh"
#include "cuda/indexer/logits_launch.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 128;

// The views of query i's heads (q and dense keys hold UE8M0 scale bytes).
struct QueryHeads {
  const uint8_t* codes;
  const uint8_t* scales;
  int64_t i;
  int heads;
  IndexerFormat format;
  __device__ VectorView operator()(int h) const {
    const int64_t vec = i * heads + h;
    return {codes + vec * code_bytes(format), scales + vec * kIndexerScaleBytes, format, false};
  }
};

__global__ void __launch_bounds__(kThreads)
    prefill_logits_v1_kernel(const LogitsParams p, const IndexerQueries q, const DenseKeys keys, const int32_t* ks,
                             const int32_t* ke, float* logits, int64_t n_cols) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= q.count * n_cols) return;
  const int64_t i = idx / n_cols, j = idx % n_cols;
  float out = -INFINITY;
  if (j >= ks[i] && j < ke[i]) {
    const VectorView k{keys.codes + j * code_bytes(p.format), keys.scales + j * kIndexerScaleBytes, p.format, false};
    out = logit_serial(QueryHeads{q.codes, q.scales, i, p.heads, p.format}, q.weights + i * p.heads, k, p.heads,
                       p.scores);
  }
  logits[idx] = out;
}

__global__ void __launch_bounds__(kThreads)
    decode_logits_v1_kernel(const LogitsParams p, const IndexerQueries q, const PagedKeys keys,
                            const int32_t* context_lens, float* logits, int64_t n_cols) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= q.count * n_cols) return;
  const int64_t b = idx / n_cols, t = idx % n_cols;
  float out = -INFINITY;
  if (t < context_lens[b]) {
    const int64_t page = keys.block_table[b * keys.table_stride + t / keys.page_keys];
    const KeyOffsets at =
        key_offsets(keys.layout, p.format, keys.page_keys, page, static_cast<int>(t % keys.page_keys));
    const VectorView k{keys.pool + at.codes, keys.pool + at.scale_word, p.format, p.format == IndexerFormat::fp8};
    out = logit_serial(QueryHeads{q.codes, q.scales, b, p.heads, p.format}, q.weights + b * p.heads, k, p.heads,
                       p.scores);
  }
  logits[idx] = out;
}

}  // namespace

namespace detail {

void prefill_logits_v1(const LogitsParams& p, const IndexerQueries& q, const DenseKeys& keys, const int32_t* ks,
                       const int32_t* ke, float* logits, int64_t n_cols, cudaStream_t stream) {
  const int64_t n = q.count * n_cols;
  if (n == 0) return;
  prefill_logits_v1_kernel<<<grid_blocks(n, kThreads, "indexer_logits_prefill"), kThreads, 0, stream>>>(
      p, q, keys, ks, ke, logits, n_cols);
  CUDA_CHECK_LAUNCH();
}

void decode_logits_v1(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, cudaStream_t stream) {
  const int64_t n = q.count * n_cols;
  if (n == 0) return;
  decode_logits_v1_kernel<<<grid_blocks(n, kThreads, "indexer_logits_decode"), kThreads, 0, stream>>>(
      p, q, keys, context_lens, logits, n_cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace dsv4::cuda
