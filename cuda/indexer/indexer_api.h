#pragma once
// CUDA lightning indexer (docs/cuda-indexer.md; the oracle is reference/stages/indexer.h): the q
// path (RoPE, Hadamard, block quantization; the head weights), and the logits of a prefill over
// dense keys and of a decode step over a paged key cache,
//   I[i, j] = S( sum_h S( S(w_h) relu( S(q_h . k_j) ) ) )   for key j in query i's range, else -inf,
// with S the score storage (ScoreStorage). All pointers are device pointers. Versions (Variant):
//   indexer_q               v1 one thread per (token, head) running q_vector_serial;
//                           v2 one warp per (token, head) (the compressor's entry-slab layout);
//   indexer_logits_prefill  v1 one thread per logit (indexer_math.cuh, bitwise the oracle);
//                           v2 wgmma (sm_90a): 2 tokens x 64 heads against 128-key tiles;
//                           v3 FP8 keys: a persistent grid, TMA key tiles through an mbarrier ring
//                           and a producer warp, 4 queries a CTA, v2's MMA and epilogue (bitwise
//                           v2's logits); FP4 keys or an empty key set run v2 (v3 is implemented
//                           for FP8 only); v2 and v3 need 16-byte aligned key codes;
//                           v4 v3's grid and ring with the MMA's operands swapped (64 keys x the
//                           heads of 2 queries): a shorter epilogue in v2's order (bitwise v2's
//                           logits); FP4 keys or no keys run v2, as for v3;
//   indexer_logits_decode   v1 one thread per logit; v2 wgmma over the pages of each sequence;
//                           v3 v2's MMA and epilogue (bitwise v2's logits) behind a cheaper copy
//                           producer (32-bit page arithmetic, a deeper ring);
//                           v4 v3's tile scoring (bitwise v3's logits) in consumer warpgroups fed
//                           by a producer warp through an mbarrier ring;
//                           v5 v4 whose producer moves DeepGEMM pages by bulk copies (cp.async.bulk)
//                           of the runs of a tile's keys that share a page (bitwise v4's logits);
//                           the interleaved layout runs v4;
//                           v6 v5 with each tile's bulk copies issued by one lane of the producer
//                           warp and one query operand a CTA (a deeper ring; bitwise v5's logits),
//                           for DeepGEMM pages of a multiple of 64 keys; other pages run v5.
//                           v7 v6 with a full tile's FP8 codes copied by TMA straight into the
//                           MMA's operand layout (bitwise v6's logits); FP4 keys and v6's other
//                           cases run v6.
// v2 and later versions of the logits need 64 heads; other head counts run v1.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/kinds.h"
#include "cuda/indexer/formats.h"

namespace dsv4::cuda {

// ---- q path ---------------------------------------------------------------------------------------

struct IndexerQParams {
  int heads = 64;  // IH
  IndexerFormat format = IndexerFormat::fp4;
  bool hadamard = true;
  float weight_multiplier = 0;  // fp32(ID^-1/2 * IH^-1/2), the oracle's indexer_weights multiplier
};

// The outputs of indexer_q for s tokens.
struct IndexerQOut {
  uint8_t* codes = nullptr;    // [s, IH, code_bytes(format)]
  uint8_t* scales = nullptr;   // [s, IH, 4] UE8M0 bytes (fp8: byte 0)
  uint16_t* values = nullptr;  // [s, IH * 128] bf16 codes of the fake-quantized q (indexer/q); nullptr: not written
  float* weights = nullptr;    // [s, IH] the head weights (indexer/weights), bf16 values in fp32
};

// q_proj [s, IH*128] bf16 codes of wq_b(q_latent) (nullptr: only the weights are computed); rope
// [s, 64] fp32 (cos, sin) of pair p of token i's position at [i*64 + 2p]; weights_proj [s, IH] bf16
// codes of weights_proj(x) (nullptr: the weights are not computed, out.weights ignored).
void indexer_q(const IndexerQParams& p, int64_t s, const uint16_t* q_proj, const float* rope,
               const uint16_t* weights_proj, const IndexerQOut& out, Variant v, cudaStream_t stream = nullptr);

// ---- logits ----------------------------------------------------------------------------------------

struct LogitsParams {
  int heads = 64;
  IndexerFormat format = IndexerFormat::fp4;
  ScoreStorage scores = ScoreStorage::bf16;
};

// The queries of a call, as indexer_q writes them: codes [s, IH, code_bytes], scales [s, IH, 4],
// weights [s, IH].
struct IndexerQueries {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  const float* weights = nullptr;
  int64_t count = 0;  // s
};

// Dense keys [n]: codes [n, code_bytes], scales [n, 4] UE8M0 bytes (fp8: byte 0).
struct DenseKeys {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  int64_t count = 0;
};

// Prefill: query i reads keys [ks[i], ke[i]) (none when ke[i] <= ks[i]; int32 [s] each) and writes
// logits row i [n_cols] (fp32, row stride n_cols): its range the scores, every other column -inf
// exactly. A key outside every range is never read by v1 and v2; v3 and v4 read whole 128-key tiles
// (keys 128 t .. 128 t + 127 below keys.count) that hold a key of some range of the 4 queries of a
// CTA's unit, and writes the other keys' columns -inf all the same. Requires ke[i] <= min(keys.count,
// n_cols).
// fp4_inexact (v2, and v3 / v4 with FP4 keys, which run v2; nullptr: not counted): a device int to which
// the kernel adds the number of query elements whose block scale, relative to their head's largest,
// was below 2^-7 and so left the e4m3 grid when folded into the operand: the logits are bitwise the
// oracle's only when it stays 0 (docs/cuda-indexer.md).
void indexer_logits_prefill(const LogitsParams& p, const IndexerQueries& q, const DenseKeys& keys, const int32_t* ks,
                            const int32_t* ke, float* logits, int64_t n_cols, Variant v, cudaStream_t stream = nullptr,
                            int* fp4_inexact = nullptr);

// The paged indexer-key cache of a batch of sequences (docs/cuda-indexer.md "Key caches"): a pool
// of pages of page_keys keys each; key t of sequence b lives in pool page
// block_table[b * table_stride + t / page_keys] at slot t % page_keys. Within a page:
//   interleaved (the project's, page_keys 32 = the keys of 128 positions): slot u's code bytes at
//               u * (code_bytes + 4), its 4-byte scale word right after them;
//   deepgemm    (fp8_paged_mqa_logits, page_keys 64 on SM90): every slot's code bytes first (slot u
//               at u * code_bytes), then every slot's scale word (at page_keys * code_bytes + 4u).
// Scale words: FP4 4 UE8M0 bytes (one per 32 dims); FP8 the fp32 scale (a power of two).
enum class IndexerCacheLayout { interleaved, deepgemm };

struct PagedKeys {
  IndexerFormat format = IndexerFormat::fp4;
  IndexerCacheLayout layout = IndexerCacheLayout::interleaved;
  int page_keys = 32;
  const uint8_t* pool = nullptr;
  int64_t pool_pages = 0;
  const int32_t* block_table = nullptr;  // [batch, table_stride]
  int table_stride = 0;
  int64_t page_bytes() const { return static_cast<int64_t>(page_keys) * (code_bytes(format) + kIndexerScaleBytes); }
};

// Decode (one query per sequence): row b reads keys [0, context_lens[b]) of sequence b through the
// block table and writes logits row b [n_cols]: those scores, then -inf. Requires
// context_lens[b] <= n_cols and every page it reaches to be in the pool (checked on the host from
// host copies: context_lens_host, block_table_host).
void indexer_logits_decode(const LogitsParams& p, const IndexerQueries& q, const PagedKeys& keys,
                           const int32_t* context_lens, float* logits, int64_t n_cols, Variant v,
                           cudaStream_t stream = nullptr, int* fp4_inexact = nullptr);

// The host-side checks of a decode call (indexer_logits_decode cannot read device memory before
// launching): every length within n_cols and every page a length reaches inside the pool. Throws
// std::invalid_argument naming the row.
void check_decode_tables(const PagedKeys& keys, int batch, const int32_t* context_lens_host,
                         const int32_t* block_table_host, int64_t n_cols);

}  // namespace dsv4::cuda
