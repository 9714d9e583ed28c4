// The one way every benchmark reads its command line (header-only, so that
// gpu_bench, built by nvcc and run on a machine without Boost, uses it too).
//
//   uint64_t bytes = 1 << 20;
//   geeps::bench::Flags flags("rw_bench");
//   flags.Add("--bytes", &bytes, "bytes per message");
//   if (int status = flags.Parse(argc, argv); status >= 0) return status;
//
// Each flag is bound to a variable that holds its default. `--name value`
// sets it (`--name` alone for a bool). An unknown flag, a missing value, or
// a value that is not a number of the variable's type (trailing characters,
// out of range) prints "<program>: <reason>" and the usage to stderr, and
// Parse returns 2, the status main should exit with; `--help` prints the
// usage to stdout and Parse returns 0. It returns -1 when all went well.
// Nothing throws: a bad number is an error message, not an abort.
#ifndef GEEPS_BENCHMARKS_FLAGS_H_
#define GEEPS_BENCHMARKS_FLAGS_H_

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace geeps::bench {

class Flags {
 public:
  // Parses one value into its variable; false if the text is not valid.
  using Parser = std::function<bool(const std::string& text)>;

  explicit Flags(std::string program) : program_(std::move(program)) {}

  Flags& Add(const std::string& name, std::string* v, const std::string& help) {
    return AddParser(name, "TEXT", help, [v](const std::string& s) {
      *v = s;
      return true;
    });
  }
  Flags& Add(const std::string& name, int* v, const std::string& help) {
    return AddParser(name, "N", help, [v](const std::string& s) { return ParseInt(s, v); });
  }
  Flags& Add(const std::string& name, uint64_t* v, const std::string& help) {
    return AddParser(name, "N", help, [v](const std::string& s) { return ParseUint(s, v); });
  }
  Flags& Add(const std::string& name, double* v, const std::string& help) {
    return AddParser(name, "X", help, [v](const std::string& s) { return ParseDouble(s, v); });
  }
  // A comma-separated list of integers (replaces the default list).
  Flags& Add(const std::string& name, std::vector<int>* v, const std::string& help) {
    return AddParser(name, "N,N,...", help,
                     [v](const std::string& s) { return ParseList(s, ParseInt, v); });
  }
  // A byte count with an optional K, M or G suffix (binary: 4K = 4096).
  Flags& AddSize(const std::string& name, uint64_t* v, const std::string& help) {
    return AddParser(name, "BYTES", help, [v](const std::string& s) { return ParseSize(s, v); });
  }
  // A comma-separated list of byte counts (replaces the default list).
  Flags& AddSizes(const std::string& name, std::vector<uint64_t>* v, const std::string& help) {
    return AddParser(name, "BYTES,...", help,
                     [v](const std::string& s) { return ParseList(s, ParseSize, v); });
  }
  // A switch: present sets it to true; it takes no value.
  Flags& Add(const std::string& name, bool* v, const std::string& help) {
    flags_.push_back(Flag{name, "", help, nullptr, v});
    return *this;
  }
  // A flag with a value read by `parse` (`metavar` names it in the usage).
  Flags& AddParser(const std::string& name, const std::string& metavar, const std::string& help,
                   Parser parse) {
    flags_.push_back(Flag{name, metavar, help, std::move(parse), nullptr});
    return *this;
  }
  // Flags this program does not know are skipped (with the next argument
  // when that does not start with "--"), for programs that receive a
  // launcher's common arguments.
  Flags& IgnoreUnknown() {
    ignore_unknown_ = true;
    return *this;
  }

  // Reads argv[first..argc). -1: all set; 0: --help was printed; 2: an
  // error was printed.
  int Parse(int argc, char** argv, int first = 1) const {
    for (int i = first; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        std::fputs(Usage().c_str(), stdout);
        return 0;
      }
      const Flag* f = Find(a);
      if (f == nullptr) {
        if (!ignore_unknown_) return Fail("unknown flag " + a);
        if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) ++i;
        continue;
      }
      if (f->is_set != nullptr) {
        *f->is_set = true;
        continue;
      }
      if (i + 1 >= argc) return Fail("missing value of " + a);
      const std::string v = argv[++i];
      if (!f->parse(v)) return Fail("bad value of " + a + ": '" + v + "' (" + f->metavar + ")");
    }
    return -1;
  }

  // Prints "<program>: <why>" and the usage to stderr; returns 2, for checks
  // of the values after Parse.
  int Fail(const std::string& why) const {
    std::fprintf(stderr, "%s: %s\n%s", program_.c_str(), why.c_str(), Usage().c_str());
    return 2;
  }

  std::string Usage() const {
    std::string u = "usage: " + program_ + " [flags]\n";
    for (const Flag& f : flags_) {
      std::string left = "  " + f.name + (f.metavar.empty() ? "" : " " + f.metavar);
      if (left.size() < 28) left.resize(28, ' ');
      u += left + " " + f.help + "\n";
    }
    return u;
  }

  // The strict number parsers behind Add (the whole text, in range).
  static bool ParseInt(const std::string& s, int* out) {
    int64_t v;
    if (!ParseInt64(s, &v) || v < std::numeric_limits<int>::min() ||
        v > std::numeric_limits<int>::max()) {
      return false;
    }
    *out = static_cast<int>(v);
    return true;
  }
  static bool ParseUint(const std::string& s, uint64_t* out) {
    if (s.empty() || s[0] == '-' || s[0] == ' ') return false;
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (errno != 0 || end != s.c_str() + s.size()) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  static bool ParseSize(const std::string& s, uint64_t* out) {
    if (s.empty()) return false;
    int shift = 0;
    std::string digits = s;
    switch (s.back()) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      default:
        break;
    }
    if (shift != 0) digits.pop_back();
    uint64_t v;
    if (!ParseUint(digits, &v) || v > (std::numeric_limits<uint64_t>::max() >> shift)) return false;
    *out = v << shift;
    return true;
  }
  static bool ParseDouble(const std::string& s, double* out) {
    if (s.empty() || s[0] == ' ') return false;
    errno = 0;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (errno != 0 || end != s.c_str() + s.size() || v != v) return false;
    *out = v;
    return true;
  }

 private:
  // Replaces *out with the comma-separated elements of s, each read by
  // `parse_one`; false (and *out unchanged) if any is not valid.
  template <typename T>
  static bool ParseList(const std::string& s, bool (*parse_one)(const std::string&, T*),
                        std::vector<T>* out) {
    std::vector<T> list;
    size_t start = 0;
    for (;;) {
      const size_t comma = s.find(',', start);
      T x;
      if (!parse_one(s.substr(start, comma - start), &x)) return false;
      list.push_back(x);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    *out = std::move(list);
    return true;
  }

  struct Flag {
    std::string name, metavar, help;
    Parser parse;  // null for a switch
    bool* is_set;  // a switch's variable
  };

  static bool ParseInt64(const std::string& s, int64_t* out) {
    if (s.empty() || s[0] == ' ') return false;
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno != 0 || end != s.c_str() + s.size()) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }

  const Flag* Find(const std::string& name) const {
    for (const Flag& f : flags_) {
      if (f.name == name) return &f;
    }
    return nullptr;
  }

  std::string program_;
  std::vector<Flag> flags_;
  bool ignore_unknown_ = false;
};

}  // namespace geeps::bench

#endif  // GEEPS_BENCHMARKS_FLAGS_H_
