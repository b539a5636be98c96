#pragma once
// A group: its members, navigation by relative path ("calls/0/indexer/q"), and writing datasets.
// Only hard links are followed: a soft or external link (which could point into another file) is
// reported as an error when opened and listed as Member::Kind::link.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "verify/hdf5/dataset.h"
#include "verify/hdf5/object.h"

namespace dsv4::verify::hdf5 {

struct Member {
  enum class Kind { group, dataset, link, other };
  std::string name;
  Kind kind = Kind::other;
};

// "a group", "a dataset", "a soft or external link (...)", "nothing": for messages.
const char* describe(Member::Kind kind);

// How write() stores a dataset. Chunked gzip (with byte shuffle) shrinks captures several-fold but
// costs time, so it is off by default.
struct WriteOptions {
  bool compress = false;
  int gzip_level = 4;  // 1..9
};

class Group : public Object {
 public:
  Group(Handle handle, std::string file, std::string path)
      : Object(std::move(handle), std::move(file), std::move(path)) {}

  std::vector<Member> members() const;  // in name order
  // What a relative path names: Kind::other when nothing (or an intermediate is not a group).
  Member::Kind kind_of(const std::string& relative) const;

  // Throw Error ("expected a group, found a dataset", "... found nothing", ...) otherwise.
  Group group(const std::string& relative) const;
  Dataset dataset(const std::string& relative) const;

  // Creates missing intermediate groups.
  Group create_group(const std::string& relative);
  // Stored as float32 (T = float), float64 (double), int32 (int32_t) or int64 (int64_t), in
  // row-major order; values.size() must equal the product of shape.
  template <typename T>
  Dataset write(const std::string& relative, const std::vector<int64_t>& shape, std::span<const T> values,
                const WriteOptions& options = {});
  // Unlinks a member (its storage is not reclaimed until the file is rewritten).
  void remove(const std::string& relative);

 private:
  Handle open_object(const std::string& relative, Member::Kind want, const char* expected) const;
};

}  // namespace dsv4::verify::hdf5
