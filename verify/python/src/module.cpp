// dsv4_oracle._core: the C++ oracle and verifier, bound with nanobind (docs/python.md).
#include <nanobind/nanobind.h>

namespace dsv4::python {
namespace nb = nanobind;
void bind_oracle(nb::module_& m);
void bind_numerics(nb::module_& m);
void bind_layouts(nb::module_& m);
void bind_verify(nb::module_& m);
void bind_capture(nb::module_& m);
}  // namespace dsv4::python

NB_MODULE(_core, m) {
  m.doc() = "dsv4-oracle: the CPU oracle of DeepSeek-V4 attention, its comparators, capture I/O and engine layouts";
  dsv4::python::bind_oracle(m);
  dsv4::python::bind_numerics(m);
  dsv4::python::bind_layouts(m);
  dsv4::python::bind_verify(m);
  dsv4::python::bind_capture(m);
}
