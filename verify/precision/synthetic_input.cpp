#include "verify/precision/synthetic_input.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <numbers>
#include <random>
#include <stdexcept>

#include "reference/numerics/storage.h"
#include "reference/weights.h"
#include "verify/capture/tensor_convert.h"

namespace dsv4::verify {

namespace {

void require(bool ok, const std::string& option, const std::string& expected, const std::string& found) {
  if (!ok) throw std::invalid_argument(fmt::format("{}: expected {}, found {}", option, expected, found));
}

// splitmix64's finaliser: independent seeds for (seed, layer, stream).
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// N(0, 1) by Box-Muller on mt19937_64 (whose output the standard fixes), rounded to bf16: the
// attention input DeepSeek's code holds in bf16. -> [tokens, dim]
ref::Mat normal_bf16(int64_t tokens, int dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  ref::Mat x(tokens, dim);
  for (ref::Index i = 0; i < x.size(); ++i) {
    const double u1 = (static_cast<double>(rng() >> 11) + 0.5) * 0x1p-53;  // (0, 1)
    const double u2 = static_cast<double>(rng() >> 11) * 0x1p-53;          // [0, 1)
    x.data()[i] = ref::round_to(ref::Storage::bf16,
                                std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
  }
  return x;
}

std::vector<int64_t> call_lengths(const SyntheticInputOptions& o) {
  std::vector<int64_t> lengths;
  const int64_t chunk = o.chunk > 0 ? o.chunk : o.prefill;
  for (int64_t done = 0; done < o.prefill; done += chunk) lengths.push_back(std::min(chunk, o.prefill - done));
  lengths.insert(lengths.end(), static_cast<size_t>(o.decode), 1);
  return lengths;
}

ref::ModelConfig checked_config(const SyntheticInputOptions& o) {
  ref::ModelConfig cfg = ref::ModelConfig::by_name(o.config);
  require(!o.ratios.empty(), "--ratio", "at least one ratio", "none");
  for (int r : o.ratios) require(r == 0 || r == 4 || r == 128, "--ratio", "0, 4 or 128", std::to_string(r));
  require(o.prefill >= 1, "--prefill", "at least 1 token", std::to_string(o.prefill));
  require(o.chunk >= 0, "--chunk", "a token count >= 0 (0: one call)", std::to_string(o.chunk));
  require(o.decode >= 0, "--decode", "a count >= 0", std::to_string(o.decode));
  require(o.prefill + o.decode <= cfg.max_seq_len, "--prefill + --decode",
          fmt::format("at most max_seq_len = {} of config {}", cfg.max_seq_len, cfg.name),
          std::to_string(o.prefill + o.decode));
  require(o.batch >= 1, "--batch", "at least 1", std::to_string(o.batch));
  cfg.compress_ratios = o.ratios;
  return cfg;
}

}  // namespace

Capture synthetic_input(const SyntheticInputOptions& o) {
  const ref::ModelConfig cfg = checked_config(o);
  Capture c;
  c.producer = synthetic_input_info(o).producer;
  c.model = cfg.name;
  c.config = cfg;
  c.precision = "exact";
  const std::vector<int64_t> lengths = call_lengths(o);
  for (size_t l = 0; l < o.ratios.size(); ++l) {
    const uint64_t layer_seed = mix(o.seed ^ mix(l));
    LayerCapture& layer = c.layers[static_cast<int>(l)];
    layer.index = static_cast<int>(l);
    layer.compress_ratio = o.ratios[l];
    layer.weights = ref::AttentionWeights::random(cfg, o.ratios[l], mix(layer_seed ^ 1));
    std::vector<ref::Mat> x;
    for (int b = 0; b < o.batch; ++b) x.push_back(normal_bf16(o.prefill + o.decode, cfg.dim, mix(layer_seed ^ mix(2 + b))));
    int64_t start = 0;
    for (size_t k = 0; k < lengths.size(); ++k) {
      CallCapture call;
      call.index = static_cast<int>(k);
      call.start_pos = start;
      call.seqlen = lengths[k];
      call.batch = o.batch;
      std::vector<ref::Mat> slice;
      for (const ref::Mat& xb : x) slice.push_back(xb.middleRows(start, lengths[k]));
      call.stages["x"] = from_mats(slice, {o.batch, lengths[k], cfg.dim}, "bfloat16");
      layer.calls.push_back(std::move(call));
      start += lengths[k];
    }
  }
  return c;
}

InputInfo synthetic_input_info(const SyntheticInputOptions& o) {
  const ref::ModelConfig cfg = checked_config(o);
  InputInfo info;
  info.kind = "synthetic";
  info.producer = fmt::format("dsv4-verify precision-report --synth (random weights and x ~ N(0,1) in bf16, seed {})",
                              o.seed);
  info.model = cfg.name;
  info.config = cfg;
  const std::vector<int64_t> lengths = call_lengths(o);
  info.description = fmt::format(
      "{} dims ({}); layers of ratio {}; prefill {} tokens{}{}, batch {}, seed {}", cfg.name, describe_dims(cfg),
      fmt::join(o.ratios, ", "), o.prefill,
      o.chunk > 0 && o.chunk < o.prefill ? fmt::format(" in calls of {}", o.chunk) : std::string(),
      o.decode > 0 ? fmt::format(", then {} one-token decodes", o.decode) : std::string(), o.batch, o.seed);
  info.weights = WeightsOrigin::random;
  info.weights_reason = "drawn by ref::AttentionWeights::random on the checkpoint's number grids";
  return info;
}

}  // namespace dsv4::verify
