#pragma once
// The work of prefill logits v3 (logits_prefill_v3.cu), as host code can check it
// (test_cuda_indexer_host): the logits [s, n_cols] split into units of 4 consecutive queries x one
// chunk of 16 column tiles (128 columns each); the persistent CTAs take units round-robin
// (CTA b: units b, b + grid, ...). Within a unit the key range is the union [lo, hi) of its
// queries' ranges; the chunk's tiles that hold a key of [lo, hi) are computed (their keys read by
// TMA, each column stored as its query's score or -inf), the chunk's other tiles are -inf for every
// query of the unit and read nothing.
#include <cstdint>

#include "cuda/common/numerics.cuh"  // DSV4_HD

namespace dsv4::cuda::prefill_v3 {

inline constexpr int kTileKeys = 128;          // columns (keys) of a tile: the N of the MMA
inline constexpr int kUnitQueries = 4;         // queries of a unit: one a consumer warpgroup
inline constexpr int kUnitTiles = 16;          // column tiles of a unit's chunk (2048 columns)
inline constexpr int64_t kNoKeys = INT64_MAX;  // lo of a unit whose ranges are all empty

// The unit count fits an int (the launcher checks): the kernel divides in 32 bits.
inline constexpr int64_t kMaxUnits = INT32_MAX;

struct Schedule {
  int64_t queries = 0, n_cols = 0;
  DSV4_HD int64_t col_tiles() const { return (n_cols + kTileKeys - 1) / kTileKeys; }
  DSV4_HD int64_t chunks() const { return (col_tiles() + kUnitTiles - 1) / kUnitTiles; }
  DSV4_HD int64_t query_groups() const { return (queries + kUnitQueries - 1) / kUnitQueries; }
  DSV4_HD int64_t units() const { return query_groups() * chunks(); }
};

// Unit u of a schedule, given the union [lo, hi) of its queries' key ranges (lo = kNoKeys, hi = 0
// when every range is empty). Tiles are indices of 128-column tiles: [chunk_begin, chunk_end) the
// chunk, [first, last) the computed ones (first == last: none).
struct Unit {
  int64_t first_query = 0;
  int64_t chunk_begin = 0, chunk_end = 0;
  int64_t first = 0, last = 0;
  DSV4_HD bool computed(int64_t tile) const { return tile >= first && tile < last; }
};

// unit_query_group(u, chunks): the query group of unit u (its first query is 4 times it).
DSV4_HD inline int unit_query_group(int u, int chunks) { return u / chunks; }

DSV4_HD inline Unit unit_of(const Schedule& s, int u, int64_t lo, int64_t hi) {
  Unit w;
  const int chunks = static_cast<int>(s.chunks());
  const int group = unit_query_group(u, chunks);
  w.first_query = static_cast<int64_t>(group) * kUnitQueries;
  w.chunk_begin = static_cast<int64_t>(u - group * chunks) * kUnitTiles;
  const int64_t tiles = s.col_tiles();
  w.chunk_end = w.chunk_begin + kUnitTiles < tiles ? w.chunk_begin + kUnitTiles : tiles;
  if (hi > lo) {
    const int64_t lo_tile = lo / kTileKeys, hi_tile = (hi + kTileKeys - 1) / kTileKeys;
    w.first = w.chunk_begin > lo_tile ? w.chunk_begin : lo_tile;
    w.last = w.chunk_end < hi_tile ? w.chunk_end : hi_tile;
  }
  if (w.last <= w.first) w.first = w.last = w.chunk_end;
  return w;
}

// The union of the ranges [ks[i], ke[i]) of queries first .. first + 3 (those below `queries`);
// empty ranges (ke <= ks) take no part.
DSV4_HD inline void unit_key_range(const int32_t* ks, const int32_t* ke, int64_t first, int64_t queries, int64_t& lo,
                                   int64_t& hi) {
  lo = kNoKeys;
  hi = 0;
  for (int k = 0; k < kUnitQueries; ++k) {
    const int64_t i = first + k;
    if (i < queries && ke[i] > ks[i]) {
      lo = lo < ks[i] ? lo : static_cast<int64_t>(ks[i]);
      hi = hi > ke[i] ? hi : static_cast<int64_t>(ke[i]);
    }
  }
}

}  // namespace dsv4::cuda::prefill_v3
