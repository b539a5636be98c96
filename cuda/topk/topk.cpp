// The top-k entry point (topk_api.h): argument checks, then the version asked for.
#include <string>

#include "cuda/common/launch_checks.h"
#include "cuda/topk/topk_api.h"
#include "cuda/topk/topk_launch.h"

namespace dsv4::cuda {

void topk(int64_t rows, const float* scores, int64_t stride, const int32_t* lengths, int64_t max_length, int k,
          int32_t offset, int32_t* out, Variant v, cudaStream_t stream) {
  detail::require_variant(
      v == Variant::v1 || v == Variant::v2 || v == Variant::v3 || v == Variant::v4 || v == Variant::v5, v, "topk",
      "v1, v2, v3, v4, v5");
  detail::require(k >= 0 && k <= kMaxTopk,
                  "topk: k = " + std::to_string(k) + ", expected 0 <= k <= " + std::to_string(kMaxTopk));
  detail::require(rows >= 0 && max_length >= 0 && max_length <= stride,
                  "topk: expected rows >= 0 and 0 <= max_length <= stride, got rows " + std::to_string(rows) +
                      ", max_length " + std::to_string(max_length) + ", stride " + std::to_string(stride));
  detail::require(offset >= 0 && static_cast<int64_t>(offset) + max_length <= 0x7fffffffLL,
                  "topk: offset " + std::to_string(offset) + " with " + std::to_string(max_length) +
                      " candidates leaves the int32 index range");
  detail::require(max_length < 0xffffffffLL, "topk: at most 2^32 - 1 candidates a row");
  if (rows == 0 || k == 0) return;
  detail::require(scores && lengths && out, "topk: scores, lengths and out must be device pointers, got a nullptr");
  const TopkArgs a{rows, scores, stride, lengths, max_length, k, offset, out};
  if (v == Variant::v1)
    detail::topk_v1(a, stream);
  else if (v == Variant::v2)
    detail::topk_v2(a, stream);
  else if (v == Variant::v3)
    detail::topk_v3(a, stream);
  else if (v == Variant::v4)
    detail::topk_v4(a, stream);
  else
    detail::topk_v5(a, stream);
}

}  // namespace dsv4::cuda
