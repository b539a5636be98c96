#include "verify/replay/inspect.h"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <stdexcept>

#include "reference/pre_quant.h"
#include "reference/precision.h"
#include "reference/stage_registry.h"
#include "verify/capture/config_attrs.h"
#include "verify/compare/shape.h"

namespace dsv4::verify {

namespace {

std::string call_kind(const CallCapture& call) {
  if (call.start_pos == 0) return "prefill";
  return call.seqlen == 1 ? "decode" : "chunked";
}

}  // namespace

void describe_capture(std::ostream& out, const Capture& c) {
  fmt::print(out, "file: {}\n", c.path);
  fmt::print(out, "format: dsv4-capture version {}\nproducer: {}\nmodel: {}\n", c.format_version,
             c.producer.empty() ? "-" : c.producer, c.model.empty() ? "-" : c.model);
  std::string config;
  for (const ConfigIntAttr& a : kConfigIntAttrs) config += fmt::format(" {}={}", a.name, c.config.*a.field);
  for (const ConfigRealAttr& a : kConfigRealAttrs) config += fmt::format(" {}={}", a.name, c.config.*a.field);
  fmt::print(out, "config:{}\nprecision: {}", config, c.precision);
  try {
    ref::PrecisionPolicy::by_name(c.precision);
    fmt::print(out, "\n");
  } catch (const std::invalid_argument&) {
    fmt::print(out, "  (not a named policy: replay it with --precision NAME)\n");
  }

  for (const auto& [index, layer] : c.layers) {
    fmt::print(out, "\nlayer {}: compress_ratio {}, {} call{}, batch {}\n", index, layer.compress_ratio,
               layer.calls.size(), layer.calls.size() == 1 ? "" : "s", layer.calls.front().batch);
    int64_t end = 0;
    for (const CallCapture& call : layer.calls) {
      const ref::CallGeometry g{&c.config, layer.compress_ratio, call.batch, call.seqlen, call.start_pos};
      fmt::print(out, "  call {}: {} start_pos {} seqlen {} (kv rows {}, top-k width {})\n", call.index,
                 call_kind(call), call.start_pos, call.seqlen, g.kv_rows(), g.topk_width());
      std::vector<std::string> absent;
      for (const ref::StageDef& s : ref::stages()) {
        if (!ref::in_scope(s.scope, layer.compress_ratio)) continue;
        const std::string name(s.name);
        if (!call.has(name)) {
          absent.push_back(name);
          continue;
        }
        const Tensor& t = call.stage(name);
        fmt::print(out, "    {:<38} {:<16} {}\n", name, format_shape(t.shape), t.dtype);
      }
      for (const ref::PreQuantDef& p : ref::pre_quant_datasets()) {  // optional: listed only when present
        const std::string name(p.name);
        if (call.has(name))
          fmt::print(out, "    {:<38} {:<16} {}\n", name, format_shape(call.stage(name).shape), call.stage(name).dtype);
      }
      if (!absent.empty()) {
        std::string list;
        for (const std::string& a : absent) list += (list.empty() ? "" : ", ") + a;
        fmt::print(out, "    absent: {}\n", list);
      }
      if (call.start_pos != 0 && call.start_pos != end)
        fmt::print(out,
                   "    note: starts at {}, not where the previous call ended ({}): a stage-local replay needs "
                   "its cache/ datasets, a chained replay cannot run it\n",
                   call.start_pos, end);
      end = call.start_pos + call.seqlen;
    }
  }
  if (!c.notes.empty()) {
    fmt::print(out, "\nnotes:\n");
    for (const std::string& n : c.notes) fmt::print(out, "  {}\n", n);
  }
}

}  // namespace dsv4::verify
