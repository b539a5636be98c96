// Capture files (format v1, docs/capture-format.md) in Python: read, build, write.
#include <nanobind/nanobind.h>
#include <nanobind/stl/bind_map.h>
#include <nanobind/stl/bind_vector.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "verify/capture/capture.h"
#include "verify/capture/reader.h"
#include "verify/capture/writer.h"
#include "verify/python/src/arrays.h"

NB_MAKE_OPAQUE(std::map<std::string, dsv4::verify::Tensor>)
NB_MAKE_OPAQUE(std::vector<dsv4::verify::CallCapture>)
NB_MAKE_OPAQUE(std::map<int, dsv4::verify::LayerCapture>)

namespace dsv4::python {

using namespace nb::literals;
namespace v = verify;

void bind_capture(nb::module_& m) {
  nb::class_<v::Tensor>(m, "CaptureTensor", "One dataset: shape, values (float64), dtype attribute, is_index.")
      .def(nb::init<>())
      .def(
          "__init__",
          [](v::Tensor* self, InAny values, const std::string& dtype, bool is_index) {
            new (self) v::Tensor{shape_of(values), std::vector<double>(values.data(), values.data() + values.size()),
                                 dtype, is_index};
          },
          "values"_a, "dtype"_a = "float32", "is_index"_a = false)
      .def_rw("shape", &v::Tensor::shape)
      .def_rw("dtype", &v::Tensor::dtype)
      .def_rw("is_index", &v::Tensor::is_index)
      .def_prop_rw(
          "values",
          [](const v::Tensor& t) {
            std::vector<size_t> shape(t.shape.begin(), t.shape.end());
            return out(std::vector<double>(t.values), shape);
          },
          [](v::Tensor& t, InAny values) {
            t.shape = shape_of(values);
            t.values.assign(values.data(), values.data() + values.size());
          },
          nb::rv_policy::move);
  nb::bind_map<std::map<std::string, v::Tensor>, nb::rv_policy::reference_internal>(m, "StageMap");
  nb::class_<v::CallCapture>(m, "CallCapture")
      .def(nb::init<>())
      .def_rw("index", &v::CallCapture::index)
      .def_rw("start_pos", &v::CallCapture::start_pos)
      .def_rw("seqlen", &v::CallCapture::seqlen)
      .def_rw("batch", &v::CallCapture::batch)
      .def_rw("stages", &v::CallCapture::stages, "{stage name: CaptureTensor}, names of the capture format");
  nb::bind_vector<std::vector<v::CallCapture>, nb::rv_policy::reference_internal>(m, "CallList");
  nb::class_<v::LayerCapture>(m, "LayerCapture")
      .def(nb::init<>())
      .def_rw("index", &v::LayerCapture::index)
      .def_rw("compress_ratio", &v::LayerCapture::compress_ratio)
      .def_rw("weights", &v::LayerCapture::weights)
      .def_rw("weight_linear_kinds", &v::LayerCapture::weight_linear_kinds)
      .def_rw("calls", &v::LayerCapture::calls);
  nb::bind_map<std::map<int, v::LayerCapture>, nb::rv_policy::reference_internal>(m, "LayerMap");
  nb::class_<v::Capture>(m, "Capture", "A capture file's contents (docs/capture-format.md).")
      .def(nb::init<>())
      .def_rw("path", &v::Capture::path)
      .def_rw("producer", &v::Capture::producer)
      .def_rw("model", &v::Capture::model)
      .def_rw("probs_convention", &v::Capture::probs_convention)
      .def_rw("format_version", &v::Capture::format_version)
      .def_rw("config", &v::Capture::config)
      .def_rw("precision", &v::Capture::precision)
      .def_rw("layers", &v::Capture::layers)
      .def_rw("notes", &v::Capture::notes);
  m.def(
      "read_capture", [](const std::string& path) { return v::read_capture(path); }, "path"_a,
      "Reads and validates a capture file (format v1); raises with the file, dataset, expected and found on bad "
      "input.");
  m.def(
      "write_capture",
      [](const std::string& path, const v::Capture& c, bool compress) {
        verify::hdf5::WriteOptions o;
        o.compress = compress;
        v::write_capture(path, c, o);
      },
      "path"_a, "capture"_a, "compress"_a = false,
      "Writes a capture file whole or not at all (float tensors as float32 with their dtype attribute, index tensors "
      "as int32).");
}

}  // namespace dsv4::python
