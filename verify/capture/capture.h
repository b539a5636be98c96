#pragma once
// The capture model: what one capture file (format v1, docs/capture-format.md) holds, in memory.
// Tensors keep the file's shapes ([b, s, H, d], ...); tensor_convert.h turns them into the
// oracle's per-sequence matrices. read_capture (reader.h) fills this and validates it;
// write_capture (writer.h) stores it.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "reference/config.h"
#include "reference/weights.h"

namespace dsv4::verify {

inline constexpr const char* kCaptureFormat = "dsv4-capture";
inline constexpr int kCaptureFormatVersion = 1;

// One dataset's values, widened to double, in row-major order.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> values;     // product(shape) values; index datasets hold integers (-1 = unused)
  std::string dtype = "float32";  // attr `dtype`: what the producer held (bfloat16, float32,
                                  // float8_e4m3fn); index datasets: int32 or int64
  bool is_index = false;

  int64_t numel() const;  // product of shape (1 for a scalar)
};

// calls/<k>: one call of the layer over the whole batch.
struct CallCapture {
  int index = 0;
  int64_t start_pos = 0;
  int64_t seqlen = 0;  // s
  int batch = 0;       // b
  // Keyed by the dataset path under calls/<k>/ ("x", "indexer/topk", "cache/window_kv", ...):
  // exactly the names of the stage registry (reference/stage_registry.h) and of the
  // pre-quantization datasets (reference/pre_quant.h). Only the datasets present in the file.
  std::map<std::string, Tensor> stages;

  bool has(const std::string& stage) const { return stages.count(stage) != 0; }
  const Tensor& stage(const std::string& name) const;  // throws std::out_of_range naming the stage
};

// layers/<L>: one captured attention layer.
struct LayerCapture {
  int index = 0;                  // L, the layer's index in the model
  int compress_ratio = 0;         // 0, 4 or 128
  ref::AttentionWeights weights;  // compressor / indexer parts filled when the ratio has them
  // attr `linear` of each projection weight ("fp8" | "bf16" | "fp32"), keyed by weight path
  // ("wq_a", "indexer/wq_b", "compressor/wkv"); the spec's default where the file has none.
  std::map<std::string, std::string> weight_linear_kinds;
  std::vector<CallCapture> calls;  // calls[k].index == k
};

struct Capture {
  std::string path;      // the file read (empty for a capture built in memory)
  std::string producer;  // free text (attr of /; "" when absent)
  std::string model;     // free text (attr of /; "" when absent)
  // attr of /: the probability convention of the producer's attn/core, "deepseek" or "any"
  // (verify/tolerance/probability_flips.h); "" when absent, which replays as "any".
  std::string probs_convention;
  int format_version = kCaptureFormatVersion;
  // From /config. Not in the file: `name` (set to `model`, or "capture" when empty) and
  // `compress_ratios` (size max(L)+1; entry L is captured layer L's ratio, uncaptured layers 0).
  ref::ModelConfig config;
  std::string precision = "official";  // /config attr `precision`
  std::map<int, LayerCapture> layers;
  // What the reader skipped, one line each, e.g. "ignored unknown dataset /layers/3/calls/0/foo".
  std::vector<std::string> notes;
};

}  // namespace dsv4::verify
