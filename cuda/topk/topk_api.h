#pragma once
// CUDA top-k of the indexer scores and the key lists sparse attention consumes (docs/cuda-indexer.md;
// the oracle is reference/stages/topk.h and index_lists.h). All pointers are device pointers.
//
// topk, per row r: the candidates are scores[r, 0 .. lengths[r]) (fp32, row stride `stride`;
// nothing past the length is read); a candidate is visible when its score is > -inf and not NaN
// (+inf ranks first). The k best visible candidates in the oracle's order (score descending, the
// lower index first among equal scores; -0 == +0) are written as index + offset, then -1 up to k.
// The picks and their order depend only on the row: bitwise the same across reruns and batch
// permutations. Versions:
//   v1  one CTA per row: radix select of the k-th key over 4 passes of 8 bits reading the row from
//       global memory each pass, the equal keys at the boundary taken in index order by a block
//       scan, a bitonic sort of the picks;
//   v2  a cluster of CTAs per row (1 for rows up to 32768 candidates, up to 8 beyond), each holding
//       its slice of the row in shared memory (re-read from global when a slice is longer), the
//       histograms merged through distributed shared memory; the same selection rule;
//   v3  a cluster of up to 16 CTAs per row (one per 16384 candidates), 3 radix passes of 11/11/10
//       bits whose counts each CTA's share owner merges through distributed shared memory, the ties
//       shared out by rank from the last histograms, a register bitonic sort (topk_v3.cu; measured
//       in docs/cuda-indexer.md);
//   v4  v3's cluster and selection with fewer dependent steps: pass 0 counted as the scores load,
//       one remote round trip a share reduction, one block barrier a digit search, the picks taken
//       from the keys collected at pass 1, up to 512 picks placed by rank from 16 sorted runs
//       (topk_v4.cu);
//   v5  v4 with one cluster barrier a radix pass (warp 0 searches the CTAs' counts remotely) and pass
//       2 skipped when the k-th key's bin after pass 1 holds at most 128 keys, which CTA 0 ranks
//       directly (topk_v5.cu).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/kinds.h"
#include "cuda/common/numerics.cuh"  // DSV4_HD

namespace dsv4::cuda {

inline constexpr int kMaxTopk = 2048;

// max_length: an upper bound of every lengths[r] (<= stride), used to size the launch.
void topk(int64_t rows, const float* scores, int64_t stride, const int32_t* lengths, int64_t max_length, int k,
          int32_t offset, int32_t* out, Variant v, cudaStream_t stream = nullptr);

// The call's index space (reference/stages/index_lists.h IndexSpace): prefill (start_pos 0), decode
// (s 1) or chunked.
struct IndexSpaceDesc {
  int kind = 0;  // 0 prefill, 1 decode, 2 chunked (IndexSpace::Kind's order)
  int64_t start_pos = 0;
  int64_t seqlen = 0;
  int window = 0;
  DSV4_HD int64_t window_width() const { return kind == 0 ? (seqlen < window ? seqlen : window) : window; }
};

// The project's convention (the oracle's concat_indices(window_indices(space), topk)): row i =
// its window list (rows of positions max(0, t-W+1) .. t in the space's kv matrix, oldest first,
// then -1) followed by the k top-k picks as given. topk [s, k] (k may be 0: nullptr allowed);
// out [s, window_width + k].
void attention_indices(const IndexSpaceDesc& space, const int32_t* topk_picks, int k, int32_t* out,
                       cudaStream_t stream = nullptr);

// The engines' convention (vLLM's combine_topk_swa_indices): row i = its valid window entries,
// then its valid top-k picks (each list's -1 dropped, order kept), -1 padded to `width` = the
// smallest multiple of 128 >= window_width + k; lengths[i] = the number of valid entries.
int64_t compact_width(const IndexSpaceDesc& space, int k);
void attention_indices_compact(const IndexSpaceDesc& space, const int32_t* topk_picks, int k, int32_t* out,
                               int32_t* lengths, cudaStream_t stream = nullptr);

}  // namespace dsv4::cuda
