// dsv4-verify precision-report, run in-process: the JSON of a synthetic run and of a capture file
// (the input kind, producer and weights' origin stated), exit 2 naming an unknown policy, and
// report files whole or absent when a run fails (nothing written, an existing report untouched).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "verify/capture/writer.h"
#include "verify/cli/cli.h"
#include "verify/precision/synthetic_input.h"
#include "verify/tests/scratch_dir.h"

using namespace dsv4::verify;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Run {
  int status = -1;
  std::string out, err;
};

Run run(std::vector<std::string> args) {
  args.insert(args.begin(), {"dsv4-verify", "precision-report"});
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

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), {}};
}

// No file of the folder is a leftover temporary (".name.tmp-...").
bool no_temporaries(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp-") != std::string::npos) return false;
  return true;
}

const std::vector<std::string> kSmallSynth = {"--synth", "tiny", "--prefill", "40", "--batch", "1"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

}  // namespace

TEST_CASE("precision-report --synth: JSON and Markdown with the input kind and random weights") {
  testing::ScratchDir dir("precision_cli_synth");
  const fs::path j = dir.path() / "r.json", md = dir.path() / "r.md";
  const Run r =
      run(with(kSmallSynth, {"--policies", "exact,official", "--json", j.string(), "--markdown", md.string()}));
  INFO(r.err);
  REQUIRE(r.status == 0);
  const json report = read_json(j);
  CHECK(report["input"]["kind"] == "synthetic");
  CHECK(report["input"]["weights"] == "random");
  REQUIRE(report["policies"].size() == 2);
  CHECK(report["policies"][0]["name"] == "exact");
  CHECK(report["policies"][1]["name"] == "official");
  CHECK(report["command"].get<std::string>().find("precision-report --synth tiny") != std::string::npos);
  const std::string text = read_text(md);
  CHECK(text.find("Input: **synthetic**") != std::string::npos);
  CHECK(text.find("Weights: **random**") != std::string::npos);
  CHECK(text.find("Random weights do not attend like a trained model") != std::string::npos);
  CHECK(r.out.find("official") != std::string::npos);
  CHECK(no_temporaries(dir.path()));
}

TEST_CASE("precision-report FILE: a capture's producer string and the weights' origin it implies or is told") {
  testing::ScratchDir dir("precision_cli_capture");
  SyntheticInputOptions o;
  o.config = "tiny";
  o.prefill = 20;
  Capture c = synthetic_input(o);
  c.producer = "a serving engine's capture hook";
  c.model = "DeepSeek-V4 attention";
  const fs::path capture = dir.path() / "c.h5";
  write_capture(capture.string(), c);

  const fs::path j = dir.path() / "r.json", md = dir.path() / "r.md";
  Run r = run({capture.string(), "--policies", "official", "--json", j.string(), "--markdown", md.string()});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(read_text(md).find("One input: figures without intervals") != std::string::npos);
  json report = read_json(j);
  CHECK(report["input"]["seeds"].empty());
  CHECK(report["input"]["kind"] == "capture");
  CHECK(report["input"]["file"] == capture.string());
  CHECK(report["input"]["producer"] == "a serving engine's capture hook");
  CHECK(report["input"]["weights"] == "random");  // tiny dims: no released model has them

  r = run({capture.string(), "--policies", "official", "--weights", "real", "--json", j.string()});
  REQUIRE(r.status == 0);
  report = read_json(j);
  CHECK(report["input"]["weights"] == "real");
  CHECK(report["input"]["weights_reason"].get<std::string>().find("--weights") != std::string::npos);
}

TEST_CASE("precision-report: an unknown policy exits 2 naming it, and nothing is written") {
  testing::ScratchDir dir("precision_cli_unknown");
  const fs::path j = dir.path() / "r.json";
  const Run r = run(with(kSmallSynth, {"--policies", "official,fp6-indexer", "--json", j.string()}));
  CHECK(r.status == 2);
  CHECK(r.err.find("'fp6-indexer'") != std::string::npos);
  CHECK(r.err.find("known policies are exact, official") != std::string::npos);
  CHECK(!fs::exists(j));
}

TEST_CASE("precision-report: a report that cannot be written whole leaves every report file as it was") {
  testing::ScratchDir dir("precision_cli_atomic");
  const fs::path j = dir.path() / "r.json";
  {
    std::ofstream old(j);
    old << "the previous report\n";
  }
  SUBCASE("the Markdown folder does not exist: refused before the run") {
    const Run r = run(with(kSmallSynth, {"--policies", "official", "--json", j.string(), "--markdown",
                                         (dir.path() / "missing" / "r.md").string()}));
    CHECK(r.status == 2);
    CHECK(r.err.find("does not exist") != std::string::npos);
  }
  SUBCASE("the Markdown target is a folder") {
    fs::create_directory(dir.path() / "md");
    const Run r = run(with(
        kSmallSynth, {"--policies", "official", "--json", j.string(), "--markdown", (dir.path() / "md").string()}));
    CHECK(r.status == 2);
  }
  SUBCASE("the capture cannot be read") {
    const fs::path capture = dir.path() / "bad.h5";
    std::ofstream(capture) << "not HDF5";
    const Run r = run({capture.string(), "--policies", "official", "--json", j.string()});
    CHECK(r.status == 2);
  }
  CHECK(read_text(j) == "the previous report\n");
  CHECK(no_temporaries(dir.path()));
}

TEST_CASE("precision-report --seeds: every figure over the seeds, and a checkpoint that resumes to the same report") {
  testing::ScratchDir dir("precision_cli_seeds");
  const fs::path j = dir.path() / "r.json", md = dir.path() / "r.md", ck = dir.path() / "ck";
  const std::vector<std::string> args =
      with(kSmallSynth, {"--seeds", "2", "--seed", "4", "--policies", "official,fp32-probs", "--x-tail-dof", "5",
                         "--checkpoint", ck.string(), "--json", j.string(), "--markdown", md.string()});
  Run r = run(args);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const json report = read_json(j);
  CHECK(report["input"]["seeds"] == json::array({4, 5}));
  CHECK(report["input"]["activation_model"]["x_tail_dof"] == 5);
  CHECK(report["policies"][1]["differences_from_official"] == "attn_probs=fp32 (official: bf16)");
  CHECK(report["policies"][0]["layers"][0]["stages"][0]["nmse"]["values"].size() == 2);
  CHECK(fs::exists(ck / "seed-5" / "fp32-probs.json"));
  const std::string text = read_text(md);
  CHECK(text.find("Seeds: 4, 5") != std::string::npos);
  CHECK(text.find("Student-t(5)") != std::string::npos);
  CHECK(r.out.find("mean over 2 seeds") != std::string::npos);

  r = run(args);  // everything from the checkpoint: the same report
  REQUIRE(r.status == 0);
  CHECK(read_json(j) == report);
}

TEST_CASE("precision-report: usage errors exit 2") {
  testing::ScratchDir dir("precision_cli_usage");
  const fs::path j = dir.path() / "r.json";
  CHECK(run({"--json", j.string()}).status == 2);  // neither FILE nor --synth
  CHECK(run({"x.h5", "--synth", "tiny", "--json", j.string()}).status == 2);
  CHECK(run({"--synth", "tiny"}).status == 2);                               // --json is required
  CHECK(run({"x.h5", "--prefill", "4", "--json", j.string()}).status == 2);  // --prefill needs --synth
  CHECK(run(with(kSmallSynth, {"--policies", "bf16,bf16", "--json", j.string()})).status == 2);
  CHECK(run({"x.h5", "--seeds", "3", "--json", j.string()}).status == 2);  // --seeds needs --synth
  CHECK(run(with(kSmallSynth, {"--seeds", "0", "--json", j.string()})).status == 2);
  Run r = run(with(kSmallSynth, {"--x-tail-dof", "2", "--json", j.string()}));
  CHECK(r.status == 2);
  CHECK(r.err.find("--x-tail-dof") != std::string::npos);
  r = run({"--synth", "tiny", "--prefill", "2000", "--json", j.string()});
  CHECK(r.status == 2);
  CHECK(r.err.find("--max-seq-len") != std::string::npos);
  CHECK(!fs::exists(j));
}
