#pragma once
// The replay of one captured layer, call by call: the oracle's layer (ref::AttentionLayer::forward)
// runs every sequence of the batch with its stages computed by a backend (a ref::StageProvider);
// the mode says what each stage reads (docs/capture-format.md "Replay"):
//   stage-local  the captured values of its inputs (a captured input that is absent is replaced by
//                the replay's own value, and the record says so); the state before a call from the
//                call's cache/ datasets, else from the replay of the earlier calls;
//   chained      x and the replay's own earlier results, the cache carried from call to call
//                (exactly ref::AttentionLayer::forward_batch over a ring cache). Beside it the
//                stage-local pass runs too: each stage recomputed from the captured inputs, whose
//                difference to the chained value is the error the replay's own inputs carry,
//                propagated through the stage (docs/tolerances.md "Chained replay").
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "reference/kv_cache.h"
#include "reference/layer.h"
#include "reference/stage_provider.h"
#include "verify/capture/capture.h"
#include "verify/tolerance/probability_flips.h"

namespace dsv4::verify {

enum class ReplayMode { stage_local, chained };
std::string to_string(ReplayMode mode);                       // "stage-local", "chained"
ReplayMode replay_mode_from_string(const std::string& name);  // throws std::invalid_argument

// One stage's values from the replay of one call, one entry per sequence of the batch.
struct StageValue {
  std::vector<ref::Mat> dense;         // dense and state stages
  std::vector<ref::IndexMat> indices;  // index-set stages
  std::vector<ref::Mat> tie_scores;    // index-set stages: the scores the selection was made from
  int64_t tie_offset = 0;              // their column of index i is i - tie_offset
  std::vector<int> rows;               // state stages: the meaningful rows (the same for every sequence)
  std::vector<std::string> notes;      // inputs that did not come from where the mode says
  std::string computed_by;             // the backend's name
  // Rounded stages (the block-quantized ones of reference/pre_quant.h and the bf16 ones), when the
  // oracle computed them: the oracle's value before the stage's final rounding, per sequence; the
  // replay judges the stage's flips by it (compare_rounded, docs/tolerances.md F5). Empty otherwise.
  std::vector<ref::Mat> pre_rounding;
  // attn/core, in a pass that reads the captured inputs: the per-element bound of pre_rounding for a
  // producer that follows DeepSeek's probability convention, per sequence, and what it rests on
  // (verify/tolerance/probability_flips.h). Empty where the policy does not follow it.
  std::vector<ref::Mat> probability_bound;
  ProbabilityFlipCounts probability_counts;
};
using CallValues = std::map<std::string, StageValue, std::less<>>;

// One replayed call: the values of the mode, and in chained mode the stage-local values beside them.
struct ReplayedCall {
  CallValues values;
  CallValues from_captured_inputs;  // chained mode only (empty in stage-local mode)
};

// The oracle's layer for a captured layer: the capture's configuration with the layer's ratio, its
// weights, `policy`. Throws std::invalid_argument when the oracle refuses them.
ref::AttentionLayer replay_layer(const Capture& capture, const LayerCapture& layer, const ref::PrecisionPolicy& policy);

class LayerReplay {
 public:
  // `capture`, `layer` and `backend` must outlive this object. Throws std::invalid_argument when
  // the oracle refuses the configuration or the weights.
  LayerReplay(const Capture& capture, const LayerCapture& layer, const ref::PrecisionPolicy& policy,
              const ref::StageProvider& backend, ReplayMode mode);
  // The same with the oracle's layer already built (replay_layer): replays of one layer share its
  // weights instead of copying them.
  LayerReplay(const Capture& capture, const LayerCapture& layer, ref::AttentionLayer oracle_layer,
              const ref::StageProvider& backend, ReplayMode mode);

  // Replays layer.calls[k], k = 0, 1, ... in order (each call once), and advances the carried caches.
  // -> the values of every compared stage the layer's ratio has. Throws CaptureError naming the
  // missing dataset when a state the call needs is neither captured nor left by the earlier calls
  // (a call that does not continue the previous one).
  ReplayedCall replay_call(const CallCapture& call);

 private:
  const Capture& capture_;
  const LayerCapture& layer_;
  const ref::StageProvider& backend_;
  ReplayMode mode_;
  ref::AttentionLayer oracle_layer_;
  std::unique_ptr<ref::KvCache> cache_;        // every sequence's state after the last call, as the mode computes it
  std::unique_ptr<ref::KvCache> local_cache_;  // chained mode: the stage-local pass's state
};

}  // namespace dsv4::verify
