#pragma once
// The GPU test harness every kernel family's tests use: seeded inputs -> oracle -> per-version
// tally of differences, with one string ID per case so that one line reproduces a failure.
//
//   for (...) {
//     const auto c = testing::Case::select(testing::CaseId("c4_prefill").with("d", 512)
//                                              .with("lengths", lengths).with("variant", v));
//     if (!c) continue;                // DSV4_CASE names another case
//     INFO(c->reproduce());            // printed with any failure inside this scope
//     std::mt19937_64 gen = c->rng();  // the case's inputs come from its seed only
//     ... run the kernel and the oracle, then book.at(variant, "entries").bitwise(equal) ...
//     CHECK(book.at(...).differing <= allowed);
//   }
//   MESSAGE(book.table());             // the per-version tally of the test case
//
// A case ID is ggml-style: op(key=value,...,seed=S), e.g.
// c4_prefill(setup=C4 main d512,lengths=[37,5],variant=v3,seed=123). Its seed is derived from the
// base seed (DSV4_TEST_SEED, else random) and the ID without the seed, so cases are independent of
// each other and of their order. Setting DSV4_CASE to a printed ID runs that case alone (every other
// harness case of the binary is skipped) with the seed written in it.
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common/kinds.h"

namespace dsv4::cuda::testing {

class CaseId {
 public:
  explicit CaseId(std::string op) : op_(std::move(op)) {}
  CaseId& with(const std::string& key, int64_t value);
  CaseId& with(const std::string& key, int value) { return with(key, static_cast<int64_t>(value)); }
  CaseId& with(const std::string& key, const std::string& value);
  CaseId& with(const std::string& key, const char* value) { return with(key, std::string(value)); }
  CaseId& with(const std::string& key, const std::vector<int64_t>& values);  // [37,5]
  CaseId& with(const std::string& key, Variant v) { return with(key, variant_name(v)); }
  CaseId& with(const std::string& key, bool value) { return with(key, value ? "yes" : "no"); }
  // op(key=value,...) without the seed.
  std::string str() const;

 private:
  std::string op_;
  std::vector<std::pair<std::string, std::string>> params_;
};

// The seed the cases derive theirs from: DSV4_TEST_SEED when set, else drawn once per process.
uint64_t base_seed();

class Case {
 public:
  // The case, unless DSV4_CASE is set and names another one. env_case: the value of DSV4_CASE
  // (nullptr: unset); the one-argument form reads the environment.
  static std::optional<Case> select(const CaseId& id, const char* env_case);
  static std::optional<Case> select(const CaseId& id);

  const std::string& id() const { return id_; }  // op(key=value,...,seed=S)
  uint64_t seed() const { return seed_; }
  std::mt19937_64 rng() const { return std::mt19937_64(seed_); }
  // "DSV4_CASE='<id>' reproduces this case": the line to print with a failure.
  std::string reproduce() const;

 private:
  Case(std::string id, uint64_t seed) : id_(std::move(id)), seed_(seed) {}
  std::string id_;
  uint64_t seed_;
};

// The seed of a case ID (without seed) under a base seed: a 64-bit mix of both.
uint64_t case_seed(uint64_t base, const std::string& id_without_seed);

// Differences of one quantity of one version: values compared, values that differ bitwise, values
// outside their bound, and the worst error / bound seen.
struct Tally {
  int64_t compared = 0;
  int64_t differing = 0;
  int64_t over_bound = 0;
  double worst_ratio = 0;
  void bitwise(bool equal) {
    ++compared;
    differing += !equal;
  }
  // |error| against its bound (a NaN error counts as outside).
  void bounded(double error, double bound);
  Tally& operator+=(const Tally& o);
};

// The tallies of a test case by (version, quantity), in first-use order.
class TallyBook {
 public:
  Tally& at(const std::string& version, const std::string& quantity);
  Tally& at(Variant v, const std::string& quantity) { return at(std::string(variant_name(v)), quantity); }
  // One line per (version, quantity): compared, differing, over bound, worst error / bound.
  std::string table() const;

 private:
  std::vector<std::pair<std::pair<std::string, std::string>, Tally>> rows_;
};

// ---- seeded inputs -------------------------------------------------------------------------------

// n fp32 values uniform in [lo, hi).
std::vector<float> uniform_floats(size_t n, double lo, double hi, std::mt19937_64& gen);
// n bf16 codes of values uniform in [lo, hi).
std::vector<uint16_t> uniform_bf16(size_t n, double lo, double hi, std::mt19937_64& gen);

// Number of positions where a and b differ bit for bit (sizes must match; a size mismatch counts
// every value of the longer one).
int64_t bitwise_differences(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace dsv4::cuda::testing
