// dsv4-verify, run in-process (verify/cli/cli.h): exit status 0 / 1 / 2, the JSON report's keys and
// first failure, report files never written on bad input, inspect on good and broken files,
// usage errors, help on every subcommand, synth reproducing the committed fixtures, and the
// replay of the DeepSeek capture (docs/deepseek-capture.md) in both modes.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "verify/capture/reader.h"
#include "verify/capture/writer.h"
#include "verify/cli/cli.h"
#include "verify/tests/scratch_dir.h"

using namespace dsv4::verify;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kCaptures = DSV4_CAPTURES_DIR;

struct Run {
  int status = -1;
  std::string out, err;
};

Run run(std::vector<std::string> args) {
  args.insert(args.begin(), "dsv4-verify");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  Run r;
  r.status = cli::run_cli(static_cast<int>(argv.size()), argv.data(), {out, err, false});
  r.out = out.str();
  r.err = err.str();
  return r;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// A copy of a fixture with one value of one dataset moved far away.
fs::path corrupted_copy(const fs::path& fixture, const fs::path& dir, int call, const std::string& stage, size_t i) {
  Capture c = read_capture(fixture.string());
  c.layers.begin()->second.calls.at(call).stages.at(stage).values.at(i) += 1.0;
  const fs::path out = dir / ("corrupt-" + std::to_string(call) + ".h5");
  write_capture(out.string(), c);
  return out;
}

const fs::path kSynthR4 = kCaptures / "synth-tiny-r4-p13-d6.h5";
const fs::path kDeepSeek = kCaptures / "deepseek-official-tiny-p37-d5.h5";

}  // namespace

TEST_CASE("replay of a fixture exits 0 and writes a JSON report with the required keys") {
  testing::ScratchDir dir("cli_json");
  const fs::path report = dir.path() / "r.json";
  const fs::path markdown = dir.path() / "r.md";
  const Run r = run({"replay", kSynthR4.string(), "--json", report.string(), "--markdown", markdown.string()});
  CHECK(r.status == 0);
  // 10 of the 126 records are VACUOUS (calls that complete no compressor entry), not passes.
  CHECK(r.out.find("summary: 116 passed, 0 failed, 10 skipped") != std::string::npos);
  const json j = read_json(report);
  for (const char* key : {"file", "mode", "precision", "backend", "first_failure", "records"}) CHECK(j.contains(key));
  CHECK(j["mode"] == "stage-local");
  CHECK(j["precision"] == "official");
  CHECK(j["backend"] == "oracle");
  CHECK(j["first_failure"].is_null());
  REQUIRE(j["records"].size() == 126);
  for (const char* key : {"layer", "call", "stage", "status"}) CHECK(j["records"][0].contains(key));
  CHECK(j["records"][0]["stage"] == "q_latent");
  CHECK(fs::exists(markdown));
}

TEST_CASE("a corrupted stage is the first failure: exit 1 and the JSON names it") {
  testing::ScratchDir dir("cli_corrupt");
  const fs::path report = dir.path() / "r.json";
  const fs::path bad = corrupted_copy(kSynthR4, dir.path(), 3, "attn/core", 100);
  const Run r = run({"replay", bad.string(), "--json", report.string()});
  CHECK(r.status == 1);
  CHECK(r.out.find("first failure: layer 0, call 3, attn/core") != std::string::npos);
  const json j = read_json(report);
  CHECK(j["first_failure"]["layer"] == 0);
  CHECK(j["first_failure"]["call"] == 3);
  CHECK(j["first_failure"]["stage"] == "attn/core");

  // Chained: an early stage corrupted is the first failure; the chained verdict charges a stage
  // with its own error (against the stage recomputed from the captured inputs), so only the
  // corrupted dataset and the stages that read it (q and indexer/q read q_latent) can fail.
  const fs::path early = corrupted_copy(kSynthR4, dir.path(), 0, "q_latent", 7);
  const Run c = run({"replay", early.string(), "--mode", "chained", "--json", report.string()});
  CHECK(c.status == 1);
  const json jc = read_json(report);
  CHECK(jc["first_failure"]["layer"] == 0);
  CHECK(jc["first_failure"]["call"] == 0);
  CHECK(jc["first_failure"]["stage"] == "q_latent");
  for (const json& rec : jc["records"]) {
    if (rec["status"] != "FAIL") continue;
    INFO(rec["layer"], " ", rec["call"], " ", rec["stage"]);
    CHECK(rec["call"] == 0);
    CHECK((rec["stage"] == "q_latent" || rec["stage"] == "q" || rec["stage"] == "indexer/q"));
  }
  CHECK(jc["mode"] == "chained");
}

TEST_CASE("bad input exits 2 with one line naming the dataset and writes no report") {
  testing::ScratchDir dir("cli_bad");
  Capture c = read_capture(kSynthR4.string());
  Tensor& q = c.layers.begin()->second.calls.at(1).stages.at("q");
  q.shape.back() = 64;  // [2,1,4,64] instead of [2,1,4,128]
  q.values.resize(2 * 4 * 64);
  const fs::path broken = dir.path() / "broken.h5";
  write_capture(broken.string(), c);
  const fs::path report = dir.path() / "r.json", markdown = dir.path() / "r.md";

  const Run i = run({"inspect", broken.string()});
  CHECK(i.status == 2);
  CHECK(i.err.find("/layers/0/calls/1/q: expected shape [b,s,H,d] = [2,1,4,128], found [2,1,4,64]") !=
        std::string::npos);
  CHECK(std::count(i.err.begin(), i.err.end(), '\n') == 1);

  const Run r = run({"replay", broken.string(), "--json", report.string(), "--markdown", markdown.string()});
  CHECK(r.status == 2);
  CHECK(r.err.find("/layers/0/calls/1/q") != std::string::npos);
  CHECK(r.out.empty());
  CHECK_FALSE(fs::exists(report));
  CHECK_FALSE(fs::exists(markdown));

  // A replay that cannot run (a layer the file does not have) writes nothing either.
  const Run l = run({"replay", kSynthR4.string(), "--layer", "3", "--json", report.string()});
  CHECK(l.status == 2);
  CHECK(l.err.find("--layer 3") != std::string::npos);
  CHECK_FALSE(fs::exists(report));
  // Neither does a missing file.
  CHECK(run({"replay", (dir.path() / "nothing.h5").string(), "--json", report.string()}).status == 2);
  CHECK_FALSE(fs::exists(report));
}

TEST_CASE("inspect lists a fixture and exits 0") {
  const Run r = run({"inspect", kSynthR4.string()});
  CHECK(r.status == 0);
  CHECK(r.out.find("layer 0: compress_ratio 4, 7 calls, batch 2") != std::string::npos);
  CHECK(r.out.find("call 0: prefill start_pos 0 seqlen 13") != std::string::npos);
  CHECK(r.out.find("call 6: decode start_pos 18 seqlen 1") != std::string::npos);
  CHECK(r.out.find("indexer/scores") != std::string::npos);
  CHECK(r.out.find("valid:") != std::string::npos);
}

TEST_CASE("usage errors exit 2 and help exits 0 on every subcommand") {
  CHECK(run({}).status == 2);
  CHECK(run({"frobnicate"}).status == 2);
  CHECK(run({"replay"}).status == 2);
  CHECK(run({"replay", kSynthR4.string(), "--mode", "sideways"}).status == 2);
  CHECK(run({"replay", kSynthR4.string(), "--no-such-option"}).status == 2);
  CHECK(run({"replay", kSynthR4.string(), "--stage", "("}).status == 2);
  CHECK(run({"replay", kSynthR4.string(), "--precision", "fp16-everything"}).status == 2);
  CHECK(run({"synth"}).status == 2);  // -o is required
  CHECK(run({"synth", "--ratio", "3", "-o", "x.h5"}).status == 2);
  for (const char* cmd : {"replay", "synth", "inspect"}) {
    const Run h = run({cmd, "--help"});
    CHECK(h.status == 0);
    CHECK(h.out.find("Usage:") != std::string::npos);
  }
  CHECK(run({"--help"}).status == 0);
}

TEST_CASE("the cuda backend either runs or exits 2 saying it is not available") {
  const Run r = run({"replay", kSynthR4.string(), "--backend", "cuda", "--call", "0"});
  if (r.status == 2)
    CHECK(r.err.find("cuda backend not built / no GPU") != std::string::npos);
  else
    CHECK(r.status == 0);
}

TEST_CASE("progress lines go to stderr only when asked") {
  const Run quiet = run({"replay", kSynthR4.string(), "--stage", "^out$"});
  CHECK(quiet.err.empty());
  const Run loud = run({"replay", kSynthR4.string(), "--stage", "^out$", "--progress"});
  CHECK(loud.err.find("replay: layer 0 (1/1), call 7/7") != std::string::npos);
  // The same report, but for the command line it names.
  auto without_command = [](const std::string& out) { return out.substr(out.find("\nfirst failure")); };
  CHECK(without_command(loud.out) == without_command(quiet.out));
}

TEST_CASE("synth reproduces the committed synthetic fixtures dataset by dataset") {
  testing::ScratchDir dir("cli_synth");
  struct Fixture {
    const char* name;
    std::vector<std::string> args;
  };
  const Fixture fixtures[] = {
      // The fixtures predate the pre-quantization datasets (docs/capture-format.md).
      {"synth-tiny-r0-p13-d6.h5", {"--ratio", "0", "--prefill", "13", "--decode", "6", "--no-pre-quant"}},
      {"synth-tiny-r4-p13-d6.h5", {"--ratio", "4", "--prefill", "13", "--decode", "6", "--no-pre-quant"}},
      {"synth-tiny-r128-p125-d6.h5",
       {"--ratio", "128", "--prefill", "125", "--decode", "6", "--no-cache", "--no-pre-quant"}},
  };
  for (const Fixture& f : fixtures) {
    INFO(f.name);
    std::vector<std::string> args{"synth", "-o", (dir.path() / f.name).string()};
    args.insert(args.end(), f.args.begin(), f.args.end());
    REQUIRE(run(args).status == 0);
    const Capture made = read_capture((dir.path() / f.name).string());
    const Capture committed = read_capture((kCaptures / f.name).string());
    REQUIRE(made.layers.size() == committed.layers.size());
    for (const auto& [index, layer] : committed.layers) {
      const LayerCapture& other = made.layers.at(index);
      REQUIRE(layer.calls.size() == other.calls.size());
      for (size_t k = 0; k < layer.calls.size(); ++k) {
        REQUIRE(layer.calls[k].stages.size() == other.calls[k].stages.size());
        for (const auto& [name, t] : layer.calls[k].stages) {
          INFO(name);
          CHECK(t.values == other.calls[k].stage(name).values);
          CHECK(t.dtype == other.calls[k].stage(name).dtype);
        }
      }
      CHECK(layer.weights.wq_b == other.weights.wq_b);
    }
  }
}

TEST_CASE("replay of a capture with a bug injected fails at that stage and names the bug that reproduces it") {
  testing::ScratchDir dir("cli_diagnosis");
  const fs::path buggy = dir.path() / "ties.h5";
  REQUIRE(run({"synth", "-o", buggy.string(), "--ratio", "4", "--prefill", "13", "--decode", "2", "--inject-bug",
               "indexer/q:ties-toward-zero"})
              .status == 0);
  const fs::path report = dir.path() / "r.json";
  const Run r = run({"replay", buggy.string(), "--json", report.string()});
  CHECK(r.status == 1);
  INFO(r.out);
  CHECK(r.out.find("first failure: layer 0, call 0, indexer/q") != std::string::npos);
  CHECK(r.out.find("diagnosis: matches indexer/q:ties-toward-zero") != std::string::npos);
  const json j = read_json(report);
  bool diagnosed = false;
  for (const json& rec : j["records"])
    if (rec.contains("diagnosis")) {
      CHECK(rec["stage"] == "indexer/q");
      CHECK(rec["diagnosis"]["trials"][0]["mutation"] == "indexer/q:ties-toward-zero");
      CHECK(rec["diagnosis"]["trials"][0]["reproduces"] == true);
      diagnosed = true;
    }
  CHECK(diagnosed);
  // --no-diagnose: the verdict alone.
  CHECK(run({"replay", buggy.string(), "--no-diagnose"}).out.find("diagnosis:") == std::string::npos);
}

TEST_CASE("replay --probs-convention: the capture's attribute by default, deepseek or any when given") {
  testing::ScratchDir dir("cli_probs");
  const fs::path buggy = dir.path() / "probs.h5";
  REQUIRE(run({"synth", "-o", buggy.string(), "--ratio", "0", "--prefill", "13", "--decode", "1", "--inject-bug",
               "attn/core:probs-fp32"})
              .status == 0);
  // synth declares DeepSeek's convention: attn/core is judged per element and fails.
  const Run declared = run({"replay", buggy.string(), "--no-diagnose"});
  INFO(declared.out);
  CHECK(declared.status == 1);
  CHECK(declared.out.find("first failure: layer 0, call 0, attn/core") != std::string::npos);
  CHECK(run({"replay", buggy.string(), "--no-diagnose", "--probs-convention", "deepseek"}).status == 1);
  // As a producer of another convention: the row's bound, which the class passes.
  const Run any = run({"replay", buggy.string(), "--no-diagnose", "--probs-convention", "any", "-v"});
  CHECK(any.status == 0);
  CHECK(any.out.find("probabilities by any convention") != std::string::npos);
  CHECK(run({"replay", buggy.string(), "--probs-convention", "DeepSeek"}).status == 2);
  // The command that replays the failing record keeps the option.
  const Run given = run({"replay", buggy.string(), "--no-diagnose", "--probs-convention", "deepseek"});
  CHECK(given.out.find("--probs-convention deepseek --layer 0 --call 0 --stage attn/core") != std::string::npos);
}

TEST_CASE("the DeepSeek official capture passes every stage in both modes") {
  testing::ScratchDir dir("cli_deepseek");
  const fs::path report = dir.path() / "r.json";
  const Run local = run({"replay", kDeepSeek.string(), "--json", report.string()});
  CHECK(local.status == 0);
  const json j = read_json(report);
  CHECK(j["summary"]["failed"] == 0);
  CHECK(j["summary"]["missing"] == 0);
  CHECK(j["summary"]["passed"] == 208);  // of 222 records, 14 are VACUOUS (no compressor entry completed)
  CHECK(j["summary"]["vacuous"] == 14);

  // Chained: the H200 run's few one-ulp attn/core flips grow through the RoPE pair and wo_a
  // (attn/out_heads and attn/wo_a of the prefill calls are further from the oracle's chain than
  // their rows allow a stage's own error); the chained verdict charges each stage with its own
  // error only (docs/tolerances.md "Chained replay"), so every stage passes, and the records
  // still show the chained distance.
  const Run chained = run({"replay", kDeepSeek.string(), "--mode", "chained", "--json", report.string()});
  CHECK(chained.status == 0);
  const json jc = read_json(report);
  CHECK(jc["summary"]["failed"] == 0);
  CHECK(jc["summary"]["passed"] == 208);
  CHECK(jc["summary"]["vacuous"] == 14);
  double out_heads_distance = 0;
  for (const json& rec : jc["records"])
    if (rec["stage"] == "attn/out_heads")
      out_heads_distance = std::max(out_heads_distance, rec["metrics"]["max_abs"].get<double>());
  CHECK(out_heads_distance > 0);
}

TEST_CASE("the console prints one line per stage and the command that replays exactly the first failure") {
  testing::ScratchDir dir("cli_console");
  const fs::path bad = corrupted_copy(kSynthR4, dir.path(), 3, "attn/core", 100);
  const Run r = run({"replay", bad.string(), "--mode", "chained"});
  CHECK(r.status == 1);
  // One line per stage (18 stages at ratio 4), not one per record (126).
  int stage_lines = 0;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line))
    if (line.find(" records: ") != std::string::npos) ++stage_lines;
  CHECK(stage_lines == 18);
  CHECK(r.out.find("FAIL  attn/core") != std::string::npos);
  CHECK(r.out.find("vacuous in every call") == std::string::npos);  // entries complete in some calls
  const std::string replay_it =
      "    replay it: dsv4-verify replay " + bad.string() + " --mode chained --layer 0 --call 3 --stage attn/core\n";
  REQUIRE(r.out.find(replay_it) != std::string::npos);

  // That command replays that record alone, with the same verdict.
  const Run one = run({"replay", bad.string(), "--mode", "chained", "--layer", "0", "--call", "3", "--stage",
                       "attn/core", "--json", (dir.path() / "one.json").string()});
  CHECK(one.status == 1);
  const json j = read_json(dir.path() / "one.json");
  REQUIRE(j["records"].size() == 1);
  CHECK(j["records"][0]["stage"] == "attn/core");
  CHECK(j["records"][0]["call"] == 3);
  CHECK(j["records"][0]["status"] == "FAIL");

  // --verbose prints every record as well.
  const Run v = run({"replay", bad.string(), "--mode", "chained", "--verbose"});
  CHECK(std::regex_search(v.out, std::regex("\nFAIL +L0 c3 attn/core ")));
  CHECK(std::regex_search(v.out, std::regex("\nPASS +L0 c6 out ")));
  CHECK(r.out.find("L0 c6 out") == std::string::npos);
}

TEST_CASE("--stage with a stage's name selects that stage alone, anything else is a regex") {
  testing::ScratchDir dir("cli_stage");
  const fs::path report = dir.path() / "r.json";
  REQUIRE(run({"replay", kSynthR4.string(), "--call", "0", "--stage", "q", "--json", report.string()}).status == 0);
  json j = read_json(report);
  REQUIRE(j["records"].size() == 1);
  CHECK(j["records"][0]["stage"] == "q");
  REQUIRE(run({"replay", kSynthR4.string(), "--call", "0", "--stage", "kv", "--json", report.string()}).status == 0);
  CHECK(read_json(report)["records"].size() == 1);
  // A pattern that is not a stage name searches: 'state_kv' matches both compressors' states.
  REQUIRE(run({"replay", kSynthR4.string(), "--call", "0", "--stage", "state_kv", "--json", report.string()}).status ==
          0);
  j = read_json(report);
  REQUIRE(j["records"].size() == 2);
  CHECK(j["records"][0]["stage"] == "compressor/state_kv");
  CHECK(j["records"][1]["stage"] == "indexer/compressor/state_kv");
}
