// The exhaustive comparison of relu_candidate_check.h: the epilogue's relu (relu_keep_nan) against
// the oracle's x < 0 ? 0 : x on every fp32 bit pattern.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"
#include "cuda/indexer/tile_math.cuh"
#include "cuda/tests/relu_candidate_check.h"

namespace dsv4::cuda::testing {
namespace {

// The oracle's relu (reference/: x < 0 ? 0 : x), written here so that the comparison does not read
// the function it checks.
__device__ inline float oracle_relu(float x) { return x < 0 ? 0.0f : x; }

// counts: ReluCandidateMismatches' three fields in order.
__global__ void compare_relu_candidates(unsigned long long* counts) {
  unsigned long long nonzero = 0, nan = 0, zero = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32);
       i += stride) {
    const float x = __uint_as_float(static_cast<uint32_t>(i));
    const uint32_t want = __float_as_uint(oracle_relu(x));
    const float got = logits_tile::relu_keep_nan(x);
    if (x != x) {
      nan += got == got;
    } else if (x == 0.0f) {
      zero += __float_as_uint(got) != want;
    } else {
      nonzero += __float_as_uint(got) != want;
    }
  }
  if (nonzero) atomicAdd(&counts[0], nonzero);
  if (nan) atomicAdd(&counts[1], nan);
  if (zero) atomicAdd(&counts[2], zero);
}

}  // namespace

ReluCandidateMismatches relu_candidate_mismatches() {
  DeviceBuffer<unsigned long long> counts(3);
  counts.fill_bytes(0);
  compare_relu_candidates<<<1024, 256>>>(counts.get());
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto host = counts.download();
  return {host[0], host[1], host[2]};
}

}  // namespace dsv4::cuda::testing
