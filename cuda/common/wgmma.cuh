#pragma once
// Hopper warpgroup MMA (wgmma, sm_90a) for e4m3 operands in shared memory: descriptors, the
// m64n64k32 / m64n128k32 instructions, fences and waits, and where each accumulator register sits
// (PTX ISA "Matrix fragments for wgmma.mma_async m64nNk32": warp w of the warpgroup holds rows
// 16w .. 16w+15; register 4i + 2r + v of lane l is row 16w + l/4 + 8r, column 8i + 2(l%4) + v).
//
// Shared-memory operand layout used by every kernel here (no swizzle, "interleave"): a tile of R
// rows x 128 bytes of K is stored as 8 column chunks of 16 bytes, chunk c at c * R * 16, row r of a
// chunk at r * 16. A core matrix (8 rows x 16 bytes) is then 128 contiguous bytes; the K-major
// canonical layout ((8, R/8), (16 B, 2)) : ((16 B, SBO), (1, LBO)) has SBO = 128 bytes (next 8 rows)
// and LBO = R * 16 bytes (next 16-byte K chunk). The k32 slice s of a tile starts at chunk 2s.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/wgmma_layout.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "cuda/common/wgmma.cuh needs sm_90a (wgmma): build the translation unit for CUDA architecture 90a"
#endif

namespace dsv4::cuda::wgmma {

// Descriptor of the k32 slice `slice` of an R-row tile at `tile` (16-byte aligned shared memory).
// Bits 0-13 address >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 49-51 base offset 0, 62-63 swizzle 0.
__device__ inline uint64_t slice_descriptor(const void* tile, int rows, int slice) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(tile)) + 2u * slice * rows * kChunkBytes;
  const uint64_t lbo = static_cast<uint64_t>(rows * kChunkBytes) >> 4;
  const uint64_t sbo = static_cast<uint64_t>(kCoreMatrixBytes) >> 4;
  return static_cast<uint64_t>((addr >> 4) & 0x3FFFu) | (lbo << 16) | (sbo << 32);
}

// Descriptor of the k32 slice `slice` of an R-row tile of 128-byte rows stored with the 128-byte
// swizzle (what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B, cuda/common/tma.cuh: 16-byte chunk c of
// row r at r * 128 + 16 (c ^ r % 8)), the tile 1024-byte aligned. K-major swizzled: SBO = 1024 bytes
// (the next 8 rows), LBO unused (1 by convention), bits 62-63 = 1 (128B swizzle), base offset 0; the
// slice starts 32 bytes further along the row (the hardware applies the XOR to the address it forms).
__device__ inline uint64_t slice_descriptor_sw128(const void* tile, int slice) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(tile)) + 32u * slice;
  const uint64_t lbo = 1, sbo = kSwizzle128AtomBytes >> 4;
  return static_cast<uint64_t>((addr >> 4) & 0x3FFFu) | (lbo << 16) | (sbo << 32) | (uint64_t{1} << 62);
}

__device__ inline void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ inline void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ inline void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the asynchronous MMA.
template <int N>
__device__ inline void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Generic-proxy writes to shared memory (st.shared, cp.async) made visible to wgmma's reads.
__device__ inline void fence_shared_for_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// D[64 x 64] (+)= A[64 x 32] * B[64 x 32]^T, e4m3 operands K-major in shared memory (descriptors),
// fp32 accumulators in the wgmma fragment layout (acc_row / acc_col). accumulate = false: D = A B.
__device__ inline void wgmma_m64n64k32_e4m3(float (&d)[32], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, "
      "1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

// D[64 x 128] (+)= A[64 x 32] * B[128 x 32]^T, e4m3 operands K-major in shared memory (descriptors),
// fp32 accumulators in the wgmma fragment layout (acc_row / acc_col). accumulate = false: D = A B.
__device__ inline void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
      "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "
      "%57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
}

}  // namespace dsv4::cuda::wgmma
