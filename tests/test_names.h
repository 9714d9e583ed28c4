// Names of table-driven (parameterised) tests from their cases' prose
// names: "a lost part, then ..." -> "ALostPartThen...", letters and digits
// only, as gtest requires.
#ifndef GEEPS_TESTS_TEST_NAMES_H_
#define GEEPS_TESTS_TEST_NAMES_H_

#include <cctype>
#include <string>

namespace geeps::testing {

inline std::string CamelCaseName(const std::string& prose) {
  std::string name;
  bool upper = true;
  for (char ch : prose) {
    if (std::isalnum(static_cast<unsigned char>(ch)) == 0) {
      upper = true;
      continue;
    }
    name += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch;
    upper = false;
  }
  return name;
}

}  // namespace geeps::testing

#endif  // GEEPS_TESTS_TEST_NAMES_H_
