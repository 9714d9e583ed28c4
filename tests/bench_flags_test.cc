// benchmarks/flags.h, the command-line parser every benchmark uses: each
// type of flag, and every kind of bad input gives exit status 2 with the
// reason (before it, a bad number made std::stoi throw and the benchmark
// abort).
#include "../benchmarks/flags.h"

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace geeps::bench {
namespace {

// Parse over a list of strings (argv[0] is the program).
int ParseArgs(const Flags& flags, std::vector<std::string> args) {
  args.insert(args.begin(), "bench");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return flags.Parse(static_cast<int>(argv.size()), argv.data());
}

struct Vars {
  std::string out = "default.json";
  int n = 3;
  uint64_t big = 7;
  double x = 0.5;
  bool on = false;
  std::vector<int> list = {1, 2};
  uint64_t size = 0;
  std::vector<uint64_t> sizes = {1};
};

Flags MakeFlags(Vars* v) {
  Flags f("bench");
  f.Add("--out", &v->out, "file")
      .Add("--n", &v->n, "an int")
      .Add("--big", &v->big, "a count")
      .Add("--x", &v->x, "a real")
      .Add("--on", &v->on, "a switch")
      .Add("--list", &v->list, "ints")
      .AddSize("--size", &v->size, "bytes")
      .AddSizes("--sizes", &v->sizes, "bytes list");
  return f;
}

TEST(BenchFlagsTest, SetsEveryKindAndKeepsDefaults) {
  Vars v;
  Flags f = MakeFlags(&v);
  EXPECT_EQ(ParseArgs(f, {}), -1);
  EXPECT_EQ(v.out, "default.json");
  EXPECT_EQ(v.n, 3);
  EXPECT_EQ(ParseArgs(f, {"--out", "a.json", "--n", "-12", "--big", "18446744073709551615", "--x",
                          "2.5e-3", "--on", "--list", "4,0,-8", "--size", "64K", "--sizes",
                          "4K,1M,2G,17"}),
            -1);
  EXPECT_EQ(v.out, "a.json");
  EXPECT_EQ(v.n, -12);
  EXPECT_EQ(v.big, UINT64_MAX);
  EXPECT_DOUBLE_EQ(v.x, 2.5e-3);
  EXPECT_TRUE(v.on);
  EXPECT_EQ(v.list, (std::vector<int>{4, 0, -8}));
  EXPECT_EQ(v.size, 64u << 10);
  EXPECT_EQ(v.sizes, (std::vector<uint64_t>{4u << 10, 1u << 20, 2ull << 30, 17}));
}

TEST(BenchFlagsTest, BadInputIsStatusTwoWithTheReason) {
  const std::vector<std::vector<std::string>> bad = {
      {"--nope", "1"},             // unknown flag
      {"--n"},                     // missing value
      {"--n", "12abc"},            // trailing characters
      {"--n", "99999999999"},      // out of int's range
      {"--n", ""},                 // empty
      {"--big", "-1"},             // negative count
      {"--x", "fast"},             // not a number
      {"--x", "nan"},              // not a number either
      {"--list", "1,,2"},          // an empty element
      {"--size", "12T"},           // unknown suffix
      {"--sizes", "4K,"},          // trailing comma
      {"--size", "17179869184G"},  // overflows
  };
  for (const auto& args : bad) {
    Vars v;
    Flags f = MakeFlags(&v);
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(ParseArgs(f, args), 2) << args[0];
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("bench: "), std::string::npos) << err;
    EXPECT_NE(err.find(args[0]), std::string::npos) << err;  // names the flag
    EXPECT_NE(err.find("usage: bench"), std::string::npos) << err;
  }
}

TEST(BenchFlagsTest, HelpAndFailAndIgnoringUnknownFlags) {
  Vars v;
  Flags f = MakeFlags(&v);
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(ParseArgs(f, {"--help"}), 0);
  const std::string help = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(help.find("--sizes BYTES,..."), std::string::npos) << help;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(f.Fail("--n must be positive"), 2);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("bench: --n must be positive"),
            std::string::npos);

  // Unknown flags are skipped with their value, switches without one.
  f.IgnoreUnknown();
  EXPECT_EQ(ParseArgs(f, {"--slack", "1", "--child", "--n", "5", "--other", "--x", "3"}), -1);
  EXPECT_EQ(v.n, 5);
  EXPECT_DOUBLE_EQ(v.x, 3.0);
}

}  // namespace
}  // namespace geeps::bench
