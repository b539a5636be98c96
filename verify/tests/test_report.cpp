// Report writers: the JSON parses back with the required keys (non-finite numbers as strings), the
// console names the first failure and closes with the summary line CI reads, the Markdown has its
// tables, and files are written whole or not at all.
#include <doctest/doctest.h>

#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "verify/compare/rounded.h"
#include "verify/report/atomic_file.h"
#include "verify/report/console.h"
#include "verify/report/json.h"
#include "verify/report/markdown.h"
#include "verify/report/text_cells.h"
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
  CHECK(j["first_failure"] == json{{"layer", 2},
                                   {"call", 0},
                                   {"stage", "kv"},
                                   {"replay", "dsv4-verify replay capture.h5 --layer 2 --call 0 --stage kv"}});
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
  CHECK(j["summary"] == json{{"passed", 1}, {"failed", 3}, {"vacuous", 0}, {"missing", 1}, {"skipped", 1}});

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

TEST_CASE("console --verbose: every record, the first failure at the top and the end, the summary line last") {
  std::ostringstream out;
  write_console(out, sample_report(), ConsoleOptions{true});
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

  // Record lines of the same kind are aligned: the cell after the stage starts in the same column.
  std::ostringstream one;
  write_console(one, sample_report(), ConsoleOptions{true});
  std::istringstream rows(one.str());
  std::vector<size_t> shape_columns;
  while (std::getline(rows, line)) {
    if (std::regex_search(line, std::regex(R"(^(PASS|FAIL) +L\d+ c\d+ )")) && line.find("max_abs") != std::string::npos)
      shape_columns.push_back(line.find('['));
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
  CHECK(text.find("| status | layer | call | stage | shape | dtype | max_abs @ coord (ref, got) |") !=
        std::string::npos);
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

namespace {

// Two layers, two calls: q passes everywhere (its worst record is L1 c1), kv fails in L1 c0,
// compressor/entries is vacuous in every call, and an FP4 indexer/q record carries a flip census.
Report stage_report() {
  Report report;
  report.file = "my capture.h5";
  report.mode = "chained";
  report.precision = "official";
  report.backend = "oracle";
  report.record_options = {"--mode", "chained"};
  for (int layer : {1, 3}) {
    for (int call : {0, 1}) {
      const double off = layer == 1 && call == 1 ? 0.05 : 0.01;
      report.records.push_back(dense_record(layer, call, "q", {1, 2, 3}, {1 + off, 2, 3}, row(0.1, 0)));
      report.records.push_back(
          dense_record(layer, call, "kv", {1, 2}, {1.0, layer == 1 && call == 0 ? 3.0 : 2.0}, row(0, 0.1)));
      Record empty = dense_record(layer, call, "compressor/entries", {}, {}, row(0, 0));
      empty.shape = {1, 0, 4};
      report.records.push_back(empty);
    }
  }
  // indexer/q: FP4 blocks of 32; one value a tie rounded toward zero, judged with a zero bound.
  std::vector<double> pre(32, 0.0);
  pre[0] = 6.0;
  pre[1] = 0.75;
  std::vector<double> ref = pre, got;
  ref[1] = 1.0;  // 0.75 -> 1 (to even)
  got = ref;
  got[1] = 0.5;  // toward zero
  Record q;
  q.layer = 1;
  q.call = 0;
  q.stage = "indexer/q";
  q.shape = {1, 32};
  q.dtype = "bfloat16";
  Tolerance t = row(1, 1);
  t.pre_rounding = ErrorBound{0, 0, 0, "test bound"};
  const DenseMetrics m = compare_rounded(
      ref, got, q.shape, RoundedReference{pre, RoundingFormat::blocks(dsv4::ref::BlockFormat::fp4_indexer()), {}}, t);
  q.status = m.status;
  q.metrics = m;
  q.tolerance = t;
  report.records.push_back(q);
  return report;
}

}  // namespace

TEST_CASE("console: one line per stage with its counts and worst record, the replay command, vacuous stages") {
  const Report report = stage_report();
  std::ostringstream out;
  write_console(out, report);
  const std::string text = out.str();
  // Stage order is the capture format's: q, kv, compressor/entries, indexer/q.
  std::smatch q, kv, entries, iq;
  REQUIRE(std::regex_search(text, q, std::regex("\nPASS +q +4 records")));
  REQUIRE(std::regex_search(text, kv, std::regex("\nFAIL +kv +4 records")));
  REQUIRE(std::regex_search(text, entries, std::regex("\nVACUOUS +compressor/entries +4 records")));
  REQUIRE(std::regex_search(text, iq, std::regex("\nFAIL +indexer/q +1 record:")));
  CHECK(q.position() < kv.position());
  CHECK(kv.position() < entries.position());
  CHECK(entries.position() < iq.position());
  CHECK(text.find("4 records: 4 passed, 0 failed, 0 vacuous  worst L1 c1: 0.5 of elementwise") != std::string::npos);
  CHECK(text.find("4 records: 3 passed, 1 failed, 0 vacuous  worst L1 c0: 5 of elementwise") != std::string::npos);
  CHECK(text.find("4 records: 0 passed, 0 failed, 4 vacuous") != std::string::npos);
  // No record lines by default.
  CHECK(text.find("L3 c1 q ") == std::string::npos);
  CHECK(text.find("first failure: layer 1, call 0, kv\n    failed elementwise") != std::string::npos);
  CHECK(text.find("    replay it: dsv4-verify replay 'my capture.h5' --mode chained --layer 1 --call 0 --stage kv\n") !=
        std::string::npos);
  CHECK(text.find("vacuous in every call (nothing was compared): compressor/entries (layers 1, 3)") !=
        std::string::npos);
  CHECK(text.find("skipped: 0 missing from the capture, 0 not replayed, 4 vacuous") != std::string::npos);
  std::istringstream lines(text);
  std::string line, last;
  while (std::getline(lines, line)) last = line;
  CHECK(last == "summary: 7 passed, 2 failed, 4 skipped");

  // Verbose: the record lines too, with the census of the rounded record.
  std::ostringstream verbose;
  write_console(verbose, report, ConsoleOptions{true});
  CHECK(verbose.str().find("L3 c1 q ") != std::string::npos);
  CHECK(verbose.str().find("rounding e2m1/b32/ue8m0: 1 of 32 differ, flips 1 (0 explained), 1 unexplained, ties 1 (1 "
                           "flipped)") != std::string::npos);
  CHECK(verbose.str().find("a tie not rounded as the format's rule (to nearest even)") != std::string::npos);
  CHECK(verbose.str().find("min atol 1.000e-02 | min rtol 1.000e-02") != std::string::npos);
}

TEST_CASE("JSON and Markdown carry the stage summaries, the worst rows, the census and the replay command") {
  const Report report = stage_report();
  const json j = json::parse(to_json(report).dump());
  CHECK(j["summary"] == json{{"passed", 7}, {"failed", 2}, {"vacuous", 4}, {"missing", 0}, {"skipped", 0}});
  CHECK(j["first_failure"]["replay"] ==
        "dsv4-verify replay 'my capture.h5' --mode chained --layer 1 --call 0 --stage kv");
  REQUIRE(j["stages"].size() == 4);
  CHECK(j["stages"][0]["stage"] == "q");
  CHECK(j["stages"][0]["counts"]["passed"] == 4);
  CHECK(j["stages"][0]["layers"] == json::array({1, 3}));
  CHECK(j["stages"][0]["worst"]["layer"] == 1);
  CHECK(j["stages"][0]["worst"]["call"] == 1);
  CHECK(j["stages"][2]["worst"].is_null());
  CHECK(j["vacuous_everywhere"] == json::array({json{{"stage", "compressor/entries"}, {"layers", {1, 3}}}}));
  const json& rec = j["records"].back();
  CHECK(rec["comparator"] == "rounded");
  CHECK(rec["metrics"]["rounding"]["tie_flips"] == 1);
  CHECK(rec["metrics"]["rounding"]["first_unexplained"]["coord"] == json::array({0, 1}));
  CHECK(rec["metrics"]["rows"]["grouping"] == "row");
  CHECK(rec["metrics"]["nonfinite_allowed"] == "none");
  CHECK(rec["tolerance"]["pre_rounding"]["reason"] == "test bound");
  CHECK(j["records"][2]["status"] == "VACUOUS");
  CHECK(j["records"][0]["metrics"]["worst_ratio_gate"] == "elementwise");

  std::ostringstream md;
  write_markdown(md, report);
  const std::string text = md.str();
  CHECK(text.find(
            "Replay that record: `dsv4-verify replay 'my capture.h5' --mode chained --layer 1 --call 0 --stage kv`") !=
        std::string::npos);
  CHECK(text.find("## Stages") != std::string::npos);
  CHECK(text.find("| `compressor/entries` | 0 | 0 | 4 | 0 | - | - |") != std::string::npos);
  CHECK(text.find("- VACUOUS `L1 c0 compressor/entries`") != std::string::npos);
  CHECK(text.find("rounding e2m1/b32/ue8m0") != std::string::npos);
}

TEST_CASE("a record whose verdict is a comparison of its own (chained) is judged and described by it") {
  // The chained distance is zero, but the stage against its own recomputation fails.
  Record r = dense_record(0, 2, "attn/core", {1, 2}, {1, 2}, row(0, 0.1));
  const Record own = dense_record(0, 2, "attn/core", {1, 2}, {1, 3}, row(0, 0.1));
  r.status = own.status;
  r.verdict = own.metrics;
  Report report;
  report.file = "c.h5";
  report.mode = "chained";
  report.record_options = {"--mode", "chained"};
  report.records.push_back(r);
  CHECK(worst_ratio(report.records[0]) == doctest::Approx(5.0));
  CHECK(margin_cell(report.records[0]) == "5 of elementwise (own error)");
  CHECK(failure_detail(report.records[0]).rfind("on the stage's own error: failed elementwise", 0) == 0);
  const json j = to_json(report);
  CHECK(j["records"][0]["metrics"]["max_abs"] == 0.0);
  CHECK(j["records"][0]["verdict_metrics"]["max_abs"] == 1.0);
  std::ostringstream out;
  write_console(out, report);
  CHECK(out.str().find("    on the stage's own error: failed elementwise") != std::string::npos);
}
