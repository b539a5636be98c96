// Bad input: every kind of broken capture gives a CaptureError whose one-line message names the
// file, the object, what was expected and what was found. The broken files are made at test time
// from a valid synthetic capture, by changing the capture before writing it or the file after.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <hdf5.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "reference/stage_registry.h"
#include "synthetic_capture.h"
#include "verify/capture/config_attrs.h"
#include "verify/capture/dataset_checks.h"
#include "verify/capture/reader.h"
#include "verify/capture/tensor_convert.h"
#include "verify/capture/weight_names.h"
#include "verify/capture/writer.h"
#include "verify/hdf5/file.h"

using namespace dsv4::verify;
namespace ref = dsv4::ref;
using dsv4::verify::testing::TempFile;

namespace {

using FileEdit = std::function<void(hdf5::File&)>;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The CaptureError reading `path` throws; checks the message's form.
CaptureError read_error(const std::string& path, const ReadOptions& options = {}) {
  try {
    read_capture(path, options);
  } catch (const CaptureError& e) {
    CHECK(e.file() == path);
    CHECK(std::string(e.what()) == path + ": " + e.object() + ": expected " + e.expected() + ", found " + e.found());
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
    return e;
  }
  FAIL("read_capture accepted a broken capture: " << path);
  return CaptureError("", "", "", "");
}

// Writes c, applies `edit` to the file, and returns the error reading it.
CaptureError broken(const Capture& c, const FileEdit& edit = {}, const ReadOptions& options = {}) {
  TempFile f("broken");
  write_capture(f.path, c);
  if (edit) {
    hdf5::File file = hdf5::File::open(f.path, hdf5::File::Mode::read_write);
    edit(file);
  }
  return read_error(f.path, options);
}

// One CSA layer (index 0), batch 2: a prefill of 10 then a decode at 10.
Capture csa() { return testing::synthetic_capture({4}, {{0, 10}, {10, 1}}, 2, 7); }
CallCapture& call(Capture& c, int k) { return c.layers.at(0).calls[k]; }

// Replaces dataset `path` by one of another type, same shape.
template <typename T>
void retype(hdf5::File& file, const std::string& path) {
  std::vector<int64_t> shape = file.dataset(path).shape();
  int64_t n = file.dataset(path).element_count();
  file.remove(path);
  file.write<T>(path, shape, std::vector<T>(static_cast<std::size_t>(n), T{1}));
}

// A dataset of an HDF5 type the layer does not write (strings, opaque bf16 as ml_dtypes stores it).
void replace_with_raw_type(hdf5::File& file, const std::string& path, hid_t type) {
  std::vector<int64_t> shape = file.dataset(path).shape();
  file.remove(path);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t d = H5Dcreate2(file.id(), path.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(d >= 0);
  H5Dclose(d);
  H5Sclose(space);
}

}  // namespace

TEST_CASE("errors: not a capture file") {
  CaptureError e = read_error("/nonexistent/capture.h5");
  CHECK(e.object() == "/");
  CHECK(e.found() == "no such file");

  TempFile text("text");
  std::ofstream(text.path) << "{\"format\": \"dsv4-capture\"}\n";
  e = read_error(text.path);
  CHECK(e.expected() == "an HDF5 file");
  CHECK(e.found() == "a file without the HDF5 signature");

  TempFile empty("empty");
  std::ofstream(empty.path).flush();
  CHECK(read_error(empty.path).found() == "a file without the HDF5 signature");

  TempFile truncated("truncated");
  write_capture(truncated.path, csa());
  std::filesystem::resize_file(truncated.path, std::filesystem::file_size(truncated.path) / 3);
  e = read_error(truncated.path);
  CHECK(e.object() == "/");
  CHECK(e.expected() == "a readable HDF5 file");
  CHECK(contains(e.found(), "truncated"));

  TempFile other("other-hdf5");
  { hdf5::File::create(other.path).write<float>("data", {2}, std::vector<float>{1, 2}); }
  e = read_error(other.path);
  CHECK(e.object() == "/: attribute 'format'");
  CHECK(e.expected() == "'dsv4-capture' (a capture file)");
  CHECK(e.found() == "nothing");
}

TEST_CASE("errors: format and format_version") {
  CaptureError e = broken(csa(), [](hdf5::File& f) { f.set_attribute("format", std::string("dsv4-capture-v2")); });
  CHECK(e.object() == "/: attribute 'format'");
  CHECK(e.found() == "'dsv4-capture-v2'");

  Capture v2 = csa();
  v2.format_version = 2;
  e = broken(v2);
  CHECK(e.object() == "/: attribute 'format_version'");
  CHECK(e.expected() == "1 (the version this reader knows)");
  CHECK(e.found() == "2");

  e = broken(csa(), [](hdf5::File& f) { f.set_attribute("format_version", std::string("1")); });
  CHECK(e.object() == "/: attribute 'format_version'");
  CHECK(e.found() == "'1'");
}

TEST_CASE("errors: probs_convention is deepseek or any") {
  Capture c = csa();
  c.probs_convention = "DeepSeek";
  CaptureError e = broken(c);
  CHECK(e.object() == "/: attribute 'probs_convention'");
  CHECK(e.expected() == "'deepseek' or 'any'");
  CHECK(e.found() == "'DeepSeek'");
  // Optional: written when set, read back; absent reads as "".
  for (const char* value : {"deepseek", "any", ""}) {
    TempFile f("convention");
    c.probs_convention = value;
    write_capture(f.path, c);
    CHECK(read_capture(f.path).probs_convention == value);
  }
}

TEST_CASE("errors: every /config attribute is required, with the right type") {
  for (const ConfigIntAttr& a : kConfigIntAttrs) {
    CAPTURE(a.name);
    CaptureError e = broken(csa(), [&](hdf5::File& f) { f.group("config").remove_attribute(std::string(a.name)); });
    CHECK(e.object() == fmt::format("/config: attribute '{}'", a.name));
    CHECK(contains(e.expected(), "an integer"));
    CHECK(e.found() == "nothing");
  }
  for (const ConfigRealAttr& a : kConfigRealAttrs) {
    CAPTURE(a.name);
    CaptureError e = broken(csa(), [&](hdf5::File& f) { f.group("config").remove_attribute(std::string(a.name)); });
    CHECK(e.object() == fmt::format("/config: attribute '{}'", a.name));
    CHECK(e.expected() == "a finite number");
  }
  CaptureError e = broken(csa(), [](hdf5::File& f) { f.group("config").remove_attribute("precision"); });
  CHECK(e.object() == "/config: attribute 'precision'");
  CHECK(e.expected() == "a string");

  e = broken(csa(), [](hdf5::File& f) { f.group("config").set_attribute("dim", std::string("128")); });
  CHECK(e.object() == "/config: attribute 'dim'");
  CHECK(e.found() == "'128'");
  e = broken(csa(), [](hdf5::File& f) { f.group("config").set_attribute("dim", 128.5); });
  CHECK(e.found() == "128.5");
  e = broken(csa(), [](hdf5::File& f) { f.group("config").set_attribute("norm_eps", std::string("1e-6")); });
  CHECK(e.object() == "/config: attribute 'norm_eps'");
  e = broken(csa(), [](hdf5::File& f) { f.group("config").set_attribute("norm_eps", NAN); });
  CHECK(e.found() == "nan");
  e = broken(csa(), [](hdf5::File& f) { f.group("config").set_attribute("precision", int64_t{1}); });
  CHECK(e.found() == "1");
  e = broken(csa(), [](hdf5::File& f) { f.remove("config"); });
  CHECK(e.object() == "/config");
  CHECK(e.expected() == "a group");
  CHECK(e.found() == "nothing");

  // An integer stored as a float (as a JSON round trip may leave it) is accepted.
  TempFile f("float-int");
  write_capture(f.path, csa());
  { hdf5::File::open(f.path, hdf5::File::Mode::read_write).group("config").set_attribute("dim", 128.0); }
  CHECK(read_capture(f.path).config.dim == 128);
}

TEST_CASE("errors: a configuration the oracle cannot run, or that contradicts the weights") {
  CaptureError e = broken(csa(), [](hdf5::File& f) { f.group("config").set_attribute("dim", int64_t{100}); });
  CHECK(e.object() == "/config");
  CHECK(e.expected() == "a valid model configuration");
  CHECK(contains(e.found(), "dim = 100"));

  // dim 256 is valid but the weights were made for 128: the first weight reading dim says so.
  e = broken(csa(), [](hdf5::File& f) { f.group("config").set_attribute("dim", int64_t{256}); });
  CHECK(e.object() == "/layers/0/weights/wq_a");
  CHECK(e.expected() == "shape [q_lora_rank,dim] = [128,256]");
  CHECK(e.found() == "[128,128]");
}

TEST_CASE("errors: layer and call attributes") {
  CaptureError e = broken(csa(), [](hdf5::File& f) { f.group("layers/0").remove_attribute("compress_ratio"); });
  CHECK(e.object() == "/layers/0: attribute 'compress_ratio'");
  CHECK(e.found() == "nothing");
  e = broken(csa(), [](hdf5::File& f) { f.group("layers/0").set_attribute("compress_ratio", int64_t{3}); });
  CHECK(e.expected() == "0, 4 or 128");
  CHECK(e.found() == "3");
  e = broken(csa(), [](hdf5::File& f) { f.group("layers/0").set_attribute("compress_ratio", int64_t{256}); });
  CHECK(e.found() == "256");

  for (const char* attr : {"start_pos", "seqlen"}) {
    CAPTURE(attr);
    e = broken(csa(), [&](hdf5::File& f) { f.group("layers/0/calls/1").remove_attribute(attr); });
    CHECK(e.object() == fmt::format("/layers/0/calls/1: attribute '{}'", attr));
    CHECK(e.found() == "nothing");
  }
  // A 0-length call, by its attribute or by its x.
  e = broken(csa(), [](hdf5::File& f) { f.group("layers/0/calls/0").set_attribute("seqlen", int64_t{0}); });
  CHECK(e.object() == "/layers/0/calls/0: attribute 'seqlen'");
  CHECK(e.expected() == "an integer in [1, 256]");
  CHECK(e.found() == "0");
  Capture empty_x = csa();
  Tensor& x = call(empty_x, 0).stages.at("x");
  x.shape[1] = 0;
  x.values.clear();
  e = broken(empty_x);
  CHECK(e.object() == "/layers/0/calls/0/x");
  CHECK(e.expected() == "shape [b,s,dim] = [2,10,128]");
  CHECK(e.found() == "[2,0,128]");

  e = broken(csa(), [](hdf5::File& f) {
    f.group("layers/0/calls/1").set_attribute("start_pos", int64_t{250});
    f.group("layers/0/calls/1").set_attribute("seqlen", int64_t{10});
  });
  CHECK(e.object() == "/layers/0/calls/1: attribute 'seqlen'");
  CHECK(e.expected() == "start_pos + seqlen <= max_seq_len = 256");
  CHECK(e.found() == "250 + 10 = 260");

  // Two-element attribute.
  e = broken(csa(), [](hdf5::File& f) {
    f.group("layers/0").remove_attribute("compress_ratio");
    hsize_t two = 2;
    hid_t space = H5Screate_simple(1, &two, nullptr);
    hid_t a = H5Acreate2(f.group("layers/0").id(), "compress_ratio", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    int64_t v[2] = {4, 4};
    H5Awrite(a, H5T_NATIVE_INT64, v);
    H5Aclose(a);
    H5Sclose(space);
  });
  CHECK(e.object() == "/layers/0: attribute 'compress_ratio'");
  CHECK(e.expected() == "a single value");
  CHECK(e.found() == "2 values of type int64");
}

TEST_CASE("errors: layers and calls that are missing or misnumbered") {
  CaptureError e = broken(csa(), [](hdf5::File& f) { f.remove("layers/0"); });
  CHECK(e.object() == "/layers");
  CHECK(e.found() == "none");
  e = broken(csa(), [](hdf5::File& f) {
    f.remove("layers/0/calls/0");
    f.remove("layers/0/calls/1");
  });
  CHECK(e.object() == "/layers/0/calls");
  CHECK(e.found() == "none");
  e = broken(testing::synthetic_capture({0}, {{0, 4}, {4, 1}, {5, 1}}, 1, 8),
             [](hdf5::File& f) { f.remove("layers/0/calls/1"); });
  CHECK(e.object() == "/layers/0/calls");
  CHECK(e.expected() == "calls numbered 0..1");
  CHECK(e.found() == "calls 0, 2");
  e = broken(csa(),
             [](hdf5::File& f) { H5Lmove(f.id(), "layers/0", f.id(), "layers/70000", H5P_DEFAULT, H5P_DEFAULT); });
  CHECK(e.object() == "/layers/70000");
  CHECK(e.expected() == "a layer index below 65536");
  e = broken(csa(), [](hdf5::File& f) { f.remove("layers/0/weights"); });
  CHECK(e.object() == "/layers/0/weights");
  CHECK(e.found() == "nothing");
}

TEST_CASE("errors: batch must be the same in every call of a layer") {
  Capture c = csa();
  call(c, 1) = testing::synthetic_capture({4}, {{0, 10}, {10, 1}}, 3, 9).layers.at(0).calls[1];
  CaptureError e = broken(c);
  CHECK(e.object() == "/layers/0/calls/1/x");
  CHECK(e.expected() == "batch b = 2 as in call 0 (a layer's calls serve one batch)");
  CHECK(e.found() == "b = 3");
}

TEST_CASE("errors: missing x, x of the wrong kind, and every required weight") {
  CaptureError e = broken(csa(), [](hdf5::File& f) { f.remove("layers/0/calls/1/x"); });
  CHECK(e.object() == "/layers/0/calls/1/x");
  CHECK(e.expected() == "a dataset [b,s,dim] = [b,1,128] with b >= 1 (every call has x)");
  CHECK(e.found() == "nothing");
  e = broken(csa(), [](hdf5::File& f) {
    f.remove("layers/0/calls/1/x");
    f.create_group("layers/0/calls/1/x");
  });
  CHECK(e.found() == "a group");
  e = broken(csa(), [](hdf5::File& f) {
    f.remove("layers/0/calls/1/x");
    H5Lcreate_soft("/layers/0/calls/0/x", f.id(), "layers/0/calls/1/x", H5P_DEFAULT, H5P_DEFAULT);
  });
  CHECK(contains(e.found(), "soft or external link"));
  e = broken(csa(), [](hdf5::File& f) {
    f.remove("layers/0/calls/1/q");
    H5Lcreate_external("other.h5", "/q", f.id(), "layers/0/calls/1/q", H5P_DEFAULT, H5P_DEFAULT);
  });
  CHECK(e.object() == "/layers/0/calls/1/q");
  CHECK(contains(e.found(), "soft or external link"));
  e = broken(csa(), [](hdf5::File& f) {
    f.remove("layers/0/calls/1/indexer");
    f.write<float>("layers/0/calls/1/indexer", {1}, std::vector<float>{1});
  });
  CHECK(e.object() == "/layers/0/calls/1/indexer");
  CHECK(e.expected() == "a group");
  CHECK(e.found() == "a dataset");

  int required = 0;
  for (const WeightName& w : weight_names()) {
    CAPTURE(w.name);
    ++required;
    e = broken(csa(), [&](hdf5::File& f) { f.remove("layers/0/weights/" + std::string(w.name)); });
    CHECK(e.object() == "/layers/0/weights/" + std::string(w.name));
    CHECK(contains(e.expected(), std::string(w.shape_doc)));
    CHECK(contains(e.expected(), "required for compress_ratio 4"));
    CHECK(e.found() == "nothing");
  }
  CHECK(required == 18);
}

TEST_CASE("errors: weights and stages that the layer's ratio does not have") {
  CaptureError e = broken(testing::synthetic_capture({0}, {{0, 4}}, 1, 10), [](hdf5::File& f) {
    f.write<float>("layers/0/weights/compressor/norm", {128}, std::vector<float>(128, 1.0f));
  });
  CHECK(e.object() == "/layers/0/weights/compressor/norm");
  CHECK(e.expected() ==
        "no such dataset (weights/compressor/norm belongs to compress_ratio 4 or 128 only; this layer has "
        "compress_ratio 0)");
  CHECK(e.found() == "a dataset");

  Capture hca = testing::synthetic_capture({128}, {{0, 4}}, 1, 11);
  Capture with_indexer = csa();
  call(hca, 0).stages.emplace("indexer/topk", call(with_indexer, 0).stage("indexer/topk"));
  e = broken(hca);
  CHECK(e.object() == "/layers/0/calls/0/indexer/topk");
  CHECK(contains(e.expected(), "belongs to compress_ratio 4 only; this layer has compress_ratio 128"));
}

TEST_CASE("errors: every stage and every weight is checked against its shape") {
  int stages = 0;
  for (const ref::StageDef& s : ref::stages()) {
    CAPTURE(s.name);
    ++stages;
    Capture c = csa();
    Tensor& t = call(c, 1).stages.at(std::string(s.name));
    std::vector<int64_t> good = t.shape;
    t.shape.back() += 1;
    t.values.assign(static_cast<std::size_t>(t.numel()), 0.0);
    CaptureError e = broken(c);
    CHECK(e.object() == "/layers/0/calls/1/" + std::string(s.name));
    CHECK(e.expected() == fmt::format("shape {} = {}", s.shape_doc, shape_text(good)));
    CHECK(e.found() == shape_text(t.shape));
  }
  CHECK(stages == 26);
  for (const WeightName& w : weight_names()) {
    CAPTURE(w.name);
    Capture c = csa();
    visit_weight(c.layers.at(0).weights, w.name, [](auto& m) { m.conservativeResize(m.rows() + 1, m.cols()); });
    CaptureError e = broken(c);
    CHECK(e.object() == "/layers/0/weights/" + std::string(w.name));
    CHECK(contains(e.expected(), "shape " + std::string(w.shape_doc)));
  }
  // A rank error too: q stored as [b, s, H*d].
  Capture flat = csa();
  Tensor& q = call(flat, 0).stages.at("q");
  q.shape = {2, 10, 256};
  CaptureError e = broken(flat);
  CHECK(e.expected() == "shape [b,s,H,d] = [2,10,2,128]");
  CHECK(e.found() == "[2,10,256]");
}

TEST_CASE("errors: wrong value types") {
  CaptureError e = broken(csa(), [](hdf5::File& f) { retype<int32_t>(f, "layers/0/calls/0/x"); });
  CHECK(e.object() == "/layers/0/calls/0/x");
  CHECK(e.expected() == "a floating-point dataset (float32)");
  CHECK(e.found() == "int32");
  e = broken(csa(), [](hdf5::File& f) { retype<int64_t>(f, "layers/0/weights/wkv"); });
  CHECK(e.object() == "/layers/0/weights/wkv");
  CHECK(e.found() == "int64");
  e = broken(csa(), [](hdf5::File& f) { retype<float>(f, "layers/0/calls/0/topk_idxs"); });
  CHECK(e.object() == "/layers/0/calls/0/topk_idxs");
  CHECK(e.expected() == "an integer dataset (int32 or int64 indices)");
  CHECK(e.found() == "float32");
  e = broken(csa(), [](hdf5::File& f) {
    hid_t text = H5Tcopy(H5T_C_S1);
    H5Tset_size(text, 8);
    replace_with_raw_type(f, "layers/0/calls/0/q", text);
    H5Tclose(text);
  });
  CHECK(e.object() == "/layers/0/calls/0/q");
  CHECK(e.found() == "string (8 bytes)");
  e = broken(csa(), [](hdf5::File& f) {
    hid_t bf16 = H5Tcreate(H5T_OPAQUE, 2);  // how h5py stores ml_dtypes.bfloat16
    replace_with_raw_type(f, "layers/0/calls/0/out", bf16);
    H5Tclose(bf16);
  });
  CHECK(e.found() == "opaque (2 bytes) (store bfloat16 values as float32 with attr dtype = 'bfloat16')");

  // int64 indices and float64 / float16 values are fine.
  TempFile f("wide-types");
  write_capture(f.path, csa());
  {
    hdf5::File file = hdf5::File::open(f.path, hdf5::File::Mode::read_write);
    std::vector<int64_t> idx(2 * 10 * 10, -1);
    file.remove("layers/0/calls/0/topk_idxs");
    file.write<int64_t>("layers/0/calls/0/topk_idxs", {2, 10, 10}, idx);
    std::vector<double> x(2 * 10 * 128, 0.1);
    file.remove("layers/0/calls/0/x");
    file.write<double>("layers/0/calls/0/x", {2, 10, 128}, x);
  }
  Capture read = read_capture(f.path);
  CHECK(read.layers.at(0).calls[0].stage("topk_idxs").dtype == "int64");
  CHECK(read.layers.at(0).calls[0].stage("x").values[0] == 0.1);  // float64 kept exactly
}

TEST_CASE("errors: dtype and linear attributes") {
  CaptureError e =
      broken(csa(), [](hdf5::File& f) { f.dataset("layers/0/calls/0/q").set_attribute("dtype", std::string("fp16")); });
  CHECK(e.object() == "/layers/0/calls/0/q: attribute 'dtype'");
  CHECK(e.expected() == "one of bfloat16, float32, float8_e4m3fn, float16, float64");
  CHECK(e.found() == "'fp16'");
  e = broken(csa(), [](hdf5::File& f) {
    f.dataset("layers/0/calls/0/topk_idxs").set_attribute("dtype", std::string("float32"));
  });
  CHECK(e.expected() == "one of int32, int64");
  e = broken(csa(),
             [](hdf5::File& f) { f.dataset("layers/0/weights/wq_b").set_attribute("linear", std::string("int8")); });
  CHECK(e.object() == "/layers/0/weights/wq_b: attribute 'linear'");
  CHECK(e.found() == "'int8'");

  // Absent linear attributes read as the spec's kinds.
  TempFile f("no-linear");
  write_capture(f.path, csa());
  {
    hdf5::File::open(f.path, hdf5::File::Mode::read_write).dataset("layers/0/weights/wo_a").remove_attribute("linear");
  }
  CHECK(read_capture(f.path).layers.at(0).weight_linear_kinds.at("wo_a") == "bf16");
}

TEST_CASE("errors: NaN and infinities, allowed only as -inf in scores and state scores") {
  struct Poison {
    const char* stage;
    double value;
    const char* found;
  };
  // q [2,10,2,128]: flat element 3*256 + 5 of sequence 0 is token 3, head 0, dim 5.
  for (const Poison& p :
       {Poison{"x", NAN, "nan at [0,3,5] (1 such value)"}, Poison{"q", -INFINITY, "-inf at [0,3,0,5] (1 such value)"},
        Poison{"q_latent", INFINITY, "inf at [0,3,5] (1 such value)"},
        Poison{"cache/window_kv", NAN, "nan at [0,3,5] (1 such value)"}}) {
    CAPTURE(p.stage);
    Capture c = csa();
    Tensor& t = call(c, 0).stages.at(p.stage);
    t.values[3 * (t.shape.back() * (t.shape.size() == 4 ? t.shape[2] : 1)) + 5] = p.value;
    CaptureError e = broken(c);
    CHECK(e.object() == fmt::format("/layers/0/calls/0/{}", p.stage));
    CHECK(e.expected() == "finite values");
    CHECK(e.found() == p.found);
  }
  for (const char* stage : {"indexer/scores", "compressor/state_score", "cache/indexer_compressor_state_score"}) {
    CAPTURE(stage);
    for (double v : {double(INFINITY), double(NAN)}) {
      Capture c = csa();
      call(c, 0).stages.at(stage).values[1] = v;
      CaptureError e = broken(c);
      CHECK(e.object() == fmt::format("/layers/0/calls/0/{}", stage));
      CHECK(e.expected() == "finite values or -inf");
    }
  }
  Capture c = csa();
  c.layers.at(0).weights.attn_sink[1] = INFINITY;
  c.layers.at(0).weights.wq_b(0, 0) = NAN;
  c.layers.at(0).weights.wq_b(1, 1) = NAN;
  CaptureError e = broken(c);
  CHECK(e.object() == "/layers/0/weights/wq_b");  // weights are read in table order: wq_b before attn_sink
  CHECK(e.found() == "nan at [0,0] (2 such values)");
}

TEST_CASE("errors: indices outside the call's kv rows") {
  // Prefill of 10 at ratio 4: rows are 10 fresh kv + 2 entries = 12; decode at 10: ring 8 + 2 entries.
  struct Case {
    int call;
    const char* stage;
    double value;
    const char* expected;
  };
  for (const Case& k : {Case{0, "topk_idxs", 12, "-1 or an index in [0,12) (prefill: s + entries = 10 + 2)"},
                        Case{0, "topk_idxs", -2, "-1 or an index in [0,12) (prefill: s + entries = 10 + 2)"},
                        Case{0, "indexer/topk", 100, "-1 or an index in [0,12) (prefill: s + entries = 10 + 2)"},
                        Case{1, "topk_idxs", 10, "-1 or an index in [0,10) (decode: W + entries = 8 + 2)"},
                        Case{1, "indexer/topk", 1e10, "-1 or an index in [0,10) (decode: W + entries = 8 + 2)"}}) {
    CAPTURE(k.stage);
    CAPTURE(k.value);
    Capture c = csa();
    if (k.value == 1e10) {
      // Out of int32: written as int64 directly.
      TempFile f("index-int64");
      write_capture(f.path, c);
      {
        hdf5::File file = hdf5::File::open(f.path, hdf5::File::Mode::read_write);
        std::string path = fmt::format("layers/0/calls/{}/{}", k.call, k.stage);
        std::vector<int64_t> shape = file.dataset(path).shape();
        hdf5::Array<int64_t> old = file.dataset(path).read<int64_t>();
        old.values[0] = 10000000000LL;
        file.remove(path);
        file.write<int64_t>(path, shape, old.values);
      }
      CaptureError e = read_error(f.path);
      CHECK(e.expected() == k.expected);
      CHECK(contains(e.found(), "10000000000 at [0,0,0]"));
      continue;
    }
    call(c, k.call).stages.at(k.stage).values[5] = k.value;
    CaptureError e = broken(c);
    CHECK(e.object() == fmt::format("/layers/0/calls/{}/{}", k.call, k.stage));
    CHECK(e.expected() == k.expected);
    CHECK(contains(e.found(), fmt::format("{} at ", static_cast<int64_t>(k.value))));
  }
  // The edges are accepted: -1 and the last row.
  Capture c = csa();
  call(c, 0).stages.at("topk_idxs").values[0] = 11;
  call(c, 0).stages.at("topk_idxs").values[1] = -1;
  call(c, 1).stages.at("topk_idxs").values[0] = 9;
  TempFile f("index-edges");
  write_capture(f.path, c);
  CHECK_NOTHROW(read_capture(f.path));
}

TEST_CASE("errors: datasets larger than ReadOptions allows are refused before reading") {
  CaptureError e = broken(csa(), {}, ReadOptions{.max_dataset_elements = 1000});
  CHECK(e.object() == "/layers/0/weights/wq_a");
  CHECK(e.expected() == "at most 1000 elements (ReadOptions::max_dataset_elements)");
  CHECK(e.found() == "16384 elements");
}
