// The key lists of sparse attention (topk_api.h attention_indices, attention_indices_compact): the
// window list of each query row in the call's index space (reference/stages/index_lists.cpp
// window_indices and IndexSpace::raw_row), then its top-k picks. One thread per output value
// (project's convention) or per row (compact convention).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/topk/topk_api.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 128;

// Entry w of row i's window list: the kv-matrix row of position max(0, t-W+1) + w, or -1 past t.
__device__ inline int32_t window_entry(const IndexSpaceDesc& sp, int64_t i, int64_t w) {
  const int64_t t = sp.start_pos + i;
  const int64_t first = t - sp.window + 1 > 0 ? t - sp.window + 1 : 0;
  const int64_t p = first + w;
  if (p > t) return -1;
  switch (sp.kind) {
    case 0: return static_cast<int32_t>(p);              // prefill
    case 1: return static_cast<int32_t>(p % sp.window);  // decode
    default: return static_cast<int32_t>(p >= sp.start_pos ? sp.window + (p - sp.start_pos) : p % sp.window);
  }
}

__global__ void attention_indices_kernel(const IndexSpaceDesc sp, const int32_t* topk, int k, int32_t* out) {
  const int64_t width = sp.window_width() + k;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= sp.seqlen * width) return;
  const int64_t i = idx / width, col = idx % width;
  const int64_t ww = sp.window_width();
  out[idx] = col < ww ? window_entry(sp, i, col) : topk[i * k + (col - ww)];
}

__global__ void attention_indices_compact_kernel(const IndexSpaceDesc sp, const int32_t* topk, int k, int64_t width,
                                                 int32_t* out, int32_t* lengths) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= sp.seqlen) return;
  int32_t* row = out + i * width;
  int64_t n = 0;
  for (int64_t w = 0; w < sp.window_width(); ++w) {
    const int32_t e = window_entry(sp, i, w);
    if (e >= 0) row[n++] = e;
  }
  for (int c = 0; c < k; ++c) {
    const int32_t e = topk[i * k + c];
    if (e >= 0) row[n++] = e;
  }
  lengths[i] = static_cast<int32_t>(n);
  for (int64_t c = n; c < width; ++c) row[c] = -1;
}

void check_space(const IndexSpaceDesc& sp, int k, const char* who) {
  const std::string w(who);
  detail::require(sp.kind >= 0 && sp.kind <= 2, w + ": space kind must be 0, 1 or 2, got " + std::to_string(sp.kind));
  detail::require(sp.seqlen >= 1 && sp.window >= 1 && sp.start_pos >= 0,
                  w + ": expected seqlen >= 1, window >= 1, start_pos >= 0; got " + std::to_string(sp.seqlen) + ", " +
                      std::to_string(sp.window) + ", " + std::to_string(sp.start_pos));
  detail::require((sp.kind == 0) == (sp.start_pos == 0) && (sp.kind != 1 || sp.seqlen == 1),
                  w + ": the space kind does not match start_pos and seqlen (IndexSpace::for_call)");
  detail::require(k >= 0, w + ": k must be >= 0, got " + std::to_string(k));
}

}  // namespace

void attention_indices(const IndexSpaceDesc& space, const int32_t* topk_picks, int k, int32_t* out,
                       cudaStream_t stream) {
  check_space(space, k, "attention_indices");
  detail::require(out != nullptr && (k == 0 || topk_picks != nullptr),
                  "attention_indices: out (and topk when k > 0) must be device pointers, got a nullptr");
  const int64_t n = space.seqlen * (space.window_width() + k);
  attention_indices_kernel<<<detail::grid_blocks(n, kThreads, "attention_indices"), kThreads, 0, stream>>>(
      space, topk_picks, k, out);
  CUDA_CHECK_LAUNCH();
}

int64_t compact_width(const IndexSpaceDesc& space, int k) { return (space.window_width() + k + 127) / 128 * 128; }

void attention_indices_compact(const IndexSpaceDesc& space, const int32_t* topk_picks, int k, int32_t* out,
                               int32_t* lengths, cudaStream_t stream) {
  check_space(space, k, "attention_indices_compact");
  detail::require(
      out != nullptr && lengths != nullptr && (k == 0 || topk_picks != nullptr),
      "attention_indices_compact: out, lengths (and topk when k > 0) must be device pointers, got a nullptr");
  attention_indices_compact_kernel<<<detail::grid_blocks(space.seqlen, kThreads, "attention_indices_compact"), kThreads,
                                     0, stream>>>(space, topk_picks, k, compact_width(space, k), out, lengths);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda
