// Helpers shared by the fuzz targets (tests/fuzz/fuzz_*.cc) and by
// tests/fuzz_regression_test.cc, which compiles the same targets into a
// GoogleTest binary to replay tests/fuzz/regressions/.
//
// Every target defines its entry point as GEEPS_FUZZ_ENTRY(data, size), which
// is LLVMFuzzerTestOneInput unless the includer defines it to another name.
#ifndef GEEPS_TESTS_FUZZ_FUZZ_UTIL_H_
#define GEEPS_TESTS_FUZZ_FUZZ_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace geeps::fuzz {

// A property of the code under test does not hold: report it and abort, so
// that libFuzzer saves the input as a crash (and a replaying test dies).
[[noreturn]] inline void Fail(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n", file, line, cond);
  std::abort();
}

// Splits `data` on '\n'. A line that is exactly one byte 0xFF stands for
// "not set" (set == false). A value ends at its first NUL byte, as setenv's
// and getenv's C strings do.
struct Line {
  bool set = true;
  std::string value;
};

inline std::vector<Line> SplitLines(const uint8_t* data, size_t size) {
  std::vector<Line> lines;
  size_t start = 0;
  for (size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == '\n') {
      Line l;
      l.value.assign(reinterpret_cast<const char*>(data) + start, i - start);
      if (l.value.size() == 1 && static_cast<unsigned char>(l.value[0]) == 0xFF) {
        l.set = false;
        l.value.clear();
      }
      l.value = l.value.c_str();
      lines.push_back(std::move(l));
      start = i + 1;
    }
  }
  return lines;
}

}  // namespace geeps::fuzz

#define GEEPS_FUZZ_CHECK(cond)                                   \
  do {                                                           \
    if (!(cond)) ::geeps::fuzz::Fail(__FILE__, __LINE__, #cond); \
  } while (0)

#endif  // GEEPS_TESTS_FUZZ_FUZZ_UTIL_H_
