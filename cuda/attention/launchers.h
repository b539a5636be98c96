#pragma once
// The version-specific launchers behind sparse_mqa_decode / sparse_mqa_prefill (sparse_mqa.cpp
// checks the arguments and builds the params before calling them).
#include <cuda_runtime.h>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/sparse_mqa_api.h"

namespace dsv4::cuda::attention::detail {

// v1 (sparse_mqa_v1.cu): one block of 64 threads per (query row, head).
void launch_v1(const DecodeParams& p, Probs probs, cudaStream_t stream);
void launch_v1(const PrefillParams& p, Probs probs, cudaStream_t stream);

// v2 (sparse_mqa_v2.cu): 256 threads per (query row, 64 heads[, split]). splits > 1 writes partial
// results to `workspace` (split_workspace_bytes) and combines them in a second kernel.
void launch_v2(const DecodeParams& p, Probs probs, int splits, void* workspace, cudaStream_t stream);
void launch_v2(const PrefillParams& p, Probs probs, cudaStream_t stream);
// v3 (sparse_mqa_v3.cu, sm_90a): 384 threads per (query row, 64 heads[, split]); splits as v2.
void launch_v3(const DecodeParams& p, Probs probs, int splits, void* workspace, cudaStream_t stream);
void launch_v3(const PrefillParams& p, Probs probs, cudaStream_t stream);
// v4 (sparse_mqa_v4.cu, sm_90a): v3's producer, consumers that each compute the whole block (S for
// all 64 slots, P in registers) and never wait for each other; splits as v2.
void launch_v4(const DecodeParams& p, Probs probs, int splits, void* workspace, cudaStream_t stream);
void launch_v4(const PrefillParams& p, Probs probs, cudaStream_t stream);
// v5 (sparse_mqa_v5.cu, sm_90a): v4's consumers; the decode producer stages raw MODEL1 bytes by
// cp.async and dequantizes shared -> shared with packed conversions; a persistent grid of
// min(work units, SMs) CTAs; splits as v2.
void launch_v5(const DecodeParams& p, Probs probs, int splits, void* workspace, cudaStream_t stream);
void launch_v5(const PrefillParams& p, Probs probs, cudaStream_t stream);
// v7 (sparse_mqa_v7.cu, sm_90a): v5 with the online softmax in the base-2 domain (ex2.approx) and the
// wgmma descriptors stepped in their low word; splits as v2. Needs scale > 0.
void launch_v7(const DecodeParams& p, Probs probs, int splits, void* workspace, cudaStream_t stream);
void launch_v7(const PrefillParams& p, Probs probs, cudaStream_t stream);

size_t split_workspace_bytes(int64_t rows, int n_heads, int splits);

}  // namespace dsv4::cuda::attention::detail
