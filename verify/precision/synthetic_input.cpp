#include "verify/precision/synthetic_input.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "reference/numerics/storage.h"
#include "reference/random.h"
#include "reference/weights.h"
#include "verify/capture/tensor_convert.h"

namespace dsv4::verify {

namespace {

void require(bool ok, const std::string& option, const std::string& expected, const std::string& found) {
  if (!ok) throw std::invalid_argument(fmt::format("{}: expected {}, found {}", option, expected, found));
}

// Independent seeds for (seed, layer, stream).
uint64_t mix(uint64_t z) { return ref::splitmix64(z); }

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
  require(o.max_seq_len == 0 || (o.max_seq_len > 0 && o.max_seq_len % 128 == 0), "--max-seq-len",
          "a positive multiple of 128 (0: the config's)", std::to_string(o.max_seq_len));
  if (o.max_seq_len > 0) cfg.max_seq_len = static_cast<int>(o.max_seq_len);
  require(o.prefill + o.decode <= cfg.max_seq_len, "--prefill + --decode",
          fmt::format("at most max_seq_len = {} of config {} (raise it with --max-seq-len)", cfg.max_seq_len, cfg.name),
          std::to_string(o.prefill + o.decode));
  require(o.batch >= 1, "--batch", "at least 1", std::to_string(o.batch));
  o.activations.validate(cfg);
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
    // The model's fixed channels, per layer (streams no batch index reaches).
    const ActivationModel& model = o.activations;
    add_heavy_qk_dims(
        layer.weights, cfg, model,
        heavy_channels(model.qk_heavy_channels, cfg.head_dim, mix(layer_seed ^ mix(1u << 20))),
        heavy_channels(model.qk_heavy_channels, cfg.index_head_dim, mix(layer_seed ^ mix((1u << 20) + 1))));
    const std::vector<int> x_heavy =
        heavy_channels(model.x_heavy_channels, cfg.dim, mix(layer_seed ^ mix((1u << 20) + 2)));
    std::vector<ref::Mat> x;
    for (int b = 0; b < o.batch; ++b)
      x.push_back(model_x(model, o.prefill + o.decode, cfg.dim, x_heavy, mix(layer_seed ^ mix(2 + b))));
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

InputInfo synthetic_input_info(const SyntheticInputOptions& o, const std::vector<uint64_t>& seeds) {
  const ref::ModelConfig cfg = checked_config(o);
  InputInfo info;
  info.kind = "synthetic";
  info.seeds = seeds.empty() ? std::vector<uint64_t>{o.seed} : seeds;
  info.activation_model = o.activations;
  const std::string seed_text =
      fmt::format("{} {}", info.seeds.size() == 1 ? "seed" : "seeds", fmt::join(info.seeds, ", "));
  info.producer =
      fmt::format("dsv4-verify precision-report --synth (random weights; {}; {})", o.activations.describe(), seed_text);
  info.model = cfg.name;
  info.config = cfg;
  const std::vector<int64_t> lengths = call_lengths(o);
  info.description =
      fmt::format("{} dims ({}); layers of ratio {}; prefill {} tokens{}{}, batch {}; {}; {}", cfg.name,
                  describe_dims(cfg), fmt::join(o.ratios, ", "), o.prefill,
                  o.chunk > 0 && o.chunk < o.prefill ? fmt::format(" in calls of {}", o.chunk) : std::string(),
                  o.decode > 0 ? fmt::format(", then {} one-token decodes", o.decode) : std::string(), o.batch,
                  o.activations.describe(), seed_text);
  info.weights = WeightsOrigin::random;
  info.weights_reason = o.activations.qk_heavy_channels > 0
                            ? "drawn by ref::AttentionWeights::random on the checkpoint's number grids, then the "
                              "activation model's q/k dims scaled"
                            : "drawn by ref::AttentionWeights::random on the checkpoint's number grids";
  return info;
}

}  // namespace dsv4::verify
