// The one list of GEEPS_* variables (src/common/tunables.h): well formed,
// what ApplyEnvironment reads (every Config row's range and words, checked
// row by row), complete (every GEEPS_* variable the sources name is in it,
// and nothing else), and the tables of docs/operations.md and docs/api.md
// generated from it.
#include "common/tunables.h"
#include "common/config_doc.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "geeps/config.h"
#include "test_paths.h"

namespace geeps::tunables {
namespace {

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Sets one variable for the scope of a test step.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

TEST(TunablesTest, EveryRowIsWellFormed) {
  std::set<std::string> names;
  for (const Tunable& t : All()) {
    SCOPED_TRACE(t.variable);
    EXPECT_EQ(std::string(t.variable).rfind("GEEPS_", 0), 0u);
    EXPECT_TRUE(names.insert(t.variable).second) << "declared twice";
    EXPECT_GT(std::string(t.doc).size(), 10u);
    EXPECT_FALSE(Values(t).empty());
    EXPECT_EQ(Find(t.variable), &t);
    if (t.scope != Scope::kConfig) continue;
    switch (t.kind) {
      case Kind::kInteger:
        EXPECT_TRUE(t.set_integer != nullptr && t.get_integer != nullptr);
        EXPECT_LT(t.lo, t.hi);
        break;
      case Kind::kChoice:
        EXPECT_GE(t.words.size(), 2u);
        EXPECT_NE(t.get_word, nullptr);
        break;
      case Kind::kText:
        EXPECT_NE(t.set_text, nullptr);
        break;
      case Kind::kOther:
        ADD_FAILURE() << "a Config row must say how ApplyEnvironment reads it";
    }
  }
  EXPECT_EQ(Find("GEEPS_NO_SUCH_VARIABLE"), nullptr);
}

TEST(TunablesTest, ConfigDefaultsLieInTheirRanges) {
  const Config defaults;
  for (const Tunable& t : All()) {
    SCOPED_TRACE(t.variable);
    if (t.scope != Scope::kConfig) continue;
    if (t.kind == Kind::kInteger) {
      const long long d = t.get_integer(defaults);
      EXPECT_GE(d, t.lo);
      EXPECT_LE(d, t.hi);
    } else if (t.kind == Kind::kChoice) {
      const std::string d = t.get_word(defaults);
      bool found = false;
      for (const Word& w : t.words) found = found || d == w.word;
      EXPECT_TRUE(found) << d;
    }
  }
}

// Each integer row: both ends of its range are taken and set the field;
// one past either end, and a word, are refused naming the variable.
TEST(TunablesTest, IntegerRowsTakeTheirRangeAndRefuseTheRest) {
  int rows = 0;
  for (const Tunable& t : All()) {
    if (t.scope != Scope::kConfig || t.kind != Kind::kInteger) continue;
    SCOPED_TRACE(t.variable);
    ++rows;
    for (long long v : {t.lo, t.hi}) {
      ScopedEnv env(t.variable, std::to_string(v));
      Config c;
      ASSERT_TRUE(ApplyEnvironment(&c).ok()) << v;
      EXPECT_EQ(t.get_integer(c), v);
    }
    for (const std::string& bad :
         {std::to_string(t.lo - 1), std::to_string(t.hi) + "0", std::string("many")}) {
      ScopedEnv env(t.variable, bad);
      Config c;
      const Status s = ApplyEnvironment(&c);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(s.message().find(t.variable), std::string::npos) << s.message();
    }
  }
  EXPECT_GE(rows, 20);
}

TEST(TunablesTest, ChoiceAndTextRowsSetTheirField) {
  for (const Tunable& t : All()) {
    if (t.scope != Scope::kConfig) continue;
    SCOPED_TRACE(t.variable);
    if (t.kind == Kind::kChoice) {
      for (const Word& w : t.words) {
        ScopedEnv env(t.variable, w.word);
        Config c;
        ASSERT_TRUE(ApplyEnvironment(&c).ok());
        EXPECT_STREQ(t.get_word(c), w.word);
      }
      ScopedEnv env(t.variable, "sometimes");
      Config c;
      const Status s = ApplyEnvironment(&c);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find(t.variable), std::string::npos) << s.message();
      EXPECT_NE(s.message().find(Values(t)), std::string::npos) << s.message();
    } else if (t.kind == Kind::kText) {
      ScopedEnv env(t.variable, "/some/where");
      Config c;
      ASSERT_TRUE(ApplyEnvironment(&c).ok());
      EXPECT_TRUE(c.stats_file == "/some/where" || c.checkpoint_dir == "/some/where");
    }
  }
}

// Every whole string literal "GEEPS_..." in src/ names a listed variable,
// and every variable listed apart from Config's is named by some source
// (nothing listed that nobody reads or sets).
TEST(TunablesTest, TheListIsWhatTheSourcesRead) {
  const std::filesystem::path src = ::geeps::testing::SourceFile("src");
  const std::regex literal("\"(GEEPS_[A-Z0-9_]+)\"");
  std::set<std::string> named;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(src)) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".cc" && ext != ".h" && ext != ".cu") continue;
    if (entry.path().filename() == "tunables.cc") continue;  // the list itself
    const std::string text = ReadFile(entry.path());
    for (std::sregex_iterator m(text.begin(), text.end(), literal), end; m != end; ++m)
      named.insert((*m)[1].str());
  }
  for (const std::string& n : named) EXPECT_NE(Find(n), nullptr) << n << " is read but not listed";
  // Config's rows are read from the list itself (the tests above).
  for (const Tunable& t : All()) {
    if (t.scope == Scope::kConfig) continue;
    EXPECT_EQ(named.count(t.variable), 1u) << t.variable << " is listed but no source names it";
  }
}

// The lines of `doc` (a path under the source tree) between its
// "<!-- marker:begin ...-->" line and its "<!-- marker:end -->" line; a
// failure where either is missing.
std::string GeneratedSection(const std::string& doc, const std::string& marker) {
  const std::string text = ReadFile(::geeps::testing::SourceFile(doc));
  const size_t b = text.find("<!-- " + marker + ":begin");
  const size_t e = text.find("<!-- " + marker + ":end -->", b);
  if (b == std::string::npos || e == std::string::npos) {
    ADD_FAILURE() << doc << " has no " << marker << " markers";
    return "";
  }
  const size_t table = text.find('\n', b) + 1;
  return text.substr(table, e - table);
}

TEST(TunablesTest, OperationsDocHoldsTheGeneratedTable) {
  EXPECT_EQ(GeneratedSection("docs/operations.md", "tunables"), MarkdownTable())
      << "regenerate it: bash scripts/update-env-doc.sh";
}

TEST(TunablesTest, ApiDocHoldsTheGeneratedConfigTable) {
  EXPECT_EQ(GeneratedSection("docs/api.md", "config-table"), ConfigMarkdownTable())
      << "regenerate it: bash scripts/update-env-doc.sh";
}

// Every Config row has the guide's meaning (src/common/config_doc.cc), so a
// new field's row says more than its one line of help.
TEST(TunablesTest, EveryConfigRowHasAMeaningInTheGuide) {
  int rows = 0;
  for (const Tunable& t : All()) {
    if (t.scope != Scope::kConfig) continue;
    ++rows;
    EXPECT_NE(ConfigMeaning(t.field), nullptr) << t.field << ": add its meaning to config_doc.cc";
    EXPECT_NE(ConfigMarkdownTable().find(std::string("| `") + t.variable + "` |"),
              std::string::npos)
        << t.variable;
  }
  EXPECT_GE(rows, 29);
  EXPECT_EQ(ConfigMeaning("Config::no_such_field"), nullptr);
  EXPECT_NE(
      ConfigMarkdownTable().find("| `prefetch_depth` | `GEEPS_PREFETCH_DEPTH` | `0..64` | `2` |"),
      std::string::npos);
}

TEST(TunablesTest, HelpNamesEveryVariable) {
  const std::string help = HelpText();
  for (const Tunable& t : All()) {
    EXPECT_NE(help.find(t.variable), std::string::npos) << t.variable;
    EXPECT_NE(help.find(Values(t)), std::string::npos) << t.variable;
  }
}

}  // namespace
}  // namespace geeps::tunables
