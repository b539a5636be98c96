#include "verify/capture/reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <set>
#include <stdexcept>

#include "reference/pre_quant.h"
#include "reference/stage_registry.h"
#include "verify/capture/config_attrs.h"
#include "verify/capture/dataset_checks.h"
#include "verify/capture/tensor_convert.h"
#include "verify/capture/weight_names.h"
#include "verify/hdf5/error.h"
#include "verify/hdf5/file.h"

namespace dsv4::verify {

namespace {

// "3" -> 3. Only canonical decimal names count ("03" and "x" do not), so no two names alias.
std::optional<int> decimal_name(const std::string& name) {
  if (name.empty() || name.size() > 9 ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  int value = std::stoi(name);
  if (std::to_string(value) != name) return std::nullopt;
  return value;
}

std::string join_path(const std::string& group, const std::string& name) {
  return group == "/" ? "/" + name : group + "/" + name;
}

// How the rows of the kv matrix that indices point into are counted, for index range messages.
std::string kv_rows_text(const ref::CallGeometry& g) {
  int64_t entries = g.ratio == 0 ? 0 : g.entries_after(g.ratio);
  switch (g.index_space().kind) {
    case ref::IndexSpace::Kind::prefill: return fmt::format("prefill: s + entries = {} + {}", g.seqlen, entries);
    case ref::IndexSpace::Kind::decode:
      return fmt::format("decode: W + entries = {} + {}", g.cfg->window_size, entries);
    case ref::IndexSpace::Kind::chunked:
      return fmt::format("chunked: W + s + entries = {} + {} + {}", g.cfg->window_size, g.seqlen, entries);
  }
  return "";
}

// Layer indices fill ModelConfig::compress_ratios densely; models have ~60 layers.
constexpr int kMaxLayerIndex = 1 << 16;

class CaptureReader {
 public:
  CaptureReader(std::string path, ReadOptions options) : path_(std::move(path)), options_(options) {}
  Capture read();

 private:
  int64_t int_attr(const hdf5::Object& o, const std::string& name, int64_t min, int64_t max) const;
  double real_attr(const hdf5::Object& o, const std::string& name) const;
  std::string string_attr(const hdf5::Object& o, const std::string& name) const;
  std::string optional_string_attr(const hdf5::Object& o, const std::string& name) const;
  void note_unknown_attributes(const hdf5::Object& o, std::initializer_list<std::string_view> known);
  void note_unknown_members(const hdf5::Group& g, std::initializer_list<std::string_view> known);

  void read_config(const hdf5::Group& g);
  LayerCapture read_layer(const hdf5::Group& g, int index);
  void read_weights(const hdf5::Group& g, LayerCapture& layer);
  // expected_batch: the batch of call 0, or 0 for call 0 itself.
  CallCapture read_call(const hdf5::Group& g, int index, int ratio, int expected_batch);
  Tensor read_tensor(const hdf5::Dataset& d, bool is_index, const std::vector<int64_t>& expected,
                     std::string_view shape_doc) const;
  // The datasets under g that `is_dataset` knows, going into the groups `is_group` knows, by path
  // relative to the top group; notes unknown members, refuses known names of the wrong kind.
  void find_known(const hdf5::Group& g, const std::string& prefix, bool (*is_dataset)(std::string_view),
                  bool (*is_group)(std::string_view), std::set<std::string>& found);

  std::string path_;
  ReadOptions options_;
  Capture capture_;
};

int64_t CaptureReader::int_attr(const hdf5::Object& o, const std::string& name, int64_t min, int64_t max) const {
  std::string where = o.attribute_where(name);
  std::string expected = fmt::format("an integer in [{}, {}]", min, max);
  if (!o.has_attribute(name)) throw CaptureError(path_, where, expected, "nothing");
  hdf5::AttributeValue value = o.attribute(name).read();
  int64_t v = 0;
  if (const auto* i = std::get_if<int64_t>(&value)) {
    v = *i;
  } else if (const auto* d = std::get_if<double>(&value);
             d != nullptr && std::isfinite(*d) && std::floor(*d) == *d && std::fabs(*d) < 0x1p62) {
    v = static_cast<int64_t>(*d);  // an integer stored as a float (4096.0) is still an integer
  } else {
    throw CaptureError(path_, where, expected, hdf5::to_string(value));
  }
  if (v < min || v > max) throw CaptureError(path_, where, expected, fmt::format("{}", v));
  return v;
}

double CaptureReader::real_attr(const hdf5::Object& o, const std::string& name) const {
  std::string where = o.attribute_where(name);
  if (!o.has_attribute(name)) throw CaptureError(path_, where, "a finite number", "nothing");
  hdf5::AttributeValue value = o.attribute(name).read();
  if (const auto* i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&value); d != nullptr && std::isfinite(*d)) return *d;
  throw CaptureError(path_, where, "a finite number", hdf5::to_string(value));
}

std::string CaptureReader::string_attr(const hdf5::Object& o, const std::string& name) const {
  std::string where = o.attribute_where(name);
  if (!o.has_attribute(name)) throw CaptureError(path_, where, "a string", "nothing");
  hdf5::AttributeValue value = o.attribute(name).read();
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  throw CaptureError(path_, where, "a string", hdf5::to_string(value));
}

std::string CaptureReader::optional_string_attr(const hdf5::Object& o, const std::string& name) const {
  return o.has_attribute(name) ? string_attr(o, name) : "";
}

void CaptureReader::note_unknown_attributes(const hdf5::Object& o, std::initializer_list<std::string_view> known) {
  for (const std::string& name : o.attribute_names()) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      capture_.notes.push_back(fmt::format("ignored unknown attribute '{}' of {}", name, o.path()));
    }
  }
}

void CaptureReader::note_unknown_members(const hdf5::Group& g, std::initializer_list<std::string_view> known) {
  for (const hdf5::Member& m : g.members()) {
    if (std::find(known.begin(), known.end(), m.name) == known.end()) {
      capture_.notes.push_back(fmt::format("ignored unknown member {}", join_path(g.path(), m.name)));
    }
  }
}

void CaptureReader::find_known(const hdf5::Group& g, const std::string& prefix, bool (*is_dataset)(std::string_view),
                               bool (*is_group)(std::string_view), std::set<std::string>& found) {
  for (const hdf5::Member& m : g.members()) {
    std::string relative = prefix.empty() ? m.name : prefix + "/" + m.name;
    std::string full = join_path(g.path(), m.name);
    bool known_dataset = is_dataset(relative), known_group = is_group(relative);
    const char* expected = known_dataset ? "a dataset" : "a group";
    switch (m.kind) {
      case hdf5::Member::Kind::dataset:
        if (known_dataset) {
          found.insert(relative);
        } else if (known_group) {
          throw CaptureError(path_, full, expected, "a dataset");
        } else {
          capture_.notes.push_back("ignored unknown dataset " + full);
        }
        break;
      case hdf5::Member::Kind::group:
        if (known_group) {
          find_known(g.group(m.name), relative, is_dataset, is_group, found);
        } else if (known_dataset) {
          throw CaptureError(path_, full, expected, "a group");
        } else {
          capture_.notes.push_back("ignored unknown group " + full);
        }
        break;
      case hdf5::Member::Kind::link:
        if (known_dataset || known_group) {
          throw CaptureError(path_, full, expected, hdf5::describe(m.kind));
        }
        capture_.notes.push_back("ignored link " + full);
        break;
      case hdf5::Member::Kind::other:
        if (known_dataset || known_group) throw CaptureError(path_, full, expected, "another kind of HDF5 object");
        capture_.notes.push_back("ignored unknown object " + full);
        break;
    }
  }
}

Tensor CaptureReader::read_tensor(const hdf5::Dataset& d, bool is_index, const std::vector<int64_t>& expected,
                                  std::string_view shape_doc) const {
  DatasetLocation at{path_, d.path()};
  hdf5::TypeInfo type = d.type();
  check_value_type(at, type, is_index);
  Tensor t;
  t.is_index = is_index;
  t.shape = d.shape();
  check_shape(at, t.shape, expected, shape_doc);
  check_size(at, d.element_count(), options_.max_dataset_elements);
  if (is_index) {
    hdf5::Array<int64_t> a = d.read<int64_t>();
    t.values.assign(a.values.begin(), a.values.end());
    t.dtype = type.name;
  } else {
    t.values = d.read<double>().values;
  }
  return t;
}

void CaptureReader::read_config(const hdf5::Group& g) {
  ref::ModelConfig& cfg = capture_.config;
  for (const ConfigIntAttr& a : kConfigIntAttrs)
    cfg.*a.field = static_cast<int>(int_attr(g, std::string(a.name), INT_MIN, INT_MAX));
  for (const ConfigRealAttr& a : kConfigRealAttrs) cfg.*a.field = real_attr(g, std::string(a.name));
  capture_.precision = string_attr(g, std::string(kConfigPrecisionAttr));

  std::vector<std::string_view> known{kConfigPrecisionAttr};
  for (const ConfigIntAttr& a : kConfigIntAttrs) known.push_back(a.name);
  for (const ConfigRealAttr& a : kConfigRealAttrs) known.push_back(a.name);
  for (const std::string& name : g.attribute_names()) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      capture_.notes.push_back(fmt::format("ignored unknown attribute '{}' of {}", name, g.path()));
    }
  }
  note_unknown_members(g, {});

  cfg.name = capture_.model.empty() ? "capture" : capture_.model;
  // compress_ratios is not in /config; validate the rest with a placeholder ratio list.
  ref::ModelConfig checked = cfg;
  checked.compress_ratios = {0};
  try {
    checked.validate();
  } catch (const std::invalid_argument& e) {
    throw CaptureError(path_, g.path(), "a valid model configuration", e.what());
  }
}

void CaptureReader::read_weights(const hdf5::Group& g, LayerCapture& layer) {
  const ref::ModelConfig& cfg = capture_.config;
  const int ratio = layer.compress_ratio;
  std::set<std::string> present;
  find_known(
      g, "", [](std::string_view n) { return find_weight(n) != nullptr; }, is_weight_group, present);
  // In table order, so the first bad weight reported is the first in the spec's list.
  for (const WeightName& w : weight_names()) {
    const std::string name(w.name);
    if (present.count(name) == 0) continue;
    hdf5::Dataset d = g.dataset(name);
    DatasetLocation at{path_, d.path()};
    if (!ref::in_scope(w.scope, ratio)) {
      throw CaptureError(
          path_, d.path(),
          fmt::format("no such dataset (weights/{} belongs to {} only; this layer has compress_ratio {})", w.name,
                      ref::scope_text(w.scope), ratio),
          "a dataset");
    }
    Tensor t = read_tensor(d, false, w.shape(cfg, ratio), w.shape_doc);
    check_finite(at, t, false);
    visit_weight(layer.weights, name, [&](auto& member) { assign_weight(member, t); });
    if (!w.linear.empty()) {
      std::string kind = d.has_attribute("linear") ? string_attr(d, "linear") : std::string(w.linear);
      if (kind != "fp8" && kind != "bf16" && kind != "fp32") {
        throw CaptureError(path_, d.attribute_where("linear"), "one of fp8, bf16, fp32", fmt::format("'{}'", kind));
      }
      layer.weight_linear_kinds[name] = kind;
    }
  }
  for (const WeightName& w : weight_names()) {
    if (ref::in_scope(w.scope, ratio) && present.count(std::string(w.name)) == 0) {
      throw CaptureError(path_, join_path(g.path(), std::string(w.name)),
                         fmt::format("a dataset {} = {} (required for compress_ratio {})", w.shape_doc,
                                     shape_text(w.shape(cfg, ratio)), ratio),
                         "nothing");
    }
  }
  layer.weights.compress_ratio = ratio;
  if (ratio != 0) {
    layer.weights.compressor.ratio = ratio;
    layer.weights.compressor.head_dim = cfg.head_dim;
  }
  if (ratio == 4) {
    layer.weights.indexer.compressor.ratio = 4;
    layer.weights.indexer.compressor.head_dim = cfg.index_head_dim;
  }
  // The oracle's own check of the same rules (reference/weights.h). The table checks above name the
  // dataset first, so this fails only if the table and the oracle disagree.
  try {
    layer.weights.validate(cfg);
  } catch (const std::invalid_argument& e) {
    throw CaptureError(path_, g.path(), "weights the oracle accepts", e.what());
  }
}

CallCapture CaptureReader::read_call(const hdf5::Group& g, int index, int ratio, int expected_batch) {
  const ref::ModelConfig& cfg = capture_.config;
  CallCapture call;
  call.index = index;
  call.start_pos = int_attr(g, "start_pos", 0, cfg.max_seq_len - 1);
  call.seqlen = int_attr(g, "seqlen", 1, cfg.max_seq_len);
  if (call.start_pos + call.seqlen > cfg.max_seq_len) {
    throw CaptureError(path_, g.attribute_where("seqlen"),
                       fmt::format("start_pos + seqlen <= max_seq_len = {}", cfg.max_seq_len),
                       fmt::format("{} + {} = {}", call.start_pos, call.seqlen, call.start_pos + call.seqlen));
  }
  note_unknown_attributes(g, {"start_pos", "seqlen"});

  std::string x_path = join_path(g.path(), "x");
  std::string x_expected =
      fmt::format("a dataset [b,s,dim] = [b,{},{}] with b >= 1 (every call has x)", call.seqlen, cfg.dim);
  if (hdf5::Member::Kind kind = g.kind_of("x"); kind != hdf5::Member::Kind::dataset) {
    throw CaptureError(path_, x_path, x_expected, hdf5::describe(kind));
  }
  std::vector<int64_t> x_shape = g.dataset("x").shape();
  if (x_shape.size() != 3 || x_shape[0] < 1 || x_shape[0] > INT_MAX) {
    throw CaptureError(path_, x_path, x_expected, "shape " + shape_text(x_shape));
  }
  call.batch = static_cast<int>(x_shape[0]);
  if (expected_batch != 0 && call.batch != expected_batch) {
    throw CaptureError(path_, x_path,
                       fmt::format("batch b = {} as in call 0 (a layer's calls serve one batch)", expected_batch),
                       fmt::format("b = {}", call.batch));
  }

  ref::CallGeometry geometry{&cfg, ratio, call.batch, call.seqlen, call.start_pos};
  std::set<std::string> present;
  find_known(
      g, "", [](std::string_view n) { return ref::find_stage(n) != nullptr || ref::find_pre_quant(n) != nullptr; },
      [](std::string_view n) { return ref::is_stage_group(n) || ref::is_pre_quant_group(n); }, present);
  // Dataset `name`, checked by the registry row of stage s (a pre-quantization dataset by its stage's).
  auto read_dataset = [&](const std::string& name, const ref::StageDef& s) {
    if (present.count(name) == 0) return;
    hdf5::Dataset d = g.dataset(name);
    DatasetLocation at{path_, d.path()};
    if (!ref::in_scope(s.scope, ratio)) {
      throw CaptureError(path_, d.path(),
                         fmt::format("no such dataset ({} belongs to {} only; this layer has compress_ratio {})", name,
                                     ref::scope_text(s.scope), ratio),
                         "a dataset");
    }
    Tensor t = read_tensor(d, s.is_index(), s.shape(geometry), s.shape_doc);
    if (d.has_attribute("dtype")) {
      t.dtype = string_attr(d, "dtype");
      check_dtype_name(at, t.dtype, s.is_index());
    }
    if (s.is_index()) {
      check_indices(at, t, geometry.kv_rows(), kv_rows_text(geometry));
    } else {
      check_finite(at, t, s.values == ref::StageValues::finite_or_minus_inf);
    }
    call.stages.emplace(name, std::move(t));
  };
  // In table order: x first, then the stages in computation order, then the pre-quantization values.
  for (const ref::StageDef& s : ref::stages()) read_dataset(std::string(s.name), s);
  for (const ref::PreQuantDef& p : ref::pre_quant_datasets()) read_dataset(std::string(p.name), ref::stage(p.stage));
  return call;
}

LayerCapture CaptureReader::read_layer(const hdf5::Group& g, int index) {
  LayerCapture layer;
  layer.index = index;
  int64_t ratio = int_attr(g, "compress_ratio", 0, 128);
  if (ratio != 0 && ratio != 4 && ratio != 128) {
    throw CaptureError(path_, g.attribute_where("compress_ratio"), "0, 4 or 128", fmt::format("{}", ratio));
  }
  layer.compress_ratio = static_cast<int>(ratio);
  note_unknown_attributes(g, {"compress_ratio"});
  note_unknown_members(g, {"weights", "calls"});
  read_weights(g.group("weights"), layer);

  hdf5::Group calls = g.group("calls");
  std::vector<int> numbers;
  for (const hdf5::Member& m : calls.members()) {
    std::optional<int> k = decimal_name(m.name);
    if (k && m.kind == hdf5::Member::Kind::group) {
      numbers.push_back(*k);
    } else if (k) {
      throw CaptureError(path_, join_path(calls.path(), m.name), "a group", "not a group");
    } else {
      capture_.notes.push_back("ignored unknown member " + join_path(calls.path(), m.name));
    }
  }
  std::sort(numbers.begin(), numbers.end());
  if (numbers.empty()) throw CaptureError(path_, calls.path(), "at least one call group (calls/0)", "none");
  for (std::size_t k = 0; k < numbers.size(); ++k) {
    if (numbers[k] != static_cast<int>(k)) {
      throw CaptureError(path_, calls.path(), fmt::format("calls numbered 0..{}", numbers.size() - 1),
                         fmt::format("calls {}", fmt::join(numbers, ", ")));
    }
  }
  for (int k : numbers) {
    int expected_batch = layer.calls.empty() ? 0 : layer.calls.front().batch;
    layer.calls.push_back(read_call(calls.group(std::to_string(k)), k, layer.compress_ratio, expected_batch));
    if (k > 0) {
      const CallCapture& before = layer.calls[k - 1];
      const CallCapture& now = layer.calls[k];
      if (now.start_pos != before.start_pos + before.seqlen) {
        capture_.notes.push_back(
            fmt::format("layer {} call {} starts at position {}, not where call {} ended ({}): state does not carry "
                        "over between them",
                        index, k, now.start_pos, k - 1, before.start_pos + before.seqlen));
      }
    }
  }
  return layer;
}

Capture CaptureReader::read() {
  hdf5::File file = hdf5::File::open(path_);
  capture_.path = path_;
  if (!file.has_attribute("format")) {
    throw CaptureError(path_, file.attribute_where("format"), fmt::format("'{}' (a capture file)", kCaptureFormat),
                       "nothing");
  }
  std::string format = string_attr(file, "format");
  if (format != kCaptureFormat) {
    throw CaptureError(path_, file.attribute_where("format"), fmt::format("'{}'", kCaptureFormat),
                       fmt::format("'{}'", format));
  }
  int64_t version = int_attr(file, "format_version", INT_MIN, INT_MAX);
  if (version != kCaptureFormatVersion) {
    throw CaptureError(path_, file.attribute_where("format_version"),
                       fmt::format("{} (the version this reader knows)", kCaptureFormatVersion),
                       fmt::format("{}", version));
  }
  capture_.format_version = static_cast<int>(version);
  capture_.producer = optional_string_attr(file, "producer");
  capture_.model = optional_string_attr(file, "model");
  capture_.probs_convention = optional_string_attr(file, "probs_convention");
  if (!capture_.probs_convention.empty() && capture_.probs_convention != "deepseek" &&
      capture_.probs_convention != "any") {
    throw CaptureError(path_, file.attribute_where("probs_convention"), "'deepseek' or 'any'",
                       fmt::format("'{}'", capture_.probs_convention));
  }
  note_unknown_attributes(file, {"format", "format_version", "producer", "model", "probs_convention"});
  note_unknown_members(file, {"config", "layers"});

  read_config(file.group("config"));

  hdf5::Group layers = file.group("layers");
  for (const hdf5::Member& m : layers.members()) {
    std::optional<int> index = decimal_name(m.name);
    if (index && *index >= kMaxLayerIndex) {
      throw CaptureError(path_, join_path(layers.path(), m.name), fmt::format("a layer index below {}", kMaxLayerIndex),
                         m.name);
    }
    if (!index) {
      capture_.notes.push_back("ignored unknown member " + join_path(layers.path(), m.name));
      continue;
    }
    if (m.kind != hdf5::Member::Kind::group)
      throw CaptureError(path_, join_path(layers.path(), m.name), "a group", "not a group");
    capture_.layers.emplace(*index, read_layer(layers.group(m.name), *index));
  }
  if (capture_.layers.empty())
    throw CaptureError(path_, layers.path(), "at least one layer group (layers/<L>)", "none");

  capture_.config.compress_ratios.assign(capture_.layers.rbegin()->first + 1, 0);
  for (const auto& [index, layer] : capture_.layers) capture_.config.compress_ratios[index] = layer.compress_ratio;
  return std::move(capture_);
}

}  // namespace

Capture read_capture(const std::string& path, const ReadOptions& options) {
  try {
    return CaptureReader(path, options).read();
  } catch (const hdf5::Error& e) {
    throw CaptureError(e.file(), e.object(), e.expected(), e.found());
  }
}

}  // namespace dsv4::verify
