// The CUDA backend: the compressor stages (main and indexer) run on the kernels of cuda/compressor
// through their oracle-typed wrappers (cuda/compressor/oracle_mirror.h); the attention core
// (attn/core), its inverse RoPE (attn/out_heads) and the grouped wo_a (attn/wo_a) on the kernels
// of cuda/attention through theirs (cuda/attention/attention_mirror.h). The sparse MQA runs as an
// engine runs it: a decode call reads the sequence's cache encoded into FlashMLA's MODEL1 pages
// (verify/layouts) with FlashMLA's two index lists; prefill and chunked calls read the call's kv rows
// as bf16 (v7 on Hopper, else v2, at head_dim 512 with heads in groups of 64; v1 otherwise, e.g. the
// tiny config's head_dim 128). The indexer (indexer/q, indexer/weights, indexer/scores) and the key lists
// (indexer/topk, topk_idxs) on the kernels of cuda/indexer and cuda/topk through theirs
// (cuda/indexer/oracle_mirror.h: the q path after the oracle's wq_b projection, the head weights
// after its weights_proj, the logits over the sequence's indexer keys read from the cache, the
// top-k, the window list concatenated on the GPU with the layer's compressed list); the gate
// projections wkv(x), wgate(x), wq_b, weights_proj, wo_b and every other stage come from the
// oracle. Built with the kernels only when the
// build has them (target dsv4_cuda defines DSV4_HAVE_CUDA for this file); otherwise asking for it
// says so. Extension point: a stage gets a kernel by overriding its ref::StageProvider entry here
// and listing the entry in computes() (docs/architecture.md "Add a kernel").
#include "reference/layer.h"
#include "verify/replay/backend.h"

#ifdef DSV4_HAVE_CUDA
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "cuda/attention/attention_mirror.h"
#include "cuda/compressor/oracle_mirror.h"
#include "cuda/indexer/oracle_mirror.h"
#include "reference/primitives/linear.h"
#include "reference/stages/index_lists.h"
#include "verify/layouts/block_table.h"
#include "verify/layouts/flashmla_model1.h"
#include "verify/layouts/index_conventions.h"
#include "verify/layouts/layout_table.h"
#endif

namespace dsv4::verify {

#ifdef DSV4_HAVE_CUDA
namespace {

class CudaBackend : public ref::StageProvider {
 public:
  explicit CudaBackend(cuda::Variant attention_variant) : variant_(attention_variant) {}
  std::string name() const override { return "cuda"; }
  bool computes(ref::StageEntry entry) const override {
    switch (entry) {
      case ref::StageEntry::compress:
      case ref::StageEntry::indexer_q:
      case ref::StageEntry::indexer_weights:
      case ref::StageEntry::indexer_scores:
      case ref::StageEntry::topk_indices:
      case ref::StageEntry::attention_indices:
      case ref::StageEntry::sparse_mqa:
      case ref::StageEntry::inverse_rope_heads:
      case ref::StageEntry::grouped_wo_a: return true;
      default: return false;
    }
  }
  // The compressor kernels exist for head dims 128 and 512 (cuda::takes_head_dim); a layer of other
  // dims (the alias-free DeepSeek capture's 192) has its main compressor stages computed by the oracle.
  std::string declines(ref::Stage stage, const ref::ModelConfig& c) const override {
    switch (stage) {
      case ref::Stage::compressor_entries:
      case ref::Stage::compressor_state_kv:
      case ref::Stage::compressor_state_score:
        return compressor_takes(ref::CompressorKind::main, c) ? "" : declined_head_dim(c.head_dim);
      case ref::Stage::indexer_compressor_entries:
      case ref::Stage::indexer_compressor_state_kv:
      case ref::Stage::indexer_compressor_state_score:
        return compressor_takes(ref::CompressorKind::indexer, c) ? "" : declined_head_dim(c.index_head_dim);
      default: return "";
    }
  }
  ref::CompressorOutput compress(const ref::AttentionLayer& l, ref::CompressorKind kind, const ref::Mat& x,
                                 int64_t start_pos, ref::CompressorState& state) const override {
    if (!compressor_takes(kind, l.config())) return ref::StageProvider::compress(l, kind, x, start_pos, state);
    const ref::CompressorWeights& w =
        kind == ref::CompressorKind::main ? l.weights().compressor : l.weights().indexer.compressor;
    const ref::CompressorProjections proj = ref::compressor_projections(w, x, l.policy());
    return cuda::compress(w, kind, proj, start_pos, state, l.rope(), l.config().norm_eps);
  }
  // q_latent [s, q_lora_rank] -> indexer/q [s, IH*ID] (wq_b on the oracle, the rest on the q path)
  ref::Mat indexer_q(const ref::AttentionLayer& l, const ref::Mat& q_latent, int64_t start_pos) const override {
    const ref::Mat q_proj = ref::linear_fp8_weight(q_latent, l.weights().indexer.wq_b, l.policy());
    return cuda::indexer_q(q_proj, start_pos, l.rope(), l.config(), l.policy());
  }
  // x [s, dim] -> indexer/weights [s, IH] (weights_proj on the oracle, the scaling on the GPU)
  ref::Mat indexer_weights(const ref::AttentionLayer& l, const ref::Mat& x) const override {
    const ref::Mat proj = ref::linear_exact(x, l.weights().indexer.weights_proj, l.policy().activations);
    return cuda::indexer_weights(proj, l.config(), l.policy());
  }
  // q [s, IH*ID], weights [s, IH], the sequence's indexer keys -> indexer/scores [s, (start_pos+s)/4]
  ref::Mat indexer_scores(const ref::AttentionLayer& l, const ref::Mat& q, const ref::Mat& weights,
                          const ref::KvCache& cache, int seq, int64_t start_pos) const override {
    const int ratio = l.compress_ratio();
    const ref::Mat keys = cache.entries(seq, ref::EntryKind::indexer, (start_pos + q.rows()) / ratio);
    return cuda::indexer_scores(q, weights, keys, start_pos, ratio, l.policy());
  }
  // scores [s, n] -> indexer/topk [s, k]
  ref::IndexMat topk_indices(const ref::AttentionLayer&, const ref::Mat& scores, int k, int32_t offset) const override {
    return cuda::topk_indices(scores, k, offset);
  }
  // [window | compressed]: the layer's compressed list (ratio 4: the top-k; 128: every complete
  // block, the oracle's hca_indices; 0: none) after the window list built on the GPU.
  ref::IndexMat attention_indices(const ref::AttentionLayer& l, const ref::IndexSpace& space,
                                  const ref::IndexMat& indexer_topk) const override {
    switch (l.compress_ratio()) {
      case 4: return cuda::attention_indices(space, indexer_topk);
      case 128: return cuda::attention_indices(space, ref::hca_indices(space, 128));
      default: return cuda::attention_indices(space, ref::IndexMat(space.seqlen, 0));
    }
  }
  // q [s, H*d], the call's kv (cache and index space), indices [s, K] into it -> attn/core [s, H*d]
  ref::Mat sparse_mqa(const ref::AttentionLayer& l, const ref::Mat& q, const ref::AttentionKv& kv,
                      const ref::IndexMat& indices) const override {
    namespace attn = cuda::attention;
    const ref::ModelConfig& c = l.config();
    const double scale = std::pow(static_cast<double>(c.head_dim), -0.5);
    const bool kernel_shape = c.head_dim == attn::kHeadDim && c.n_heads % 64 == 0;  // v2 and newer
    if (kernel_shape && kv.space.kind == ref::IndexSpace::Kind::decode) {
      return decode_on_model1_pages(q, kv, indices, l.weights().attn_sink, c.n_heads, scale, l.compress_ratio());
    }
    return attn::sparse_mqa(q, kv.rows(), l.weights().attn_sink, indices, c.n_heads, scale, attn::Probs::bf16,
                            kernel_shape ? variant_ : cuda::Variant::v1);
  }
  // attn/core [s, H*d] -> attn/out_heads [s, H*d]
  ref::Mat inverse_rope_heads(const ref::AttentionLayer& l, const ref::Mat& core, int64_t start_pos) const override {
    return cuda::attention::inverse_rope_heads(core, start_pos, l.rope(), l.config().n_heads, l.config().head_dim);
  }
  // attn/out_heads [s, H*d] -> attn/wo_a [s, G*o_lora_rank]
  ref::Mat grouped_wo_a(const ref::AttentionLayer& l, const ref::Mat& out_heads) const override {
    return cuda::attention::grouped_wo_a(l.weights().wo_a, out_heads, l.config().o_groups);
  }

 private:
  static bool compressor_takes(ref::CompressorKind kind, const ref::ModelConfig& c) {
    return kind == ref::CompressorKind::main ? cuda::takes_head_dim(cuda::Kind::main, c.head_dim)
                                             : cuda::takes_head_dim(cuda::Kind::indexer, c.index_head_dim);
  }
  static std::string declined_head_dim(int head_dim) {
    return "the compressor kernels take head_dim 128 or 512 (the indexer's 128), this layer's is " +
           std::to_string(head_dim);
  }

  // A decode call as an engine runs it: the window ring (after this call's write, slot order) and the
  // compressed entries encoded into MODEL1 pages; each pool's pages placed through a block table in
  // reversed order (page j of the sequence in pool page n - j; pool page 0 unused), so that a kernel
  // addressing pages by the sequence's order would read the wrong tokens; the oracle's
  // [window | compressed] list split into FlashMLA's two scopes and mapped to pool indices
  // (page * page_size + offset). Page sizes as FlashMLA's: 64 (window, C4), 2 (C128).
  ref::Mat decode_on_model1_pages(const ref::Mat& q, const ref::AttentionKv& kv, const ref::IndexMat& indices,
                                  const ref::Vec& sink, int n_heads, double scale, int ratio) const {
    namespace attn = cuda::attention;
    const int window = kv.space.window;
    const layouts::SplitIndices lists =
        layouts::split_window_compressed(indices, window, static_cast<int32_t>(kv.space.compressed_offset()));
    ref::IndexMat window_list, compressed_list(q.rows(), 0);
    const attn::Model1Pool window_pool =
        paged(kv.cache.ring(kv.seq, kv.space.start_pos + 1), 64, lists.window, window_list);
    attn::Model1Pool compressed_pool;
    if (kv.n_entries > 0 && lists.compressed.cols() > 0)
      compressed_pool = paged(kv.cache.entries(kv.seq, ref::EntryKind::main, kv.n_entries), ratio == 128 ? 2 : 64,
                              lists.compressed, compressed_list);
    return attn::sparse_mqa_decode(q, window_pool, window_list, compressed_pool, compressed_list, sink, n_heads, scale,
                                   attn::Probs::bf16, variant_);
  }

  // rows [n, 512] -> a MODEL1 pool holding them through a reversed block table; logical token
  // indices [R, K] -> `pool_indices` in that pool.
  static cuda::attention::Model1Pool paged(const ref::Mat& rows, int page_size, const ref::IndexMat& logical,
                                           ref::IndexMat& pool_indices) {
    const layouts::PagedLayout layout = layouts::flashmla_model1(page_size);
    const int64_t pages = (rows.rows() + page_size - 1) / page_size;
    const std::vector<uint8_t> sequence_pages = layouts::encode_model1(rows, layouts::Model1Layout{page_size});
    ref::IndexMat block_table(1, pages);
    for (int64_t j = 0; j < pages; ++j) block_table(0, j) = static_cast<int32_t>(pages - j);
    cuda::attention::Model1Pool pool;
    pool.page_size = page_size;
    pool.bytes.assign(static_cast<size_t>(layout.pool_bytes(pages + 1)), 0);
    layouts::scatter_pages(layout, sequence_pages, std::span<const int32_t>(block_table.data(), pages), pool.bytes);
    pool_indices = layouts::to_pool_indices(logical, block_table, page_size, static_cast<int>(logical.rows()));
    return pool;
  }

  cuda::Variant variant_;
};

}  // namespace

std::unique_ptr<ref::StageProvider> make_cuda_backend(const std::string& precision) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    throw BackendUnavailable(
        std::string("cuda backend not built / no GPU: the build has the kernels, but no GPU is usable (") +
        (status != cudaSuccess ? cudaGetErrorString(status) : "no device") + ")");
  }
  if (precision != "official") {
    throw BackendUnavailable("cuda backend: the kernels implement the official precision only, the replay asks for '" +
                             precision + "'");
  }
  // The attention's fastest kernel on this device: v7 (needs Hopper, sm_90a; run Q, 2026-12-02).
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return std::make_unique<CudaBackend>(major == 9 && minor == 0 ? cuda::Variant::v7 : cuda::Variant::v2);
}
#else
std::unique_ptr<ref::StageProvider> make_cuda_backend(const std::string&) {
  throw BackendUnavailable(
      "cuda backend not built / no GPU: this dsv4-verify was built without the CUDA kernels (configure with nvcc on "
      "the PATH and -DDSV4_BUILD_CUDA=ON)");
}
#endif

}  // namespace dsv4::verify
