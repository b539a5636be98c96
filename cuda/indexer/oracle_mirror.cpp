// The oracle-typed wrappers of the CUDA indexer and top-k (oracle_mirror.h): upload, run, download.
#include "cuda/indexer/oracle_mirror.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"
#include "cuda/common/numerics.cuh"
#include "cuda/indexer/host_vectors.h"
#include "cuda/indexer/indexer_api.h"
#include "cuda/topk/topk_api.h"
#include "reference/numerics/storage.h"

namespace dsv4::cuda {
namespace {

std::vector<uint16_t> bf16_codes(const ref::Mat& m, const char* who) {
  std::vector<uint16_t> out(static_cast<size_t>(m.size()));
  for (ref::Index r = 0; r < m.rows(); ++r)
    for (ref::Index c = 0; c < m.cols(); ++c) {
      const double v = m(r, c);
      const uint16_t code = bf16_bits(static_cast<float>(v));
      if (!(static_cast<double>(bf16_value(code)) == v))
        throw std::invalid_argument(std::string(who) + ": value " + std::to_string(v) + " at [" + std::to_string(r) +
                                    ", " + std::to_string(c) + "] is not a bf16 value");
      out[static_cast<size_t>(r * m.cols() + c)] = code;
    }
  return out;
}

float weight_multiplier(const ref::ModelConfig& cfg, const ref::PrecisionPolicy& p) {
  return static_cast<float>(ref::round_to(p.fp32_tensors, std::pow(static_cast<double>(cfg.index_head_dim), -0.5) *
                                                              std::pow(static_cast<double>(cfg.index_n_heads), -0.5)));
}

void require_dims(const ref::ModelConfig& cfg, const char* who) {
  if (cfg.index_head_dim != kIndexerDim || cfg.rope_head_dim != kRopeDim)
    throw std::invalid_argument(std::string(who) + ": the kernels take index_head_dim 128 and rope_head_dim 64, the " +
                                "config has " + std::to_string(cfg.index_head_dim) + " and " +
                                std::to_string(cfg.rope_head_dim));
}

}  // namespace

IndexerKernelPolicy indexer_kernel_policy(const ref::PrecisionPolicy& p) {
  const std::string who = "cuda indexer (policy '" + p.name + "'): ";
  if (p.activations != ref::Storage::bf16 || p.fp32_tensors != ref::Storage::fp32)
    throw std::invalid_argument(who + "the kernels hold activations in bf16 and fp32 tensors in fp32");
  if (!p.indexer_qk)
    throw std::invalid_argument(who + "the kernels quantize the indexer q and keys; this policy does not");
  IndexerKernelPolicy k;
  if (*p.indexer_qk == ref::BlockFormat::fp4_indexer())
    k.format = IndexerFormat::fp4;
  else if (*p.indexer_qk == ref::BlockFormat::fp8_per_head(kIndexerDim))
    k.format = IndexerFormat::fp8;
  else
    throw std::invalid_argument(who + "indexer format " + p.indexer_qk->name() +
                                " is not one of the kernels' (e2m1/b32/ue8m0, e4m3/b128/ue8m0)");
  if (p.indexer_scores == ref::Storage::fp64)
    throw std::invalid_argument(who + "the kernels round the indexer scores to bf16 or fp32, not fp64");
  k.hadamard = p.indexer_hadamard;
  k.scores = p.indexer_scores == ref::Storage::bf16 ? ScoreStorage::bf16 : ScoreStorage::fp32;
  return k;
}

std::vector<float> position_rope(const ref::RopeTable& rope, int64_t start_pos, int64_t s) {
  if (rope.rope_dim != kRopeDim)
    throw std::invalid_argument("position_rope: the kernels rotate 64 dims, the table has rope_dim " +
                                std::to_string(rope.rope_dim));
  std::vector<float> out(static_cast<size_t>(s * kRopeDim));
  for (int64_t i = 0; i < s; ++i)
    for (int k = 0; k < kRopeDim / 2; ++k) {
      out[static_cast<size_t>(i * kRopeDim + 2 * k)] = static_cast<float>(rope.cos_at(start_pos + i, k));
      out[static_cast<size_t>(i * kRopeDim + 2 * k + 1)] = static_cast<float>(rope.sin_at(start_pos + i, k));
    }
  return out;
}

ref::Mat indexer_q(const ref::Mat& q_proj, int64_t start_pos, const ref::RopeTable& rope, const ref::ModelConfig& cfg,
                   const ref::PrecisionPolicy& p, Variant v) {
  require_dims(cfg, "cuda indexer_q");
  const IndexerKernelPolicy kp = indexer_kernel_policy(p);
  const int heads = cfg.index_n_heads;
  const int64_t s = q_proj.rows();
  if (q_proj.cols() != static_cast<ref::Index>(heads) * kIndexerDim)
    throw std::invalid_argument("cuda indexer_q: q_proj has " + std::to_string(q_proj.cols()) + " columns, expected " +
                                std::to_string(heads) + " heads x 128");
  ref::Mat out(s, q_proj.cols());
  if (s == 0) return out;
  const DeviceBuffer<uint16_t> x(bf16_codes(q_proj, "cuda indexer_q"));
  const DeviceBuffer<float> table(position_rope(rope, start_pos, s));
  DeviceBuffer<uint8_t> codes(static_cast<size_t>(s * heads * code_bytes(kp.format)));
  DeviceBuffer<uint8_t> scales(static_cast<size_t>(s * heads * kIndexerScaleBytes));
  DeviceBuffer<uint16_t> values(static_cast<size_t>(s * heads * kIndexerDim));
  IndexerQOut o;
  o.codes = codes.get();
  o.scales = scales.get();
  o.values = values.get();
  indexer_q({heads, kp.format, kp.hadamard, weight_multiplier(cfg, p)}, s, x.get(), table.get(), nullptr, o, v);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint16_t> host = values.download();
  for (ref::Index i = 0; i < out.size(); ++i)
    out.data()[i] = bf16_value(host[static_cast<size_t>(i)]);  // both row-major
  return out;
}

ref::Mat indexer_weights(const ref::Mat& weights_proj, const ref::ModelConfig& cfg, const ref::PrecisionPolicy& p) {
  (void)indexer_kernel_policy(p);
  const int heads = cfg.index_n_heads;
  const int64_t s = weights_proj.rows();
  if (weights_proj.cols() != heads)
    throw std::invalid_argument("cuda indexer_weights: weights_proj has " + std::to_string(weights_proj.cols()) +
                                " columns, expected " + std::to_string(heads));
  ref::Mat out(s, heads);
  if (s == 0) return out;
  const DeviceBuffer<uint16_t> w(bf16_codes(weights_proj, "cuda indexer_weights"));
  DeviceBuffer<float> result(static_cast<size_t>(s * heads));
  IndexerQOut o;
  o.weights = result.get();
  indexer_q({heads, IndexerFormat::fp4, true, weight_multiplier(cfg, p)}, s, nullptr, nullptr, w.get(), o, Variant::v2);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> host = result.download();
  for (int64_t r = 0; r < s; ++r)
    for (int h = 0; h < heads; ++h) out(r, h) = host[static_cast<size_t>(r * heads + h)];
  return out;
}

ref::Mat indexer_scores(const ref::Mat& q, const ref::Mat& weights, const ref::Mat& keys, int64_t start_pos, int ratio,
                        const ref::PrecisionPolicy& p, Variant v) {
  const IndexerKernelPolicy kp = indexer_kernel_policy(p);
  const int64_t s = q.rows(), n_keys = keys.rows();
  const ref::Index heads = weights.cols();
  if (ratio < 1 || start_pos < 0 || heads < 1 || weights.rows() != s || q.cols() != heads * kIndexerDim ||
      (n_keys > 0 && keys.cols() != kIndexerDim))
    throw std::invalid_argument("cuda indexer_scores: q [" + std::to_string(q.rows()) + ", " +
                                std::to_string(q.cols()) + "], weights [" + std::to_string(weights.rows()) + ", " +
                                std::to_string(weights.cols()) + "], keys [" + std::to_string(keys.rows()) + ", " +
                                std::to_string(keys.cols()) + "], ratio " + std::to_string(ratio) +
                                " do not fit q [s, IH*128], weights [s, IH], keys [n, 128]");
  ref::Mat out = ref::Mat::Constant(s, n_keys, -INFINITY);
  if (s == 0 || n_keys == 0) return out;
  const HostVectors hq = quantize_vectors(q, kp.format);
  const HostVectors hk = quantize_vectors(keys, kp.format);
  std::vector<float> w(static_cast<size_t>(s * heads));
  std::vector<int32_t> ks(static_cast<size_t>(s), 0), ke(static_cast<size_t>(s));
  for (int64_t i = 0; i < s; ++i) {
    for (ref::Index h = 0; h < heads; ++h) w[static_cast<size_t>(i * heads + h)] = static_cast<float>(weights(i, h));
    ke[static_cast<size_t>(i)] = static_cast<int32_t>(std::min<int64_t>(n_keys, (start_pos + i + 1) / ratio));
  }
  const DeviceBuffer<uint8_t> qc(hq.codes), qs(hq.scales), kc(hk.codes), ksc(hk.scales);
  const DeviceBuffer<float> dw(w);
  const DeviceBuffer<int32_t> dks(ks), dke(ke);
  DeviceBuffer<float> logits(static_cast<size_t>(s * n_keys));
  const LogitsParams lp{static_cast<int>(heads), kp.format, kp.scores};
  indexer_logits_prefill(lp, {qc.get(), qs.get(), dw.get(), s}, {kc.get(), ksc.get(), n_keys}, dks.get(), dke.get(),
                         logits.get(), n_keys, heads == 64 ? v : Variant::v1);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> host = logits.download();
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < n_keys; ++j) out(i, j) = host[static_cast<size_t>(i * n_keys + j)];
  return out;
}

ref::IndexMat topk_indices(const ref::Mat& scores, int k, int32_t offset, Variant v) {
  if (k < 0 || k > scores.cols())
    throw std::invalid_argument("cuda topk_indices: k = " + std::to_string(k) +
                                ", expected 0 <= k <= n_keys = " + std::to_string(scores.cols()));
  const int64_t rows = scores.rows(), n = scores.cols();
  ref::IndexMat out = ref::IndexMat::Constant(rows, k, -1);
  if (rows == 0 || k == 0) return out;
  std::vector<float> host(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) host[static_cast<size_t>(r * n + j)] = static_cast<float>(scores(r, j));
  const DeviceBuffer<float> d(host);
  const DeviceBuffer<int32_t> lengths(std::vector<int32_t>(static_cast<size_t>(rows), static_cast<int32_t>(n)));
  DeviceBuffer<int32_t> picks(static_cast<size_t>(rows * k));
  topk(rows, d.get(), n, lengths.get(), n, k, offset, picks.get(), v);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> h = picks.download();
  for (int64_t r = 0; r < rows; ++r)
    for (int c = 0; c < k; ++c) out(r, c) = h[static_cast<size_t>(r * k + c)];
  return out;
}

ref::IndexMat attention_indices(const ref::IndexSpace& space, const ref::IndexMat& indexer_topk) {
  const IndexSpaceDesc sp{static_cast<int>(space.kind), space.start_pos, space.seqlen, space.window};
  const int k = static_cast<int>(indexer_topk.cols());
  if (k > 0 && indexer_topk.rows() != space.seqlen)
    throw std::invalid_argument("cuda attention_indices: indexer_topk has " + std::to_string(indexer_topk.rows()) +
                                " rows, the call " + std::to_string(space.seqlen));
  std::vector<int32_t> picks(static_cast<size_t>(space.seqlen * k));
  for (int64_t i = 0; i < space.seqlen && k > 0; ++i)
    for (int c = 0; c < k; ++c) picks[static_cast<size_t>(i * k + c)] = indexer_topk(i, c);
  const DeviceBuffer<int32_t> d(picks);
  const int64_t width = sp.window_width() + k;
  DeviceBuffer<int32_t> out(static_cast<size_t>(space.seqlen * width));
  cuda::attention_indices(sp, d.get(), k, out.get());
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int32_t> h = out.download();
  ref::IndexMat m(space.seqlen, width);
  for (int64_t i = 0; i < space.seqlen; ++i)
    for (int64_t c = 0; c < width; ++c) m(i, c) = h[static_cast<size_t>(i * width + c)];
  return m;
}

}  // namespace dsv4::cuda
