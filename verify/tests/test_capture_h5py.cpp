// A capture written by h5py (write_h5py_capture.py: gzip+shuffle chunks, float64 and float32
// values, int64 indices, fixed- and variable-length string attributes, unknown extras) reads back
// with every value where the script's formula put it; a filter libhdf5 lacks (lzf) is named.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "reference/stage_registry.h"
#include "synthetic_capture.h"
#include "verify/capture/reader.h"
#include "verify/capture/tensor_convert.h"
#include "verify/capture/weight_names.h"

using namespace dsv4::verify;
namespace ref = dsv4::ref;
using dsv4::verify::testing::TempFile;

namespace {

void run_script(const char* mode, const std::string& out) {
  const std::string command = fmt::format("'{}' '{}' {} '{}'", DSV4_PYTHON, DSV4_H5PY_SCRIPT, mode, out);
  REQUIRE_MESSAGE(std::system(command.c_str()) == 0, "failed: " << command);
}

// The script's value(): element i of dataset `name` is ((7 i + salt) mod 101)/16 - 3, salt = the
// byte sum of the name mod 101; "score" datasets hold -inf at every 5th element.
int64_t salt(const std::string& name) {
  int64_t sum = 0;
  for (unsigned char c : name) sum += c;
  return sum % 101;
}
std::vector<double> expected_values(const std::string& name, int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>((7 * i + salt(name)) % 101) / 16.0 - 3.0;
  if (name.find("score") != std::string::npos)
    for (int64_t i = 0; i < n; i += 5) v[i] = -INFINITY;
  return v;
}
std::vector<double> expected_indices(const std::string& name, int64_t n, int64_t rows) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>((5 * i + salt(name)) % (rows + 1) - 1);
  return v;
}

}  // namespace

TEST_CASE("h5py capture: every attribute and value as the script wrote it") {
  TempFile f("h5py");
  run_script("valid", f.path);
  const Capture c = read_capture(f.path);

  CHECK(c.producer == "h5py fixture");  // fixed-length ASCII attribute
  CHECK(c.model == "micro");            // variable-length UTF-8
  CHECK(c.precision == "official");     // fixed-length UTF-8
  const dsv4::ref::ModelConfig micro = testing::micro_config();
  CHECK(c.config.dim == micro.dim);  // stored as int32
  CHECK(c.config.index_head_dim == micro.index_head_dim);
  CHECK(c.config.norm_eps == 1e-6);
  CHECK(c.config.compress_rope_theta == 160000.0);
  CHECK(c.config.compress_ratios == std::vector<int>{0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0});
  REQUIRE(c.layers.size() == 2);
  CHECK(c.layers.at(3).compress_ratio == 4);
  CHECK(c.layers.at(10).compress_ratio == 0);
  CHECK(c.notes == std::vector<std::string>{"ignored unknown attribute 'captured_at' of /",
                                            "ignored unknown dataset /layers/10/calls/0/debug_extra",
                                            "ignored unknown dataset /layers/10/calls/1/debug_extra",
                                            "ignored unknown dataset /layers/3/calls/0/debug_extra",
                                            "ignored unknown dataset /layers/3/calls/1/debug_extra"});

  int datasets = 0;
  for (const auto& [index, layer] : c.layers) {
    CAPTURE(index);
    for (const WeightName& w : weight_names()) {
      if (!ref::in_scope(w.scope, layer.compress_ratio)) continue;
      const std::string name = "weights/" + std::string(w.name);
      CAPTURE(name);
      visit_weight(layer.weights, w.name,
                   [&](const auto& m) { CHECK(weight_tensor(m).values == expected_values(name, m.size())); });
      ++datasets;
    }
    CHECK(layer.weight_linear_kinds.at("wq_b") == "fp8");
    CHECK(layer.weight_linear_kinds.at("wo_a") == "bf16");  // fixed-length bytes attribute
    REQUIRE(layer.calls.size() == 2);
    for (const CallCapture& call : layer.calls) {
      CHECK(call.batch == 2);
      ref::CallGeometry g{&c.config, layer.compress_ratio, 2, call.seqlen, call.start_pos};
      int stages = 0;
      for (const ref::StageDef& s : ref::stages()) stages += ref::in_scope(s.scope, layer.compress_ratio);
      CHECK(call.stages.size() == static_cast<std::size_t>(stages));
      for (const auto& [stage, t] : call.stages) {
        const std::string name = fmt::format("calls/{}/{}", call.index, stage);
        CAPTURE(name);
        CHECK(t.shape == ref::find_stage(stage)->shape(g));
        if (t.is_index) {
          CHECK(t.values == expected_indices(name, t.numel(), g.kv_rows()));
          CHECK(t.dtype == "int64");
        } else {
          std::vector<double> expected = expected_values(name, t.numel());
          for (std::size_t i = 0; i < expected.size(); ++i) {
            if (t.values[i] != expected[i]) {
              FAIL_CHECK("element " << i << ": " << t.values[i] << " != " << expected[i]);
              break;
            }
          }
          const bool bf16 = stage == "x" || stage == "q" || stage == "kv" || stage == "out";
          CHECK(t.dtype == (bf16 ? "bfloat16" : "float32"));
        }
        ++datasets;
      }
    }
  }
  // 18 + 8 weights; 26 + 10 stages per call, 2 calls.
  CHECK(datasets == 18 + 8 + 2 * (26 + 10));
}

TEST_CASE("h5py capture: a dataset compressed with a filter libhdf5 lacks is named with the filter") {
  TempFile f("h5py-lzf");
  run_script("lzf", f.path);
  try {
    read_capture(f.path);
    FAIL("lzf-compressed x was read");
  } catch (const CaptureError& e) {
    CHECK(e.object() == "/layers/10/calls/0/x");
    CHECK(e.found() == "filter 32000 'lzf', which is not available");
  }
}
