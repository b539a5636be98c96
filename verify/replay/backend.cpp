#include "verify/replay/backend.h"

namespace dsv4::verify {

std::unique_ptr<ref::StageProvider> make_backend(const std::string& name, const std::string& precision) {
  if (name == "oracle" || name == "cpu") return std::make_unique<ref::StageProvider>();
  if (name == "cuda") return make_cuda_backend(precision);
  throw std::invalid_argument("backend '" + name + "': expected cpu (the oracle) or cuda");
}

}  // namespace dsv4::verify
