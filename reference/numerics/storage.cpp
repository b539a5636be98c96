// Names of the storage formats, for policies, reports and command lines.
#include "reference/numerics/storage.h"

#include <stdexcept>

namespace dsv4::ref {

std::string to_string(Storage s) {
  switch (s) {
    case Storage::fp64: return "fp64";
    case Storage::fp32: return "fp32";
    case Storage::bf16: return "bf16";
  }
  throw std::invalid_argument("to_string: unknown Storage " + std::to_string(static_cast<int>(s)));
}

Storage storage_from_string(const std::string& name) {
  for (Storage s : {Storage::fp64, Storage::fp32, Storage::bf16})
    if (to_string(s) == name) return s;
  throw std::invalid_argument("unknown storage '" + name + "': expected fp64, fp32 or bf16");
}

}  // namespace dsv4::ref
