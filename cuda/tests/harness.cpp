// The GPU test harness (harness.h): case IDs, seeds, DSV4_CASE selection, tallies, inputs.
#include "cuda/tests/harness.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <sstream>

#include "cuda/common/numerics.cuh"

namespace dsv4::cuda::testing {

CaseId& CaseId::with(const std::string& key, int64_t value) { return with(key, std::to_string(value)); }

CaseId& CaseId::with(const std::string& key, const std::string& value) {
  params_.emplace_back(key, value);
  return *this;
}

CaseId& CaseId::with(const std::string& key, const std::vector<int64_t>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(values[i]);
  }
  s += ']';
  return with(key, s);
}

std::string CaseId::str() const {
  std::string s = op_ + "(";
  for (size_t i = 0; i < params_.size(); ++i) {
    if (i) s += ',';
    s += params_[i].first;
    s += '=';
    s += params_[i].second;
  }
  s += ')';
  return s;
}

uint64_t base_seed() {
  static const uint64_t seed = [] {
    if (const char* env = std::getenv("DSV4_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(env, nullptr, 10));
    const uint64_t s = static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}();
    std::printf("base seed %llu (DSV4_TEST_SEED reproduces every case)\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

uint64_t case_seed(uint64_t base, const std::string& id_without_seed) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the ID, then a splitmix64 round with the base
  for (unsigned char ch : id_without_seed) h = (h ^ ch) * 0x100000001b3ull;
  uint64_t z = base + h * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {

// "op(k=v,...,seed=S)" -> ("op(k=v,...)", S); nullopt when the text has no trailing seed.
std::optional<std::pair<std::string, uint64_t>> parse_id(const std::string& text) {
  const size_t at = text.rfind("seed=");
  if (at == std::string::npos || at == 0 || text.back() != ')') return std::nullopt;
  const char before = text[at - 1];
  if (before != ',' && before != '(') return std::nullopt;
  const std::string digits = text.substr(at + 5, text.size() - 1 - (at + 5));
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  std::string head = text.substr(0, before == ',' ? at - 1 : at);
  head += ')';
  return std::make_pair(head, static_cast<uint64_t>(std::strtoull(digits.c_str(), nullptr, 10)));
}

std::string with_seed(const std::string& id_without_seed, uint64_t seed) {
  std::string s = id_without_seed.substr(0, id_without_seed.size() - 1);
  if (s.back() != '(') s += ',';
  s += "seed=";
  s += std::to_string(seed);
  s += ')';
  return s;
}

}  // namespace

std::optional<Case> Case::select(const CaseId& id, const char* env_case) {
  const std::string key = id.str();
  if (env_case != nullptr && *env_case != '\0') {
    const auto wanted = parse_id(env_case);
    if (!wanted) {
      std::fprintf(stderr, "DSV4_CASE='%s' is not a case ID of the form op(key=value,...,seed=N)\n", env_case);
      std::exit(2);
    }
    if (wanted->first != key) return std::nullopt;
    return Case(with_seed(key, wanted->second), wanted->second);
  }
  const uint64_t seed = case_seed(base_seed(), key);
  return Case(with_seed(key, seed), seed);
}

std::optional<Case> Case::select(const CaseId& id) { return select(id, std::getenv("DSV4_CASE")); }

std::string Case::reproduce() const { return "DSV4_CASE='" + id_ + "' reproduces this case"; }

void Tally::bounded(double error, double bound) {
  ++compared;
  const double e = std::fabs(error);
  differing += e != 0;
  over_bound += !(e <= bound);
  if (bound > 0 && e / bound > worst_ratio) worst_ratio = e / bound;
  if (std::isnan(e)) worst_ratio = INFINITY;
}

Tally& Tally::operator+=(const Tally& o) {
  compared += o.compared;
  differing += o.differing;
  over_bound += o.over_bound;
  worst_ratio = std::max(worst_ratio, o.worst_ratio);
  return *this;
}

Tally& TallyBook::at(const std::string& version, const std::string& quantity) {
  for (auto& row : rows_)
    if (row.first.first == version && row.first.second == quantity) return row.second;
  rows_.push_back({{version, quantity}, Tally{}});
  return rows_.back().second;
}

std::string TallyBook::table() const {
  std::ostringstream out;
  out << "version  quantity            compared   differing  over bound  worst error/bound\n";
  for (const auto& [key, t] : rows_)
    out << std::left << std::setw(9) << key.first << std::setw(20) << key.second << std::right << std::setw(8)
        << t.compared << std::setw(12) << t.differing << std::setw(12) << t.over_bound << "  " << std::setprecision(3)
        << t.worst_ratio << "\n";
  return out.str();
}

std::vector<float> uniform_floats(size_t n, double lo, double hi, std::mt19937_64& gen) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(u(gen));
  return v;
}

std::vector<uint16_t> uniform_bf16(size_t n, double lo, double hi, std::mt19937_64& gen) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = bf16_bits(static_cast<float>(u(gen)));
  return v;
}

int64_t bitwise_differences(const std::vector<float>& a, const std::vector<float>& b) {
  const size_t n = std::min(a.size(), b.size());
  int64_t bad = static_cast<int64_t>(std::max(a.size(), b.size()) - n);
  for (size_t i = 0; i < n; ++i) bad += std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]);
  return bad;
}

}  // namespace dsv4::cuda::testing
