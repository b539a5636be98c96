#pragma once
// CUDA shared-KV sparse MQA with an attention sink (docs/math.md "attn/core", docs/cuda-attention.md;
// the oracle is reference/stages/sparse_mqa.h). Per query token and head h:
//   s_j = scale * q_h . kv_j over the token's valid slots j,  M = max_j s_j,
//   o_h = sum_j P(e^(s_j - M)) kv_j / (sum_j e^(s_j - M) + e^(sink_h - M)),
// one 512-d row kv_j shared by every head as key and value, the sink in the denominator only,
// P = bf16 rounding (DeepSeek's kernel.py) or none (fp32 probabilities).
//
// Two entry points with FlashMLA's interfaces, so that FlashMLA and these kernels read the very same
// tensors:
//   decode  (flash_mla_with_kvcache, sparse FP8): KV in FlashMLA's MODEL1 paged byte layout
//           (verify/layouts/flashmla_model1.h), a window pool plus an optional compressed ("extra")
//           pool, each with its own index list of `page * page_size + offset` entries;
//   prefill (flash_mla_sparse_fwd): KV as bf16 rows, one index list of row numbers.
//
// Slots. A query token's slots are its list's `topk` entries followed by its extra list's
// `extra_topk` entries (decode), walked in blocks of 64 slots as kernel.py walks
// [window | compressed]. A slot is invalid (skipped, never read) when its entry is negative, not a
// token of its pool (>= tokens), or at or past its row's length (topk_length / extra_topk_length);
// FlashMLA's decode documents -1 only, its prefill "< 0 or >= s_kv": every such entry is skipped here.
//
// Rows with no valid slot: out 0, lse +inf (FlashMLA's convention; the oracle returns 0 as well) and,
// for prefill, max_logits -inf. lse is natural-log and excludes the sink: lse = M + log(sum_j e^(s_j-M)).
// A sink of +inf gives out 0, -inf no effect; no sink (nullptr) = -inf.
//
// All pointers are device pointers, q, kv, out and the pools 16-byte aligned; bf16 tensors are
// passed as their uint16_t codes.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/common/kinds.h"

namespace dsv4::cuda::attention {

inline constexpr int kHeadDim = 512;   // MODEL1 rows: 448 FP8 nope dims + 64 bf16 rope dims
inline constexpr int kSlotBlock = 64;  // kernel.py's block of index slots (running max per block)

// Probabilities before P.V: bf16 as DeepSeek's kernel.py (and FlashMLA) round them, or fp32.
enum class Probs { bf16, fp32 };

// The version of a kernel, as every family names it (cuda/common/kinds.h).
using ::dsv4::cuda::Variant;

// Versions (dsv4::cuda::Variant, cuda/common/kinds.h; docs/cuda-attention.md):
//   v1  one block per (query token, head), the oracle's operation order in double (bitwise equal to
//       the oracle but for exp's last bit); any n_heads, prefill head_dim a multiple of 64 up to 512;
//   v2  64 heads per block, bf16 mma.sync with fp32 accumulation, FP8 dequantized on the CUDA cores,
//       cp.async double buffering, split-KV plus a combine kernel when the grid would not fill the GPU;
//       n_heads a multiple of 64, head_dim 512;
//   v3  sm_90a: wgmma from shared memory, a producer warpgroup gathering (and dequantizing) the rows
//       into a pipeline of bf16 tiles, two consumer warpgroups for QK and PV; shapes as v2;
//   v4  sm_90a: v3's producer; each consumer warpgroup computes the whole block (QK over all 64
//       slots, its own softmax, P V for its 256 dims with P from registers), the two never wait for
//       each other; shapes as v2;
//   v5  sm_90a: v4's consumers; the decode producer stages the raw MODEL1 bytes by cp.async and
//       dequantizes them shared -> shared with packed conversions; prefill hands each block over as
//       soon as it has landed; a persistent grid of min(work units, SMs) CTAs; outputs bitwise v4's.
//   (v6: the indexer's; the attention's v6 was measured slower than v5 and is not here)
//   v7  sm_90a: v5 with fewer consumer instructions: the online softmax in the base-2 domain
//       (ex2.approx, the row max over the raw scores: softmax_scale must be finite and > 0) and the
//       wgmma descriptors stepped in their low word; outputs within the oracle's bounds, not v5's bits.

// One MODEL1 pool of pages: page p at bytes + p * Model1Layout{page_size}.page_bytes().
struct PagedPool {
  const uint8_t* bytes = nullptr;
  int page_size = 0;  // tokens per page (FlashMLA: 256 window, 64 or 2 compressed)
  int64_t num_pages = 0;
  int64_t tokens() const { return num_pages * page_size; }
};

// One index list: indices [rows, topk] int32, row-major; lengths (optional) cut each row short.
struct IndexList {
  const int32_t* indices = nullptr;
  int topk = 0;
  const int32_t* lengths = nullptr;  // decode: [batch] (per sequence); prefill: [s_q]; nullptr: topk
};

// ---- decode: FlashMLA's flash_mla_with_kvcache (sparse, FP8 MODEL1) ---------------------------
struct DecodeArgs {
  int batch = 0;
  int s_q = 0;                  // query tokens per sequence (1, or 2 with MTP)
  int n_heads = 0;              // 64 (V4-Flash) or 128 (V4-Pro); v2 and v3 need a multiple of 64
  const uint16_t* q = nullptr;  // [batch, s_q, n_heads, 512] bf16
  PagedPool pool;               // k_cache: the window pool
  IndexList list;               // indices [batch, s_q, topk], lengths = topk_length [batch]
  PagedPool extra_pool;         // extra_k_cache: the compressed pool (extra_list.topk == 0: none)
  IndexList extra_list;         // extra_indices [batch, s_q, extra_topk], extra_topk_length [batch]
  const float* sink = nullptr;  // attn_sink [n_heads] fp32, or nullptr
  float softmax_scale = 0;
  Probs probs = Probs::bf16;
  uint16_t* out = nullptr;  // [batch, s_q, n_heads, 512] bf16
  float* lse = nullptr;     // [batch, n_heads, s_q] fp32
};

// Scratch the split-KV of v2 / v3 needs (0 when it does not split this shape on this device);
// v1 needs none. Query it with the same args and device you run with.
size_t decode_workspace_bytes(const DecodeArgs& a, Variant v, int device = 0);

// Throws std::invalid_argument naming the bad argument before launching anything (shapes, null
// pointers, page sizes, a workspace smaller than decode_workspace_bytes).
void sparse_mqa_decode(const DecodeArgs& a, Variant v, void* workspace = nullptr, size_t workspace_bytes = 0,
                       cudaStream_t stream = nullptr);

// ---- prefill: FlashMLA's flash_mla_sparse_fwd on bf16 KV --------------------------------------
struct PrefillArgs {
  int s_q = 0;
  int n_heads = 0;
  int head_dim = kHeadDim;  // d of q and kv; v2, v3: 512; v1: a multiple of 64 up to 512
  int64_t s_kv = 0;
  const uint16_t* q = nullptr;   // [s_q, n_heads, head_dim] bf16
  const uint16_t* kv = nullptr;  // [s_kv, head_dim] bf16 (h_kv = 1)
  IndexList list;                // indices [s_q, topk] row numbers of kv, lengths = topk_length [s_q]
  const float* sink = nullptr;   // [n_heads] or nullptr
  float softmax_scale = 0;
  Probs probs = Probs::bf16;
  uint16_t* out = nullptr;      // [s_q, n_heads, head_dim] bf16
  float* max_logits = nullptr;  // [s_q, n_heads] fp32 (-inf for a row with no valid slot); may be nullptr
  float* lse = nullptr;         // [s_q, n_heads] fp32; may be nullptr
};

void sparse_mqa_prefill(const PrefillArgs& a, Variant v, cudaStream_t stream = nullptr);

// The split-KV factor the mma decode uses for this shape on a device with `sms` multiprocessors:
// enough splits (of whole 64-slot blocks) for the grid to fill the GPU, 1 when it already does.
int decode_splits(int batch, int s_q, int n_heads, int total_slots, int sms);

}  // namespace dsv4::cuda::attention
