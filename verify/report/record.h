#pragma once
// What a replay found: one Record per (layer, call, stage), in replay order, gathered in a Report
// that the writers (console.h, json.h, markdown.h) print.
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "verify/compare/dense.h"
#include "verify/compare/index_set.h"
#include "verify/compare/shape.h"
#include "verify/compare/status.h"
#include "verify/report/diagnosis.h"
#include "verify/tolerance/tolerance.h"

namespace dsv4::verify {

struct StageId {
  int layer = 0;
  int call = 0;
  std::string stage;
  bool operator==(const StageId&) const = default;
};

using Metrics = std::variant<std::monostate, DenseMetrics, IndexSetMetrics>;  // monostate: not compared

struct Record {
  int layer = 0;
  int call = 0;
  std::string stage;  // the capture's dataset name (reference/stage_registry.h)
  Status status = Status::skipped;
  Shape shape;        // of the compared dataset
  std::string dtype;  // the dataset's `dtype` attribute (what the producer held), e.g. "bfloat16"
  Metrics metrics;
  // The comparison the status comes from when it is not `metrics` (chained replay: the stage
  // against its own recomputation from the captured inputs, while `metrics` is the distance from
  // the oracle's chain); nullopt: the status is `metrics`'s.
  std::optional<Metrics> verdict;
  std::optional<Tolerance> tolerance;  // the row used
  std::string note;                    // why MISSING/SKIPPED, or anything the replay wants said
  std::optional<Diagnosis> diagnosis;  // a failing stage's variants tried (the first failing call of its layer)

  StageId id() const { return {layer, call, stage}; }
  const Metrics& verdict_metrics() const { return verdict ? *verdict : metrics; }
};

struct StatusCounts {
  int64_t passed = 0;
  int64_t failed = 0;
  int64_t vacuous = 0;  // compared, but nothing was there to compare
  int64_t missing = 0;
  int64_t skipped = 0;
};

// One stage over every (layer, call) record of it: how its records came out and which was worst.
struct StageSummary {
  std::string stage;
  StatusCounts counts;
  std::vector<int> layers;        // the layers with a record of this stage, ascending
  const Record* worst = nullptr;  // the compared record with the largest measured / allowed, a FAIL
                                  // when there is one (the first on ties); nullptr when none was compared
  bool vacuous_everywhere() const { return counts.vacuous > 0 && counts.passed + counts.failed == 0; }
};

struct Report {
  std::string file;        // the capture
  std::string mode;        // "stage-local" or "chained"
  std::string precision;   // the policy replayed
  std::string backend;     // "oracle", "cuda", ...
  std::string tolerances;  // the tolerance table's source (ToleranceTable::source())
  std::string command;     // the command line that reproduces this report (may be empty)
  // The options that shape a record's values (e.g. {"--mode", "chained", "--precision", "fp32"}),
  // as typed: replay_command() adds them to the command that replays one record.
  std::vector<std::string> record_options;
  std::vector<Record> records;

  // The first FAIL in record (= replay) order: the stage to look at first.
  std::optional<StageId> first_failure() const;
  StatusCounts counts() const;
  // One summary per stage, in the capture format's stage order (reference/stage_registry.h);
  // its `worst` points into `records`.
  std::vector<StageSummary> stages() const;
};

// measured / allowed of the closest gate of the comparison a record's status comes from (<= 1:
// passed it); 0 for a record not compared or vacuous.
double worst_ratio(const Record& r);

}  // namespace dsv4::verify
