// read_capture_isolated: the capture the child read arrives bit for bit, the reader's errors arrive
// unchanged, and a read that runs too long or needs too much memory ends in a CaptureError naming
// the file while the caller lives on. The codec underneath refuses cut and corrupted streams.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "same_capture.h"
#include "scratch_dir.h"
#include "synthetic_capture.h"
#include "verify/capture/capture_codec.h"
#include "verify/capture/isolated_read.h"
#include "verify/capture/reader.h"
#include "verify/capture/writer.h"

using namespace dsv4::verify;
using dsv4::verify::testing::check_same;
using dsv4::verify::testing::ScratchDir;
using dsv4::verify::testing::TempFile;

namespace {

struct BufferSink : ByteSink {
  std::vector<char> bytes;
  void write(const void* data, std::size_t size) override {
    bytes.insert(bytes.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
  }
};

struct BufferSource : ByteSource {
  const std::vector<char>& bytes;
  std::size_t at = 0;
  explicit BufferSource(const std::vector<char>& b) : bytes(b) {}
  void read(void* data, std::size_t size) override {
    if (size > bytes.size() - at) throw std::runtime_error("end of buffer");
    std::memcpy(data, bytes.data() + at, size);
    at += size;
  }
};

Capture sample_capture() {
  Capture c = testing::synthetic_capture({0, 4, 128}, {{0, 10}, {10, 1}, {11, 6}}, 2, 5);
  c.path = "sample.h5";
  c.notes = {"ignored unknown member /extra", "a second note"};
  c.probs_convention = "deepseek";
  return c;
}

CaptureError isolated_error(const std::string& path, const std::optional<ReadLimits>& limits = std::nullopt) {
  try {
    read_capture_isolated(path, {}, limits);
  } catch (const CaptureError& e) {
    return e;
  }
  FAIL("read_capture_isolated(" << path << ") did not throw");
  return CaptureError("", "", "", "");
}

}  // namespace

TEST_CASE("capture codec: decode(encode(c)) is c bit for bit, and encoding empties the source") {
  const Capture original = sample_capture();
  Capture source = original;
  BufferSink sink;
  encode_capture(source, sink);
  for (const auto& [index, layer] : source.layers) {
    CHECK(layer.weights.wq_a.size() == 0);
    for (const CallCapture& call : layer.calls) {
      for (const auto& [name, tensor] : call.stages) CHECK(tensor.values.empty());
    }
  }
  BufferSource in(sink.bytes);
  const Capture decoded = decode_capture(in, int64_t{1} << 30);
  CHECK(in.at == sink.bytes.size());
  check_same(original, decoded);
  CHECK(decoded.path == original.path);
  CHECK(decoded.notes == original.notes);
  CHECK(decoded.config.name == original.config.name);
}

TEST_CASE("capture codec: a cut stream, a corrupted count or an oversized tensor is refused") {
  Capture c = sample_capture();
  BufferSink sink;
  encode_capture(c, sink);
  const std::vector<char> whole = sink.bytes;
  for (std::size_t cut : {std::size_t{0}, std::size_t{3}, std::size_t{100}, whole.size() / 2, whole.size() - 1}) {
    CAPTURE(cut);
    const std::vector<char> part(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(cut));
    BufferSource in(part);
    CHECK_THROWS_AS(decode_capture(in, int64_t{1} << 30), std::runtime_error);
  }
  // The path's length, the first count after the tag, claims 2^40 bytes: refused before allocating.
  std::vector<char> corrupted = whole;
  const uint64_t huge = uint64_t{1} << 40;
  std::memcpy(corrupted.data() + 4, &huge, sizeof huge);
  BufferSource in(corrupted);
  CHECK_THROWS_WITH_AS(decode_capture(in, int64_t{1} << 30), doctest::Contains("exceeds the bound"),
                       std::runtime_error);
  // Every tensor is larger than 10 elements.
  BufferSource small(whole);
  CHECK_THROWS_WITH_AS(decode_capture(small, 10), doctest::Contains("more than 10 elements"), std::runtime_error);
}

TEST_CASE("isolated read: the same capture as read_capture, for the bundled captures and a gzip file") {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(DSV4_CAPTURES_DIR)) {
    if (entry.path().extension() == ".h5") files.push_back(entry.path().string());
  }
  REQUIRE(files.size() >= 4);
  TempFile gzip("isolated-gzip");
  write_capture(gzip.path, testing::synthetic_capture({4}, {{0, 9}}, 1, 6), {.compress = true});
  files.push_back(gzip.path);
  for (const std::string& file : files) {
    CAPTURE(file);
    const Capture in_process = read_capture(file);
    const Capture isolated = read_capture_isolated(file);
    check_same(in_process, isolated);
    CHECK(isolated.path == in_process.path);
    CHECK(isolated.notes == in_process.notes);
  }
}

TEST_CASE("isolated read: the reader's errors arrive unchanged") {
  ScratchDir dir("isolated_errors");
  const std::string missing = (dir.path() / "missing.h5").string();
  TempFile truncated("isolated-truncated");
  write_capture(truncated.path, testing::synthetic_capture({0}, {{0, 4}}, 1, 7));
  std::filesystem::resize_file(truncated.path, 3000);
  for (const std::string& file : {missing, truncated.path}) {
    CAPTURE(file);
    std::string in_process;
    try {
      read_capture(file);
    } catch (const CaptureError& e) {
      in_process = e.what();
    }
    REQUIRE(!in_process.empty());
    const CaptureError isolated = isolated_error(file);
    CHECK(std::string(isolated.what()) == in_process);
    CHECK(isolated.file() == file);
  }
}

TEST_CASE("isolated read: a read past its time limit is stopped and reported") {
  // The DeepSeek capture (5 MB, every stage) takes far longer than 10 ms to open, validate and widen.
  const std::string file = std::string(DSV4_CAPTURES_DIR) + "/deepseek-official-tiny-p37-d5.h5";
  const auto start = std::chrono::steady_clock::now();
  const CaptureError e = isolated_error(file, ReadLimits{.seconds = 0.01, .memory_bytes = int64_t{1} << 30});
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(std::string(e.what()) == file +
                                     ": /: expected a read within 0.01 s (DSV4_READ_SECONDS sets the limit), "
                                     "found a read still going after 0.01 s, stopped");
  CHECK(elapsed >= 0.01);
  CHECK(elapsed < 5);  // stopped, not waited for
}

TEST_CASE("isolated read: a read that needs more memory than its limit ends in out of memory") {
  // 2 x 64 x 128 x 128 values per q dataset, read as doubles: far more than 1 MiB.
  TempFile big("isolated-big");
  write_capture(big.path, testing::synthetic_capture({0}, {{0, 64}}, 2, 8));
#if defined(__SANITIZE_ADDRESS__)
  // A sanitizer build sets no address-space limit (isolated_read.cpp): the read goes through.
  CHECK(
      read_capture_isolated(big.path, {}, ReadLimits{.seconds = 60, .memory_bytes = int64_t{1} << 20}).layers.size() ==
      1);
#else
  const CaptureError e = isolated_error(big.path, ReadLimits{.seconds = 60, .memory_bytes = int64_t{1} << 20});
  // The first allocation past the limit fails: one of the reader's (std::bad_alloc, reported by
  // read_capture_isolated) or, depending on the allocator's layout, one of libhdf5's (its error).
  const std::string ours = big.path +
                           ": /: expected a read within 1 MiB of memory (DSV4_READ_MEMORY_MIB sets the "
                           "limit), found a read that needs more (out of memory)";
  const bool hdf5s = e.file() == big.path && e.found().find("memory allocation failed") != std::string::npos;
  CHECK_MESSAGE((std::string(e.what()) == ours || hdf5s), std::string(e.what()));
#endif
  // The same file within the default limits reads.
  CHECK(read_capture_isolated(big.path).layers.size() == 1);
}

TEST_CASE("isolated read: limits come from the file's size and the environment") {
  TempFile f("isolated-limits");
  write_capture(f.path, testing::synthetic_capture({0}, {{0, 4}}, 1, 9));
  const ReadLimits defaults = ReadLimits::for_file(f.path);
  CHECK(defaults.seconds == doctest::Approx(60.0 + std::filesystem::file_size(f.path) / (10.0 * (1 << 20))));
  CHECK(defaults.memory_bytes > (int64_t{1} << 28));
  ::setenv("DSV4_READ_SECONDS", "2.5", 1);
  ::setenv("DSV4_READ_MEMORY_MIB", "64", 1);
  const ReadLimits set = ReadLimits::for_file(f.path);
  CHECK(set.seconds == 2.5);
  CHECK(set.memory_bytes == int64_t{64} << 20);
  ::setenv("DSV4_READ_SECONDS", "soon", 1);
  CHECK_THROWS_WITH_AS(ReadLimits::for_file(f.path), "DSV4_READ_SECONDS=soon: expected a positive number",
                       std::invalid_argument);
  ::setenv("DSV4_READ_SECONDS", "0", 1);
  CHECK_THROWS_AS(ReadLimits::for_file(f.path), std::invalid_argument);
  ::unsetenv("DSV4_READ_SECONDS");
  ::unsetenv("DSV4_READ_MEMORY_MIB");
}
