#pragma once
// The one exception a capture reader throws for bad input. Its message is one line:
//   <file>: <object path>: expected <...>, found <...>
// e.g. "run.h5: /layers/3/calls/0/q: expected shape [b,s,H,d] = [1,8,4,128], found [1,8,4,64]".
// The CLI prints it and exits with status 2.
#include <stdexcept>
#include <string>

namespace dsv4::verify {

class CaptureError : public std::runtime_error {
 public:
  CaptureError(std::string file, std::string object, std::string expected, std::string found);
  const std::string& file() const { return file_; }
  const std::string& object() const { return object_; }  // "/layers/3/calls/0/x", "/config: attribute 'dim'"
  const std::string& expected() const { return expected_; }
  const std::string& found() const { return found_; }

 private:
  std::string file_, object_, expected_, found_;
};

}  // namespace dsv4::verify
