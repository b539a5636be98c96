#pragma once
// Warp-level tensor-core and async-copy primitives (PTX of sm_80, run on sm_90): ldmatrix,
// mma.sync m16n8k16 bf16 x bf16 -> fp32, cp.async with zero fill. Fragment layouts (PTX ISA,
// "Matrix fragments for mma.m16n8k16"), with g = lane / 4 and c = lane % 4:
//   A 16x16 row-major: a0 (row g, cols 2c, 2c+1), a1 (row g+8, same cols), a2 (row g, cols 2c+8, +9),
//                      a3 (row g+8, cols 2c+8, +9)
//   B 16x8 (k x n):    b0 (k 2c, 2c+1; n g), b1 (k 2c+8, 2c+9; n g)
//   C 16x8 fp32:       c0, c1 (row g, cols 2c, 2c+1), c2, c3 (row g+8, cols 2c, 2c+1)
// ldmatrix.x4: lanes 8i..8i+7 give the 8 row addresses (16 bytes each) of matrix i; register i of
// lane l receives row l/4, elements 2(l%4), 2(l%4)+1 of matrix i (.trans: rows 2(l%4), 2(l%4)+1 of
// column l/4, i.e. the transposed matrix's row l/4).
#include <cstdint>

namespace dsv4::cuda::attention::mma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a * b (16x8x16, bf16 inputs, fp32 accumulators).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes global -> shared, bypassing L1; src is not read and zeros are written when !valid.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// 8 bytes global -> shared (through L1); zeros when !valid.
__device__ __forceinline__ void cp_async_8(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 8 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace dsv4::cuda::attention::mma
