#pragma once
// The Tensor Memory Accelerator (sm_90; PTX ISA "cp.async.bulk.tensor", CUDA driver API "Tensor Map
// Object Management"): on the host, the tensor map of a row-major byte matrix [rows, row_bytes]
// read in boxes of [box_rows, row_bytes] (or of the leading rows of equal pages, a box within a page)
// with the 128-byte swizzle (the layout wgmma reads with a
// 128B-swizzle descriptor, cuda/common/wgmma.cuh); on the device, one box into shared memory,
// completing its bytes on an mbarrier (cuda/common/mbarrier.cuh). Rows past `rows` are filled with
// zeros and never read. The driver's encoder is reached through the runtime (no libcuda link).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/launch_checks.h"

namespace dsv4::cuda {

// ---- host ---------------------------------------------------------------------------------------

// The driver's cuTensorMapEncodeTiled, looked up once (nullptr where the driver has none).
using TensorMapEncode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                     const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                     CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
inline TensorMapEncode tensor_map_encoder() {
  static const TensorMapEncode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t e =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found);
    return e == cudaSuccess && found == cudaDriverEntryPointSuccess ? reinterpret_cast<TensorMapEncode>(fn) : nullptr;
  }();
  return encode;
}

// The uint8 tensor map of `base` with dims[0..rank) (dims[0] = 128: one 128-byte swizzle span a row),
// byte strides[0..rank-1) of dimensions 1.., boxes of box[0..rank), the 128-byte swizzle, zeros
// outside the dims. Requires base 16-byte aligned (checked); the encoder checks the rest.
template <int kRank>
CUtensorMap tensor_map_sw128(const void* base, const cuuint64_t (&dims)[kRank], const cuuint64_t (&strides)[kRank - 1],
                             const cuuint32_t (&box)[kRank], const char* who) {
  const TensorMapEncode encode = tensor_map_encoder();
  const std::string w(who);
  detail::require(encode != nullptr, w + ": the driver has no cuTensorMapEncodeTiled (CUDA 12.0 or newer needed)");
  detail::require(reinterpret_cast<uintptr_t>(base) % 16 == 0, w + ": the TMA source must be 16-byte aligned");
  cuuint32_t element_strides[kRank];
  for (int i = 0; i < kRank; ++i) element_strides[i] = 1;
  CUtensorMap map;
  const CUresult r = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, kRank, const_cast<void*>(base), dims, strides, box,
                            element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  detail::require(r == CUDA_SUCCESS, w + ": cuTensorMapEncodeTiled failed with CUresult " + std::to_string(r));
  return map;
}

// The tensor map of `base` [rows][row_bytes] (row_bytes 128: one 128-byte swizzle span a row), boxes
// of box_rows rows. Requires base 16-byte aligned (checked), 1 <= rows < 2^32, box_rows <= 256.
inline CUtensorMap tensor_map_rows_sw128(const void* base, int64_t rows, int row_bytes, int box_rows, const char* who) {
  detail::require(row_bytes == 128 && rows >= 1 && rows < (int64_t{1} << 32) && box_rows >= 1 && box_rows <= 256,
                  std::string(who) + ": TMA map of " + std::to_string(rows) + " rows of " + std::to_string(row_bytes) +
                      " bytes in boxes of " + std::to_string(box_rows) + " rows is outside what this helper makes");
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(row_bytes), static_cast<cuuint32_t>(box_rows)};
  return tensor_map_sw128<2>(base, dims, strides, box, who);
}

// The tensor map of `pages` pages of page_bytes bytes at `base`, each beginning with page_rows rows of
// 128 bytes (what follows them in a page is not mapped), as [pages][page_rows][128]; boxes of
// box_rows rows of one page (coordinates (0, row, page)). Requires base 16-byte aligned and page_bytes
// a multiple of 16 below 2^40 (checked), 1 <= pages < 2^32, box_rows <= min(page_rows, 256).
inline CUtensorMap tensor_map_page_rows_sw128(const void* base, int64_t pages, int page_rows, int64_t page_bytes,
                                              int box_rows, const char* who) {
  detail::require(pages >= 1 && pages < (int64_t{1} << 32) && page_rows >= 1 && page_bytes >= 128 * page_rows &&
                      page_bytes % 16 == 0 && page_bytes < (int64_t{1} << 40) && box_rows >= 1 &&
                      box_rows <= page_rows && box_rows <= 256,
                  std::string(who) + ": TMA map of " + std::to_string(pages) + " pages of " +
                      std::to_string(page_bytes) + " bytes, " + std::to_string(page_rows) +
                      " rows of 128 bytes each, in boxes of " + std::to_string(box_rows) +
                      " rows is outside what this helper makes");
  const cuuint64_t dims[3] = {128, static_cast<cuuint64_t>(page_rows), static_cast<cuuint64_t>(pages)};
  const cuuint64_t strides[2] = {128, static_cast<cuuint64_t>(page_bytes)};
  const cuuint32_t box[3] = {128, static_cast<cuuint32_t>(box_rows), 1};
  return tensor_map_sw128<3>(base, dims, strides, box, who);
}

// ---- device -------------------------------------------------------------------------------------

#ifdef __CUDACC__
// Loads the box at (x, y) = (byte 0 of the row, row y) of `map` into shared memory at `dst` (1024-byte
// aligned for the 128B swizzle); its bytes complete on mbarrier `bar` (the caller arrives with
// expect_tx of the box's bytes). One thread issues it.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
// Loads the box at (0, y, z) (byte 0 of row y of page z) of a tensor_map_page_rows_sw128 map into
// shared memory at `dst` (1024-byte aligned); as tma_load_2d otherwise.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int y, int z, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(0), "r"(y), "r"(z), "r"(bar)
      : "memory");
}
// Copies `bytes` contiguous bytes from global `src` to shared memory at `dst` (a 1D bulk copy: both
// addresses 16-byte aligned, bytes a multiple of 16); they complete on mbarrier `bar` (the caller
// arrives with expect_tx of them). One thread issues it.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
               : "memory");
}
// Fetches the tensor map (a kernel parameter) into the TMA unit's cache ahead of the first load.
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
#endif

}  // namespace dsv4::cuda
