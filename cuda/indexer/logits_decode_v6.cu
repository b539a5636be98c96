// v6 of the indexer decode logits over a paged key cache (sm_90a; docs/cuda-indexer.md "Logits
// decode v6"): v5 (logits_decode_v4.cu: the same grid, CTA shape, consumers, ring protocol and tile
// scoring, so the logits are v5's bit for bit) with two changes, for the DeepGEMM layout with pages
// of a multiple of 64 keys (every tile then lies in one page: one run of codes, one of scale words):
//   - the producer warp's tile is one lane's work, not the warp's: lane l owns the tiles j = l mod 32
//     of the chunk, works out their pool offsets a window of 32 tiles at a time (the block-table
//     entries of the next window loaded while this one is copied), and for its tile arrives on the
//     stage's full barrier with the byte count and issues the two bulk copies; the other lanes only
//     arrive. v5's producer walked each tile's page runs in the warp (a multiply-shift split, a
//     shuffle of the table entry, the copies' offsets computed by lane 0 after it: ~130 warp
//     instructions a tile on one dependent chain); here a tile is ~75 (the owner's ~42);
//   - the query's A operand is built once a CTA (by consumer 0) and read by the three consumers,
//     where v5 built three identical copies: 16 KiB freed, two more ring stages (FP8 fp32: 9, v5 7).
// The tile ending at the sequence's length gets v5's treatment (its last n_valid % 4 scale words and
// the zeros past the length stored by the lanes before they arrive). Other page sizes, and the
// interleaved layout, run v5. The ring's producer and consumer bodies are decode_ring.cuh's (v7 runs
// them over many units a CTA); v6 is its one-unit case.
#include <cuda_runtime.h>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/indexer/decode_ring.cuh"
#include "cuda/indexer/indexer_api.h"
#include "cuda/indexer/logits_launch.h"

namespace dsv4::cuda {
namespace {

using namespace decode_ring;

// The CTA of sequence blockIdx.x, chunk blockIdx.y.
template <IndexerFormat F, ScoreStorage S>
__global__ void __launch_bounds__(kThreads, Config<F, S>::kCtasPerSm) decode_logits_v6(const DecodeArgs a) {
  using C = Config<F, S>;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  typename C::Smem& sm = *reinterpret_cast<typename C::Smem*>(smem_raw);
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int64_t b = blockIdx.x;
  const int64_t len = a.context_lens[b];
  const ChunkTiles chunk = chunk_tiles(len, a.n_cols, blockIdx.y);
  write_keyless_tiles(a.logits + b * a.n_cols, chunk, a.n_cols, t, kThreads);
  const int n_tiles = static_cast<int>(chunk.last - chunk.begin);
  if (n_tiles <= 0) return;  // uniform across the CTA

  if (t == 0) init_ring<F, S>(sm);
  __syncthreads();
  if (warp == kProducerWarp) {
    RingSlot at;
    produce_unit<F, S>(sm, sequence_pages(a, b, len), static_cast<uint32_t>(chunk.begin * kTileKeys), n_tiles, lane,
                       at);
    return;
  }
  const int g = warp / 4, tg = t % kGroupThreads;
  float row_weights[2];
  prepare_query<F, S>(sm, a, b, g, tg, row_weights);
  consumers_barrier();
  consume_unit<F, S>(sm, a, row_weights, b, len, chunk.begin, n_tiles, 0, g, g, tg);
}

template <IndexerFormat F, ScoreStorage S>
void launch(const DecodeArgs& a, cudaStream_t stream, const char* who) {
  launch_chunks(decode_logits_v6<F, S>, a, a.q.count, a.n_cols, kThreads,
                static_cast<int>(sizeof(typename Config<F, S>::Smem)), who, stream);
}

}  // namespace

namespace detail {

void decode_logits_v6(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                      const int32_t* context_lens, float* logits, int64_t n_cols, int* inexact, cudaStream_t stream) {
  if (q.count == 0 || n_cols == 0) return;
  if (keys.layout != IndexerCacheLayout::deepgemm || keys.page_keys % kTileKeys != 0) {
    decode_logits_v5(p, q, keys, context_lens, logits, n_cols, inexact, stream);  // a tile may span pages
    return;
  }
  const char* who = "indexer_logits_decode v6";
  const DecodeArgs a = walk_args(q, keys, context_lens, logits, n_cols, inexact, who);
  dispatch(p.format, p.scores, keys.layout, [&](auto f, auto s, auto l) {
    if constexpr (decltype(l)::value == IndexerCacheLayout::deepgemm)
      launch<decltype(f)::value, decltype(s)::value>(a, stream, who);
  });
}

}  // namespace detail
}  // namespace dsv4::cuda
