#include "verify/capture/capture_codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "verify/capture/config_attrs.h"
#include "verify/capture/weight_names.h"

namespace dsv4::verify {

namespace {

// Bounds on what the decoder allocates before reading it: strings are attribute values, dataset
// paths and notes (the reader refuses string attributes over 1 MiB); counts are layers, calls,
// stages, notes; ranks are tensor ranks.
constexpr uint64_t kMaxString = uint64_t{1} << 20;
constexpr uint64_t kMaxCount = uint64_t{1} << 24;
constexpr uint64_t kMaxRank = 16;
// Tags between the parts: a stream cut short or out of step fails at the next tag.
constexpr uint32_t kTagCapture = 0x43415031;  // "CAP1"
constexpr uint32_t kTagLayer = 0x4c415952;    // "LAYR"
constexpr uint32_t kTagCall = 0x43414c4c;     // "CALL"
constexpr uint32_t kTagEnd = 0x454e4421;      // "END!"

[[noreturn]] void malformed(const std::string& what) { throw std::runtime_error("capture stream: " + what); }

class Writer {
 public:
  explicit Writer(ByteSink& sink) : sink_(sink) {}
  template <typename T>
  void scalar(T value) {
    static_assert(std::is_arithmetic_v<T>);
    sink_.write(&value, sizeof value);
  }
  void count(std::size_t n) { scalar<uint64_t>(n); }
  void string(const std::string& s) {
    count(s.size());
    sink_.write(s.data(), s.size());
  }
  template <typename T>
  void array(const T* data, std::size_t n) {
    count(n);
    if (n > 0) sink_.write(data, n * sizeof(T));  // an empty matrix's data() may be null
  }

 private:
  ByteSink& sink_;
};

class Reader {
 public:
  explicit Reader(ByteSource& source) : source_(source) {}
  template <typename T>
  T scalar() {
    static_assert(std::is_arithmetic_v<T>);
    T value;
    source_.read(&value, sizeof value);
    return value;
  }
  uint64_t count(uint64_t bound, const char* what) {
    const uint64_t n = scalar<uint64_t>();
    if (n > bound) malformed(fmt::format("{} {} exceeds the bound {}", what, n, bound));
    return n;
  }
  std::string string() {
    std::string s(count(kMaxString, "string length"), '\0');
    source_.read(s.data(), s.size());
    return s;
  }
  template <typename T>
  void array(T* data, uint64_t n, const char* what) {
    if (count(n, what) != n) malformed(fmt::format("{}: fewer values than its shape holds", what));
    if (n > 0) source_.read(data, n * sizeof(T));
  }
  void tag(uint32_t expected) {
    const uint32_t found = scalar<uint32_t>();
    if (found != expected) malformed(fmt::format("tag {:#x} where {:#x} belongs", found, expected));
  }

 private:
  ByteSource& source_;
};

// The product of extents, refused past `bound` (no overflow on the way).
uint64_t checked_numel(const std::vector<int64_t>& shape, uint64_t bound, const char* what) {
  uint64_t n = 1;
  for (int64_t extent : shape) {
    if (extent < 0) malformed(fmt::format("{}: negative extent {}", what, extent));
    if (extent != 0 && n > bound / static_cast<uint64_t>(extent))
      malformed(fmt::format("{}: more than {} elements", what, bound));
    n *= static_cast<uint64_t>(extent);
  }
  return n;
}

void encode_tensor(Writer& w, Tensor& t) {
  w.array(t.shape.data(), t.shape.size());
  w.string(t.dtype);
  w.scalar<uint8_t>(t.is_index);
  w.array(t.values.data(), t.values.size());
  std::vector<double>().swap(t.values);
}

Tensor decode_tensor(Reader& r, uint64_t max_elements) {
  Tensor t;
  t.shape.resize(r.count(kMaxRank, "tensor rank"));
  for (int64_t& extent : t.shape) extent = r.scalar<int64_t>();
  t.dtype = r.string();
  t.is_index = r.scalar<uint8_t>() != 0;
  t.values.resize(checked_numel(t.shape, max_elements, "tensor"));
  r.array(t.values.data(), t.values.size(), "tensor values");
  return t;
}

// A weight (ref::Mat, row-major, or ref::Vec): its extents, then its values.
template <typename Matrix>
void encode_matrix(Writer& w, Matrix& m) {
  w.scalar<int64_t>(m.rows());
  w.scalar<int64_t>(m.cols());
  w.array(m.data(), static_cast<std::size_t>(m.size()));
  m.resize(0, 1);
}

template <typename Matrix>
void decode_matrix(Reader& r, Matrix& m, uint64_t max_elements) {
  const std::vector<int64_t> shape{r.scalar<int64_t>(), r.scalar<int64_t>()};
  checked_numel(shape, max_elements, "weight");
  if constexpr (Matrix::ColsAtCompileTime == 1) {
    if (shape[1] != 1) malformed(fmt::format("a vector weight with {} columns", shape[1]));
    m.resize(shape[0]);
  } else {
    m.resize(shape[0], shape[1]);
  }
  r.array(m.data(), static_cast<uint64_t>(m.size()), "weight values");
}

void encode_layer(Writer& w, LayerCapture& layer) {
  w.scalar<uint32_t>(kTagLayer);
  w.scalar<int32_t>(layer.index);
  w.scalar<int32_t>(layer.compress_ratio);
  ref::AttentionWeights& weights = layer.weights;
  for (int value : {weights.compress_ratio, weights.compressor.ratio, weights.compressor.head_dim,
                    weights.indexer.compressor.ratio, weights.indexer.compressor.head_dim}) {
    w.scalar<int32_t>(value);
  }
  for (const WeightName& name : weight_names()) {
    visit_weight(weights, name.name, [&](auto& member) { encode_matrix(w, member); });
  }
  w.count(layer.weight_linear_kinds.size());
  for (const auto& [name, kind] : layer.weight_linear_kinds) {
    w.string(name);
    w.string(kind);
  }
  w.count(layer.calls.size());
  for (CallCapture& call : layer.calls) {
    w.scalar<uint32_t>(kTagCall);
    w.scalar<int32_t>(call.index);
    w.scalar<int64_t>(call.start_pos);
    w.scalar<int64_t>(call.seqlen);
    w.scalar<int32_t>(call.batch);
    w.count(call.stages.size());
    for (auto& [name, tensor] : call.stages) {
      w.string(name);
      encode_tensor(w, tensor);
    }
  }
}

LayerCapture decode_layer(Reader& r, uint64_t max_elements) {
  r.tag(kTagLayer);
  LayerCapture layer;
  layer.index = r.scalar<int32_t>();
  layer.compress_ratio = r.scalar<int32_t>();
  ref::AttentionWeights& weights = layer.weights;
  for (int* value : {&weights.compress_ratio, &weights.compressor.ratio, &weights.compressor.head_dim,
                     &weights.indexer.compressor.ratio, &weights.indexer.compressor.head_dim}) {
    *value = r.scalar<int32_t>();
  }
  for (const WeightName& name : weight_names()) {
    visit_weight(weights, name.name, [&](auto& member) { decode_matrix(r, member, max_elements); });
  }
  for (uint64_t n = r.count(kMaxCount, "linear kinds"); n > 0; --n) {
    std::string name = r.string();
    layer.weight_linear_kinds[name] = r.string();
  }
  layer.calls.resize(r.count(kMaxCount, "calls"));
  for (CallCapture& call : layer.calls) {
    r.tag(kTagCall);
    call.index = r.scalar<int32_t>();
    call.start_pos = r.scalar<int64_t>();
    call.seqlen = r.scalar<int64_t>();
    call.batch = r.scalar<int32_t>();
    for (uint64_t n = r.count(kMaxCount, "stages"); n > 0; --n) {
      std::string name = r.string();
      call.stages[name] = decode_tensor(r, max_elements);
    }
  }
  return layer;
}

}  // namespace

void encode_capture(Capture& capture, ByteSink& sink) {
  Writer w(sink);
  w.scalar<uint32_t>(kTagCapture);
  w.string(capture.path);
  w.string(capture.producer);
  w.string(capture.model);
  w.string(capture.probs_convention);
  w.scalar<int32_t>(capture.format_version);
  w.string(capture.precision);
  const ref::ModelConfig& cfg = capture.config;
  w.string(cfg.name);
  for (const ConfigIntAttr& a : kConfigIntAttrs) w.scalar<int32_t>(cfg.*a.field);
  for (const ConfigRealAttr& a : kConfigRealAttrs) w.scalar<double>(cfg.*a.field);
  w.array(cfg.compress_ratios.data(), cfg.compress_ratios.size());
  w.count(capture.layers.size());
  for (auto& [index, layer] : capture.layers) encode_layer(w, layer);
  w.count(capture.notes.size());
  for (const std::string& note : capture.notes) w.string(note);
  w.scalar<uint32_t>(kTagEnd);
}

Capture decode_capture(ByteSource& source, int64_t max_tensor_elements) {
  const uint64_t max_elements = static_cast<uint64_t>(std::max<int64_t>(max_tensor_elements, 0));
  Reader r(source);
  r.tag(kTagCapture);
  Capture capture;
  capture.path = r.string();
  capture.producer = r.string();
  capture.model = r.string();
  capture.probs_convention = r.string();
  capture.format_version = r.scalar<int32_t>();
  capture.precision = r.string();
  ref::ModelConfig& cfg = capture.config;
  cfg.name = r.string();
  for (const ConfigIntAttr& a : kConfigIntAttrs) cfg.*a.field = r.scalar<int32_t>();
  for (const ConfigRealAttr& a : kConfigRealAttrs) cfg.*a.field = r.scalar<double>();
  cfg.compress_ratios.resize(r.count(kMaxCount, "compress ratios"));
  for (int& ratio : cfg.compress_ratios) ratio = r.scalar<int32_t>();
  for (uint64_t n = r.count(kMaxCount, "layers"); n > 0; --n) {
    LayerCapture layer = decode_layer(r, max_elements);
    const int index = layer.index;
    if (!capture.layers.emplace(index, std::move(layer)).second) malformed(fmt::format("layer {} twice", index));
  }
  capture.notes.resize(r.count(kMaxCount, "notes"));
  for (std::string& note : capture.notes) note = r.string();
  r.tag(kTagEnd);
  return capture;
}

}  // namespace dsv4::verify
