#include "verify/capture/writer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "verify/capture/config_attrs.h"
#include "verify/capture/tensor_convert.h"
#include "verify/capture/weight_names.h"
#include "verify/hdf5/file.h"

namespace dsv4::verify {

namespace {

void write_tensor(hdf5::Group& group, const std::string& name, const Tensor& t, const hdf5::WriteOptions& options) {
  if (static_cast<int64_t>(t.values.size()) != t.numel()) {
    throw std::invalid_argument(
        fmt::format("write_capture: {}/{}: {} values for {} elements", group.path(), name, t.values.size(), t.numel()));
  }
  if (t.is_index) {
    std::vector<int32_t> values(t.values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
      double v = t.values[i];
      if (!(v == std::floor(v) && v >= std::numeric_limits<int32_t>::min() &&
            v <= std::numeric_limits<int32_t>::max())) {
        throw std::invalid_argument(
            fmt::format("write_capture: {}/{}: expected int32 index values, found {}", group.path(), name, v));
      }
      values[i] = static_cast<int32_t>(v);
    }
    group.write<int32_t>(name, t.shape, values, options);
  } else {
    std::vector<float> values(t.values.begin(), t.values.end());
    hdf5::Dataset d = group.write<float>(name, t.shape, values, options);
    d.set_attribute("dtype", t.dtype);
  }
}

void write_layer(hdf5::Group& layers, int index, const LayerCapture& layer, const hdf5::WriteOptions& options) {
  hdf5::Group g = layers.create_group(std::to_string(index));
  g.set_attribute("compress_ratio", int64_t{layer.compress_ratio});
  hdf5::Group weights = g.create_group("weights");
  for (const WeightName& w : weight_names()) {
    if (!ref::in_scope(w.scope, layer.compress_ratio)) continue;
    Tensor t;
    visit_weight(layer.weights, w.name, [&](const auto& member) { t = weight_tensor(member); });
    std::string name(w.name);
    std::vector<float> values(t.values.begin(), t.values.end());
    hdf5::Dataset d = weights.write<float>(name, t.shape, values, options);
    if (!w.linear.empty()) {
      auto kind = layer.weight_linear_kinds.find(name);
      d.set_attribute("linear", kind != layer.weight_linear_kinds.end() ? kind->second : std::string(w.linear));
    }
  }
  hdf5::Group calls = g.create_group("calls");
  for (std::size_t k = 0; k < layer.calls.size(); ++k) {
    const CallCapture& call = layer.calls[k];
    hdf5::Group c = calls.create_group(std::to_string(k));
    c.set_attribute("start_pos", call.start_pos);
    c.set_attribute("seqlen", call.seqlen);
    for (const auto& [name, tensor] : call.stages) write_tensor(c, name, tensor, options);
  }
}

void write_file(const std::string& path, const Capture& capture, const hdf5::WriteOptions& options) {
  hdf5::File file = hdf5::File::create(path);
  file.set_attribute("format", std::string(kCaptureFormat));
  file.set_attribute("format_version", int64_t{capture.format_version});
  file.set_attribute("producer", capture.producer);
  file.set_attribute("model", capture.model);
  if (!capture.probs_convention.empty()) file.set_attribute("probs_convention", capture.probs_convention);
  {
    hdf5::Group config = file.create_group("config");
    for (const ConfigIntAttr& a : kConfigIntAttrs)
      config.set_attribute(std::string(a.name), int64_t{capture.config.*a.field});
    for (const ConfigRealAttr& a : kConfigRealAttrs) config.set_attribute(std::string(a.name), capture.config.*a.field);
    config.set_attribute(std::string(kConfigPrecisionAttr), capture.precision);
    hdf5::Group layers = file.create_group("layers");
    for (const auto& [index, layer] : capture.layers) write_layer(layers, index, layer, options);
  }
  file.close();
}

}  // namespace

void write_capture(const std::string& path, const Capture& capture, const hdf5::WriteOptions& options) {
  const std::string temporary = fmt::format("{}.tmp-{}", path, ::getpid());
  try {
    write_file(temporary, capture, options);
    std::filesystem::rename(temporary, path);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
}

}  // namespace dsv4::verify
