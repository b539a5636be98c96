#pragma once
// Launching a top-k kernel that takes one cluster of CTAs a row (v3, v4, v5): the largest cluster the
// GPU schedules with the kernel's shared memory, found once per device and kernel (16 needs the
// non-portable attribute and a GPC with 16 free SMs; else the portable 8), and the launch of
// rows x cluster CTAs of kThreads threads.
#include <cuda_runtime.h>

#include <atomic>

#include "cuda/common/cuda_check.h"
#include "cuda/common/launch_checks.h"
#include "cuda/topk/topk_launch.h"
#include "cuda/topk/topk_v3_plan.h"

namespace dsv4::cuda::topk_cluster_launch {

using ClusterKernel = void (*)(TopkArgs);

inline cudaLaunchAttribute cluster_dimension(int cluster) {
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(cluster);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  return attribute;
}

// Once per device (kernel: its own cache, one per instantiation). smem: the kernel's dynamic shared
// memory in bytes.
template <ClusterKernel kKernel>
int max_cluster_for_device(int smem) {
  static std::atomic<int> cached[64] = {};
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device < 64 && cached[device].load() != 0) return cached[device].load();
  CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int best = 8;
  if (cudaFuncSetAttribute(kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(16);
    config.blockDim = dim3(topk_v3_plan::kThreads);
    config.dynamicSmemBytes = static_cast<size_t>(smem);
    cudaLaunchAttribute attribute[1] = {cluster_dimension(16)};
    config.attrs = attribute;
    config.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kKernel, &config) == cudaSuccess && clusters >= 1) best = 16;
  }
  (void)cudaGetLastError();  // a refused query is an answer (8), not an error of a later call
  if (device < 64) cached[device].store(best);
  return best;
}

// a.rows clusters of cluster_size(a.max_length, ...) CTAs; who: the name errors give.
template <ClusterKernel kKernel>
void launch(const TopkArgs& a, int smem, const char* who, cudaStream_t stream) {
  const int c = topk_v3_plan::cluster_size(a.max_length, max_cluster_for_device<kKernel>(smem));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(detail::grid_blocks(a.rows * c, 1, who));
  config.blockDim = dim3(topk_v3_plan::kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  cudaLaunchAttribute attribute[1] = {cluster_dimension(c)};
  config.attrs = attribute;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kKernel, a));
  CUDA_CHECK_LAUNCH();
}

}  // namespace dsv4::cuda::topk_cluster_launch
