// The oracle's results do not move: every value the replay computes (both modes, every bundled
// capture, every layer, call and stage) is hashed, and the hashes must equal the ones recorded in
// oracle_digests.txt. A refactoring of the layer's data flow, the stage registry or the backends
// must leave them unchanged bit for bit; a deliberate change of the oracle's numerics regenerates
// the file (DSV4_WRITE_DIGESTS=1) and says why in its commit.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "verify/capture/reader.h"
#include "verify/replay/backend.h"
#include "verify/replay/layer_replay.h"

using namespace dsv4;
using namespace dsv4::verify;

namespace {

// FNV-1a over bytes.
struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ULL;
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  }
};

// "<capture> <mode> <layer> <call> <stage>" -> hash of the replayed values of every sequence.
std::map<std::string, std::string> digests_of(const std::string& path) {
  std::map<std::string, std::string> out;
  const Capture capture = read_capture(path);
  const std::string name = path.substr(path.find_last_of('/') + 1);
  const ref::PrecisionPolicy policy = ref::PrecisionPolicy::by_name(capture.precision);
  const ref::StageProvider& oracle = ref::oracle_stages();
  for (ReplayMode mode : {ReplayMode::stage_local, ReplayMode::chained}) {
    for (const auto& [index, layer] : capture.layers) {
      LayerReplay replay(capture, layer, policy, oracle, mode);
      for (const CallCapture& call : layer.calls) {
        const CallValues values = replay.replay_call(call).values;
        for (const auto& [stage, value] : values) {
          Fnv1a h;
          for (const ref::Mat& m : value.dense) h.add(m.data(), sizeof(double) * static_cast<size_t>(m.size()));
          for (const ref::IndexMat& m : value.indices) h.add(m.data(), sizeof(int32_t) * static_cast<size_t>(m.size()));
          out[fmt::format("{} {} {} {} {}", name, to_string(mode), index, call.index, stage)] =
              fmt::format("{:016x}", h.h);
        }
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("the oracle's replayed values on the bundled captures are bitwise unchanged") {
  std::map<std::string, std::string> got;
  for (const char* capture : {"deepseek-official-tiny-p37-d5.h5", "synth-tiny-r0-p13-d6.h5", "synth-tiny-r4-p13-d6.h5",
                              "synth-tiny-r128-p125-d6.h5"})
    got.merge(digests_of(std::string(DSV4_CAPTURES_DIR) + "/" + capture));
  REQUIRE(got.size() > 300);

  if (std::getenv("DSV4_WRITE_DIGESTS")) {
    std::ofstream f(DSV4_DIGESTS_FILE);
    for (const auto& [key, digest] : got) f << key << ' ' << digest << '\n';
    MESSAGE("wrote ", got.size(), " digests to ", DSV4_DIGESTS_FILE);
    return;
  }
  std::map<std::string, std::string> expected;
  std::ifstream f(DSV4_DIGESTS_FILE);
  REQUIRE_MESSAGE(f.good(), "cannot open ", DSV4_DIGESTS_FILE);
  for (std::string line; std::getline(f, line);) {
    const size_t cut = line.find_last_of(' ');
    expected[line.substr(0, cut)] = line.substr(cut + 1);
  }
  CHECK(got.size() == expected.size());
  int shown = 0;
  for (const auto& [key, digest] : expected) {
    const auto it = got.find(key);
    const std::string now = it == got.end() ? "absent" : it->second;
    if (now != digest && shown++ < 20) FAIL_CHECK(key, ": recorded ", digest, ", now ", now);
  }
  CHECK(shown == 0);
}
