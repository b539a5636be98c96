// write_capture -> read_capture returns the same capture bit for bit (values on the float32 grid),
// compressed or not; the writer is atomic; conversions to the oracle's matrices put every element
// where an independent index formula says.
#include <doctest/doctest.h>
#include <hdf5.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "same_capture.h"
#include "synthetic_capture.h"
#include "verify/capture/reader.h"
#include "verify/capture/tensor_convert.h"
#include "verify/capture/writer.h"
#include "verify/hdf5/file.h"

using namespace dsv4::verify;
using dsv4::verify::testing::CallSpec;
using dsv4::verify::testing::check_same;
using dsv4::verify::testing::TempFile;

TEST_CASE("round trip: ratios 0, 4, 128 over prefill, decode and chunked calls, batch 2") {
  const Capture written = testing::synthetic_capture({0, 4, 128}, {{0, 10}, {10, 1}, {11, 6}}, 2, 1);
  TempFile f("roundtrip");
  write_capture(f.path, written);
  const Capture read = read_capture(f.path);
  CHECK(read.path == f.path);
  CHECK(read.notes.empty());
  check_same(written, read);
  // Every stage of every call is there, including empty ones (no entry completes in decode at 10).
  CHECK(read.layers.at(1).calls[1].stage("compressor/entries").shape == std::vector<int64_t>{2, 0, 128});
  CHECK(read.layers.at(1).calls[0].stages.size() == 26);
  CHECK(read.layers.at(0).calls[0].stages.size() == 10);  // the window-only stages
  CHECK(read.config.name == "micro");
}

TEST_CASE("round trip: an HCA layer whose calls complete entries, gzip-compressed file") {
  const Capture written = testing::synthetic_capture({128}, {{0, 130}, {130, 126}}, 1, 2);
  TempFile f("roundtrip-gzip");
  write_capture(f.path, written, {.compress = true});
  check_same(written, read_capture(f.path));
  // The datasets really are compressed.
  hdf5::File file = hdf5::File::open(f.path);
  hid_t plist = H5Dget_create_plist(file.dataset("layers/0/calls/0/q").id());
  CHECK(H5Pget_nfilters(plist) == 2);
  H5Pclose(plist);
  CHECK(read_capture(f.path).layers.at(0).calls[1].stage("compressor/entries").shape ==
        std::vector<int64_t>{1, 1, 128});
}

TEST_CASE("round trip: the -inf of masked scores and empty state slots survive, as does -0.0") {
  Capture c = testing::synthetic_capture({4}, {{0, 5}}, 1, 3);
  Tensor& scores = c.layers.at(0).calls[0].stages.at("indexer/scores");
  scores.values[0] = -INFINITY;
  scores.values[1] = -0.0;
  TempFile f("roundtrip-inf");
  write_capture(f.path, c);
  const Capture read = read_capture(f.path);
  const Tensor& back = read.layers.at(0).calls[0].stage("indexer/scores");
  CHECK(back.values[0] == -INFINITY);
  CHECK(std::signbit(back.values[1]));
}

TEST_CASE("writer: atomic, a failed write leaves the old file and no temporary") {
  TempFile f("atomic");
  std::ofstream(f.path) << "old contents";
  Capture c = testing::synthetic_capture({0}, {{0, 4}}, 1, 4);
  c.layers.at(0).calls[0].stages.at("topk_idxs").values[3] = 0.5;  // not an index: the writer refuses it
  CHECK_THROWS_AS(write_capture(f.path, c), std::invalid_argument);
  std::ifstream in(f.path);
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(contents == "old contents");
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(f.path).parent_path())) {
    CHECK(entry.path().string().find(f.path + ".tmp-") == std::string::npos);
  }
  CHECK_THROWS_AS(write_capture("/nonexistent/dir/c.h5", c), hdf5::Error);
}

TEST_CASE("reader notes: unknown members are ignored and listed, gaps between calls are noted") {
  Capture c = testing::synthetic_capture({0}, {{0, 4}, {9, 1}}, 1, 5);
  TempFile f("notes");
  write_capture(f.path, c);
  {
    hdf5::File file = hdf5::File::open(f.path, hdf5::File::Mode::read_write);
    file.write<float>("layers/0/calls/0/foo", {2}, std::vector<float>{1, 2});
    file.write<float>("layers/0/calls/0/attn/extra", {1}, std::vector<float>{1});
    file.create_group("layers/0/calls/0/debug");
    file.create_group("layers/notalayer");
    file.group("config").set_attribute("vocab_size", int64_t{129280});
  }
  const Capture read = read_capture(f.path);
  const std::vector<std::string> expected{
      "ignored unknown attribute 'vocab_size' of /config",
      "ignored unknown dataset /layers/0/calls/0/attn/extra",
      "ignored unknown group /layers/0/calls/0/debug",
      "ignored unknown dataset /layers/0/calls/0/foo",
      "layer 0 call 1 starts at position 9, not where call 0 ended (4): state does not carry over between them",
      "ignored unknown member /layers/notalayer",
  };
  CHECK(read.notes == expected);
  CHECK_FALSE(read.layers.at(0).calls[0].has("foo"));
}

TEST_CASE("tensor conversion: (b, s, H, d) <-> b matrices (s, H*d), element by element") {
  const int64_t b = 2, s = 3, H = 4, d = 5;
  Tensor q;
  q.shape = {b, s, H, d};
  for (int64_t i = 0; i < b * s * H * d; ++i) q.values.push_back(static_cast<double>(i) * 0.5 - 7);
  std::vector<dsv4::ref::Mat> mats = to_mats(q);
  REQUIRE(mats.size() == 2);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < s; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < d; ++j) CHECK(mats[bi](t, h * d + j) == q.values[((bi * s + t) * H + h) * d + j]);
  Tensor back = from_mats(mats, q.shape, "bfloat16");
  CHECK(back.values == q.values);
  CHECK(back.dtype == "bfloat16");
  CHECK_THROWS_AS(from_mats(mats, {b, s, H, d + 1}), std::invalid_argument);
  CHECK_THROWS_AS(from_mats(mats, {3, s, H, d}), std::invalid_argument);

  Tensor idx;
  idx.is_index = true;
  idx.shape = {1, 2, 3};
  idx.values = {-1, 0, 5, 7, -1, 2};
  std::vector<dsv4::ref::IndexMat> imats = to_index_mats(idx);
  CHECK(imats[0](0, 2) == 5);
  CHECK(imats[0](1, 0) == 7);
  Tensor idx_back = from_index_mats(imats, idx.shape);
  CHECK(idx_back.values == idx.values);
  CHECK(idx_back.is_index);
  idx.values[1] = 0.5;
  CHECK_THROWS_AS(to_index_mats(idx), std::invalid_argument);
}

TEST_CASE("tensor conversion: compressor states and weights") {
  Tensor kv, score;
  kv.shape = score.shape = {2, 8, 6};  // ratio 4 (coff 2): 8 rows, 2 * head dim 3
  for (int i = 0; i < 96; ++i) {
    kv.values.push_back(i);
    score.values.push_back(i % 3 == 0 ? -INFINITY : -i);
  }
  std::vector<dsv4::ref::CompressorState> states = to_compressor_states(kv, score, 4, 3);
  REQUIRE(states.size() == 2);
  CHECK(states[1].ratio == 4);
  CHECK(states[1].head_dim == 3);
  CHECK(states[1].kv(2, 4) == 48 + 2 * 6 + 4);
  CHECK(states[1].score(0, 0) == -INFINITY);
  CHECK_THROWS_AS(to_compressor_states(kv, score, 128, 3), std::invalid_argument);

  dsv4::ref::Mat m(2, 3);
  m << 1, 2, 3, 4, 5, 6;
  Tensor t = weight_tensor(m);
  CHECK(t.shape == std::vector<int64_t>{2, 3});
  CHECK(t.values == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(to_mat(t) == m);
  CHECK_THROWS_AS(to_vec(t), std::invalid_argument);
}
