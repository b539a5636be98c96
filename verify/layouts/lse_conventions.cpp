// lse conventions (lse_conventions.h).
#include "verify/layouts/lse_conventions.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace dsv4::layouts {

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kLn2 = 0.69314718055994530942;

// ln(e^a + e^b), exact for infinite arguments.
double log_add_exp(double a, double b) {
  if (a == -kInf) return b;
  if (b == -kInf) return a;
  const double m = std::max(a, b);
  if (m == kInf) return kInf;
  return m + std::log1p(std::exp(-std::fabs(a - b)));
}

}  // namespace

LseConvention LseConvention::flashmla() { return {"flashmla", false, false, kInf}; }
LseConvention LseConvention::vllm_reference() { return {"vllm_reference", false, false, -kInf}; }
LseConvention LseConvention::flashinfer_reference() { return {"flashinfer_reference", true, true, -kInf}; }

std::vector<LseConvention> LseConvention::all() { return {flashmla(), vllm_reference(), flashinfer_reference()}; }

LseConvention LseConvention::by_name(const std::string& name) {
  std::string known;
  for (const LseConvention& c : all()) {
    if (c.name == name) return c;
    known += (known.empty() ? "" : ", ") + c.name;
  }
  throw std::invalid_argument("unknown lse convention '" + name + "' (known: " + known + ")");
}

double convert_lse(double lse, double sink, const LseConvention& from, const LseConvention& to) {
  if (std::isnan(lse)) return lse;
  // To natural log, sink excluded, empty row = -inf (the mathematics: ln of an empty sum).
  double natural = from.base2 ? lse * kLn2 : lse;
  if (from.sink_included) {
    // The sink alone (up to the rounding of the source's sum): an empty row.
    if (!(natural - sink > 1e-12 * std::max(1.0, std::fabs(sink))))
      natural = -kInf;
    else
      natural = natural + std::log1p(-std::exp(sink - natural));  // ln(e^l - e^sink)
  } else if (lse == from.empty_row) {
    natural = -kInf;
  }
  // From the mathematics to the target.
  double out = natural;
  if (to.sink_included)
    out = log_add_exp(natural, sink);
  else if (natural == -kInf)
    return to.empty_row;
  return to.base2 ? out / kLn2 : out;
}

ref::Mat convert_lse(const ref::Mat& lse, const ref::Vec& sink, const LseConvention& from, const LseConvention& to) {
  if (sink.size() != lse.cols())
    throw std::invalid_argument("convert_lse: " + std::to_string(sink.size()) + " sinks for " +
                                std::to_string(lse.cols()) + " heads");
  ref::Mat out(lse.rows(), lse.cols());
  for (ref::Index r = 0; r < lse.rows(); ++r)
    for (ref::Index h = 0; h < lse.cols(); ++h) out(r, h) = convert_lse(lse(r, h), sink(h), from, to);
  return out;
}

}  // namespace dsv4::layouts
