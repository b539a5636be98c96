// The CUDA attention kernels behind the oracle's types (attention_mirror.h).
#include "cuda/attention/attention_mirror.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "cuda/attention/model1_codec.cuh"
#include "cuda/attention/output_path.h"
#include "cuda/common/device_buffer.h"
#include "reference/numerics/bf16.h"

namespace dsv4::cuda::attention {
namespace {

// bf16 codes of a matrix whose values must all be bf16 values (NaN rows pass: unread poison).
std::vector<uint16_t> exact_bf16(const ref::Mat& m, const char* who, const char* what) {
  std::vector<uint16_t> codes(static_cast<size_t>(m.size()));
  for (ref::Index i = 0; i < m.size(); ++i) {
    const double v = m.data()[i];
    const uint16_t c = ref::bf16_encode(static_cast<float>(v));
    if (!std::isnan(v) && static_cast<double>(ref::bf16_decode(c)) != v)
      throw std::invalid_argument(std::string(who) + ": " + what + " element " + std::to_string(i) + " = " +
                                  std::to_string(v) + " is not a bf16 value (the kernels read bf16)");
    codes[static_cast<size_t>(i)] = c;
  }
  return codes;
}

ref::Mat from_bf16(const std::vector<uint16_t>& codes, ref::Index rows, ref::Index cols) {
  ref::Mat m(rows, cols);
  for (ref::Index i = 0; i < m.size(); ++i) m.data()[i] = ref::bf16_decode(codes[static_cast<size_t>(i)]);
  return m;
}

}  // namespace

std::vector<float> rope_rows(const ref::RopeTable& rope, int64_t n_positions) {
  if (rope.rope_dim != kRopeDims)
    throw std::invalid_argument("rope_rows: the table has rope_dim " + std::to_string(rope.rope_dim) +
                                ", the kernels rotate " + std::to_string(kRopeDims) + " dims");
  std::vector<float> rows(static_cast<size_t>(n_positions) * kRopeDims);
  for (int64_t t = 0; t < n_positions; ++t)
    for (int i = 0; i < kRopeDims / 2; ++i) {
      rows[static_cast<size_t>(t * kRopeDims + 2 * i)] = static_cast<float>(rope.cos_at(t, i));
      rows[static_cast<size_t>(t * kRopeDims + 2 * i + 1)] = static_cast<float>(rope.sin_at(t, i));
    }
  return rows;
}

ref::Mat sparse_mqa(const ref::Mat& q, const ref::Mat& kv, const ref::Vec& sink, const ref::IndexMat& indices,
                    int n_heads, double softmax_scale, Probs probs, Variant variant) {
  const char* who = "cuda::attention::sparse_mqa";
  const ref::Index d = kv.cols();
  if (n_heads < 1 || q.cols() != n_heads * d || sink.size() != n_heads || indices.rows() != q.rows())
    throw std::invalid_argument(std::string(who) + ": expected q [s, H*d], kv [n, d], sink [H], indices [s, K]");
  for (ref::Index i = 0; i < indices.size(); ++i) {
    const int32_t idx = indices.data()[i];
    if (idx < -1 || idx >= kv.rows())
      throw std::invalid_argument(std::string(who) + ": index " + std::to_string(idx) + " outside [-1, " +
                                  std::to_string(kv.rows()) + ")");
  }
  const std::vector<uint16_t> q_codes = exact_bf16(q, who, "q");
  const std::vector<uint16_t> kv_codes = exact_bf16(kv, who, "kv");
  std::vector<float> sink_f(static_cast<size_t>(n_heads));
  for (int h = 0; h < n_heads; ++h) sink_f[static_cast<size_t>(h)] = static_cast<float>(sink(h));
  std::vector<int32_t> idx(indices.data(), indices.data() + indices.size());

  DeviceBuffer<uint16_t> dq(q_codes), dkv(kv_codes), dout(q_codes.size());
  DeviceBuffer<float> dsink(sink_f);
  DeviceBuffer<int32_t> didx(idx);
  PrefillArgs a;
  a.s_q = static_cast<int>(q.rows());
  a.n_heads = n_heads;
  a.head_dim = static_cast<int>(d);
  a.s_kv = kv.rows();
  a.q = dq.get();
  a.kv = dkv.get();
  a.list.indices = didx.get();
  a.list.topk = static_cast<int>(indices.cols());
  a.sink = dsink.get();
  a.softmax_scale = static_cast<float>(softmax_scale);
  a.probs = probs;
  a.out = dout.get();
  sparse_mqa_prefill(a, variant);
  CUDA_CHECK(cudaDeviceSynchronize());
  return from_bf16(dout.download(), q.rows(), q.cols());
}

ref::Mat sparse_mqa_decode(const ref::Mat& q, const Model1Pool& window, const ref::IndexMat& window_list,
                           const Model1Pool& compressed, const ref::IndexMat& compressed_list, const ref::Vec& sink,
                           int n_heads, double softmax_scale, Probs probs, Variant variant) {
  const char* who = "cuda::attention::sparse_mqa_decode";
  const ref::Index s_q = q.rows();
  if (n_heads < 1 || q.cols() != static_cast<ref::Index>(n_heads) * kHeadDim || sink.size() != n_heads ||
      window_list.rows() != s_q || (compressed_list.cols() > 0 && compressed_list.rows() != s_q))
    throw std::invalid_argument(std::string(who) + ": expected q [s_q, H*512], sink [H], lists [s_q, K]");
  const std::vector<uint16_t> q_codes = exact_bf16(q, who, "q");
  std::vector<float> sink_f(static_cast<size_t>(n_heads));
  for (int h = 0; h < n_heads; ++h) sink_f[static_cast<size_t>(h)] = static_cast<float>(sink(h));
  // row-major [s_q, K] lists (Eigen's IndexMat is row-major, as the oracle's)
  const std::vector<int32_t> wl(window_list.data(), window_list.data() + window_list.size());
  const std::vector<int32_t> cl(compressed_list.data(), compressed_list.data() + compressed_list.size());
  const int extra_topk = static_cast<int>(compressed_list.cols());

  DeviceBuffer<uint16_t> dq(q_codes), dout(q_codes.size());
  DeviceBuffer<uint8_t> dwin(window.bytes), dcomp(compressed.bytes);
  DeviceBuffer<int32_t> dwl(wl), dcl(cl);
  DeviceBuffer<float> dsink(sink_f), dlse(static_cast<size_t>(s_q * n_heads));
  DecodeArgs a;
  a.batch = 1;
  a.s_q = static_cast<int>(s_q);
  a.n_heads = n_heads;
  a.q = dq.get();
  a.pool = PagedPool{
      dwin.get(), window.page_size,
      window.page_size > 0 ? static_cast<int64_t>(window.bytes.size()) / model1_page_bytes(window.page_size) : 0};
  a.list = IndexList{dwl.get(), static_cast<int>(window_list.cols()), nullptr};
  if (extra_topk > 0) {
    a.extra_pool = PagedPool{dcomp.get(), compressed.page_size,
                             static_cast<int64_t>(compressed.bytes.size()) / model1_page_bytes(compressed.page_size)};
    a.extra_list = IndexList{dcl.get(), extra_topk, nullptr};
  }
  a.sink = dsink.get();
  a.softmax_scale = static_cast<float>(softmax_scale);
  a.probs = probs;
  a.out = dout.get();
  a.lse = dlse.get();
  const size_t ws_bytes = decode_workspace_bytes(a, variant);
  DeviceBuffer<uint8_t> ws(ws_bytes);
  sparse_mqa_decode(a, variant, ws.get(), ws_bytes);
  CUDA_CHECK(cudaDeviceSynchronize());
  return from_bf16(dout.download(), s_q, q.cols());
}

ref::Mat inverse_rope_heads(const ref::Mat& o, int64_t start_pos, const ref::RopeTable& rope, int n_heads,
                            int head_dim) {
  const char* who = "cuda::attention::inverse_rope_heads";
  if (o.cols() != static_cast<ref::Index>(n_heads) * head_dim)
    throw std::invalid_argument(std::string(who) + ": o has width " + std::to_string(o.cols()) + ", expected " +
                                std::to_string(n_heads) + " heads x " + std::to_string(head_dim));
  const std::vector<uint16_t> codes = exact_bf16(o, who, "o");
  const std::vector<float> table = rope_rows(rope, start_pos + o.rows());
  std::vector<int64_t> positions(static_cast<size_t>(o.rows()));
  for (ref::Index i = 0; i < o.rows(); ++i) positions[static_cast<size_t>(i)] = start_pos + i;
  DeviceBuffer<uint16_t> din(codes), dout(codes.size());
  DeviceBuffer<float> dtable(table);
  DeviceBuffer<int64_t> dpos(positions);
  attention::inverse_rope_heads(din.get(), dout.get(), o.rows(), n_heads, head_dim, dpos.get(), dtable.get(),
                                start_pos + o.rows());
  CUDA_CHECK(cudaDeviceSynchronize());
  return from_bf16(dout.download(), o.rows(), o.cols());
}

ref::Mat grouped_wo_a(const ref::Mat& wo_a, const ref::Mat& o, int groups) {
  const char* who = "cuda::attention::grouped_wo_a";
  const ref::Index width = groups > 0 ? o.cols() / groups : 0;
  const ref::Index rank = groups > 0 ? wo_a.rows() / groups : 0;
  if (groups < 1 || width * groups != o.cols() || rank * groups != wo_a.rows() || wo_a.cols() != width)
    throw std::invalid_argument(std::string(who) + ": o [s, G*K] and wo_a [G*R, K] do not fit " +
                                std::to_string(groups) + " groups");
  DeviceBuffer<uint16_t> dw(exact_bf16(wo_a, who, "wo_a")), do_(exact_bf16(o, who, "o"));
  DeviceBuffer<uint16_t> dout(static_cast<size_t>(o.rows() * groups * rank));
  GroupedWoA gemm;
  gemm.run(do_.get(), dw.get(), dout.get(), o.rows(), groups, static_cast<int>(width), static_cast<int>(rank));
  CUDA_CHECK(cudaDeviceSynchronize());
  return from_bf16(dout.download(), o.rows(), groups * rank);
}

}  // namespace dsv4::cuda::attention
