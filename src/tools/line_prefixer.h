// Cuts a byte stream into lines and puts a prefix in front of each: how
// geeps_launch labels its ranks' output ("[rank 3] ...").
#ifndef GEEPS_TOOLS_LINE_PREFIXER_H_
#define GEEPS_TOOLS_LINE_PREFIXER_H_

#include <cstddef>
#include <string>
#include <utility>

namespace geeps::tools {

class LinePrefixer {
 public:
  // A line longer than `max_line` bytes (without its '\n') is cut into pieces
  // of that size, each written as a line of its own. REQUIRES: max_line >= 1.
  explicit LinePrefixer(std::string prefix, size_t max_line = size_t{64} * 1024)
      : prefix_(std::move(prefix)), max_line_(max_line) {}

  // Takes `size` more bytes; returns the complete lines among what was taken
  // so far, each prefixed and ending in '\n' (often empty).
  std::string Add(const char* data, size_t size);

  // Returns the last, unterminated line prefixed and with a '\n' added (empty
  // when there is none), as at the end of the stream.
  std::string Finish();

 private:
  std::string prefix_;
  size_t max_line_;
  std::string pending_;  // the start of a line not yet complete
};

}  // namespace geeps::tools

#endif  // GEEPS_TOOLS_LINE_PREFIXER_H_
