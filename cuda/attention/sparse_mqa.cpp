// The host side of the sparse MQA kernels: argument checks (a bad call throws before anything is
// launched), the kernels' parameter views, the split-KV choice, dispatch to v1 / v2 / v3 / v4 / v5.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/attention/kernel_params.cuh"
#include "cuda/attention/launchers.h"
#include "cuda/attention/sparse_mqa_api.h"
#include "cuda/common/cuda_check.h"

namespace dsv4::cuda::attention {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument(what);
}

PoolView view(const PagedPool& p) {
  return PoolView{p.bytes, p.page_size, p.page_size > 0 ? model1_page_bytes(p.page_size) : 0, p.tokens()};
}

void check_list(const IndexList& l, const char* who, const char* name) {
  require(l.topk >= 0, std::string(who) + ": " + name + ".topk must be >= 0, got " + std::to_string(l.topk));
  require(l.topk == 0 || l.indices != nullptr,
          std::string(who) + ": " + name + ".indices is nullptr with topk = " + std::to_string(l.topk));
}

void check_pool(const PagedPool& p, int topk, const char* who, const char* name) {
  if (topk == 0) return;
  require(p.bytes != nullptr, std::string(who) + ": " + name + ".bytes is nullptr");
  require(p.page_size > 0,
          std::string(who) + ": " + name + ".page_size must be positive, got " + std::to_string(p.page_size));
  require(p.num_pages >= 0,
          std::string(who) + ": " + name + ".num_pages must be >= 0, got " + std::to_string(p.num_pages));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

int device_sms(int device) {
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// v3, v4 and v5 are built for sm_90a (wgmma, setmaxnreg): Hopper only.
void require_hopper(const char* who) {
  int device = 0, major = 0, minor = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  require(major == 9 && minor == 0, std::string(who) +
                                        ": v3, v4, v5 and v7 run on sm_90 (Hopper) only, this device is sm_" +
                                        std::to_string(major) + std::to_string(minor));
}

// The attention's versions are v1 to v5 and v7 (v6 is the indexer's; a Variant the attention does not
// have is refused, not run as another version).
void require_version(Variant v, const std::string& who) {
  require(static_cast<int>(v) <= static_cast<int>(Variant::v5) || v == Variant::v7,
          who + ": the attention has versions v1 to v5 and v7, got " + variant_name(v));
}

// v7 takes the row maximum over the raw scores q.k and scales it afterwards, which is the maximum of
// the scaled scores only for a scale > 0 (a zero scale would also make the -inf maximum of a row
// without a valid slot a NaN).
void require_v7_scale(Variant v, float scale, const std::string& who) {
  require(v != Variant::v7 || (std::isfinite(scale) && scale > 0.0f),
          who + ": v7 needs a finite softmax_scale > 0, got " + std::to_string(scale));
}

void check_decode(const DecodeArgs& a, Variant v) {
  const char* who = "sparse_mqa_decode";
  require_version(v, who);
  require_v7_scale(v, a.softmax_scale, who);
  require(a.batch >= 0 && a.s_q >= 0, std::string(who) + ": batch and s_q must be >= 0, got " +
                                          std::to_string(a.batch) + ", " + std::to_string(a.s_q));
  require(a.n_heads > 0, std::string(who) + ": n_heads must be positive, got " + std::to_string(a.n_heads));
  require(v == Variant::v1 || a.n_heads % 64 == 0,
          std::string(who) + ": v2 to v7 need n_heads a multiple of 64, got " + std::to_string(a.n_heads));
  check_list(a.list, who, "list");
  check_list(a.extra_list, who, "extra_list");
  check_pool(a.pool, a.list.topk, who, "pool");
  check_pool(a.extra_pool, a.extra_list.topk, who, "extra_pool");
  require(a.q != nullptr && a.out != nullptr && a.lse != nullptr,
          std::string(who) + ": q, out and lse must be device pointers, got a nullptr");
  require(aligned16(a.q) && aligned16(a.out) && aligned16(a.pool.bytes) && aligned16(a.extra_pool.bytes),
          std::string(who) + ": q, out and the pools must be 16-byte aligned (the kernels copy 16-byte chunks)");
  require(static_cast<int64_t>(a.list.topk) + a.extra_list.topk < (int64_t{1} << 30),
          std::string(who) + ": topk + extra_topk too large");
}

}  // namespace

DecodeParams make_decode_params(const DecodeArgs& a) {
  DecodeParams p{};
  p.batch = a.batch;
  p.s_q = a.s_q;
  p.n_heads = a.n_heads;
  p.q = a.q;
  p.pool = view(a.pool);
  p.extra_pool = view(a.extra_pool);
  p.list = a.list.indices;
  p.lengths = a.list.lengths;
  p.topk = a.list.topk;
  p.extra_list = a.extra_list.topk > 0 ? a.extra_list.indices : nullptr;
  p.extra_lengths = a.extra_list.lengths;
  p.extra_topk = a.extra_list.topk;
  p.sink = a.sink;
  p.scale = a.softmax_scale;
  p.out = a.out;
  p.lse = a.lse;
  return p;
}

PrefillParams make_prefill_params(const PrefillArgs& a) {
  PrefillParams p{};
  p.s_q = a.s_q;
  p.n_heads = a.n_heads;
  p.d = a.head_dim;
  p.s_kv = a.s_kv;
  p.q = a.q;
  p.kv = a.kv;
  p.list = a.list.indices;
  p.lengths = a.list.lengths;
  p.topk = a.list.topk;
  p.sink = a.sink;
  p.scale = a.softmax_scale;
  p.out = a.out;
  p.max_logits = a.max_logits;
  p.lse = a.lse;
  return p;
}

int decode_splits(int batch, int s_q, int n_heads, int total_slots, int sms) {
  const int64_t blocks = static_cast<int64_t>(batch) * s_q * std::max(1, n_heads / 64);
  const int slot_blocks = (total_slots + kSlotBlock - 1) / kSlotBlock;
  if (blocks <= 0 || slot_blocks <= 1 || blocks >= sms) return 1;
  return static_cast<int>(std::min<int64_t>(slot_blocks, sms / blocks));
}

namespace detail {
size_t split_workspace_bytes(int64_t rows, int n_heads, int splits) {
  if (splits <= 1) return 0;
  const int64_t parts = static_cast<int64_t>(splits) * rows * n_heads;
  return static_cast<size_t>(parts) * (kHeadDim + 2) * sizeof(float);
}
}  // namespace detail

size_t decode_workspace_bytes(const DecodeArgs& a, Variant v, int device) {
  require_version(v, "decode_workspace_bytes");
  if (v == Variant::v1) return 0;
  const int splits = decode_splits(a.batch, a.s_q, a.n_heads, a.list.topk + a.extra_list.topk, device_sms(device));
  return detail::split_workspace_bytes(static_cast<int64_t>(a.batch) * a.s_q, a.n_heads, splits);
}

void sparse_mqa_decode(const DecodeArgs& a, Variant v, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  check_decode(a, v);
  const DecodeParams p = make_decode_params(a);
  if (v == Variant::v1) {
    detail::launch_v1(p, a.probs, stream);
    return;
  }
  if (v == Variant::v3 || v == Variant::v4 || v == Variant::v5 || v == Variant::v7) require_hopper("sparse_mqa_decode");
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const int splits = decode_splits(a.batch, a.s_q, a.n_heads, p.total_slots(), device_sms(device));
  const size_t need = detail::split_workspace_bytes(p.rows(), a.n_heads, splits);
  require(workspace_bytes >= need && (need == 0 || workspace != nullptr),
          "sparse_mqa_decode: this shape splits the slots " + std::to_string(splits) + " ways and needs " +
              std::to_string(need) + " bytes of workspace (decode_workspace_bytes), got " +
              std::to_string(workspace_bytes));
  if (v == Variant::v2)
    detail::launch_v2(p, a.probs, splits, workspace, stream);
  else if (v == Variant::v3)
    detail::launch_v3(p, a.probs, splits, workspace, stream);
  else if (v == Variant::v4)
    detail::launch_v4(p, a.probs, splits, workspace, stream);
  else if (v == Variant::v5)
    detail::launch_v5(p, a.probs, splits, workspace, stream);
  else
    detail::launch_v7(p, a.probs, splits, workspace, stream);
}

void sparse_mqa_prefill(const PrefillArgs& a, Variant v, cudaStream_t stream) {
  const std::string who = "sparse_mqa_prefill";
  require_version(v, who);
  require_v7_scale(v, a.softmax_scale, who);
  require(a.s_q >= 0 && a.s_kv >= 0,
          who + ": s_q and s_kv must be >= 0, got " + std::to_string(a.s_q) + ", " + std::to_string(a.s_kv));
  require(a.n_heads > 0, who + ": n_heads must be positive, got " + std::to_string(a.n_heads));
  require(a.head_dim >= 64 && a.head_dim <= kHeadDim && a.head_dim % 64 == 0,
          who + ": head_dim must be a multiple of 64 in [64, 512], got " + std::to_string(a.head_dim));
  require(v == Variant::v1 || (a.n_heads % 64 == 0 && a.head_dim == kHeadDim),
          who + ": v2 to v7 need n_heads a multiple of 64 and head_dim 512, got " + std::to_string(a.n_heads) + ", " +
              std::to_string(a.head_dim));
  check_list(a.list, who.c_str(), "list");
  require(a.q != nullptr && a.out != nullptr, who + ": q and out must be device pointers, got a nullptr");
  require(a.list.topk == 0 || a.s_kv == 0 || a.kv != nullptr,
          who + ": kv is nullptr with s_kv = " + std::to_string(a.s_kv));
  require(aligned16(a.q) && aligned16(a.kv) && aligned16(a.out),
          who + ": q, kv and out must be 16-byte aligned (the kernels copy 16-byte chunks)");
  const PrefillParams p = make_prefill_params(a);
  if (v == Variant::v3 || v == Variant::v4 || v == Variant::v5 || v == Variant::v7) require_hopper(who.c_str());
  if (v == Variant::v1)
    detail::launch_v1(p, a.probs, stream);
  else if (v == Variant::v2)
    detail::launch_v2(p, a.probs, stream);
  else if (v == Variant::v3)
    detail::launch_v3(p, a.probs, stream);
  else if (v == Variant::v4)
    detail::launch_v4(p, a.probs, stream);
  else if (v == Variant::v5)
    detail::launch_v5(p, a.probs, stream);
  else
    detail::launch_v7(p, a.probs, stream);
}

}  // namespace dsv4::cuda::attention
