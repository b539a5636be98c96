#pragma once
// The precision report (dsv4-verify precision-report, docs/precision.md), one input: a capture's
// layers run from their captured x (and weights) through ref::AttentionLayer under each policy,
// calls in order, each policy with its own cache (chained: every stage from the policy's own earlier
// results), and every stage compared with the exact policy's value of the same call:
//   per stage   NMSE, cos-diff, max relative error (and the error distribution), error_stats.h;
//   end to end  top-k recall of the indexer against the exact indexer (CSA layers; topk_recall.h),
//               the attention output (attn/core) and the layer output (out), also by query position.
// The captured stage datasets are not used: only x, the weights and the configuration. Several
// seeds of synthetic inputs are several such reports (seeded_report.h).
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "reference/precision.h"
#include "verify/capture/capture.h"
#include "verify/precision/error_stats.h"
#include "verify/precision/input_info.h"
#include "verify/precision/topk_recall.h"

namespace dsv4::verify {

// The stage the attention-output figure is taken from, and the layer output's.
inline constexpr const char* kAttentionOutputStage = "attn/core";
inline constexpr const char* kLayerOutputStage = "out";

struct StageError {
  std::string stage;  // capture-format name, e.g. "indexer/q"
  std::string note;   // how it was compared when that is not plain (e.g. the Hadamard basis)
  ErrorStats error;
};

// The attention-output and layer-output errors of the query rows whose positions fall in one bucket.
struct OutputErrorBucket {
  int64_t first_position = 0;  // positions [first_position, last_position]
  int64_t last_position = 0;
  ErrorStats attention;  // attn/core
  ErrorStats layer;      // out
};

struct LayerResult {
  int layer = 0;  // L, the layer's index in the capture
  int compress_ratio = 0;
  std::vector<StageError> stages;                           // in capture-format order; only the stages the ratio has
  std::optional<RecallStats> recall;                        // indexer/topk against the exact indexer (ratio 4 only)
  std::map<int64_t, OutputErrorBucket> output_by_position;  // key: position / the report's bucket width

  const StageError& stage(const std::string& name) const;  // throws std::out_of_range naming it
};

// Time spent in the oracle's forward passes of one policy (the comparisons not included).
struct OracleTime {
  double wall_seconds = 0.0;
  double cpu_seconds = 0.0;  // the process's CPU time over every thread
};

struct PolicyResult {
  ref::PrecisionPolicy policy;
  std::vector<LayerResult> layers;  // ascending layer index
  OracleTime time;
};

struct PrecisionReport {
  InputInfo input;
  std::string reference = "exact";     // every figure is against this policy
  int64_t position_bucket = 0;         // query positions per recall and output-error bucket
  OracleTime reference_time;           // the exact policy's forward passes
  std::vector<PolicyResult> policies;  // in the order asked for
  std::string command;                 // the command line that reproduces it (may be empty)
};

struct PrecisionReportOptions {
  // Named policies (reference/precision.h), in report order; empty = every named policy.
  std::vector<std::string> policies;
  // Query positions per recall bucket; 0 = the longest sequence / 16, rounded up.
  int64_t position_bucket = 0;
};

struct PrecisionProgress {
  int layer = 0;
  int call = 0;
  int calls = 0;
  std::string policy;  // the policy about to run ("exact" for the reference)
  uint64_t seed = 0;   // over seeds (seeded_report.h): the seed, its index and the seed count
  int seed_index = 0;
  int seeds = 0;
};

// Query positions per recall and output-error bucket: `asked`, or when it is 0 the longest sequence
// / 16, rounded up (at least 1). Throws std::invalid_argument when `asked` < 0.
int64_t position_bucket_for(int64_t longest_sequence, int64_t asked);

// The policies of `names` (empty = all named), in that order. Throws std::invalid_argument naming
// an unknown policy (and listing the known ones) or a policy named twice.
std::vector<ref::PrecisionPolicy> resolve_policies(const std::vector<std::string>& names);

// Throws std::invalid_argument for an unknown policy, a capture without layers, or a layer the
// oracle refuses (what ref::AttentionLayer throws); std::out_of_range for a call without x.
PrecisionReport run_precision_report(const Capture& capture, const InputInfo& input,
                                     const PrecisionReportOptions& options,
                                     const std::function<void(const PrecisionProgress&)>& progress = {});

}  // namespace dsv4::verify
