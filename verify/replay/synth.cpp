#include "verify/replay/synth.h"

#include <fmt/format.h>

#include <stdexcept>

#include "reference/call_geometry.h"
#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/mutation.h"
#include "reference/numerics/storage.h"
#include "reference/pre_quant.h"
#include "reference/precision.h"
#include "reference/random.h"
#include "reference/stage_registry.h"
#include "reference/weights.h"
#include "verify/capture/tensor_convert.h"
#include "verify/replay/pre_rounding_recorder.h"
#include "verify/tolerance/probability_flips.h"

namespace dsv4::verify {

namespace {

// The attention input of one sequence: N(0, 1) (reference/random.h, the cosine of each Box-Muller
// pair, as synth has always drawn it), rounded to the activation storage.
ref::Mat random_input(int64_t tokens, int dim, uint64_t seed, ref::Storage activations) {
  ref::NormalStream normal(seed, ref::NormalStream::Pairs::cosine_only);
  ref::Mat x(tokens, dim);
  for (ref::Index i = 0; i < x.size(); ++i) x.data()[i] = ref::round_to(activations, normal());
  return x;
}

// The `dtype` attribute of a dataset the producer held in storage s.
std::string dtype_of(ref::Storage s) {
  switch (s) {
    case ref::Storage::fp64: return "float64";
    case ref::Storage::fp32: return "float32";
    case ref::Storage::bf16: return "bfloat16";
  }
  return "float32";
}

void require(bool ok, const std::string& option, const std::string& expected, const std::string& found) {
  if (!ok) throw std::invalid_argument(fmt::format("synth {}: expected {}, found {}", option, expected, found));
}

// The datasets of one call, by registry row, in the dtype the policy holds each in.
class CallWriter {
 public:
  CallWriter(CallCapture& call, const ref::CallGeometry& g, const ref::PrecisionPolicy& p)
      : call_(call), g_(g), p_(p) {}

  void dense(ref::Stage id, const std::vector<ref::Mat>& mats) {
    const ref::StageDef& s = ref::stage(id);
    call_.stages[std::string(s.name)] = from_mats(mats, s.shape(g_), dtype_of(s.storage(p_)));
  }
  // A pre-quantization dataset: its stage's shape, held in the activation storage (bf16 officially).
  void pre_quant(const ref::PreQuantDef& d, const std::vector<ref::Mat>& mats) {
    const ref::StageDef& s = ref::stage(d.stage);
    if (!ref::in_scope(s.scope, g_.ratio)) return;
    call_.stages[std::string(d.name)] = from_mats(mats, s.shape(g_), dtype_of(s.storage(p_)));
  }
  void indices(ref::Stage id, const std::vector<ref::IndexMat>& mats) {
    const ref::StageDef& s = ref::stage(id);
    call_.stages[std::string(s.name)] = from_index_mats(mats, s.shape(g_));
  }
  void states(ref::Stage kv_id, ref::Stage score_id, const std::vector<ref::CompressorState>& states) {
    std::vector<ref::Mat> kv, score;
    for (const ref::CompressorState& st : states) {
      kv.push_back(st.kv);
      score.push_back(st.score);
    }
    dense(kv_id, kv);
    dense(score_id, score);
  }
  // Every computed stage of the layer's ratio, from each sequence's outputs.
  void results(const std::vector<ref::StageOutputs>& outs) {
    for (const ref::StageDef& s : ref::stages()) {
      if (!s.is_compared() || !ref::in_scope(s.scope, g_.ratio)) continue;
      if (s.dense_result) {
        std::vector<ref::Mat> mats;
        for (const ref::StageOutputs& o : outs) mats.push_back(*s.dense_result(o));
        dense(s.id, mats);
      } else {
        std::vector<ref::IndexMat> mats;
        for (const ref::StageOutputs& o : outs) mats.push_back(*s.index_result(o));
        indices(s.id, mats);
      }
    }
  }

 private:
  CallCapture& call_;
  const ref::CallGeometry& g_;
  const ref::PrecisionPolicy& p_;
};

}  // namespace

Capture synthesize_capture(const SynthOptions& o) {
  const ref::PrecisionPolicy policy = ref::PrecisionPolicy::by_name(o.precision);
  ref::ModelConfig cfg = ref::ModelConfig::by_name(o.config);
  require(!o.ratios.empty(), "--ratio", "at least one ratio", "none");
  for (int r : o.ratios) require(r == 0 || r == 4 || r == 128, "--ratio", "0, 4 or 128", std::to_string(r));
  std::vector<int64_t> lengths = o.calls;
  if (lengths.empty()) {
    require(o.prefill >= 1, "--prefill", "at least 1 token", std::to_string(o.prefill));
    require(o.decode >= 0, "--decode", "a count >= 0", std::to_string(o.decode));
    lengths.assign(static_cast<size_t>(o.decode) + 1, 1);
    lengths.front() = o.prefill;
  }
  int64_t tokens = 0;
  for (int64_t s : lengths) {
    require(s >= 1, "--calls", "calls of at least 1 token", std::to_string(s));
    tokens += s;
  }
  require(tokens <= cfg.max_seq_len, "tokens (--prefill + --decode, or the sum of --calls)",
          fmt::format("at most max_seq_len = {} of config {}", cfg.max_seq_len, cfg.name), std::to_string(tokens));
  require(o.batch >= 1, "--batch", "at least 1", std::to_string(o.batch));
  cfg.compress_ratios = o.ratios;

  // The oracle, keeping its pre-quantization values, with the bug injected where one is asked for.
  PreRoundingRecorder recorder;
  std::optional<ref::MutatedStages> mutated;
  if (o.mutation) mutated.emplace(recorder, *o.mutation);
  const ref::StageProvider& stages = mutated ? static_cast<const ref::StageProvider&>(*mutated) : recorder;

  Capture c;
  c.producer = fmt::format("dsv4-verify synth (the CPU oracle, {} precision, seed {}{})", policy.name, o.seed,
                           o.mutation ? ", bug injected: " + o.mutation->name() : "");
  c.model = cfg.name;
  c.config = cfg;
  c.precision = policy.name;
  // The oracle's attn/core follows DeepSeek's probability convention under such a policy (a bug
  // injected there is a producer that claims it and breaks it).
  if (follows_deepseek_probabilities(policy)) c.probs_convention = to_string(ProbsConvention::deepseek);
  for (size_t l = 0; l < o.ratios.size(); ++l) {
    const int ratio = o.ratios[l];
    const uint64_t layer_seed = ref::splitmix64(o.seed ^ ref::splitmix64(l));
    LayerCapture layer;
    layer.index = static_cast<int>(l);
    layer.compress_ratio = ratio;
    layer.weights = ref::AttentionWeights::random(cfg, ratio, ref::splitmix64(layer_seed ^ 1));
    if (o.quantization_edges) {  // 2^-16 keeps every grid (FP8 weights have power-of-two block scales)
      layer.weights.kv_norm.head(64) *= 0x1p-16;
      if (ratio != 0) layer.weights.compressor.norm.head(64) *= 0x1p-16;
      if (ratio == 4) layer.weights.indexer.wq_b.topRows(cfg.index_head_dim) *= 0x1p-16;
    }
    const ref::AttentionLayer attention(cfg, layer.weights, policy);
    auto cache = ref::make_ring_cache(cfg, ratio, o.batch);
    std::vector<ref::Mat> x;
    for (int b = 0; b < o.batch; ++b)
      x.push_back(
          random_input(tokens, cfg.dim, ref::splitmix64(layer_seed ^ ref::splitmix64(2 + b)), policy.activations));

    int64_t start = 0;
    for (size_t k = 0; k < lengths.size(); ++k) {
      const int64_t s = lengths[k];
      CallCapture call;
      call.index = static_cast<int>(k);
      call.start_pos = start;
      call.seqlen = s;
      call.batch = o.batch;
      const ref::CallGeometry g{&cfg, ratio, o.batch, s, start};
      CallWriter w(call, g, policy);

      std::vector<ref::Mat> xs;
      for (const ref::Mat& xb : x) xs.push_back(xb.middleRows(start, s));
      w.dense(ref::Stage::x, xs);
      if (o.cache) {
        std::vector<ref::Mat> ring, entries, indexer_entries;
        std::vector<ref::CompressorState> state, indexer_state;
        for (int b = 0; b < o.batch; ++b) {
          ring.push_back(cache->ring(b, start));
          if (ratio != 0) {
            entries.push_back(cache->entries(b, ref::EntryKind::main, start / ratio));
            state.push_back(cache->compressor_state(b, ref::EntryKind::main));
          }
          if (ratio == 4) {
            indexer_entries.push_back(cache->entries(b, ref::EntryKind::indexer, start / 4));
            indexer_state.push_back(cache->compressor_state(b, ref::EntryKind::indexer));
          }
        }
        w.dense(ref::Stage::cache_window_kv, ring);
        if (ratio != 0) {
          w.dense(ref::Stage::cache_compressed_kv, entries);
          w.states(ref::Stage::cache_compressor_state_kv, ref::Stage::cache_compressor_state_score, state);
        }
        if (ratio == 4) {
          w.dense(ref::Stage::cache_indexer_kv, indexer_entries);
          w.states(ref::Stage::cache_indexer_compressor_state_kv, ref::Stage::cache_indexer_compressor_state_score,
                   indexer_state);
        }
      }
      w.results(attention.forward_batch(xs, start, *cache, stages));
      std::map<ref::Stage, std::vector<ref::Mat>> before_rounding = recorder.take();
      if (o.pre_quant)
        for (const ref::PreQuantDef& d : ref::pre_quant_datasets())
          if (auto it = before_rounding.find(d.stage); it != before_rounding.end()) w.pre_quant(d, it->second);
      layer.calls.push_back(std::move(call));
      start += s;
    }
    c.layers.emplace(layer.index, std::move(layer));
  }
  return c;
}

}  // namespace dsv4::verify
