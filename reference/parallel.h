#pragma once
// Deterministic parallel loops: work is split by index (token, head, fixed-size row chunk), never
// by thread count, and no reduction crosses threads, so results are bitwise the same with any
// OMP_NUM_THREADS.
#include <cstdint>

namespace dsv4::ref {

template <typename F>
void parallel_for(int64_t n, F&& body) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace dsv4::ref
