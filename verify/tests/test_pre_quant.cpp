// The optional pre-quantization datasets (docs/capture-format.md "Pre-quantization values"): synth
// writes them for every quantized stage of the layer's ratio, they survive the file round trip,
// the reader checks them by their stage's row, the oracle's final rounding of the captured
// pre-quantization value is the captured stage bit for bit, and captures without them (every
// version-1 file before) stay valid.
#include <doctest/doctest.h>

#include <bit>
#include <cstring>
#include <filesystem>

#include "reference/pre_quant.h"
#include "reference/stage_registry.h"
#include "same_capture.h"
#include "synthetic_capture.h"
#include "verify/capture/capture_error.h"
#include "verify/capture/reader.h"
#include "verify/capture/tensor_convert.h"
#include "verify/capture/writer.h"
#include "verify/replay/synth.h"

using namespace dsv4::verify;
namespace ref = dsv4::ref;
using dsv4::verify::testing::same_matrix;
using dsv4::verify::testing::TempFile;

namespace {

Capture synth(bool pre_quant) {
  SynthOptions o;
  o.ratios = {0, 4, 128};
  o.calls = {13, 1, 1, 1};
  o.pre_quant = pre_quant;
  return synthesize_capture(o);
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape == b.shape && a.values.size() == b.values.size() &&
         (a.values.empty() || std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(double)) == 0);
}

}  // namespace

TEST_CASE("pre-quantization: synth writes one per quantized stage of the ratio, shaped and held as the stage") {
  const Capture with = synth(true), without = synth(false);
  for (const auto& [index, layer] : with.layers)
    for (const CallCapture& call : layer.calls) {
      for (const ref::PreQuantDef& d : ref::pre_quant_datasets()) {
        const ref::StageDef& s = ref::stage(d.stage);
        const std::string name(d.name);
        INFO(name, " layer ", index, " call ", call.index);
        REQUIRE(call.has(name) == ref::in_scope(s.scope, layer.compress_ratio));
        if (!call.has(name)) continue;
        CHECK(call.stage(name).shape == call.stage(std::string(s.name)).shape);
        CHECK(call.stage(name).dtype == "bfloat16");
        CHECK_FALSE(without.layers.at(index).calls.at(call.index).has(name));
      }
      // Writing them changes no stage dataset.
      for (const auto& [name, t] : without.layers.at(index).calls.at(call.index).stages)
        CHECK(same_values(t, call.stage(name)));
    }
}

TEST_CASE("pre-quantization: the oracle's final rounding of the captured value is the captured stage, bitwise") {
  const Capture c = synth(true);
  const ref::PrecisionPolicy official = ref::PrecisionPolicy::official();
  int checked = 0;
  for (const auto& [index, layer] : c.layers)
    for (const CallCapture& call : layer.calls)
      for (const ref::PreQuantDef& d : ref::pre_quant_datasets()) {
        const std::string name(d.name);
        if (!call.has(name)) continue;
        INFO(name, " layer ", index, " call ", call.index);
        const std::vector<ref::Mat> pre = to_mats(call.stage(name));
        const std::vector<ref::Mat> stage = to_mats(call.stage(std::string(ref::stage(d.stage).name)));
        for (size_t b = 0; b < pre.size(); ++b) {
          ref::Mat q = pre[b];
          d.quantize(q, c.config, official);
          CHECK(same_matrix(q, stage[b]));
          checked += q.rows() > 0;
        }
      }
  CHECK(checked > 10);
}

TEST_CASE("pre-quantization: write, read back bit for bit, a wrong shape or ratio is refused, naming the dataset") {
  const Capture c = synth(true);
  TempFile file("pre-quant");
  write_capture(file.path, c);
  const Capture back = read_capture(file.path);
  CHECK(back.notes.empty());
  for (const auto& [index, layer] : c.layers)
    for (const CallCapture& call : layer.calls)
      for (const auto& [name, t] : call.stages)
        CHECK(same_values(t, back.layers.at(index).calls.at(call.index).stage(name)));

  Capture bad = c;
  Tensor& t = bad.layers.at(1).calls.at(0).stages.at("pre_quant/indexer/q");
  t.shape.back() += 1;
  t.values.assign(static_cast<size_t>(t.numel()), 0.0);
  write_capture(file.path, bad);
  try {
    read_capture(file.path);
    FAIL("a pre_quant dataset of the wrong shape was accepted");
  } catch (const CaptureError& e) {
    CHECK(e.object() == "/layers/1/calls/0/pre_quant/indexer/q");
    CHECK(e.expected().find("[b,s,IH,ID]") != std::string::npos);
  }

  Capture wrong_ratio = c;
  wrong_ratio.layers.at(0).calls.at(0).stages.emplace("pre_quant/compressor/entries",
                                                      c.layers.at(1).calls.at(0).stage("pre_quant/compressor/entries"));
  write_capture(file.path, wrong_ratio);
  try {
    read_capture(file.path);
    FAIL("a compressor pre_quant dataset in a ratio-0 layer was accepted");
  } catch (const CaptureError& e) {
    CHECK(e.object() == "/layers/0/calls/0/pre_quant/compressor/entries");
    CHECK(e.expected().find("compress_ratio 4 or 128") != std::string::npos);
  }
}

TEST_CASE("pre-quantization: captures without them are valid version-1 files, the bundled ones among them") {
  TempFile file("no-pre-quant");
  write_capture(file.path, synth(false));
  CHECK(read_capture(file.path).notes.empty());
  for (const auto& entry : std::filesystem::directory_iterator(DSV4_CAPTURES_DIR)) {
    if (entry.path().extension() != ".h5") continue;
    CAPTURE(entry.path().string());
    const Capture bundled = read_capture(entry.path().string());
    CHECK(bundled.format_version == 1);
  }
}
