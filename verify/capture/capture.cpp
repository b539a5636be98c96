#include "verify/capture/capture.h"

#include <stdexcept>

namespace dsv4::verify {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t extent : shape) n *= extent;
  return n;
}

const Tensor& CallCapture::stage(const std::string& name) const {
  auto it = stages.find(name);
  if (it == stages.end()) {
    throw std::out_of_range("call " + std::to_string(index) + " has no stage '" + name + "'");
  }
  return it->second;
}

}  // namespace dsv4::verify
