// The oracle-typed wrappers of the CUDA compressors (oracle_mirror.h): upload, run, download.
#include "cuda/compressor/oracle_mirror.h"

#include <stdexcept>
#include <string>

#include "cuda/common/cuda_check.h"
#include "cuda/common/device_buffer.h"
#include "cuda/common/numerics.cuh"

namespace dsv4::cuda {
namespace {

std::vector<float> to_floats(const ref::Mat& m) {
  std::vector<float> out(static_cast<size_t>(m.size()));
  for (ref::Index i = 0; i < m.size(); ++i) out[static_cast<size_t>(i)] = static_cast<float>(m.data()[i]);
  return out;
}

std::vector<float> to_floats(const ref::Vec& v) {
  std::vector<float> out(static_cast<size_t>(v.size()));
  for (ref::Index i = 0; i < v.size(); ++i) out[static_cast<size_t>(i)] = static_cast<float>(v(i));
  return out;
}

ref::Mat to_mat(const std::vector<float>& v, ref::Index rows, ref::Index cols) {
  ref::Mat m(rows, cols);
  for (ref::Index i = 0; i < m.size(); ++i) m.data()[i] = v[static_cast<size_t>(i)];
  return m;
}

ref::Mat bf16_to_mat(const std::vector<uint16_t>& v, ref::Index rows, ref::Index cols) {
  ref::Mat m(rows, cols);
  for (ref::Index i = 0; i < m.size(); ++i) m.data()[i] = bf16_value(v[static_cast<size_t>(i)]);
  return m;
}

void require_proj(const ref::CompressorWeights& w, const ref::CompressorProjections& proj) {
  const ref::Index width = static_cast<ref::Index>(w.coff()) * w.head_dim;
  if (proj.kv.cols() != width || proj.score.cols() != width || proj.kv.rows() != proj.score.rows())
    throw std::invalid_argument("cuda compress: projections must both be [s, " + std::to_string(width) + "], got kv [" +
                                std::to_string(proj.kv.rows()) + ", " + std::to_string(proj.kv.cols()) +
                                "] and score [" + std::to_string(proj.score.rows()) + ", " +
                                std::to_string(proj.score.cols()) + "]");
}

// Weights and the RoPE table of one call, on the device.
struct DeviceWeights {
  DeviceBuffer<float> ape, norm, rope;
  CompressorParams params;
  DeviceWeights(const ref::CompressorWeights& w, Kind kind, const ref::RopeTable& rope_table_in,
                int64_t n_entries_needed, double eps)
      : ape(to_floats(w.ape)),
        norm(to_floats(w.norm)),
        rope(rope_table(rope_table_in, w.ratio, n_entries_needed > 0 ? n_entries_needed : 1)) {
    params.ratio = w.ratio;
    params.head_dim = w.head_dim;
    params.kind = kind;
    params.norm_eps = eps;
    params.ape = ape.get();
    params.norm = norm.get();
    params.rope = rope.get();
    params.rope_entries = n_entries_needed > 0 ? n_entries_needed : 1;
  }
};

}  // namespace

std::vector<float> rope_table(const ref::RopeTable& rope, int ratio, int64_t n_entries) {
  if (rope.rope_dim != kRopeDim)
    throw std::invalid_argument("rope_table: the kernels rotate 64 dims, the table has rope_dim " +
                                std::to_string(rope.rope_dim));
  std::vector<float> out(static_cast<size_t>(n_entries) * kRopeDim);
  for (int64_t j = 0; j < n_entries; ++j)
    for (int i = 0; i < kRopeDim / 2; ++i) {
      out[static_cast<size_t>(j * kRopeDim + 2 * i)] = static_cast<float>(rope.cos_at(j * ratio, i));
      out[static_cast<size_t>(j * kRopeDim + 2 * i + 1)] = static_cast<float>(rope.sin_at(j * ratio, i));
    }
  return out;
}

Kind to_kind(ref::CompressorKind kind) { return kind == ref::CompressorKind::main ? Kind::main : Kind::indexer; }

ref::CompressorOutput compress(const ref::CompressorWeights& w, ref::CompressorKind kind,
                               const ref::CompressorProjections& proj, int64_t start_pos, ref::CompressorState& state,
                               const ref::RopeTable& rope, double norm_eps, Variant variant) {
  require_proj(w, proj);
  const int r = w.ratio, d = w.head_dim;
  const int coff = w.coff();
  if (state.ratio != r || state.head_dim != d || state.kv.rows() != coff * r || state.kv.cols() != coff * d)
    throw std::invalid_argument("cuda compress: the state does not match the weights (ratio " + std::to_string(r) +
                                ", head_dim " + std::to_string(d) + ")");
  const int32_t s = static_cast<int32_t>(proj.kv.rows());
  const BatchPlan plan({{start_pos, s, 0, 0}}, r);
  const DeviceWeights dw(w, to_kind(kind), rope, plan.max_entry() + 1, norm_eps);
  const DeviceBuffer<float> kv(to_floats(proj.kv)), score(to_floats(proj.score));
  DeviceBuffer<float> state_kv(to_floats(state.kv)), state_score(to_floats(state.score));
  const int64_t n = plan.n_entries();
  DeviceBuffer<uint16_t> entries(static_cast<size_t>(n * d));
  DeviceBuffer<float> pooled(static_cast<size_t>(n * d));
  if (r == 4)
    c4_prefill(dw.params, plan, kv.get(), score.get(), state_kv.get(), state_score.get(), entries.get(), pooled.get(),
               variant);
  else
    c128_prefill(dw.params, plan, kv.get(), score.get(), state_kv.get(), state_score.get(), entries.get(), pooled.get(),
                 variant);
  CUDA_CHECK(cudaDeviceSynchronize());
  state.kv = to_mat(state_kv.download(), coff * r, coff * d);
  state.score = to_mat(state_score.download(), coff * r, coff * d);
  ref::CompressorOutput out;
  out.first_entry = start_pos / r;
  out.pooled = to_mat(pooled.download(), n, d);
  out.entries = bf16_to_mat(entries.download(), n, d);
  return out;
}

ref::CompressorOutput compress_online_c128(const ref::CompressorWeights& w, const ref::CompressorProjections& proj,
                                           int64_t start_pos, ref::OnlineC128State& state, const ref::RopeTable& rope,
                                           double norm_eps) {
  require_proj(w, proj);
  const int d = w.head_dim;
  if (w.ratio != 128 || state.max.size() != d || state.sum.size() != d || state.mean.size() != d)
    throw std::invalid_argument("cuda compress_online_c128: expected ratio 128 and a state of 3 x " +
                                std::to_string(d) + " values");
  const int32_t s = static_cast<int32_t>(proj.kv.rows());
  const BatchPlan plan({{start_pos, s, 0, 0}}, 128);
  const DeviceWeights dw(w, Kind::main, rope, plan.max_entry() + 1, norm_eps);
  const DeviceBuffer<float> kv(to_floats(proj.kv)), score(to_floats(proj.score));
  std::vector<float> host_state(static_cast<size_t>(3 * d));
  for (int c = 0; c < d; ++c) {
    host_state[static_cast<size_t>(c)] = static_cast<float>(state.max(c));
    host_state[static_cast<size_t>(d + c)] = static_cast<float>(state.sum(c));
    host_state[static_cast<size_t>(2 * d + c)] = static_cast<float>(state.mean(c));
  }
  DeviceBuffer<float> dev_state(host_state);
  const int64_t n = plan.n_entries();
  DeviceBuffer<uint16_t> entries(static_cast<size_t>(n * d));
  DeviceBuffer<float> pooled(static_cast<size_t>(n * d));
  c128_online_prefill(dw.params, plan, kv.get(), score.get(), dev_state.get(), entries.get(), pooled.get());
  CUDA_CHECK(cudaDeviceSynchronize());
  host_state = dev_state.download();
  for (int c = 0; c < d; ++c) {
    state.max(c) = host_state[static_cast<size_t>(c)];
    state.sum(c) = host_state[static_cast<size_t>(d + c)];
    state.mean(c) = host_state[static_cast<size_t>(2 * d + c)];
  }
  ref::CompressorOutput out;
  out.first_entry = start_pos / 128;
  out.pooled = to_mat(pooled.download(), n, d);
  out.entries = bf16_to_mat(entries.download(), n, d);
  return out;
}

}  // namespace dsv4::cuda
