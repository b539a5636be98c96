#pragma once
// Where key t of a sequence lives in a paged indexer cache (indexer_api.h PagedKeys), in the 32-bit
// arithmetic of the v3 and v4 decode kernels (logits_decode_v3.cu, v4), and which bytes of a 64-key
// tile each of v3's 128 threads, or each lane of v4's producer warp, copies; for host and device code: test_cuda_host
// checks the split against integer division, the offsets against cache_layout.cuh's key_offsets, and that the copies of
// a tile cover every code byte and scale word once.
//
// PageDivider splits a key index 0 <= t < 2^31 into (t / d, t % d), d = page_keys >= 1, with one
// 32 x 32 -> 64-bit multiply and a shift instead of a 64-bit division (Granlund and Montgomery's
// round-up method for N = 31-bit numerators): l = ceil(log2 d), m = ceil(2^(31 + l) / d). Then
// m d = 2^(31 + l) + e with 0 <= e < d <= 2^l, so t m / 2^(31 + l) = t / d + t e / (d 2^(31 + l)), and
// the second term is below 2^31 2^l / (d 2^(31 + l)) = 1 / d: floor(t m / 2^(31 + l)) = floor(t / d).
// m < 2^32 (2^(l-1) < d <= 2^l puts 2^(31 + l) / d in [2^31, 2^32)); for a power of two d = 2^l,
// m = 2^31 and the quotient is t >> l. No page size needs rejecting and no branch picks a path.
#include <cstdint>

#include "cuda/common/numerics.cuh"  // DSV4_HD
#include "cuda/indexer/formats.h"
#include "cuda/indexer/indexer_api.h"

namespace dsv4::cuda::page_walk {

struct PageDivider {
  uint32_t page_keys = 1;     // d
  uint32_t magic = 1u << 31;  // m
  uint32_t shift = 31;        // 31 + l
};

struct PageSlot {
  uint32_t page;  // index into the sequence's block-table row
  uint32_t slot;  // key slot within that page
};

// page_keys >= 1 (indexer_logits_decode checks it).
inline PageDivider make_page_divider(int page_keys) {
  const uint64_t d = static_cast<uint64_t>(page_keys);
  uint32_t l = 0;
  while ((uint64_t{1} << l) < d) ++l;
  const uint64_t m = ((uint64_t{1} << (31 + l)) + d - 1) / d;
  return {static_cast<uint32_t>(d), static_cast<uint32_t>(m), 31 + l};
}

// t < 2^31.
DSV4_HD inline PageSlot split(const PageDivider& div, uint32_t t) {
  const uint32_t page = static_cast<uint32_t>((static_cast<uint64_t>(t) * div.magic) >> div.shift);
  return {page, t - page * div.page_keys};
}

// The pool offsets of slot `slot` of pool page `page` (cache_layout.cuh's key_offsets, with the page
// size's products taken once on the host): page_bytes = page_keys (code_bytes + 4) and
// scale_base = the offset of the scale words within a page (DeepGEMM: page_keys code_bytes;
// interleaved: code_bytes, right after slot 0's codes).
// page_bytes < 2^31 (indexer_logits_decode v3 checks it) bounds every other field, so a slot's offset
// within its page is a 32-bit product and the page's start one 32 x 32 -> 64-bit multiply.
struct SlotStrides {
  uint32_t page_bytes = 0;
  uint32_t code_stride = 0;  // interleaved: code_bytes + 4; deepgemm: code_bytes
  uint32_t scale_base = 0;
  uint32_t scale_stride = 0;  // interleaved: code_bytes + 4; deepgemm: 4
};

inline SlotStrides slot_strides(IndexerCacheLayout layout, IndexerFormat format, int page_keys) {
  const uint32_t cb = static_cast<uint32_t>(code_bytes(format));
  const uint32_t interleaved_stride = cb + kIndexerScaleBytes;
  SlotStrides s;
  s.page_bytes = static_cast<uint32_t>(page_keys) * interleaved_stride;
  if (layout == IndexerCacheLayout::interleaved) {
    s.code_stride = interleaved_stride;
    s.scale_base = cb;
    s.scale_stride = interleaved_stride;
  } else {
    s.code_stride = cb;
    s.scale_base = static_cast<uint32_t>(page_keys) * cb;
    s.scale_stride = kIndexerScaleBytes;
  }
  return s;
}

// pool_page: the block table's entry (>= 0: check_decode_tables).
DSV4_HD inline uint64_t code_offset(const SlotStrides& s, uint32_t pool_page, uint32_t slot) {
  return static_cast<uint64_t>(pool_page) * s.page_bytes + slot * s.code_stride;
}
DSV4_HD inline uint64_t scale_offset(const SlotStrides& s, uint32_t pool_page, uint32_t slot) {
  return static_cast<uint64_t>(pool_page) * s.page_bytes + (s.scale_base + slot * s.scale_stride);
}

// ---- the v3 producer's share of a tile ---------------------------------------------------------------

inline constexpr int kTileKeys = 64;
inline constexpr int kTileThreads = 128;
inline constexpr int kWarpKeys = kTileKeys / 4;  // interleaved: the keys a warp looks up and copies

// One copy: key `row` of the tile, its code bytes [byte, +width). The copy at byte 0 of a key also
// copies the key's scale word.
struct CopyUnit {
  int row;
  int byte;
};

// DeepGEMM layout, FP8: 4 copies of 16 bytes a thread, i < 4; thread t takes key t / 2, 16-byte chunk
// 2i + t % 2 (a warp instruction reads the 32-byte sectors of 16 keys whole).
DSV4_HD inline CopyUnit deepgemm_fp8_unit(int t, int i) { return {t / 2, 16 * (2 * i + t % 2)}; }
// DeepGEMM layout, FP4: 2 copies of 16 bytes, i < 2; keys t / 4 and t / 4 + 32, chunk t % 4 (a warp
// instruction reads 8 keys' 64 bytes whole).
DSV4_HD inline CopyUnit deepgemm_fp4_unit(int t, int i) { return {t / 4 + 32 * i, 16 * (t % 4)}; }

// Interleaved layout (slots 4-byte aligned), 4-byte copies: warp w copies keys 16w .. 16w + 15,
// `words` = code_bytes / 4 (FP8 32, FP4 16); lane l copies word l % words of the warp's key
// warp_key(words, l, p) in pass p < 16 / (32 / words). Lane r < 16 looks that key up (lookup_key) and
// the other lanes take its offsets by a shuffle from lane warp_key.
DSV4_HD inline int warp_key(int words, int lane, int pass) { return (32 / words) * pass + lane / words; }
DSV4_HD inline int lookup_key(int lane) { return lane % kWarpKeys; }
DSV4_HD inline CopyUnit interleaved_unit(int words, int t, int pass) {
  const int warp = t / 32, lane = t % 32;
  return {kWarpKeys * warp + warp_key(words, lane, pass), 4 * (lane % words)};
}

// ---- the v4 producer warp's share of a tile ------------------------------------------------------------

inline constexpr int kProducerLanes = 32;
inline constexpr int kLaneLookups = kTileKeys / 16;  // DeepGEMM layout: the keys a lane looks up

// DeepGEMM layout, 16-byte copies: lane l looks up keys l / 2 + 16 j (j < 4) and copies, of key j,
// the units 2 m + l % 2 (m < code_bytes / 32: FP8 4, FP4 2): one warp instruction (j, m) reads 16
// keys' 32-byte sectors whole and stores them conflict-free in the tile layout. The even lane also
// copies the key's scale word.
DSV4_HD inline CopyUnit producer_deepgemm_unit(int lane, int j, int m) {
  return {lane / 2 + 16 * j, 16 * (2 * m + lane % 2)};
}
// Interleaved layout (slots 4-byte aligned), 4-byte copies, `words` = code_bytes / 4: lane l looks
// up keys l and l + 32 (and copies their scale words); pass p < 64 words / 32 copies word l % words of
// key warp_key(words, l, p), whose offsets come by a shuffle from the lane that looked it up:
// lane key % 32, its lookup key / 32 = producer_lookup(words, p) (the same for the whole pass).
DSV4_HD inline CopyUnit producer_interleaved_unit(int words, int lane, int pass) {
  return {warp_key(words, lane, pass), 4 * (lane % words)};
}
DSV4_HD inline int producer_lookup(int words, int pass) { return (32 / words) * pass / 32; }

// ---- the v5 producer's bulk copies (DeepGEMM layout) ---------------------------------------------------
//
// A DeepGEMM page stores its keys' codes contiguously, then their scale words: the keys of a tile that
// share a page are one run, copied as 2 bulk copies (codes, scale words). page_keys % 4 == 0
// (indexer_logits_decode checks it) and tiles start at multiples of 64, so every run starts at a slot
// s = 0 mod 4: its codes (s code_bytes) and scale words (scale_base + 4 s) are 16-byte aligned in a
// 16-byte aligned pool, and every run but the one ending at the sequence's length holds a multiple of
// 4 keys. That run's last keys % 4 scale words are not a multiple of 16 bytes: the producer's lanes
// load them one by one (bulk_scale_keys).

// Keys [row, row + keys) of the tile, slots [slot, slot + keys) of the sequence's page base_page +
// page_index.
struct BulkRun {
  uint32_t row;
  uint32_t page_index;
  uint32_t slot;
  uint32_t keys;
};

// The run starting at key `row` of the tile whose first key is `first` (a multiple of 64), of its
// n_valid <= 64 keys below the sequence's length; base_page <= the page of key first + row. Successive
// runs of a walk are on successive pages.
DSV4_HD inline BulkRun bulk_run(const PageDivider& div, uint32_t first, uint32_t base_page, uint32_t row,
                                uint32_t n_valid) {
  const PageSlot ps = split(div, first + row);
  const uint32_t room = div.page_keys - ps.slot;
  return {row, ps.page - base_page, ps.slot, n_valid - row < room ? n_valid - row : room};
}

// Of a run's keys, those whose scale words a bulk copy moves (a multiple of 4).
DSV4_HD inline uint32_t bulk_scale_keys(uint32_t keys) { return keys & ~3u; }

// The bytes the bulk copies of a tile's n_valid keys complete: every code byte, and the scale words
// of all but the last n_valid % 4 keys (only the last run can end off a multiple of 4).
DSV4_HD inline uint32_t bulk_tile_bytes(uint32_t code_bytes, uint32_t n_valid) {
  return n_valid * code_bytes + bulk_scale_keys(n_valid) * kIndexerScaleBytes;
}

}  // namespace dsv4::cuda::page_walk
