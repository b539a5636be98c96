#pragma once
// Synthetic inputs for a precision report at any dims (real V4-Flash / V4-Pro dims included): random
// weights on the checkpoint's grids (ref::AttentionWeights::random) and a random bf16 attention input
// per sequence, split into calls: x ~ N(0, 1), or a model of activations with outliers
// (activation_model.h), which also changes the weights that project q and k. Only x and the
// weights: no stage datasets (the report computes every stage under every policy itself), so
// nothing is spent on a policy that is not compared. Deterministic: the same options give the same
// values, bit for bit; each seed draws its own weights and inputs.
#include <cstdint>
#include <string>
#include <vector>

#include "verify/capture/capture.h"
#include "verify/precision/input_info.h"

namespace dsv4::verify {

struct SyntheticInputOptions {
  std::string config = "flash";   // ref::ModelConfig::by_name
  std::vector<int> ratios = {4};  // one layer per entry, layer i with ratio ratios[i]
  int64_t prefill = 512;          // tokens of the prefill (start_pos 0)
  // The prefill runs in calls of at most `chunk` tokens (0: one call). The oracle gives bitwise the
  // same values for any split of a sequence into calls; chunks bound the memory of one call (a
  // Flash layer's q is 256 KiB per token in double).
  int64_t chunk = 0;
  int64_t decode = 0;  // one-token decode calls after the prefill
  int batch = 1;
  uint64_t seed = 1;
  ActivationModel activations;  // plain: x ~ N(0, 1), the weights as drawn
  // The config's max_seq_len (0: keep it; DeepSeek's default is 4096) raised for longer sequences:
  // nothing the layer computes depends on it but the cache size (RoPE uses original_seq_len).
  int64_t max_seq_len = 0;
};

// Throws std::invalid_argument for options out of range (naming the option, expected and found).
Capture synthetic_input(const SyntheticInputOptions& options);

// What the report states about such inputs, run once per seed of `seeds` (options.seed is not
// used; empty = {options.seed}): kind "synthetic", random weights, the activation model.
InputInfo synthetic_input_info(const SyntheticInputOptions& options, const std::vector<uint64_t>& seeds = {});

}  // namespace dsv4::verify
