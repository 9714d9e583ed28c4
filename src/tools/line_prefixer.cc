#include "tools/line_prefixer.h"

namespace geeps::tools {

std::string LinePrefixer::Add(const char* data, size_t size) {
  pending_.append(data, size);
  std::string out;
  size_t begin = 0;
  for (;;) {
    size_t end = pending_.find('\n', begin);
    if (end == std::string::npos || end - begin > max_line_) {
      if (pending_.size() - begin <= max_line_) break;
      end = begin + max_line_;  // a piece of a long line; '\n' added below
      out += prefix_;
      out.append(pending_, begin, max_line_);
      out += '\n';
      begin = end;
      continue;
    }
    out += prefix_;
    out.append(pending_, begin, end + 1 - begin);
    begin = end + 1;
  }
  pending_.erase(0, begin);
  return out;
}

std::string LinePrefixer::Finish() {
  if (pending_.empty()) return "";
  std::string out = prefix_ + pending_ + "\n";
  pending_.clear();
  return out;
}

}  // namespace geeps::tools
