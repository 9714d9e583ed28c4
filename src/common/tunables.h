// Every GEEPS_* environment variable libgeeps and its tools read, declared
// once: its name, where it lands, how a value is written, its default and
// one line of doc. ApplyEnvironment(Config*) reads the Config rows from this
// list (ranges and words included); `geeps_launch --help-env` prints it and
// docs/operations.md's table is generated from it (tests/tunables_test.cc
// checks both, and that every GEEPS_* variable the sources read is here).
//
// Header-only dependencies (geeps/config.h): geeps_launch, which does not
// link libgeeps, compiles this file too.
#ifndef GEEPS_COMMON_TUNABLES_H_
#define GEEPS_COMMON_TUNABLES_H_

#include <string>
#include <string_view>
#include <vector>

#include "geeps/config.h"

namespace geeps::tunables {

// Who reads a variable.
enum class Scope {
  kConfig,       // ApplyEnvironment(Config*): the application calls it
  kProcess,      // Process::Join (placement, rank discovery, sockets)
  kDiagnostics,  // logging and traces, read by every process by itself
  kTestMode,     // read by every worker by itself, so a whole suite runs in it
};

enum class Kind {
  kInteger,  // a decimal integer in [lo, hi] (booleans: 0 or 1)
  kChoice,   // one of `words`
  kText,     // any text (a path, a host name)
  kOther,    // parsed where it is read (`values` says how it is written)
};

struct Word {
  const char* word;
  void (*set)(Config*);  // Config rows; null elsewhere
};

struct Tunable {
  const char* variable = "";  // "GEEPS_NUM_WORKERS"
  Scope scope = Scope::kConfig;
  Kind kind = Kind::kOther;
  const char* field = "";  // "Config::num_workers", "ProcessOptions::role", or ""
  const char* doc = "";    // one line
  // kInteger:
  long long lo = 0, hi = 0;
  void (*set_integer)(Config*, long long) = nullptr;  // Config rows
  long long (*get_integer)(const Config&) = nullptr;  // Config rows: the default
  // kChoice:
  std::vector<Word> words;
  const char* (*get_word)(const Config&) = nullptr;  // Config rows: the default
  // kText (Config rows):
  void (*set_text)(Config*, const char*) = nullptr;
  // Rows that are not Config's (and kOther): how a value is written and the
  // default, as text.
  const char* values = "";
  const char* fixed_default = "";
};

// The list, in the order the help and the doc print it.
const std::vector<Tunable>& All();
// The row of `variable`, or null.
const Tunable* Find(std::string_view variable);
// How a value is written: "1..1024", "0|1", "off|required|if-present", "path".
std::string Values(const Tunable& t);
// The default: for Config rows, what a default-constructed Config holds.
std::string Default(const Tunable& t);
// What `geeps_launch --help-env` prints.
std::string HelpText();
// docs/operations.md's table (between its "tunables" markers).
std::string MarkdownTable();
// `text` as a markdown table cell: its pipes escaped.
std::string MarkdownCell(std::string_view text);

}  // namespace geeps::tunables

#endif  // GEEPS_COMMON_TUNABLES_H_
