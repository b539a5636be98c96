// The exhaustive comparison of relu_candidate_check.h: max.NaN.f32 with a +0 operand, in both
// operand orders, against relu_keep_nan on every fp32 bit pattern.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"
#include "cuda/indexer/tile_math.cuh"
#include "cuda/tests/relu_candidate_check.h"

namespace dsv4::cuda::testing {
namespace {

__device__ inline float max_nan(float a, float b) {
  float d;
  asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(d) : "f"(a), "f"(b));
  return d;
}

// counts: ReluCandidateMismatches' four fields in order.
__global__ void compare_relu_candidates(unsigned long long* counts) {
  unsigned long long nonzero = 0, nan = 0, zero_first = 0, zero_second = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32);
       i += stride) {
    const float x = __uint_as_float(static_cast<uint32_t>(i));
    const uint32_t want = __float_as_uint(logits_tile::relu_keep_nan(x));
    const float first = max_nan(0.0f, x), second = max_nan(x, 0.0f);
    if (x != x) {
      nan += (first == first) + (second == second);
    } else if (x == 0.0f) {
      zero_first += __float_as_uint(first) != want;
      zero_second += __float_as_uint(second) != want;
    } else {
      nonzero += (__float_as_uint(first) != want) + (__float_as_uint(second) != want);
    }
  }
  if (nonzero) atomicAdd(&counts[0], nonzero);
  if (nan) atomicAdd(&counts[1], nan);
  if (zero_first) atomicAdd(&counts[2], zero_first);
  if (zero_second) atomicAdd(&counts[3], zero_second);
}

}  // namespace

ReluCandidateMismatches relu_candidate_mismatches() {
  DeviceBuffer<unsigned long long> counts(4);
  counts.fill_bytes(0);
  compare_relu_candidates<<<1024, 256>>>(counts.get());
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto host = counts.download();
  return {host[0], host[1], host[2], host[3]};
}

}  // namespace dsv4::cuda::testing
