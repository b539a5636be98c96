// The CUDA backend: the compressor stages (main and indexer) run on the kernels of cuda/compressor
// through their oracle-typed wrappers (cuda/compressor/oracle_mirror.h); the attention core
// (attn/core), its inverse RoPE (attn/out_heads) and the grouped wo_a (attn/wo_a) on the kernels
// of cuda/attention through theirs (cuda/attention/attention_mirror.h: the sparse MQA reads the
// call's kv rows as bf16, the mma version at head_dim 512 with heads in groups of 64, the simple
// one otherwise); the indexer (indexer/q, indexer/weights, indexer/scores) and the key lists
// (indexer/topk, topk_idxs) on the kernels of cuda/indexer and cuda/topk through theirs
// (cuda/indexer/oracle_mirror.h: the q path after the oracle's wq_b projection, the head weights
// after its weights_proj, the logits over the sequence's indexer keys read from the cache, the
// top-k, the window list concatenated on the GPU with the layer's compressed list); the gate
// projections wkv(x), wgate(x), wq_b, weights_proj, wo_b and every other stage come from the
// oracle. Built with the kernels only when the
// build has them (target dsv4_cuda defines DSV4_HAVE_CUDA for this file); otherwise asking for it
// says so. Extension point: a stage gets a kernel by overriding its ref::StageProvider entry here
// and listing the entry in computes() (docs/architecture.md "Add a kernel").
#include "verify/replay/backend.h"

#include "reference/layer.h"

#ifdef DSV4_HAVE_CUDA
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/attention/attention_mirror.h"
#include "cuda/compressor/oracle_mirror.h"
#include "cuda/indexer/oracle_mirror.h"
#include "reference/primitives/linear.h"
#include "reference/stages/index_lists.h"
#endif

namespace dsv4::verify {

#ifdef DSV4_HAVE_CUDA
namespace {

class CudaBackend : public ref::StageProvider {
 public:
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
  ref::CompressorOutput compress(const ref::AttentionLayer& l, ref::CompressorKind kind, const ref::Mat& x,
                                 int64_t start_pos, ref::CompressorState& state) const override {
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
  // q [s, H*d], the call's kv rows, indices [s, K] -> attn/core [s, H*d]
  ref::Mat sparse_mqa(const ref::AttentionLayer& l, const ref::Mat& q, const ref::AttentionKv& kv,
                      const ref::IndexMat& indices) const override {
    namespace attn = cuda::attention;
    const ref::ModelConfig& c = l.config();
    const attn::Version v = c.head_dim == attn::kHeadDim && c.n_heads % 64 == 0 ? attn::Version::mma : attn::Version::simple;
    return attn::sparse_mqa(q, kv.rows(), l.weights().attn_sink, indices, c.n_heads,
                            std::pow(static_cast<double>(c.head_dim), -0.5), attn::Probs::bf16, v);
  }
  // attn/core [s, H*d] -> attn/out_heads [s, H*d]
  ref::Mat inverse_rope_heads(const ref::AttentionLayer& l, const ref::Mat& core, int64_t start_pos) const override {
    return cuda::attention::inverse_rope_heads(core, start_pos, l.rope(), l.config().n_heads, l.config().head_dim);
  }
  // attn/out_heads [s, H*d] -> attn/wo_a [s, G*o_lora_rank]
  ref::Mat grouped_wo_a(const ref::AttentionLayer& l, const ref::Mat& out_heads) const override {
    return cuda::attention::grouped_wo_a(l.weights().wo_a, out_heads, l.config().o_groups);
  }
};

}  // namespace

std::unique_ptr<ref::StageProvider> make_cuda_backend(const std::string& precision) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    throw BackendUnavailable(std::string("cuda backend not built / no GPU: the build has the kernels, but no GPU is usable (") +
                             (status != cudaSuccess ? cudaGetErrorString(status) : "no device") + ")");
  }
  if (precision != "official") {
    throw BackendUnavailable("cuda backend: the kernels implement the official precision only, the replay asks for '" +
                             precision + "'");
  }
  return std::make_unique<CudaBackend>();
}
#else
std::unique_ptr<ref::StageProvider> make_cuda_backend(const std::string&) {
  throw BackendUnavailable(
      "cuda backend not built / no GPU: this dsv4-verify was built without the CUDA kernels (configure with nvcc on "
      "the PATH and -DDSV4_BUILD_CUDA=ON)");
}
#endif

}  // namespace dsv4::verify
