// Inverse RoPE of the attention output and the grouped wo_a projection (output_path.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "cuda/attention/output_path.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/numerics.cuh"

namespace dsv4::cuda::attention {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + " failed: cuBLAS status " + std::to_string(static_cast<int>(s)));
}

// One thread per (token, head, pair of the head's last 64 dims), plus the copy of the other dims
// when out != in. The pair is rotated by the conjugate angle, (cos, -sin), with the oracle's RoPE
// arithmetic (rope_re / rope_im, cuda/common/numerics.cuh), as apply_rope(inverse = true) does.
__global__ void inverse_rope_kernel(const uint16_t* in, uint16_t* out, int64_t tokens, int n_heads, int head_dim,
                                    const int64_t* positions, const float* table) {
  const int pairs = kRopeDims / 2;
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= tokens * n_heads * pairs) return;
  const int pair = static_cast<int>(i % pairs);
  const int64_t head_row = i / pairs;  // token * n_heads + head
  const int64_t token = head_row / n_heads;
  const uint16_t* x = in + head_row * head_dim;
  uint16_t* y = out + head_row * head_dim;
  if (in != out)  // the nope dims, spread over the head's 32 threads
    for (int c = pair; c < head_dim - kRopeDims; c += pairs) y[c] = x[c];
  const int first = head_dim - kRopeDims + 2 * pair;
  const float* cs = table + positions[token] * kRopeDims + 2 * pair;
  const float a = bf16_value(x[first]), b = bf16_value(x[first + 1]);
  y[first] = bf16_bits(rope_re(a, b, cs[0], -cs[1]));
  y[first + 1] = bf16_bits(rope_im(a, b, cs[0], -cs[1]));
}

}  // namespace

void inverse_rope_heads(const uint16_t* in, uint16_t* out, int64_t tokens, int n_heads, int head_dim,
                        const int64_t* positions, const float* table, int64_t table_positions, cudaStream_t stream) {
  require(tokens >= 0 && n_heads > 0 && head_dim >= kRopeDims && head_dim % 2 == 0,
          "inverse_rope_heads: expected tokens >= 0, n_heads > 0, an even head_dim >= 64; got " +
              std::to_string(tokens) + ", " + std::to_string(n_heads) + ", " + std::to_string(head_dim));
  if (tokens == 0) return;
  require(in && out && positions && table && table_positions > 0,
          "inverse_rope_heads: in, out, positions and table must be device pointers and the table non-empty");
  const int64_t threads = tokens * n_heads * (kRopeDims / 2);
  const int block = 256;
  inverse_rope_kernel<<<static_cast<unsigned>((threads + block - 1) / block), block, 0, stream>>>(
      in, out, tokens, n_heads, head_dim, positions, table);
  CUDA_CHECK_LAUNCH();
}

GroupedWoA::GroupedWoA() {
  cublasHandle_t h = nullptr;
  check_cublas(cublasCreate(&h), "cublasCreate");
  handle_ = h;
}

GroupedWoA::~GroupedWoA() {
  if (handle_) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

// Column-major view: per group g, C_g [rank x tokens] = A_g^T B_g with A_g = wo_a's rows of g as a
// [group_width x rank] column-major matrix (lda = group_width) and B_g = o's columns of g as a
// [group_width x tokens] column-major matrix (ldb = groups * group_width).
void GroupedWoA::run(const uint16_t* o, const uint16_t* wo_a, uint16_t* out, int64_t tokens, int groups,
                     int group_width, int rank, cudaStream_t stream) {
  require(tokens >= 0 && groups > 0 && group_width > 0 && rank > 0,
          "GroupedWoA::run: expected tokens >= 0 and positive groups, group_width, rank; got " +
              std::to_string(tokens) + ", " + std::to_string(groups) + ", " + std::to_string(group_width) + ", " +
              std::to_string(rank));
  if (tokens == 0) return;
  require(o && wo_a && out, "GroupedWoA::run: o, wo_a and out must be device pointers");
  require(tokens <= INT32_MAX, "GroupedWoA::run: more tokens than cuBLAS takes in one call");
  auto h = static_cast<cublasHandle_t>(handle_);
  check_cublas(cublasSetStream(h, stream), "cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  check_cublas(
      cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, rank, static_cast<int>(tokens), group_width, &alpha, wo_a,
                                 CUDA_R_16BF, group_width, static_cast<long long>(rank) * group_width, o, CUDA_R_16BF,
                                 groups * group_width, group_width, &beta, out, CUDA_R_16BF, groups * rank, rank,
                                 groups, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx (grouped wo_a)");
}

}  // namespace dsv4::cuda::attention
