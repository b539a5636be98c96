// The oracle (reference/) in Python: configuration, precision policies, weights, every stage and
// the whole layer. Docstrings give the stage's capture name and its shapes (docs/math.md).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "reference/config.h"
#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/precision.h"
#include "reference/primitives/hadamard.h"
#include "reference/primitives/rope.h"
#include "reference/stage_registry.h"
#include "reference/stages/compressor.h"
#include "reference/stages/index_lists.h"
#include "reference/stages/indexer.h"
#include "reference/stages/output_projection.h"
#include "reference/stages/projections.h"
#include "reference/stages/sparse_mqa.h"
#include "reference/stages/topk.h"
#include "reference/weights.h"
#include "verify/python/src/arrays.h"

namespace dsv4::python {

using namespace nb::literals;

namespace {

// A read-write array property over an Eigen member (copies both ways).
#define DSV4_MAT_PROP(cls, Type, field, doc)                              \
  cls.def_prop_rw(                                                        \
      #field, [](const Type& self) { return out(ref::Mat(self.field)); }, \
      [](Type& self, In2 a) { self.field = to_mat(a); }, nb::rv_policy::move, doc)
#define DSV4_VEC_PROP(cls, Type, field, doc)                              \
  cls.def_prop_rw(                                                        \
      #field, [](const Type& self) { return out(ref::Vec(self.field)); }, \
      [](Type& self, In1 a) { self.field = to_vec(a); }, nb::rv_policy::move, doc)

// Every stage the registry says the layer computes for this ratio, by its capture name.
nb::dict stage_dict(const ref::StageOutputs& o, int ratio) {
  nb::dict d;
  for (const ref::StageDef& def : ref::stages()) {
    if (!ref::in_scope(def.scope, ratio)) continue;
    const std::string name(def.name);
    if (def.dense_result != nullptr)
      d[name.c_str()] = out(ref::Mat(*def.dense_result(o)));
    else if (def.index_result != nullptr)
      d[name.c_str()] = out(ref::IndexMat(*def.index_result(o)));
  }
  return d;
}

}  // namespace

void bind_oracle(nb::module_& m) {
  // --- configuration and precision -------------------------------------------------------------
  nb::class_<ref::ModelConfig> cfg(m, "ModelConfig",
                                   "Model configuration: ModelConfig('flash' | 'pro' | 'tiny') or the static makers.");
  cfg.def(nb::init<>())
      .def(
          "__init__",
          [](ref::ModelConfig* self, const std::string& name) {
            new (self) ref::ModelConfig(ref::ModelConfig::by_name(name));
          },
          "name"_a)
      .def_static("flash", &ref::ModelConfig::flash, "DeepSeek-V4-Flash (64 heads, top-512)")
      .def_static("pro", &ref::ModelConfig::pro, "DeepSeek-V4-Pro (128 heads, top-1024)")
      .def_static("tiny", &ref::ModelConfig::tiny, "small dims with the same structure, for tests")
      .def_static("by_name", &ref::ModelConfig::by_name, "name"_a)
      .def("validate", &ref::ModelConfig::validate)
      .def_prop_ro("nope_dim", &ref::ModelConfig::nope_dim);
#define DSV4_CFG_FIELD(f) cfg.def_rw(#f, &ref::ModelConfig::f)
  DSV4_CFG_FIELD(name);
  DSV4_CFG_FIELD(dim);
  DSV4_CFG_FIELD(n_heads);
  DSV4_CFG_FIELD(head_dim);
  DSV4_CFG_FIELD(rope_head_dim);
  DSV4_CFG_FIELD(q_lora_rank);
  DSV4_CFG_FIELD(o_groups);
  DSV4_CFG_FIELD(o_lora_rank);
  DSV4_CFG_FIELD(window_size);
  DSV4_CFG_FIELD(index_n_heads);
  DSV4_CFG_FIELD(index_head_dim);
  DSV4_CFG_FIELD(index_topk);
  DSV4_CFG_FIELD(rope_theta);
  DSV4_CFG_FIELD(compress_rope_theta);
  DSV4_CFG_FIELD(original_seq_len);
  DSV4_CFG_FIELD(rope_factor);
  DSV4_CFG_FIELD(beta_fast);
  DSV4_CFG_FIELD(beta_slow);
  DSV4_CFG_FIELD(norm_eps);
  DSV4_CFG_FIELD(max_seq_len);
  DSV4_CFG_FIELD(compress_ratios);
#undef DSV4_CFG_FIELD
  nb::implicitly_convertible<std::string, ref::ModelConfig>();

  nb::enum_<ref::Element>(m, "Element").value("e4m3", ref::Element::e4m3).value("e2m1", ref::Element::e2m1);
  nb::enum_<ref::ScaleRule>(m, "ScaleRule")
      .value("ue8m0_ceil", ref::ScaleRule::ue8m0_ceil)
      .value("e8m0_floor", ref::ScaleRule::e8m0_floor)
      .value("nvfp4_e4m3", ref::ScaleRule::nvfp4_e4m3)
      .value("fp32_amax", ref::ScaleRule::fp32_amax);
  nb::class_<ref::BlockFormat>(m, "BlockFormat", "A block fake-quant format: element, block size, scale rule.")
      .def(nb::init<>())
      .def(
          "__init__",
          [](ref::BlockFormat* self, ref::Element e, int block, ref::ScaleRule rule) {
            new (self) ref::BlockFormat{e, block, rule};
          },
          "element"_a, "block"_a, "scale"_a)
      .def_rw("element", &ref::BlockFormat::element)
      .def_rw("block", &ref::BlockFormat::block)
      .def_rw("scale", &ref::BlockFormat::scale)
      .def("qmax", &ref::BlockFormat::qmax)
      .def("name", &ref::BlockFormat::name)
      .def("__repr__", [](const ref::BlockFormat& f) { return "BlockFormat(" + f.name() + ")"; })
      .def("__eq__", [](const ref::BlockFormat& a, const ref::BlockFormat& b) { return a == b; })
      .def_static("fp8_kv", &ref::BlockFormat::fp8_kv, "e4m3, blocks of 64, UE8M0 (DeepSeek's KV nope dims)")
      .def_static("fp4_indexer", &ref::BlockFormat::fp4_indexer, "e2m1, blocks of 32, UE8M0 (DeepSeek's indexer q/k)")
      .def_static("fp8_per_head", &ref::BlockFormat::fp8_per_head, "head_dim"_a)
      .def_static("mxfp4", &ref::BlockFormat::mxfp4, "OCP MXFP4: e2m1, blocks of 32, E8M0 floor rule")
      .def_static("nvfp4", &ref::BlockFormat::nvfp4, "NVFP4: e2m1, blocks of 16, e4m3 block scale x fp32 tensor scale")
      .def_static("fp8_linear_activation", &ref::BlockFormat::fp8_linear_activation);

  nb::enum_<ref::Storage>(m, "Storage")
      .value("fp64", ref::Storage::fp64)
      .value("fp32", ref::Storage::fp32)
      .value("bf16", ref::Storage::bf16);
  nb::class_<ref::PrecisionPolicy>(
      m, "PrecisionPolicy",
      "A precision policy by name: PrecisionPolicy('official'); PrecisionPolicy.names() lists them.")
      .def(
          "__init__",
          [](ref::PrecisionPolicy* self, const std::string& name) {
            new (self) ref::PrecisionPolicy(ref::PrecisionPolicy::by_name(name));
          },
          "name"_a)
      .def_static("names",
                  [] {
                    std::vector<std::string> names;
                    for (const ref::PrecisionPolicy& p : ref::PrecisionPolicy::all_named()) names.push_back(p.name);
                    return names;
                  })
      .def_rw("name", &ref::PrecisionPolicy::name)
      .def_rw("activations", &ref::PrecisionPolicy::activations)
      .def_rw("fp32_tensors", &ref::PrecisionPolicy::fp32_tensors)
      .def_rw("kv_nope", &ref::PrecisionPolicy::kv_nope)
      .def_rw("indexer_qk", &ref::PrecisionPolicy::indexer_qk)
      .def_rw("indexer_hadamard", &ref::PrecisionPolicy::indexer_hadamard)
      .def_rw("indexer_scores", &ref::PrecisionPolicy::indexer_scores)
      .def_rw("attn_probs", &ref::PrecisionPolicy::attn_probs,
              "probabilities before P.V: Storage.bf16 officially (set Storage.fp32 for the fp32-P variant)")
      .def_rw("attn_online_blocks", &ref::PrecisionPolicy::attn_online_blocks)
      .def("describe", &ref::PrecisionPolicy::describe)
      .def("__repr__", [](const ref::PrecisionPolicy& p) { return "PrecisionPolicy(" + p.describe() + ")"; });
  nb::implicitly_convertible<std::string, ref::PrecisionPolicy>();

  nb::class_<ref::RopeTable>(m, "RopeTable",
                             "RoPE frequencies of a layer: RopeTable.for_layer(cfg, compress_ratio, policy).")
      .def_static("for_layer", &ref::RopeTable::for_layer, "cfg"_a, "compress_ratio"_a, "policy"_a)
      .def_ro("rope_dim", &ref::RopeTable::rope_dim)
      .def("cos_at", &ref::RopeTable::cos_at)
      .def("sin_at", &ref::RopeTable::sin_at);

  // --- weights -----------------------------------------------------------------------------------
  nb::class_<ref::CompressorWeights> cw(m, "CompressorWeights");
  cw.def(nb::init<>())
      .def_rw("ratio", &ref::CompressorWeights::ratio)
      .def_rw("head_dim", &ref::CompressorWeights::head_dim)
      .def("coff", &ref::CompressorWeights::coff);
  DSV4_MAT_PROP(cw, ref::CompressorWeights, wkv, "[coff*d, dim]");
  DSV4_MAT_PROP(cw, ref::CompressorWeights, wgate, "[coff*d, dim]");
  DSV4_MAT_PROP(cw, ref::CompressorWeights, ape, "[ratio, coff*d]");
  DSV4_VEC_PROP(cw, ref::CompressorWeights, norm, "[d]");
  nb::class_<ref::IndexerWeights> iw(m, "IndexerWeights");
  iw.def(nb::init<>()).def_rw("compressor", &ref::IndexerWeights::compressor);
  DSV4_MAT_PROP(iw, ref::IndexerWeights, wq_b, "[IH*ID, q_lora_rank]");
  DSV4_MAT_PROP(iw, ref::IndexerWeights, weights_proj, "[IH, dim]");
  nb::class_<ref::AttentionWeights> aw(
      m, "AttentionWeights",
      "One layer's weights; AttentionWeights.random(cfg, ratio, seed) has the checkpoint's number grids.");
  aw.def(nb::init<>())
      .def_static("random", &ref::AttentionWeights::random, "cfg"_a, "compress_ratio"_a, "seed"_a)
      .def("validate", &ref::AttentionWeights::validate, "cfg"_a)
      .def_rw("compress_ratio", &ref::AttentionWeights::compress_ratio)
      .def_rw("compressor", &ref::AttentionWeights::compressor)
      .def_rw("indexer", &ref::AttentionWeights::indexer);
  DSV4_MAT_PROP(aw, ref::AttentionWeights, wq_a, "[q_lora_rank, dim]");
  DSV4_VEC_PROP(aw, ref::AttentionWeights, q_norm, "[q_lora_rank]");
  DSV4_MAT_PROP(aw, ref::AttentionWeights, wq_b, "[H*d, q_lora_rank]");
  DSV4_MAT_PROP(aw, ref::AttentionWeights, wkv, "[d, dim]");
  DSV4_VEC_PROP(aw, ref::AttentionWeights, kv_norm, "[d]");
  DSV4_VEC_PROP(aw, ref::AttentionWeights, attn_sink, "[H]");
  DSV4_MAT_PROP(aw, ref::AttentionWeights, wo_a, "[G*o_lora_rank, H*d/G]");
  DSV4_MAT_PROP(aw, ref::AttentionWeights, wo_b, "[dim, G*o_lora_rank]");

  // --- projections -------------------------------------------------------------------------------
  m.def(
      "q_latent",
      [](const ref::AttentionWeights& w, In2 x, const ref::ModelConfig& c, const ref::PrecisionPolicy& p) {
        return out(ref::q_latent(w, to_mat(x), c, p));
      },
      "weights"_a, "x"_a, "cfg"_a, "policy"_a, "Stage 'q_latent' = q_norm(wq_a(x)). x [s, dim] -> [s, q_lora_rank]");
  m.def(
      "q_heads",
      [](const ref::AttentionWeights& w, In2 ql, int64_t start_pos, const ref::RopeTable& rope,
         const ref::ModelConfig& c,
         const ref::PrecisionPolicy& p) { return out(ref::q_heads(w, to_mat(ql), start_pos, rope, c, p)); },
      "weights"_a, "q_latent"_a, "start_pos"_a, "rope"_a, "cfg"_a, "policy"_a,
      "Stage 'q' = rope(head_rms_norm(wq_b(q_latent))). q_latent [s, q_lora_rank] -> [s, H*d]");
  m.def(
      "window_kv",
      [](const ref::AttentionWeights& w, In2 x, int64_t start_pos, const ref::RopeTable& rope,
         const ref::ModelConfig& c,
         const ref::PrecisionPolicy& p) { return out(ref::window_kv(w, to_mat(x), start_pos, rope, c, p)); },
      "weights"_a, "x"_a, "start_pos"_a, "rope"_a, "cfg"_a, "policy"_a,
      "Stage 'kv' = kv_nope_quant(rope(kv_norm(wkv(x)))). x [s, dim] -> [s, d]");
  m.def(
      "quantize_kv_nope",
      [](In2 kv, int rope_dim, const ref::PrecisionPolicy& p) {
        ref::Mat m2 = to_mat(kv);
        ref::quantize_kv_nope(m2, rope_dim, p);
        return out(std::move(m2));
      },
      "kv"_a, "rope_dim"_a, "policy"_a,
      "FP8 fake-quant of the nope dims of each row (policy.kv_nope). [n, d] -> [n, d]");
  m.def(
      "hadamard_rows",
      [](In2 x, int n, const ref::PrecisionPolicy& p) { return out(ref::hadamard_rows(to_mat(x), n, p)); }, "x"_a,
      "n"_a, "policy"_a, "Walsh-Hadamard of each n-block, scaled n^-1/2. [rows, heads*n] -> same");

  // --- compressor ----------------------------------------------------------------------------------
  nb::enum_<ref::CompressorKind>(m, "CompressorKind")
      .value("main", ref::CompressorKind::main)
      .value("indexer", ref::CompressorKind::indexer);
  nb::class_<ref::CompressorState> cs(
      m, "CompressorState",
      "Explicit compressor state of one sequence: kv [coff*r, coff*d] (0 when fresh), "
      "score [coff*r, coff*d] (-inf when fresh). Stages 'compressor/state_kv', 'compressor/state_score'.");
  cs.def(nb::init<>())
      .def_static("fresh", &ref::CompressorState::fresh, "ratio"_a, "head_dim"_a)
      .def_rw("ratio", &ref::CompressorState::ratio)
      .def_rw("head_dim", &ref::CompressorState::head_dim)
      .def("meaningful_rows", &ref::CompressorState::meaningful_rows, "length"_a)
      .def("copy", [](const ref::CompressorState& s) { return s; });
  DSV4_MAT_PROP(cs, ref::CompressorState, kv, "[coff*r, coff*d]");
  DSV4_MAT_PROP(cs, ref::CompressorState, score, "[coff*r, coff*d]");
  nb::class_<ref::CompressorOutput>(m, "CompressorOutput")
      .def_prop_ro(
          "pooled", [](const ref::CompressorOutput& o) { return out(ref::Mat(o.pooled)); }, nb::rv_policy::move,
          "[n_new, d] softmax-pooled")
      .def_prop_ro(
          "entries", [](const ref::CompressorOutput& o) { return out(ref::Mat(o.entries)); }, nb::rv_policy::move,
          "[n_new, d] stage 'compressor/entries' (or 'indexer/compressor/entries')")
      .def_ro("first_entry", &ref::CompressorOutput::first_entry);
  m.def(
      "compress",
      [](const ref::CompressorWeights& w, ref::CompressorKind kind, In2 x, int64_t start_pos,
         ref::CompressorState& state, const ref::RopeTable& rope, double eps,
         const ref::PrecisionPolicy& p) { return ref::compress(w, kind, to_mat(x), start_pos, state, rope, eps, p); },
      "weights"_a, "kind"_a, "x"_a, "start_pos"_a, "state"_a, "rope"_a, "norm_eps"_a, "policy"_a,
      "Stages 'compressor/entries' / 'indexer/compressor/entries': x [s, dim] at positions start_pos.. -> "
      "CompressorOutput; "
      "updates `state` (prefill: a fresh state and start_pos 0; decode: s = 1; chunked: any split, bitwise the same).");
  m.def(
      "compressor_projections",
      [](const ref::CompressorWeights& w, In2 x, const ref::PrecisionPolicy& p) {
        ref::CompressorProjections pr = ref::compressor_projections(w, to_mat(x), p);
        return nb::make_tuple(out(std::move(pr.kv)), out(std::move(pr.score)));
      },
      "weights"_a, "x"_a, "policy"_a, "(kv, score) = (wkv(x), wgate(x)), each [s, coff*d] in fp32 storage");
  m.def(
      "overlap_transform",
      [](std::vector<In2> blocks, double fill) {
        std::vector<ref::Mat> in;
        for (const In2& b : blocks) in.push_back(to_mat(b));
        std::vector<ref::Mat> o = ref::overlap_transform(in, fill);
        nb::list l;
        for (ref::Mat& b : o) l.append(out(std::move(b)));
        return l;
      },
      "blocks"_a, "fill"_a,
      "The overlap transform: n blocks [r, 2d] -> n blocks [2r, d] (rows [0, r) the previous block's 'a' half, "
      "block 0's previous rows = fill).");
  m.def(
      "softmax_pool",
      [](In2 kv, In2 score, const ref::PrecisionPolicy& p) {
        return out_row(ref::softmax_pool(to_mat(kv), to_mat(score), p));
      },
      "kv"_a, "score"_a, "policy"_a, "Per channel sum_i kv[i,c] softmax_i(score[:,c]). [m, d], [m, d] -> [d]");
  m.def(
      "postprocess_entries",
      [](const ref::CompressorWeights& w, ref::CompressorKind kind, In2 pooled, int64_t first_entry,
         const ref::RopeTable& rope, double eps, const ref::PrecisionPolicy& p) {
        return out(ref::postprocess_entries(w, kind, to_mat(pooled), first_entry, rope, eps, p));
      },
      "weights"_a, "kind"_a, "pooled"_a, "first_entry"_a, "rope"_a, "norm_eps"_a, "policy"_a,
      "RMSNorm, RoPE at j*r, then FP8 nope quant (main) or Hadamard + indexer quant. [n, d] -> [n, d]");
  nb::class_<ref::OnlineC128State>(m, "OnlineC128State")
      .def_static("fresh", &ref::OnlineC128State::fresh, "head_dim"_a)
      .def_prop_ro(
          "max", [](const ref::OnlineC128State& s) { return out_row(s.max); }, nb::rv_policy::move)
      .def_prop_ro(
          "sum", [](const ref::OnlineC128State& s) { return out_row(s.sum); }, nb::rv_policy::move)
      .def_prop_ro(
          "mean", [](const ref::OnlineC128State& s) { return out_row(s.mean); }, nb::rv_policy::move);
  m.def(
      "compress_online_c128",
      [](const ref::CompressorWeights& w, In2 x, int64_t start_pos, ref::OnlineC128State& state,
         const ref::RopeTable& rope, double eps, const ref::PrecisionPolicy& p) {
        return ref::compress_online_c128(w, to_mat(x), start_pos, state, rope, eps, p);
      },
      "weights"_a, "x"_a, "start_pos"_a, "state"_a, "rope"_a, "norm_eps"_a, "policy"_a,
      "sglang's online C128 compressor (running max/sum/mean state). x [s, dim] -> CompressorOutput");

  // --- indexer, top-k, index lists -------------------------------------------------------------------
  m.def(
      "indexer_q",
      [](const ref::IndexerWeights& w, In2 ql, int64_t start_pos, const ref::RopeTable& rope, const ref::ModelConfig& c,
         const ref::PrecisionPolicy& p) { return out(ref::indexer_q(w, to_mat(ql), start_pos, rope, c, p)); },
      "weights"_a, "q_latent"_a, "start_pos"_a, "rope"_a, "cfg"_a, "policy"_a,
      "Stage 'indexer/q' = quant(hadamard(rope(wq_b(q_latent)))). q_latent [s, q_lora_rank] -> [s, IH*ID]");
  m.def(
      "indexer_weights",
      [](const ref::IndexerWeights& w, In2 x, const ref::ModelConfig& c, const ref::PrecisionPolicy& p) {
        return out(ref::indexer_weights(w, to_mat(x), c, p));
      },
      "weights"_a, "x"_a, "cfg"_a, "policy"_a,
      "Stage 'indexer/weights' = weights_proj(x) * ID^-1/2 * IH^-1/2. x [s, dim] -> [s, IH]");
  m.def(
      "indexer_scores",
      [](In2 q, In2 weights, In2 keys, int64_t start_pos, int ratio, const ref::PrecisionPolicy& p) {
        return out(ref::indexer_scores(to_mat(q), to_mat(weights), to_mat(keys), start_pos, ratio, p));
      },
      "q"_a, "weights"_a, "keys"_a, "start_pos"_a, "ratio"_a, "policy"_a,
      "Stage 'indexer/scores' = sum_h w_h relu(q_h . k_j), -inf where not visible. q [s, IH*ID], weights [s, IH], "
      "keys [n_keys, ID] -> [s, n_keys]");
  m.def(
      "topk_indices",
      [](In2 scores, int k, int32_t offset) { return out(ref::topk_indices(to_mat(scores), k, offset)); }, "scores"_a,
      "k"_a, "offset"_a,
      "Stage 'indexer/topk': per row the k best visible entries (ties: lower index first), -1 padded, offset added. "
      "scores [s, n_keys] -> [s, k] int32");
  nb::class_<ref::IndexSpace>(m, "IndexSpace",
                              "The rows of sparse attention's kv matrix for one call (docs/math.md 'index spaces').")
      .def_static("for_call", &ref::IndexSpace::for_call, "start_pos"_a, "seqlen"_a, "window"_a)
      .def("raw_row", &ref::IndexSpace::raw_row, "position"_a)
      .def("compressed_offset", &ref::IndexSpace::compressed_offset)
      .def("rows", &ref::IndexSpace::rows, "n_compressed"_a)
      .def_ro("start_pos", &ref::IndexSpace::start_pos)
      .def_ro("seqlen", &ref::IndexSpace::seqlen)
      .def_ro("window", &ref::IndexSpace::window);
  m.def(
      "window_indices", [](const ref::IndexSpace& s) { return out(ref::window_indices(s)); }, "space"_a,
      "Window part of 'topk_idxs': prefill [s, min(s, W)], decode [1, W] ring slots, chunked [s, W]; -1 unused.");
  m.def(
      "hca_indices", [](const ref::IndexSpace& s, int ratio) { return out(ref::hca_indices(s, ratio)); }, "space"_a,
      "ratio"_a, "HCA compressed part of 'topk_idxs': every complete block, offset applied, -1 elsewhere.");
  m.def(
      "attention_indices",
      [](const ref::IndexSpace& s, int ratio, InIndex2 topk) {
        return out(ref::attention_indices(s, ratio, to_index_mat(topk)));
      },
      "space"_a, "ratio"_a, "indexer_topk"_a,
      "Stage 'topk_idxs' of a call: the window indices, then the compressed ones (HCA blocks for ratio 128, the "
      "indexer's top-k for ratio 4, none for ratio 0).");
  m.def(
      "concat_indices",
      [](InIndex2 w, InIndex2 c) { return out(ref::concat_indices(to_index_mat(w), to_index_mat(c))); }, "window"_a,
      "compressed"_a, "Stage 'topk_idxs' = [window | compressed] per row.");

  // --- attention and output ---------------------------------------------------------------------------
  m.def(
      "sparse_mqa",
      [](In2 q, In2 kv, In1 sink, InIndex2 idx, int n_heads, double scale, const ref::PrecisionPolicy& p) {
        const ref::Mat qm = to_mat(q), kvm = to_mat(kv);
        const ref::Vec sv = to_vec(sink);
        const ref::IndexMat im = to_index_mat(idx);
        ref::Mat o;
        {
          nb::gil_scoped_release release;
          o = ref::sparse_mqa(qm, kvm, sv, im, n_heads, scale, p);
        }
        return out(std::move(o));
      },
      "q"_a, "kv"_a, "sink"_a, "indices"_a, "n_heads"_a, "softmax_scale"_a, "policy"_a,
      "Stage 'attn/core': shared-KV sparse MQA with a sink in the denominator. q [s, H*d], kv [n, d], sink [H], "
      "indices [s, K] (-1 skip) -> [s, H*d]; a row with no valid index gives 0.");
  m.def(
      "inverse_rope_heads",
      [](In2 o, int64_t start_pos, const ref::RopeTable& rope, const ref::ModelConfig& c,
         const ref::PrecisionPolicy& p) { return out(ref::inverse_rope_heads(to_mat(o), start_pos, rope, c, p)); },
      "o"_a, "start_pos"_a, "rope"_a, "cfg"_a, "policy"_a,
      "Stage 'attn/out_heads': inverse RoPE per head. [s, H*d] -> [s, H*d]");
  m.def(
      "grouped_wo_a",
      [](const ref::AttentionWeights& w, In2 o, const ref::ModelConfig& c, const ref::PrecisionPolicy& p) {
        return out(ref::grouped_wo_a(w, to_mat(o), c, p));
      },
      "weights"_a, "o"_a, "cfg"_a, "policy"_a,
      "Stage 'attn/wo_a': grouped low-rank projection. [s, H*d] -> [s, G*o_lora_rank]");
  m.def(
      "wo_b",
      [](const ref::AttentionWeights& w, In2 o, const ref::PrecisionPolicy& p) {
        return out(ref::wo_b(w, to_mat(o), p));
      },
      "weights"_a, "o_lora"_a, "policy"_a, "Stage 'out' = wo_b(attn/wo_a). [s, G*o_lora_rank] -> [s, dim]");

  // --- the layer and its cache ------------------------------------------------------------------------------
  nb::enum_<ref::EntryKind>(m, "EntryKind")
      .value("main", ref::EntryKind::main)
      .value("indexer", ref::EntryKind::indexer);
  nb::class_<ref::KvCache>(
      m, "KvCache", "What each sequence keeps between calls (window ring, compressed entries, compressor states).")
      .def_static("ring", &ref::make_ring_cache, "cfg"_a, "compress_ratio"_a, "batch"_a, "DeepSeek's ring layout")
      .def_static("paged", &ref::make_paged_cache, "cfg"_a, "compress_ratio"_a, "batch"_a, "scramble_seed"_a = 0,
                  "a paged pool with block tables (pages scrambled by the seed)")
      .def("batch", &ref::KvCache::batch)
      .def("length", &ref::KvCache::length, "seq"_a)
      .def("reset", &ref::KvCache::reset, "seq"_a)
      .def(
          "ring_rows", [](const ref::KvCache& c, int seq, int64_t end) { return out(c.ring(seq, end)); }, "seq"_a,
          "end"_a, "The W window slots in slot order (slot = pos mod W) -> [W, d]")
      .def(
          "entries",
          [](const ref::KvCache& c, int seq, ref::EntryKind k, int64_t count) { return out(c.entries(seq, k, count)); },
          "seq"_a, "kind"_a, "count"_a, "Compressed entries 0..count-1 -> [count, d] (main) or [count, ID] (indexer)")
      .def(
          "compressor_state",
          [](ref::KvCache& c, int seq, ref::EntryKind k) -> ref::CompressorState& {
            return c.compressor_state(seq, k);
          },
          nb::rv_policy::reference_internal, "seq"_a, "kind"_a);
  nb::class_<ref::AttentionLayer>(m, "AttentionLayer", "One attention layer: AttentionLayer(cfg, weights, policy).")
      .def(nb::init<ref::ModelConfig, ref::AttentionWeights, ref::PrecisionPolicy>(), "cfg"_a, "weights"_a, "policy"_a)
      .def_prop_ro("config", &ref::AttentionLayer::config)
      .def_prop_ro("weights", &ref::AttentionLayer::weights)
      .def_prop_ro("policy", &ref::AttentionLayer::policy)
      .def_prop_ro("rope", &ref::AttentionLayer::rope)
      .def_prop_ro("compress_ratio", &ref::AttentionLayer::compress_ratio)
      .def(
          "forward",
          [](const ref::AttentionLayer& l, In2 x, int64_t start_pos, ref::KvCache& cache, int seq) {
            ref::Mat xm = to_mat(x);
            ref::StageOutputs o;
            {
              nb::gil_scoped_release release;
              o = l.forward(xm, start_pos, cache, seq);
            }
            return stage_dict(o, l.compress_ratio());
          },
          "x"_a, "start_pos"_a, "cache"_a, "seq"_a = 0,
          "The whole layer for one sequence: x [s, dim] at positions start_pos.. -> {stage name: array} with the "
          "capture's "
          "stage names ('q_latent' [s, q_lora_rank], 'q' [s, H*d], 'kv' [s, d], 'compressor/entries' [n_new, d], "
          "'indexer/q' [s, IH*ID], 'indexer/scores' [s, n_visible], 'indexer/topk' [s, k], 'topk_idxs' [s, K], "
          "'attn/core' [s, H*d], 'attn/out_heads', 'attn/wo_a' [s, G*o_lora_rank], 'out' [s, dim], ...). start_pos 0 "
          "starts the sequence anew; otherwise start_pos must equal cache.length(seq).");
}

}  // namespace dsv4::python
