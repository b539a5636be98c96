#include "same_capture.h"

#include <doctest/doctest.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "verify/capture/config_attrs.h"
#include "verify/capture/weight_names.h"

namespace dsv4::verify::testing {

namespace {

// Bitwise equality of doubles (so -inf == -inf and -0.0 != 0.0).
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

void check_same_weights(const dsv4::ref::AttentionWeights& a, const dsv4::ref::AttentionWeights& b) {
  CHECK(a.compress_ratio == b.compress_ratio);
  for (const WeightName& w : weight_names()) {
    CAPTURE(w.name);
    visit_weight(a, w.name, [&](const auto& ma) {
      visit_weight(b, w.name, [&](const auto& mb) {
        if constexpr (std::is_same_v<decltype(ma), decltype(mb)>) CHECK(same_matrix(ma, mb));
      });
    });
  }
  CHECK(a.compressor.ratio == b.compressor.ratio);
  CHECK(a.compressor.head_dim == b.compressor.head_dim);
  CHECK(a.indexer.compressor.ratio == b.indexer.compressor.ratio);
  CHECK(a.indexer.compressor.head_dim == b.indexer.compressor.head_dim);
}

}  // namespace

void check_same(const Capture& a, const Capture& b) {
  CHECK(a.producer == b.producer);
  CHECK(a.model == b.model);
  CHECK(a.probs_convention == b.probs_convention);
  CHECK(a.format_version == b.format_version);
  CHECK(a.precision == b.precision);
  for (const ConfigIntAttr& f : kConfigIntAttrs) CHECK(a.config.*f.field == b.config.*f.field);
  for (const ConfigRealAttr& f : kConfigRealAttrs) CHECK(a.config.*f.field == b.config.*f.field);
  CHECK(a.config.compress_ratios == b.config.compress_ratios);
  REQUIRE(a.layers.size() == b.layers.size());
  for (const auto& [index, la] : a.layers) {
    CAPTURE(index);
    const LayerCapture& lb = b.layers.at(index);
    CHECK(la.index == lb.index);
    CHECK(la.compress_ratio == lb.compress_ratio);
    CHECK(la.weight_linear_kinds == lb.weight_linear_kinds);
    check_same_weights(la.weights, lb.weights);
    REQUIRE(la.calls.size() == lb.calls.size());
    for (std::size_t k = 0; k < la.calls.size(); ++k) {
      const CallCapture& ca = la.calls[k];
      const CallCapture& cb = lb.calls[k];
      CHECK(ca.index == cb.index);
      CHECK(ca.start_pos == cb.start_pos);
      CHECK(ca.seqlen == cb.seqlen);
      CHECK(ca.batch == cb.batch);
      REQUIRE(ca.stages.size() == cb.stages.size());
      for (const auto& [name, ta] : ca.stages) {
        CAPTURE(name);
        REQUIRE(cb.has(name));
        const Tensor& tb = cb.stage(name);
        CHECK(ta.shape == tb.shape);
        CHECK(same_bits(ta.values, tb.values));
        CHECK(ta.dtype == tb.dtype);
        CHECK(ta.is_index == tb.is_index);
      }
    }
  }
}

}  // namespace dsv4::verify::testing
