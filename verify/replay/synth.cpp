#include "verify/replay/synth.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <random>
#include <stdexcept>

#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/numerics/storage.h"
#include "reference/precision.h"
#include "reference/weights.h"
#include "verify/capture/call_geometry.h"
#include "verify/capture/stage_names.h"
#include "verify/capture/tensor_convert.h"

namespace dsv4::verify {

namespace {

// splitmix64's finaliser: independent seeds for (seed, layer, stream).
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The attention input of one sequence: N(0, 1) by Box-Muller on mt19937_64 (whose output the C++
// standard fixes, unlike std::normal_distribution's), rounded to the activation storage.
ref::Mat random_input(int64_t tokens, int dim, uint64_t seed, ref::Storage activations) {
  std::mt19937_64 rng(seed);
  ref::Mat x(tokens, dim);
  for (ref::Index i = 0; i < x.size(); ++i) {
    const double u1 = (static_cast<double>(rng() >> 11) + 0.5) * 0x1p-53;  // (0, 1)
    const double u2 = static_cast<double>(rng() >> 11) * 0x1p-53;          // [0, 1)
    x.data()[i] = ref::round_to(activations, std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
  }
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

// The datasets of one call from what each sequence's forward returned and the cache before it.
class CallWriter {
 public:
  CallWriter(CallCapture& call, const CallGeometry& g, const ref::PrecisionPolicy& p) : call_(call), g_(g), p_(p) {}

  void dense(std::string_view name, const std::vector<ref::Mat>& mats) {
    const StageName* s = find_stage(name);
    call_.stages[std::string(name)] = from_mats(mats, s->shape(g_), dtype_for(name));
  }
  void indices(std::string_view name, const std::vector<ref::IndexMat>& mats) {
    call_.stages[std::string(name)] = from_index_mats(mats, find_stage(name)->shape(g_));
  }
  void states(std::string_view prefix, const std::vector<ref::CompressorState>& states) {
    std::vector<ref::Mat> kv, score;
    for (const ref::CompressorState& st : states) {
      kv.push_back(st.kv);
      score.push_back(st.score);
    }
    dense(std::string(prefix) + "_kv", kv);
    dense(std::string(prefix) + "_score", score);
  }

 private:
  std::string dtype_for(std::string_view name) const {
    if (name.find("state") != std::string_view::npos) return dtype_of(p_.fp32_tensors);
    if (name == "indexer/scores") return dtype_of(p_.indexer_scores);
    return dtype_of(p_.activations);
  }
  CallCapture& call_;
  const CallGeometry& g_;
  const ref::PrecisionPolicy& p_;
};

template <typename T, typename F>
std::vector<T> per_sequence(const std::vector<ref::StageOutputs>& outs, F&& field) {
  std::vector<T> v;
  for (const ref::StageOutputs& o : outs) v.push_back(field(o));
  return v;
}

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

  Capture c;
  c.producer = fmt::format("dsv4-verify synth (the CPU oracle, {} precision, seed {})", policy.name, o.seed);
  c.model = cfg.name;
  c.config = cfg;
  c.precision = policy.name;
  for (size_t l = 0; l < o.ratios.size(); ++l) {
    const int ratio = o.ratios[l];
    const uint64_t layer_seed = mix(o.seed ^ mix(l));
    LayerCapture layer;
    layer.index = static_cast<int>(l);
    layer.compress_ratio = ratio;
    layer.weights = ref::AttentionWeights::random(cfg, ratio, mix(layer_seed ^ 1));
    const ref::AttentionLayer attention(cfg, layer.weights, policy);
    auto cache = ref::make_ring_cache(cfg, ratio, o.batch);
    std::vector<ref::Mat> x;
    for (int b = 0; b < o.batch; ++b)
      x.push_back(random_input(tokens, cfg.dim, mix(layer_seed ^ mix(2 + b)), policy.activations));

    int64_t start = 0;
    for (size_t k = 0; k < lengths.size(); ++k) {
      const int64_t s = lengths[k];
      CallCapture call;
      call.index = static_cast<int>(k);
      call.start_pos = start;
      call.seqlen = s;
      call.batch = o.batch;
      const CallGeometry g{&cfg, ratio, o.batch, s, start};
      CallWriter w(call, g, policy);

      std::vector<ref::Mat> xs;
      for (const ref::Mat& xb : x) xs.push_back(xb.middleRows(start, s));
      w.dense("x", xs);
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
        w.dense("cache/window_kv", ring);
        if (ratio != 0) {
          w.dense("cache/compressed_kv", entries);
          w.states("cache/compressor_state", state);
        }
        if (ratio == 4) {
          w.dense("cache/indexer_kv", indexer_entries);
          w.states("cache/indexer_compressor_state", indexer_state);
        }
      }

      const std::vector<ref::StageOutputs> outs = attention.forward_batch(xs, start, *cache);
      using SO = ref::StageOutputs;
      w.dense("q_latent", per_sequence<ref::Mat>(outs, [](const SO& so) { return so.q_latent; }));
      w.dense("q", per_sequence<ref::Mat>(outs, [](const SO& so) { return so.q; }));
      w.dense("kv", per_sequence<ref::Mat>(outs, [](const SO& so) { return so.kv; }));
      if (ratio != 0) {
        w.dense("compressor/entries", per_sequence<ref::Mat>(outs, [](const SO& so) { return so.compressor_entries; }));
        w.states("compressor/state",
                 per_sequence<ref::CompressorState>(outs, [](const SO& so) { return so.compressor_state; }));
      }
      if (ratio == 4) {
        w.dense("indexer/q", per_sequence<ref::Mat>(outs, [](const SO& so) { return so.indexer_q; }));
        w.dense("indexer/weights", per_sequence<ref::Mat>(outs, [](const SO& so) { return so.indexer_weights; }));
        w.dense("indexer/compressor/entries",
                per_sequence<ref::Mat>(outs, [](const SO& so) { return so.indexer_compressor_entries; }));
        w.states("indexer/compressor/state",
                 per_sequence<ref::CompressorState>(outs, [](const SO& so) { return so.indexer_compressor_state; }));
        w.dense("indexer/scores", per_sequence<ref::Mat>(outs, [](const SO& so) { return so.indexer_scores; }));
        w.indices("indexer/topk", per_sequence<ref::IndexMat>(outs, [](const SO& so) { return so.indexer_topk; }));
      }
      w.indices("topk_idxs", per_sequence<ref::IndexMat>(outs, [](const SO& so) { return so.topk_idxs; }));
      w.dense("attn/core", per_sequence<ref::Mat>(outs, [](const SO& so) { return so.attn_core; }));
      w.dense("attn/out_heads", per_sequence<ref::Mat>(outs, [](const SO& so) { return so.attn_out_heads; }));
      w.dense("attn/wo_a", per_sequence<ref::Mat>(outs, [](const SO& so) { return so.attn_wo_a; }));
      w.dense("out", per_sequence<ref::Mat>(outs, [](const SO& so) { return so.out; }));
      layer.calls.push_back(std::move(call));
      start += s;
    }
    c.layers.emplace(layer.index, std::move(layer));
  }
  return c;
}

}  // namespace dsv4::verify
