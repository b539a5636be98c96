#pragma once
// Synthetic captures made by the oracle (`dsv4-verify synth`): random weights on the checkpoint's
// grids (ref::AttentionWeights::random), a random bf16 input x, a prefill call then one-token
// decodes (or calls of given lengths) over a batch, through ref::AttentionLayer with a ring cache; every stage dataset
// of every call, its pre-quantization values and, before each call, the cache/ datasets. Deterministic: the same
// options give the same values, bit for bit.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "reference/mutation.h"
#include "verify/capture/capture.h"

namespace dsv4::verify {

struct SynthOptions {
  std::string config = "tiny";    // ref::ModelConfig::by_name
  std::vector<int> ratios = {4};  // one layer per entry: layer i has compress ratio ratios[i]
  int64_t prefill = 13;           // tokens of call 0 (start_pos 0)
  int64_t decode = 6;             // one-token calls after it
  // When not empty: the token counts of the calls instead (the first the prefill, then chunked
  // continuations and decodes of any length), e.g. {13, 5, 1}.
  std::vector<int64_t> calls;
  int batch = 2;
  uint64_t seed = 1;
  std::string precision = "official";  // the policy the oracle runs (ref::PrecisionPolicy::by_name)
  bool cache = true;                   // write the cache/ datasets (state before each call)
  bool pre_quant = true;               // write the pre_quant/ datasets (reference/pre_quant.h)
  // A bug injected into the oracle's pipeline (reference/mutation.h), for captures a verifier must
  // fail: the stage it names is computed with the deviation, everything downstream from it. The
  // producer attribute names it.
  std::optional<ref::Mutation> mutation;
  // Weights that put the quantizers on an edge, blocks with amax below 1e-4 (where the amax floor
  // decides the scale): indexer head 0's rows of indexer.wq_b (its indexer/q blocks, FP4) and the
  // first 64 weights of kv_norm and of the compressor's norm (the first FP8 block of kv and of the
  // entries) scaled by 2^-16.
  bool quantization_edges = false;
};

// Throws std::invalid_argument for options out of range (naming the option, expected and found).
Capture synthesize_capture(const SynthOptions& options);

}  // namespace dsv4::verify
