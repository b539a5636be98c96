#pragma once
// A Capture as a byte stream, for handing a capture from the process that read it to the one that
// uses it (isolated_read.h): every member of capture.h, doubles bit for bit, in this machine's byte
// order (both ends are the same program). Not a file format: nothing is ever stored in it.
#include <cstddef>
#include <cstdint>

#include "verify/capture/capture.h"

namespace dsv4::verify {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void write(const void* data, std::size_t size) = 0;
};

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Exactly `size` bytes, or throws (the stream ended or failed).
  virtual void read(void* data, std::size_t size) = 0;
};

// Writes `capture` and empties it as it goes (each tensor's and weight's memory is released once
// written), so the two processes together hold about one capture, not two.
void encode_capture(Capture& capture, ByteSink& sink);

// Reads what encode_capture wrote. Throws std::runtime_error when the bytes are not such a stream
// (a count past its bound, a tensor whose values do not match its shape, a bad tag); no allocation
// exceeds max_tensor_elements doubles or 1 MiB per string.
Capture decode_capture(ByteSource& source, int64_t max_tensor_elements);

}  // namespace dsv4::verify
