#pragma once
// The launchers behind topk() (topk.cpp checks the arguments and picks the version).
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

struct TopkArgs {
  int64_t rows;
  const float* scores;
  int64_t stride;
  const int32_t* lengths;
  int64_t max_length;
  int k;
  int32_t offset;
  int32_t* out;
};

namespace detail {
void topk_v1(const TopkArgs& a, cudaStream_t stream);
void topk_v2(const TopkArgs& a, cudaStream_t stream);
void topk_v3(const TopkArgs& a, cudaStream_t stream);
void topk_v4(const TopkArgs& a, cudaStream_t stream);
void topk_v5(const TopkArgs& a, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
