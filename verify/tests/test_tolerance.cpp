// Tolerance tables: the shipped files load and cover every compared stage; every malformed table is
// refused with a message naming the file and the key at fault.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "reference/config.h"
#include "reference/precision.h"
#include "reference/stage_registry.h"
#include "verify/compare/stage_rounding.h"
#include "verify/tests/scratch_dir.h"
#include "verify/tolerance/tolerance_table.h"

using namespace dsv4::verify;
namespace ref = dsv4::ref;

namespace {

// The message of the std::invalid_argument that parsing `text` throws ("" when it does not throw).
std::string refusal(const std::string& text) {
  try {
    ToleranceTable::parse(text, "bad.json");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

const char* kRow = R"({"atol": 0, "rtol": 0.0078125, "reason": "one bf16 flip"})";

std::string table_with(const std::string& stages) {
  return std::string(R"({"precision": "bad", "stages": {)") + stages + "}}";
}

}  // namespace

TEST_CASE("the shipped tables load, carry a reason on every row, and cover every compared stage") {
  for (const char* precision : {"official", "exact", "lowp"}) {
    CAPTURE(precision);
    const ToleranceTable t = ToleranceTable::load(default_tolerance_dir() / (std::string(precision) + ".json"));
    CHECK(t.precision() == precision);
    for (const ref::StageDef& s : ref::stages()) {
      if (!s.is_compared()) continue;  // x and cache/...: inputs
      CAPTURE(s.name);
      CHECK(t.has_row(s.name));
      const Tolerance& row = t.at(s.name);
      CHECK_FALSE(row.reason.empty());
      CHECK(row.rtol >= 0.0);
      if (!s.is_index() && precision != std::string("exact")) CHECK(row.max_cos_diff.has_value());
    }
    REQUIRE(t.default_row().has_value());
  }
  // official's bf16 stages allow at least one bf16 flip (2^-7 relative): tighter would fail a
  // correct producer whose accumulation lands on the other side of a rounding boundary.
  const ToleranceTable official = ToleranceTable::load(default_tolerance_dir() / "official.json");
  for (const char* bf16_stage :
       {"q_latent", "q", "indexer/weights", "indexer/scores", "attn/core", "attn/out_heads", "attn/wo_a", "out"}) {
    CHECK(official.at(bf16_stage).rtol >= 1.0 / 128);
  }
}

TEST_CASE("a policy without a file of its own gets lowp.json while exact and official get theirs") {
  CHECK(ToleranceTable::for_precision("official").precision() == "official");
  CHECK(ToleranceTable::for_precision("exact").precision() == "exact");
  CHECK(ToleranceTable::for_precision("nvfp4-indexer").precision() == "lowp");
  CHECK(ToleranceTable::for_precision("bf16").source().ends_with("lowp.json"));
  CHECK_THROWS_AS(ToleranceTable::for_precision("../official"), std::invalid_argument);
  // exact and official never fall back: a missing file is an error, not a looser table.
  const testing::ScratchDir empty("tolerance_empty");
  CHECK_THROWS_AS(ToleranceTable::for_precision("official", empty.path()), std::invalid_argument);
}

TEST_CASE("lookups: a dense stage without a row takes the default but an index-set stage never does") {
  const std::string text = std::string(R"({"precision": "p", "default": {"atol": 1, "rtol": 0, "reason": "d"},)") +
                           R"("stages": {"q": {"atol": 0, "rtol": 0.5, "reason": "q row"}}})";
  const ToleranceTable t = ToleranceTable::parse(text, "inline");
  CHECK(t.at("q").rtol == 0.5);
  CHECK(t.at("kv").atol == 1.0);
  CHECK_THROWS_AS(t.at("indexer/topk"), std::out_of_range);
  CHECK_THROWS_AS(t.at("x"), std::invalid_argument);  // an input, not a compared stage
}

TEST_CASE("a malformed table is refused, naming the file and the key") {
  CHECK(refusal(table_with(std::string(R"("q": )") + kRow)).empty());  // the base case is valid

  std::string m = refusal("{\"precision\": \"bad\", \"stages\": {");
  CHECK(m.find("bad.json") != std::string::npos);
  CHECK(m.find("not valid JSON") != std::string::npos);

  m = refusal(table_with(R"("q": {"atol": 0, "rtol": 0.1})"));
  CHECK(m.find("bad.json: stages.q: missing \"reason\"") != std::string::npos);

  m = refusal(table_with(R"("q": {"atol": 0, "rtol": -0.1, "reason": "r"})"));
  CHECK(m.find("stages.q.rtol") != std::string::npos);
  CHECK(m.find(">= 0") != std::string::npos);

  m = refusal(table_with(R"("q": {"atol": 0, "rtol": 0.1, "max_cos_diff": -1, "reason": "r"})"));
  CHECK(m.find("stages.q.max_cos_diff") != std::string::npos);

  m = refusal(table_with(std::string(R"("attn/cor": )") + kRow));
  CHECK(m.find("stages.attn/cor") != std::string::npos);
  CHECK(m.find("not a compared stage") != std::string::npos);

  m = refusal(table_with(std::string(R"("x": )") + kRow));  // x is the input, never compared
  CHECK(m.find("stages.x") != std::string::npos);

  m = refusal(table_with(R"("q": {"atol": 0, "rtoll": 0.1, "rtol": 0.1, "reason": "r"})"));
  CHECK(m.find("stages.q.rtoll") != std::string::npos);

  m = refusal(table_with(R"("q": {"rtol": 0.1, "reason": "r"})"));
  CHECK(m.find("missing \"atol\"") != std::string::npos);

  m = refusal(table_with(R"("q": {"atol": "0", "rtol": 0.1, "reason": "r"})"));
  CHECK(m.find("stages.q.atol") != std::string::npos);

  m = refusal(table_with(R"("q": {"atol": 0, "rtol": 0.1, "reason": ""})"));
  CHECK(m.find("stages.q.reason") != std::string::npos);

  m = refusal(table_with(R"("indexer/topk": {"atol": 0, "rtol": 0.1, "atol_rms": 1, "reason": "r"})"));
  CHECK(m.find("stages.indexer/topk.atol_rms") != std::string::npos);

  m = refusal(R"({"stages": {}})");
  CHECK(m.find("bad.json: precision") != std::string::npos);

  m = refusal(R"({"precision": "bad"})");
  CHECK(m.find("bad.json: stages") != std::string::npos);

  m = refusal(R"({"precision": "bad", "stages": {}, "defualt": {}})");
  CHECK(m.find("bad.json: defualt") != std::string::npos);

  m = refusal(R"({"precision": "bad", "stages": {}, "default": {"atol": 0, "rtol": 0}})");
  CHECK(m.find("bad.json: default: missing \"reason\"") != std::string::npos);
}

TEST_CASE("load: a missing file and a precision that is not the file's name are refused by file name") {
  const testing::ScratchDir scratch("tolerance_load");
  const std::filesystem::path& dir = scratch.path();
  const std::filesystem::path missing = dir / "nope.json";
  try {
    ToleranceTable::load(missing);
    FAIL("loading a missing file did not throw");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find(missing.string()) != std::string::npos);
  }
  const std::filesystem::path misnamed = dir / "official.json";
  std::ofstream(misnamed) << table_with(std::string(R"("q": )") + kRow);  // says "bad"
  try {
    ToleranceTable::load(misnamed);
    FAIL("a precision that differs from the file name did not throw");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find(misnamed.string() + ": precision") != std::string::npos);
  }
}

TEST_CASE("rounded stages carry the bound of their value before the final rounding") {
  const dsv4::ref::ModelConfig flash = dsv4::ref::ModelConfig::flash();
  for (const char* precision : {"official", "lowp"}) {
    CAPTURE(precision);
    const ToleranceTable t = ToleranceTable::load(default_tolerance_dir() / (std::string(precision) + ".json"));
    for (const dsv4::ref::StageDef& s : dsv4::ref::stages()) {
      if (!s.is_compared() || s.is_index()) continue;
      CAPTURE(s.name);
      const std::optional<RoundingFormat> grid = final_rounding(s.name, dsv4::ref::PrecisionPolicy::official(), flash);
      const Tolerance& row = t.at(s.name);
      CHECK(row.pre_rounding.has_value() == grid.has_value());
      if (!row.pre_rounding) continue;
      CHECK_FALSE(row.pre_rounding->reason.empty());
      // The bound before the rounding is tighter than the envelope after it.
      CHECK(row.pre_rounding->rtol < row.rtol);
      CHECK(row.pre_rounding->atol_rms <= row.atol_rms);
      // A bf16 tail bound exactly where the row ends in bf16 dims after its blocks.
      CHECK(row.pre_rounding_tail.has_value() == (grid->block && grid->block_dims > 0));
    }
    // A stage without a row of its own gets the loosest bf16 row, never an FP8-sized one.
    REQUIRE(t.default_row().has_value());
    CHECK(t.default_row()->rtol == t.at("q").rtol);
    CHECK(t.default_row()->atol_rms == t.at("q").atol_rms);
  }
}

TEST_CASE("pre_rounding bounds are parsed, and malformed ones refused by key") {
  const std::string row =
      R"({"atol": 0, "rtol": 0.1, "pre_rounding": {"atol_rms": 0.25, "rtol": 0.125, "reason": "p"},)"
      R"( "pre_rounding_tail": {"atol": 0.5, "reason": "t"}, "reason": "r"})";
  const ToleranceTable t = ToleranceTable::parse(table_with(R"("kv": )" + row), "inline");
  const Tolerance& kv = t.at("kv");
  REQUIRE(kv.pre_rounding.has_value());
  CHECK(kv.pre_rounding->atol == 0);
  CHECK(kv.pre_rounding->atol_rms == 0.25);
  CHECK(kv.pre_rounding->rtol == 0.125);
  CHECK(kv.pre_rounding->reason == "p");
  REQUIRE(kv.pre_rounding_tail.has_value());
  CHECK(kv.pre_rounding_tail->atol == 0.5);

  std::string m = refusal(table_with(R"("q": {"atol": 0, "rtol": 0.1, "pre_rounding": {"rtol": 0.1}, "reason": "r"})"));
  CHECK(m.find("stages.q.pre_rounding: missing \"reason\"") != std::string::npos);
  m = refusal(
      table_with(R"("q": {"atol": 0, "rtol": 0.1, "pre_rounding": {"rtol": -1, "reason": "x"}, "reason": "r"})"));
  CHECK(m.find("stages.q.pre_rounding.rtol") != std::string::npos);
  m = refusal(table_with(
      R"("q": {"atol": 0, "rtol": 0.1, "pre_rounding": {"max_cos_diff": 1, "reason": "x"}, "reason": "r"})"));
  CHECK(m.find("stages.q.pre_rounding.max_cos_diff: unknown key") != std::string::npos);
  m = refusal(table_with(R"("q": {"atol": 0, "rtol": 0.1, "pre_rounding_tail": {"reason": "x"}, "reason": "r"})"));
  CHECK(m.find("stages.q.pre_rounding_tail: needs \"pre_rounding\"") != std::string::npos);
  m = refusal(table_with(R"("q": {"atol": 0, "rtol": 0.1, "pre_rounding": 3, "reason": "r"})"));
  CHECK(m.find("stages.q.pre_rounding: must be an object") != std::string::npos);
  m = refusal(
      table_with(R"("indexer/topk": {"atol": 0, "rtol": 0.1, "pre_rounding": {"reason": "x"}, "reason": "r"})"));
  CHECK(m.find("stages.indexer/topk.pre_rounding") != std::string::npos);
}
