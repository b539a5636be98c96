// Report writers: the JSON parses back with the required keys (non-finite numbers as strings), the
// console names the first failure and closes with the summary line CI reads, the Markdown has its
// tables, and files are written whole or not at all.
#include <doctest/doctest.h>

#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "verify/report/atomic_file.h"
#include "verify/report/console.h"
#include "verify/report/json.h"
#include "verify/report/markdown.h"
#include "verify/tests/scratch_dir.h"

using namespace dsv4::verify;
using nlohmann::json;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Tolerance row(double atol, double rtol) {
  Tolerance t;
  t.atol = atol;
  t.rtol = rtol;
  t.reason = "test row";
  return t;
}

Record dense_record(int layer, int call, const std::string& stage, const std::vector<double>& ref,
                    const std::vector<double>& got, const Tolerance& t) {
  Record r;
  r.layer = layer;
  r.call = call;
  r.stage = stage;
  r.shape = {1, static_cast<int64_t>(ref.size())};
  r.dtype = "bfloat16";
  const DenseMetrics m = compare_dense(ref, got, r.shape, t);
  r.status = m.status;
  r.metrics = m;
  r.tolerance = t;
  return r;
}

// Replay order: L2 c0 q passes; L2 c0 kv fails with an infinite nmse (zero reference); L2 c0
// indexer/topk fails; L2 c1 attn/core fails; a missing and a skipped stage.
Report sample_report() {
  Report report;
  report.file = "capture.h5";
  report.mode = "stage-local";
  report.precision = "official";
  report.backend = "oracle";
  report.tolerances = "data/tolerances/official.json";
  report.records.push_back(dense_record(2, 0, "q", {1, 2, 3}, {1, 2, 3}, row(0, 0)));
  report.records.push_back(dense_record(2, 0, "kv", {0, 0}, {0, 0.5}, row(0, 0)));

  Record topk;
  topk.layer = 2;
  topk.call = 0;
  topk.stage = "indexer/topk";
  topk.shape = {1, 1, 2};
  topk.dtype = "int32";
  const std::vector<int64_t> ref{0, 1}, got{0, 3};
  const std::vector<double> scores{0.9, 0.5, 0.5, 0.1};
  const IndexSetMetrics im = compare_index_sets({ref, 1, 2}, {got, 1, 2}, {scores, 1, 4}, {0, 0}, 0);
  topk.status = im.status;
  topk.metrics = im;
  topk.tolerance = row(0, 0);
  report.records.push_back(topk);

  report.records.push_back(dense_record(2, 1, "attn/core", {1, 2}, {1, 3}, row(0, 0.1)));
  Record missing;
  missing.layer = 2;
  missing.call = 1;
  missing.stage = "compressor/state_kv";
  missing.status = Status::missing;
  missing.note = "not in the capture";
  report.records.push_back(missing);
  Record skipped = missing;
  skipped.stage = "indexer/q";
  skipped.status = Status::skipped;
  skipped.note = "not asked for";
  report.records.push_back(skipped);
  return report;
}

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool has_temporary_files(const std::filesystem::path& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().find(".tmp-") != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("report JSON parses back with the required keys and non-finite numbers as strings") {
  const Report report = sample_report();
  const json j = json::parse(to_json(report).dump(2));
  for (const char* key : {"file", "mode", "precision", "backend", "first_failure", "records", "summary"}) {
    CAPTURE(key);
    CHECK(j.contains(key));
  }
  CHECK(j["file"] == "capture.h5");
  CHECK(j["first_failure"] == json{{"layer", 2}, {"call", 0}, {"stage", "kv"}});
  REQUIRE(j["records"].size() == 6);
  for (const json& r : j["records"]) {
    for (const char* key : {"layer", "call", "stage", "status", "shape", "dtype", "metrics", "tolerance"}) {
      CAPTURE(key);
      CHECK(r.contains(key));
    }
  }
  CHECK(j["records"][0]["status"] == "PASS");
  CHECK(j["records"][0]["comparator"] == "dense");
  CHECK(j["records"][1]["metrics"]["nmse"] == "inf");  // 0.25 / 0
  CHECK(json_number(j["records"][1]["metrics"]["nmse"]) == kInf);
  CHECK(j["records"][1]["metrics"]["max_abs_at"]["coord"] == json::array({0, 1}));
  CHECK(j["records"][2]["comparator"] == "index_set");
  CHECK(j["records"][2]["metrics"]["first_failure"]["extra"] == json::array({3}));
  CHECK(j["records"][4]["status"] == "MISSING");
  CHECK(j["records"][4]["metrics"].is_null());
  CHECK(j["summary"] == json{{"passed", 1}, {"failed", 3}, {"missing", 1}, {"skipped", 1}});

  CHECK(json_number(std::numeric_limits<double>::quiet_NaN()) == "nan");
  CHECK(json_number(-kInf) == "-inf");
  CHECK(std::isnan(json_number(json("nan"))));
  CHECK(json_number(json("-inf")) == -kInf);
  CHECK(json_number(json(0.25)) == 0.25);
  CHECK_THROWS_AS(json_number(json("infinity")), std::invalid_argument);

  Report clean = report;
  clean.records.resize(1);
  CHECK(to_json(clean)["first_failure"].is_null());
}

TEST_CASE("console: the first failure at the top and the end, the summary line last") {
  std::ostringstream out;
  write_console(out, sample_report());
  const std::string text = out.str();
  const std::string first = "first failure: layer 2, call 0, kv";
  const size_t at_top = text.find(first);
  REQUIRE(at_top != std::string::npos);
  CHECK(text.find(first, at_top + 1) != std::string::npos);
  CHECK(text.find("max_abs 5.000e-01 @[0,1] (ref 0, got 0.5)") != std::string::npos);
  CHECK(text.find("failed nonfinite") == std::string::npos);  // kv fails elementwise, not on non-finites
  CHECK(text.find("failed elementwise") != std::string::npos);
  CHECK(text.find("rows 1: exact 0, ties 0, failed 1") != std::string::npos);

  std::istringstream lines(text);
  std::string line, last;
  while (std::getline(lines, line)) last = line;
  CHECK(last == "summary: 1 passed, 3 failed, 2 skipped");
  // The form CI recognises: "N passed, N failed" alone on a line, one word and a colon before it
  // allowed, ", N skipped" after it allowed.
  CHECK(std::regex_match(last, std::regex(R"(^(\w+: )?\d+ passed, \d+ failed(, \d+ skipped)?$)")));

  // Lines of the same kind are aligned: the cell after the stage starts in the same column.
  std::ostringstream one;
  write_console(one, sample_report());
  std::istringstream rows(one.str());
  std::vector<size_t> shape_columns;
  while (std::getline(rows, line)) {
    if (line.rfind("PASS", 0) == 0 || line.rfind("FAIL", 0) == 0) {
      if (line.find("max_abs") != std::string::npos) shape_columns.push_back(line.find('['));
    }
  }
  REQUIRE(shape_columns.size() == 3);
  CHECK(shape_columns[0] == shape_columns[1]);
  CHECK(shape_columns[1] == shape_columns[2]);
}

TEST_CASE("markdown: tables for dense and index-set stages, the stages not compared, the summary") {
  std::ostringstream out;
  write_markdown(out, sample_report());
  const std::string text = out.str();
  CHECK(text.find("## Dense stages") != std::string::npos);
  CHECK(text.find("| status | layer | call | stage | shape | dtype | max_abs @ coord (ref, got) |") != std::string::npos);
  CHECK(text.find("| FAIL | 2 | 1 | `attn/core` |") != std::string::npos);
  CHECK(text.find("## Index-set stages") != std::string::npos);
  CHECK(text.find("- MISSING `L2 c1 compressor/state_kv`: not in the capture") != std::string::npos);
  CHECK(text.find("**first failure: layer 2, call 0, kv**") != std::string::npos);
  CHECK(text.find("\nsummary: 1 passed, 3 failed, 2 skipped\n") != std::string::npos);
}

TEST_CASE("files are written whole or not at all") {
  const testing::ScratchDir scratch("report_files");
  const std::filesystem::path target = scratch.path() / "report.json";

  // Success creates the file, and a second success replaces it.
  write_json_file(target, sample_report());
  CHECK(json::parse(read(target))["backend"] == "oracle");
  write_file_atomically(target, std::string_view("second\n"));
  CHECK(read(target) == "second\n");

  // A writer that throws midway: the old file stays as it was, no temporary file remains.
  CHECK_THROWS_AS(write_file_atomically(target,
                                        [](std::ostream& out) {
                                          out << "half a report";
                                          throw std::runtime_error("serialization failed");
                                        }),
                  std::runtime_error);
  CHECK(read(target) == "second\n");
  CHECK_FALSE(has_temporary_files(scratch.path()));

  // A directory that does not exist: nothing is created.
  const std::filesystem::path nowhere = scratch.path() / "no_such_dir" / "report.md";
  CHECK_THROWS_AS(write_markdown_file(nowhere, sample_report()), std::runtime_error);
  CHECK_FALSE(std::filesystem::exists(nowhere.parent_path()));

  // The rename fails (the target is a directory): the temporary file is removed, the directory kept.
  const std::filesystem::path occupied = scratch.path() / "occupied";
  std::filesystem::create_directories(occupied / "inside");
  CHECK_THROWS_AS(write_file_atomically(occupied, std::string_view("x")), std::runtime_error);
  CHECK(std::filesystem::is_directory(occupied / "inside"));
  CHECK_FALSE(has_temporary_files(scratch.path()));

  // Only the files written on purpose exist.
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(scratch.path())) files += entry.is_regular_file();
  CHECK(files == 1);
}
