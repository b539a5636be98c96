#include "synthetic_capture.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "reference/stage_registry.h"
#include "verify/capture/tensor_convert.h"
#include "verify/capture/weight_names.h"

namespace dsv4::verify::testing {

ref::ModelConfig micro_config() {
  ref::ModelConfig c = ref::ModelConfig::tiny();
  c.name = "micro";
  c.dim = 128;
  c.n_heads = 2;
  c.index_n_heads = 2;
  c.index_head_dim = 64;
  c.window_size = 8;
  c.index_topk = 4;
  c.max_seq_len = 256;
  return c;
}

namespace {

// Values on the float32 grid, so a float32 file holds them exactly.
double random_float(std::mt19937_64& rng) {
  return static_cast<double>(static_cast<float>(std::uniform_real_distribution<double>(-2.0, 2.0)(rng)));
}

Tensor random_tensor(std::vector<int64_t> shape, std::mt19937_64& rng) {
  Tensor t;
  t.shape = std::move(shape);
  t.values.resize(static_cast<std::size_t>(t.numel()));
  for (double& v : t.values) v = random_float(rng);
  return t;
}

}  // namespace

Capture synthetic_capture(const std::vector<int>& ratios, const std::vector<CallSpec>& calls, int batch,
                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  Capture c;
  c.producer = "synthetic_capture (verify/tests)";
  c.model = "micro";
  c.config = micro_config();
  c.config.compress_ratios = ratios;
  for (std::size_t l = 0; l < ratios.size(); ++l) {
    const int ratio = ratios[l];
    LayerCapture layer;
    layer.index = static_cast<int>(l);
    layer.compress_ratio = ratio;
    layer.weights.compress_ratio = ratio;
    for (const WeightName& w : weight_names()) {
      if (!ref::in_scope(w.scope, ratio)) continue;
      Tensor t = random_tensor(w.shape(c.config, ratio), rng);
      visit_weight(layer.weights, w.name, [&](auto& member) { assign_weight(member, t); });
      if (!w.linear.empty()) layer.weight_linear_kinds[std::string(w.name)] = std::string(w.linear);
    }
    if (ratio != 0) {
      layer.weights.compressor.ratio = ratio;
      layer.weights.compressor.head_dim = c.config.head_dim;
    }
    if (ratio == 4) {
      layer.weights.indexer.compressor.ratio = 4;
      layer.weights.indexer.compressor.head_dim = c.config.index_head_dim;
    }
    for (std::size_t k = 0; k < calls.size(); ++k) {
      CallCapture call;
      call.index = static_cast<int>(k);
      call.start_pos = calls[k].start_pos;
      call.seqlen = calls[k].seqlen;
      call.batch = batch;
      ref::CallGeometry g{&c.config, ratio, batch, call.seqlen, call.start_pos};
      for (const ref::StageDef& s : ref::stages()) {
        if (!ref::in_scope(s.scope, ratio)) continue;
        Tensor t = random_tensor(s.shape(g), rng);
        if (s.is_index()) {
          t.is_index = true;
          t.dtype = "int32";
          std::uniform_int_distribution<int64_t> index(-1, g.kv_rows() - 1);
          for (double& v : t.values) v = static_cast<double>(index(rng));
        } else if (s.values == ref::StageValues::finite_or_minus_inf) {
          for (std::size_t i = 0; i < t.values.size(); i += 7) t.values[i] = -INFINITY;
        }
        if (s.name == "x" || s.name == "q" || s.name == "out") t.dtype = "bfloat16";
        call.stages.emplace(std::string(s.name), std::move(t));
      }
      layer.calls.push_back(std::move(call));
    }
    c.layers.emplace(layer.index, std::move(layer));
  }
  return c;
}

std::string temp_path(const std::string& stem) {
  static int counter = 0;
  return (std::filesystem::temp_directory_path() / fmt::format("dsv4-{}-{}-{}.h5", stem, ::getpid(), counter++))
      .string();
}

TempFile::~TempFile() {
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
}

}  // namespace dsv4::verify::testing
