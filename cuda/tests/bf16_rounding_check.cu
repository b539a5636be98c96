// The exhaustive check behind the logits epilogue's bf16_round_hw2 (tile_math.cuh): the hardware
// conversion against bf16_round (cuda/common/numerics.cuh) on all 2^32 fp32 bit patterns, each in
// the upper half of a conversion and (bit-reversed partner) in the lower half.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"
#include "cuda/common/numerics.cuh"
#include "cuda/indexer/tile_math.cuh"
#include "cuda/tests/bf16_rounding_check.h"

namespace dsv4::cuda::testing {
namespace {

// counts[0]: non-NaN inputs whose two roundings differ in any bit; counts[1]: NaN inputs whose
// hardware rounding is not a NaN.
__global__ void compare_bf16_roundings(unsigned long long* counts) {
  unsigned long long differ = 0, lost_nan = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (uint64_t{1} << 32);
       i += stride) {
    // x in the upper half of the conversion, and in the lower half paired with another input.
    const uint32_t bits = static_cast<uint32_t>(i);
    const float x = __uint_as_float(bits), y = __uint_as_float(__brev(bits));
    float hx, hy;
    logits_tile::bf16_round_hw2(x, y, hx, hy);
    const float in[2] = {x, y}, hw[2] = {hx, hy};
    for (int k = 0; k < 2; ++k) {
      if (in[k] != in[k])
        lost_nan += hw[k] == hw[k];
      else
        differ += __float_as_uint(hw[k]) != __float_as_uint(bf16_round(in[k]));
    }
  }
  if (differ) atomicAdd(&counts[0], differ);
  if (lost_nan) atomicAdd(&counts[1], lost_nan);
}

}  // namespace

Bf16RoundingMismatches bf16_rounding_mismatches() {
  DeviceBuffer<unsigned long long> counts(2);
  counts.fill_bytes(0);
  compare_bf16_roundings<<<1024, 256>>>(counts.get());
  CUDA_CHECK_LAUNCH();
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto host = counts.download();
  return {host[0], host[1]};
}

}  // namespace dsv4::cuda::testing
