#pragma once
// Seeded random numbers that every standard library draws alike (docs/architecture.md
// "Determinism"): splitmix64 derives independent seeds for (seed, tensor, block, ...) streams;
// mt19937_64, whose output the C++ standard fixes, drives Box-Muller normals
// (std::normal_distribution is avoided: its algorithm differs between standard libraries). The
// oracle's random weights, dsv4-verify synth and the precision report's synthetic inputs all draw
// from here.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

namespace dsv4::ref {

// splitmix64's finaliser: a well-spread 64-bit seed from any 64-bit value.
inline uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Standard normal draws by Box-Muller: u1 in (0, 1), u2 in [0, 1) from two mt19937_64 outputs,
// r = sqrt(-2 ln u1), angle 2 pi u2.
class NormalStream {
 public:
  // Which draws a stream hands out: both values of each Box-Muller pair (r cos, then r sin), or
  // only the cosine one (one pair per draw: how dsv4-verify synth has always drawn its inputs, kept
  // so that the captures it made stay reproducible).
  enum class Pairs { both, cosine_only };

  explicit NormalStream(uint64_t seed, Pairs pairs = Pairs::both) : rng_(seed), pairs_(pairs) {}

  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(rng_() >> 11) + 0.5) * 0x1p-53;  // in (0, 1)
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1p-53;          // in [0, 1)
    const double radius = std::sqrt(-2 * std::log(u1));
    const double angle = 2 * std::numbers::pi * u2;
    if (pairs_ == Pairs::both) {
      spare_ = radius * std::sin(angle);
      has_spare_ = true;
    }
    return radius * std::cos(angle);
  }

 private:
  std::mt19937_64 rng_;
  Pairs pairs_;
  bool has_spare_ = false;
  double spare_ = 0;
};

}  // namespace dsv4::ref
