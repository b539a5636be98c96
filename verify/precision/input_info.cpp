#include "verify/precision/input_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace dsv4::verify {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The dims that decide whether a checkpoint could have made these weights.
bool same_dims(const ref::ModelConfig& a, const ref::ModelConfig& b) {
  return a.dim == b.dim && a.n_heads == b.n_heads && a.head_dim == b.head_dim && a.q_lora_rank == b.q_lora_rank &&
         a.o_groups == b.o_groups && a.o_lora_rank == b.o_lora_rank && a.index_n_heads == b.index_n_heads &&
         a.index_head_dim == b.index_head_dim;
}

std::string describe_layers(const Capture& c) {
  std::string text;
  for (const auto& [index, layer] : c.layers) {
    std::string calls;
    for (const CallCapture& call : layer.calls) calls += fmt::format("{}{}", calls.empty() ? "" : ",", call.seqlen);
    const int batch = layer.calls.empty() ? 0 : layer.calls.front().batch;
    text += fmt::format("{}layer {} (ratio {}, calls of {} tokens, batch {})", text.empty() ? "" : "; ", index,
                        layer.compress_ratio, calls, batch);
  }
  return text;
}

}  // namespace

std::string describe_dims(const ref::ModelConfig& c) {
  return fmt::format("dim {}, {} heads x {}, q_lora_rank {}, indexer {} heads x {} top-{}, window {}", c.dim, c.n_heads,
                     c.head_dim, c.q_lora_rank, c.index_n_heads, c.index_head_dim, c.index_topk, c.window_size);
}

std::string to_string(WeightsOrigin origin) {
  switch (origin) {
    case WeightsOrigin::random: return "random";
    case WeightsOrigin::real: return "real";
    case WeightsOrigin::unknown: return "unknown";
  }
  return "unknown";
}

WeightsOrigin weights_origin_from_string(const std::string& name) {
  if (name == "random") return WeightsOrigin::random;
  if (name == "real") return WeightsOrigin::real;
  if (name == "unknown") return WeightsOrigin::unknown;
  throw std::invalid_argument("weights origin: expected random, real or unknown, found '" + name + "'");
}

InputInfo capture_input_info(const Capture& capture) {
  InputInfo info;
  info.kind = "capture";
  info.file = capture.path;
  info.producer = capture.producer;
  info.model = capture.model;
  info.config = capture.config;
  info.description = fmt::format("{}; {}", describe_dims(capture.config), describe_layers(capture));
  const bool released_dims =
      same_dims(capture.config, ref::ModelConfig::flash()) || same_dims(capture.config, ref::ModelConfig::pro());
  if (capture.producer.starts_with("dsv4-verify synth")) {
    info.weights = WeightsOrigin::random;
    info.weights_reason = "made by the oracle's synth, which draws random weights";
  } else if (lower(capture.producer + " " + capture.model).find("random") != std::string::npos) {
    info.weights = WeightsOrigin::random;
    info.weights_reason = "the capture's producer/model text says random";
  } else if (!released_dims) {
    info.weights = WeightsOrigin::random;
    info.weights_reason = "its dims are those of no released model, so no checkpoint made these weights";
  } else {
    info.weights = WeightsOrigin::unknown;
    info.weights_reason = "the capture does not say (state it with --weights)";
  }
  return info;
}

std::string fidelity_note(const InputInfo& info) {
  switch (info.weights) {
    case WeightsOrigin::random:
      return "The weights are random. Random weights do not attend like a trained model: which entries win the "
             "indexer's top-k, and by what margins, is not what a trained model's indexer would give, so the recall "
             "here is a lower-fidelity signal than on a capture of a real model. The per-stage errors depend mostly "
             "on the value ranges each number format sees and carry over better, though random weights do not "
             "give a trained model's value distributions either.";
    case WeightsOrigin::real:
      return "The weights are a real model's (as the input states), so the recall reflects how the model attends "
             "on these inputs; other prompts may attend differently.";
    case WeightsOrigin::unknown: break;
  }
  return "Where the weights come from is not known: if they are random, recall is a lower-fidelity signal than on a "
         "capture of a real model (random weights do not attend like a trained model).";
}

InputInfo with_stated_weights(InputInfo info, WeightsOrigin stated) {
  info.weights = stated;
  info.weights_reason = "as stated by the user (--weights)";
  return info;
}

}  // namespace dsv4::verify
