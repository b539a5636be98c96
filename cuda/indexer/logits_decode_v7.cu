// v7 of the indexer decode logits over a paged key cache (sm_90a; docs/cuda-indexer.md "Logits
// decode v7"): v6's ring (decode_ring.cuh: the same producer, consumers, stages and tile scoring, so
// the logits are v6's bit for bit) on a persistent grid. v6 starts a CTA per (sequence, chunk) unit,
// and each start costs ~3000 cycles before the first MMA (the length's load, the block table's, the
// first copy's DRAM latency, the query build) in a ~88 k-cycle life; here kCtasPerSm CTAs an SM each
// walk units blockIdx.x, blockIdx.x + gridDim.x, ... (unit u: sequence u % batch, chunk u / batch,
// v6's launch order), the ring's stages and phases running on across units: the producer copies the
// next unit's tiles while the consumers score this one's. At a unit boundary consumer 0 rebuilds the
// query operand (one buffer: a second would cost FP8 a stage) once the other consumers are done with
// the previous unit's tiles (a named barrier they arrive on, it waits on). The DeepGEMM layout with
// pages of a multiple of 64 keys, as v6; other pages and the interleaved layout run v5.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/indexer/decode_ring.cuh"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/logits_launch.h"

namespace dsv4::cuda {
namespace {

using namespace decode_ring;

// Named barrier of a unit boundary: consumers 1 and 2 arrive once done with the previous unit's
// tiles, consumer 0 waits there before it overwrites the query operand they read.
constexpr int kUnitBarrier = kConsumersBarrier + 1;

// Unit u of the walk: its sequence, length and column tiles (every role of the CTA works it out).
struct Unit {
  int64_t b, len;
  ChunkTiles chunk;
};

__device__ inline Unit unit_at(const DecodeArgs& a, int64_t u) {
  const int64_t b = u % a.q.count;
  const int64_t len = a.context_lens[b];
  return {b, len, chunk_tiles(len, a.n_cols, static_cast<uint32_t>(u / a.q.count))};
}

// A persistent CTA: units blockIdx.x + i * gridDim.x of the batch x n_chunks units. Every thread
// writes its share of each unit's keyless tiles (v6's stride); units without keys skip the ring.
template <IndexerFormat F, ScoreStorage S>
__global__ void __launch_bounds__(kThreads, Config<F, S>::kCtasPerSm)
    decode_logits_v7(const DecodeArgs a, int64_t n_chunks) {
  using C = Config<F, S>;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  typename C::Smem& sm = *reinterpret_cast<typename C::Smem*>(smem_raw);
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int64_t n_units = a.q.count * n_chunks;
  if (t == 0) init_ring<F, S>(sm);
  __syncthreads();
  if (warp == kProducerWarp) {
    RingSlot at;
    for (int64_t u = blockIdx.x; u < n_units; u += gridDim.x) {
      const Unit w = unit_at(a, u);
      write_keyless_tiles(a.logits + w.b * a.n_cols, w.chunk, a.n_cols, t, kThreads);
      const int n_tiles = static_cast<int>(w.chunk.last - w.chunk.begin);
      if (n_tiles > 0)
        produce_unit<F, S>(sm, sequence_pages(a, w.b, w.len), static_cast<uint32_t>(w.chunk.begin * kTileKeys), n_tiles,
                           lane, at);
    }
    return;
  }
  const int g = warp / 4, tg = t % kGroupThreads;
  int n_first = 0;  // the CTA's tiles before this unit's (uniform across the consumers)
  for (int64_t u = blockIdx.x; u < n_units; u += gridDim.x) {
    const Unit w = unit_at(a, u);
    write_keyless_tiles(a.logits + w.b * a.n_cols, w.chunk, a.n_cols, t, kThreads);
    const int n_tiles = static_cast<int>(w.chunk.last - w.chunk.begin);
    if (n_tiles <= 0) continue;
    if (n_first > 0) {  // the previous unit's operand is still read until every consumer is done
      if (g == 0)
        asm volatile("bar.sync %0, %1;\n" ::"n"(kUnitBarrier), "n"(kConsumers * kGroupThreads) : "memory");
      else
        asm volatile("bar.arrive %0, %1;\n" ::"n"(kUnitBarrier), "n"(kConsumers * kGroupThreads) : "memory");
    }
    float row_weights[2];
    prepare_query<F, S>(sm, a, w.b, g, tg, row_weights);
    consumers_barrier();
    consume_unit<F, S>(sm, a, row_weights, w.b, w.len, w.chunk.begin, n_tiles, n_first, first_own_tile(n_first, g), g,
                       tg);
    n_first += n_tiles;
  }
}

// kCtasPerSm CTAs a multiprocessor (fewer where the batch has fewer units).
template <IndexerFormat F, ScoreStorage S>
void launch(const DecodeArgs& a, cudaStream_t stream, const char* who) {
  using C = Config<F, S>;
  const int smem = static_cast<int>(sizeof(typename C::Smem));
  CUDA_CHECK(cudaFuncSetAttribute(decode_logits_v7<F, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t n_col_tiles = (a.n_cols + kTileKeys - 1) / kTileKeys;
  const int64_t n_chunks = (n_col_tiles + kChunkTiles - 1) / kChunkTiles;
  const int64_t grid = std::min<int64_t>(a.q.count * n_chunks, static_cast<int64_t>(C::kCtasPerSm) * sms);
  // A CTA counts its tiles in an int (the ring's stage, phase and consumer of each).
  detail::require((a.q.count * n_chunks + grid - 1) / grid * kChunkTiles <= INT_MAX,
                  std::string(who) + ": " + std::to_string(a.q.count) + " sequences of " + std::to_string(a.n_cols) +
                      " columns are more tiles a CTA than an int counts");
  decode_logits_v7<F, S><<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(a, n_chunks);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

namespace detail {

void decode_logits_v7(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream) {
  if (q.count == 0 || n_cols == 0) return;
  if (keys.layout != IndexerCacheLayout::deepgemm || keys.page_keys % kTileKeys != 0) {
    decode_logits_v5(p, q, keys, context_lens, logits, n_cols, inexact, stream);  // a tile may span pages
    return;
  }
  const char* who = "indexer_logits_decode v7";
  const DecodeArgs a = walk_args(q, keys, context_lens, logits, n_cols, inexact, who);
  dispatch(p.format, p.scores, keys.layout, [&](auto f, auto s, auto l) {
    if constexpr (decltype(l)::value == IndexerCacheLayout::deepgemm)
      launch<decltype(f)::value, decltype(s)::value>(a, stream, who);
  });
}

}  // namespace detail
}  // namespace dsv4::cuda
