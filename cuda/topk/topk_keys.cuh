#pragma once
// The order the top-k kernels sort by, as unsigned integers (host- and device-compiled; the host test
// checks it against float comparisons): a visible score x (> -inf, not NaN) has the key
// order_key(x) >= 0x00800000, larger for a larger x and equal for equal x (-0 and +0 included);
// every invisible score has key 0. The pick order of the oracle (score descending, then the lower
// index) is the descending order of composite(key, index).
#include <cstdint>

#include "cuda/common/numerics.cuh"

namespace dsv4::cuda {

DSV4_HD inline uint32_t order_key(float x) {
  if (!(x > -INFINITY)) return 0;                 // -inf and NaN
  uint32_t u = float_bits(x == 0.0f ? 0.0f : x);  // -0 -> +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

DSV4_HD inline uint64_t composite(uint32_t key, uint32_t index) {
  return (static_cast<uint64_t>(key) << 32) | (0xFFFFFFFFu - index);
}
DSV4_HD inline uint32_t composite_index(uint64_t c) { return 0xFFFFFFFFu - static_cast<uint32_t>(c & 0xFFFFFFFFu); }

}  // namespace dsv4::cuda
