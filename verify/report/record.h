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
#include "verify/tolerance/tolerance.h"

namespace dsv4::verify {

struct StageId {
  int layer = 0;
  int call = 0;
  std::string stage;
  bool operator==(const StageId&) const = default;
};

struct Record {
  int layer = 0;
  int call = 0;
  std::string stage;             // the capture's dataset name (reference/stage_registry.h)
  Status status = Status::skipped;
  Shape shape;                   // of the compared dataset
  std::string dtype;             // the dataset's `dtype` attribute (what the producer held), e.g. "bfloat16"
  std::variant<std::monostate, DenseMetrics, IndexSetMetrics> metrics;  // monostate: not compared
  std::optional<Tolerance> tolerance;  // the row used
  std::string note;              // why MISSING/SKIPPED, or anything the replay wants said

  StageId id() const { return {layer, call, stage}; }
};

struct StatusCounts {
  int64_t passed = 0;
  int64_t failed = 0;
  int64_t missing = 0;
  int64_t skipped = 0;
};

struct Report {
  std::string file;        // the capture
  std::string mode;        // "stage-local" or "chained"
  std::string precision;   // the policy replayed
  std::string backend;     // "oracle", "cuda", ...
  std::string tolerances;  // the tolerance table's source (ToleranceTable::source())
  std::string command;     // the command line that reproduces this report (may be empty)
  std::vector<Record> records;

  // The first FAIL in record (= replay) order: the stage to look at first.
  std::optional<StageId> first_failure() const;
  StatusCounts counts() const;
};

}  // namespace dsv4::verify
