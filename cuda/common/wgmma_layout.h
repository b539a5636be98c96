#pragma once
// The index math of cuda/common/wgmma.cuh that host code can check (test_cuda_host): the
// shared-memory tile layout of the operands and where each accumulator register of a lane sits.
#include <cstdint>

#include "cuda/common/numerics.cuh"  // DSV4_HD

namespace dsv4::cuda::wgmma {

inline constexpr int kChunkBytes = 16;
inline constexpr int kCoreMatrixBytes = 128;
inline constexpr int kSwizzle128AtomBytes = 1024;  // 8 rows of 128 bytes: the 128B swizzle's repeat

// Byte offset of (row, k byte) in an R-row operand tile (wgmma.cuh: 16-byte K chunks of R rows).
DSV4_HD constexpr int tile_offset(int rows, int row, int k_byte) {
  return (k_byte / kChunkBytes) * rows * kChunkBytes + row * kChunkBytes + k_byte % kChunkBytes;
}

// Accumulator register k of this lane (warp w of its warpgroup): its row and column.
DSV4_HD inline int acc_row(int k, int warp_in_group, int lane) {
  return 16 * warp_in_group + lane / 4 + 8 * ((k / 2) % 2);
}
DSV4_HD inline int acc_col(int k, int lane) { return 8 * (k / 4) + 2 * (lane % 4) + k % 2; }

}  // namespace dsv4::cuda::wgmma
