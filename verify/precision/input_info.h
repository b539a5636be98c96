#pragma once
// What a precision report ran on, stated in every report: synthetic inputs made in-process or a
// capture file (with its producer string), and where the weights came from. Random weights do not
// attend like a trained model, so the report must say which kind of weights its numbers are for.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reference/config.h"
#include "verify/capture/capture.h"
#include "verify/precision/activation_model.h"

namespace dsv4::verify {

enum class WeightsOrigin { random, real, unknown };
std::string to_string(WeightsOrigin origin);                        // "random", "real", "unknown"
WeightsOrigin weights_origin_from_string(const std::string& name);  // throws std::invalid_argument

struct InputInfo {
  std::string kind;             // "synthetic" (made by this command) or "capture" (read from `file`)
  std::string file;             // the capture file; empty for synthetic inputs
  std::string producer;         // the capture's producer attribute, or what made the synthetic inputs
  std::string model;            // the capture's model attribute (free text)
  std::string description;      // one line: dims, layers, calls, batch, seeds, activation model
  std::vector<uint64_t> seeds;  // synthetic: the seeds of weights and inputs, one run each; capture: empty
  std::optional<ActivationModel> activation_model;  // synthetic only: how x and the q/k dims were drawn
  WeightsOrigin weights = WeightsOrigin::unknown;
  std::string weights_reason;  // why the report believes `weights`
  ref::ModelConfig config;
};

// "dim 4096, 64 heads x 512, q_lora_rank 1024, indexer 64 heads x 128 top-512, window 128"
std::string describe_dims(const ref::ModelConfig& config);

// A capture file's identity. Its weights are random when the producer is the oracle's synth, when
// the producer or model text says "random", or when its dims are those of no released model
// (neither V4-Flash nor V4-Pro); otherwise unknown (the caller may state it: with_stated_weights).
InputInfo capture_input_info(const Capture& capture);

// What the numbers can and cannot say for this input, one paragraph (the reports print it).
std::string fidelity_note(const InputInfo& info);

// `info` with the weights' origin as the user stated it (their word, said so in the reason).
InputInfo with_stated_weights(InputInfo info, WeightsOrigin stated);

}  // namespace dsv4::verify
