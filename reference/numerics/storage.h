#pragma once
// The floating-point format a tensor is held in. Rounding to it is the only place the oracle
// loses precision on purpose; fp64 means "the mathematics" (no rounding).
#include <string>

#include "reference/numerics/bf16.h"
#include "reference/tensor.h"

namespace dsv4::ref {

enum class Storage { fp64, fp32, bf16 };

// bf16 rounds through fp32, as torch's values reach bf16 from fp32 arithmetic. This is a double
// rounding on purpose: a double just above a bf16 midpoint can round to the midpoint in fp32 and
// then tie to even downwards, exactly as the fp32 tensor would.
inline double round_to(Storage s, double x) {
  switch (s) {
    case Storage::fp64: return x;
    case Storage::fp32: return static_cast<double>(static_cast<float>(x));
    case Storage::bf16: return static_cast<double>(bf16_round(static_cast<float>(x)));
  }
  return x;
}

template <typename Derived>
void round_in_place(Storage s, Eigen::DenseBase<Derived>& m) {
  if (s == Storage::fp64) return;
  m.derived() = m.derived().unaryExpr([s](double v) { return round_to(s, v); });
}

// m rounded to s, element by element (a stage's final rounding).
template <typename M>
M rounded(Storage s, M m) {
  round_in_place(s, m);
  return m;
}

std::string to_string(Storage s);
Storage storage_from_string(const std::string& name);  // "fp64" | "fp32" | "bf16"; throws otherwise

}  // namespace dsv4::ref
