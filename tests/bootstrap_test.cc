// DetectProcessEnv, ParseHostPort, ReadHostList and CoordinatorAddress, with a
// fake environment (a map) instead of the process's.
#include "cluster/bootstrap.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "hostile_files.h"
#include "test_util.h"

namespace geeps::cluster {
namespace {

using Env = std::map<std::string, std::string>;

GetenvFn Fake(const Env& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

// The status of `result` has `code` and its message contains `needle`.
template <typename T>
void ExpectError(const StatusOr<T>& result, StatusCode code, const std::string& needle) {
  ASSERT_FALSE(result.ok()) << "expected " << StatusCodeName(code) << " with '" << needle << "'";
  EXPECT_EQ(result.status().code(), code) << result.status();
  EXPECT_NE(result.status().message().find(needle), std::string::npos)
      << "'" << needle << "' not in: " << result.status();
}

TEST(DetectProcessEnvTest, GeepsVariables) {
  const Env env{{"GEEPS_RANK", "2"}, {"GEEPS_WORLD_SIZE", "4"}, {"GEEPS_LOCAL_RANK", "0"}};
  StatusOr<ProcessEnv> got = DetectProcessEnv(Fake(env));
  ASSERT_OK(got.status());
  EXPECT_EQ(got->rank, 2);
  EXPECT_EQ(got->world_size, 4);
  EXPECT_EQ(got->local_rank, 0);
  EXPECT_EQ(got->source, "geeps");
}

TEST(DetectProcessEnvTest, GeepsLocalRankDefaultsToRank) {
  const Env env{{"GEEPS_RANK", "3"}, {"GEEPS_WORLD_SIZE", "4"}};
  StatusOr<ProcessEnv> got = DetectProcessEnv(Fake(env));
  ASSERT_OK(got.status());
  EXPECT_EQ(got->local_rank, 3);
}

TEST(DetectProcessEnvTest, OpenMpiVariables) {
  const Env env{{"OMPI_COMM_WORLD_RANK", "5"},
                {"OMPI_COMM_WORLD_SIZE", "8"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}};
  StatusOr<ProcessEnv> got = DetectProcessEnv(Fake(env));
  ASSERT_OK(got.status());
  EXPECT_EQ(got->rank, 5);
  EXPECT_EQ(got->world_size, 8);
  EXPECT_EQ(got->local_rank, 1);
  EXPECT_EQ(got->source, "openmpi");
}

TEST(DetectProcessEnvTest, SlurmVariables) {
  const Env env{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"}};
  StatusOr<ProcessEnv> got = DetectProcessEnv(Fake(env));
  ASSERT_OK(got.status());
  EXPECT_EQ(got->rank, 0);
  EXPECT_EQ(got->world_size, 1);
  EXPECT_EQ(got->local_rank, 0);
  EXPECT_EQ(got->source, "slurm");
}

TEST(DetectProcessEnvTest, GeepsBeatsOpenMpiBeatsSlurm) {
  Env env{{"GEEPS_RANK", "1"},
          {"GEEPS_WORLD_SIZE", "2"},
          {"OMPI_COMM_WORLD_RANK", "3"},
          {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
          {"SLURM_PROCID", "5"},
          {"SLURM_NTASKS", "6"},
          {"SLURM_LOCALID", "5"}};
  StatusOr<ProcessEnv> got = DetectProcessEnv(Fake(env));
  ASSERT_OK(got.status());
  EXPECT_EQ(got->source, "geeps");
  EXPECT_EQ(got->rank, 1);

  env.erase("GEEPS_RANK");
  env.erase("GEEPS_WORLD_SIZE");
  got = DetectProcessEnv(Fake(env));
  ASSERT_OK(got.status());
  EXPECT_EQ(got->source, "openmpi");
  EXPECT_EQ(got->rank, 3);

  env.erase("OMPI_COMM_WORLD_RANK");
  env.erase("OMPI_COMM_WORLD_SIZE");
  env.erase("OMPI_COMM_WORLD_LOCAL_RANK");
  got = DetectProcessEnv(Fake(env));
  ASSERT_OK(got.status());
  EXPECT_EQ(got->source, "slurm");
  EXPECT_EQ(got->rank, 5);
}

TEST(DetectProcessEnvTest, BrokenStyleIsNotPaperedOverByALaterOne) {
  const Env env{{"GEEPS_RANK", "1"},
                {"OMPI_COMM_WORLD_RANK", "1"},
                {"OMPI_COMM_WORLD_SIZE", "2"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}};
  ExpectError(DetectProcessEnv(Fake(env)), StatusCode::kInvalidArgument, "GEEPS_WORLD_SIZE");
}

TEST(DetectProcessEnvTest, NothingSetIsNotFoundAndListsTheVariables) {
  const Env env{{"HOME", "/root"}, {"SLURM_NTASKS", "4"}};  // salloc sets NTASKS alone
  StatusOr<ProcessEnv> got = DetectProcessEnv(Fake(env));
  ExpectError(got, StatusCode::kNotFound, "GEEPS_RANK");
  for (const char* name : {"GEEPS_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}) {
    EXPECT_NE(got.status().message().find(name), std::string::npos) << name;
  }
}

struct BadEnvCase {
  const char* label;
  Env env;
  const char* variable;  // the error must name it
};

class DetectProcessEnvErrorTest : public ::testing::TestWithParam<BadEnvCase> {};

TEST_P(DetectProcessEnvErrorTest, InvalidArgumentNamingTheVariable) {
  ExpectError(DetectProcessEnv(Fake(GetParam().env)), StatusCode::kInvalidArgument,
              GetParam().variable);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, DetectProcessEnvErrorTest,
    ::testing::Values(
        BadEnvCase{"GeepsRankWithoutSize", {{"GEEPS_RANK", "0"}}, "GEEPS_WORLD_SIZE"},
        BadEnvCase{"GeepsSizeWithoutRank", {{"GEEPS_WORLD_SIZE", "2"}}, "GEEPS_RANK"},
        BadEnvCase{"GeepsLocalRankAlone", {{"GEEPS_LOCAL_RANK", "0"}}, "GEEPS_WORLD_SIZE"},
        BadEnvCase{"GeepsRankNotANumber",
                   {{"GEEPS_RANK", "one"}, {"GEEPS_WORLD_SIZE", "2"}},
                   "GEEPS_RANK"},
        BadEnvCase{"GeepsRankTrailingJunk",
                   {{"GEEPS_RANK", "1x"}, {"GEEPS_WORLD_SIZE", "2"}},
                   "GEEPS_RANK"},
        BadEnvCase{"GeepsRankEmpty", {{"GEEPS_RANK", ""}, {"GEEPS_WORLD_SIZE", "2"}}, "GEEPS_RANK"},
        BadEnvCase{
            "GeepsRankSpace", {{"GEEPS_RANK", " 1"}, {"GEEPS_WORLD_SIZE", "2"}}, "GEEPS_RANK"},
        BadEnvCase{
            "GeepsRankNegative", {{"GEEPS_RANK", "-1"}, {"GEEPS_WORLD_SIZE", "2"}}, "GEEPS_RANK"},
        BadEnvCase{
            "GeepsRankEqualsSize", {{"GEEPS_RANK", "2"}, {"GEEPS_WORLD_SIZE", "2"}}, "GEEPS_RANK"},
        BadEnvCase{
            "GeepsSizeZero", {{"GEEPS_RANK", "0"}, {"GEEPS_WORLD_SIZE", "0"}}, "GEEPS_WORLD_SIZE"},
        BadEnvCase{"GeepsSizeOverflows",
                   {{"GEEPS_RANK", "0"}, {"GEEPS_WORLD_SIZE", "99999999999999999999"}},
                   "GEEPS_WORLD_SIZE"},
        BadEnvCase{"GeepsLocalRankOutOfRange",
                   {{"GEEPS_RANK", "0"}, {"GEEPS_WORLD_SIZE", "2"}, {"GEEPS_LOCAL_RANK", "2"}},
                   "GEEPS_LOCAL_RANK"},
        BadEnvCase{"GeepsLocalRankNotANumber",
                   {{"GEEPS_RANK", "0"}, {"GEEPS_WORLD_SIZE", "2"}, {"GEEPS_LOCAL_RANK", "x"}},
                   "GEEPS_LOCAL_RANK"},
        BadEnvCase{"OpenMpiRankWithoutSize",
                   {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}},
                   "OMPI_COMM_WORLD_SIZE"},
        BadEnvCase{"OpenMpiWithoutLocalRank",
                   {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}},
                   "OMPI_COMM_WORLD_LOCAL_RANK"},
        BadEnvCase{"OpenMpiRankTooLarge",
                   {{"OMPI_COMM_WORLD_RANK", "7"},
                    {"OMPI_COMM_WORLD_SIZE", "2"},
                    {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}},
                   "OMPI_COMM_WORLD_RANK"},
        BadEnvCase{"SlurmRankWithoutSize",
                   {{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}},
                   "SLURM_NTASKS"},
        BadEnvCase{
            "SlurmWithoutLocalId", {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, "SLURM_LOCALID"},
        BadEnvCase{"SlurmSizeNotANumber",
                   {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2(x3)"}, {"SLURM_LOCALID", "0"}},
                   "SLURM_NTASKS"}),
    [](const ::testing::TestParamInfo<BadEnvCase>& info) { return info.param.label; });

TEST(DetectProcessEnvTest, RealEnvironmentDefault) {
  // Whatever ctest's environment holds, the call returns a value or a status.
  StatusOr<ProcessEnv> got = DetectProcessEnv();
  bool any_set = false;
  for (const char* name : {"GEEPS_RANK", "GEEPS_WORLD_SIZE", "GEEPS_LOCAL_RANK",
                           "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    any_set = any_set || std::getenv(name) != nullptr;
  }
  if (!any_set) {
    EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  }
}

TEST(ParseHostPortTest, Accepted) {
  struct Case {
    const char* text;
    const char* host;
    int port;
  };
  for (const Case& c :
       {Case{"localhost:29500", "localhost", 29500}, Case{"127.0.0.1:1", "127.0.0.1", 1},
        Case{"node-01.cluster_a.example.org:65535", "node-01.cluster_a.example.org", 65535},
        Case{"[::1]:8080", "::1", 8080}, Case{"[fe80::1%eth0]:80", "fe80::1%eth0", 80},
        Case{"[::ffff:10.0.0.1]:5000", "::ffff:10.0.0.1", 5000}}) {
    StatusOr<HostPort> got = ParseHostPort(c.text);
    ASSERT_OK(got.status());
    EXPECT_EQ(got->host, c.host) << c.text;
    EXPECT_EQ(got->port, c.port) << c.text;
    EXPECT_EQ(FormatHostPort(*got), c.text);
  }
}

TEST(ParseHostPortTest, Rejected) {
  struct Case {
    const char* text;
    const char* why;
  };
  for (const Case& c :
       {Case{"", "no port"}, Case{"localhost", "no port"}, Case{"localhost:", "port ''"},
        Case{":80", "empty host"}, Case{"host:0", "1..65535"}, Case{"host:65536", "1..65535"},
        Case{"host:-1", "1..65535"}, Case{"host:+80", "1..65535"}, Case{"host:80x", "1..65535"},
        Case{"host:99999999999999999999", "1..65535"}, Case{"::1:80", "brackets"},
        Case{"[::1:80", "without ']'"}, Case{"[::1]80", "no port"}, Case{"[::1]", "no port"},
        Case{"[]:80", "not an IPv6 address"}, Case{"[host]:80", "not an IPv6 address"},
        Case{"bad host:80", "letters, digits"}, Case{"tcp://host:80", "letters, digits"}}) {
    ExpectError(ParseHostPort(c.text), StatusCode::kInvalidArgument, c.why);
  }
}

// A scratch folder removed at the end of the test.
class HostListTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "bootstrap_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
    rmdir(dir_.c_str());
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }

  std::string dir_;
  std::vector<std::string> files_;
};

class CoordinatorAddressTest : public HostListTest {};

TEST_F(HostListTest, HostsSlotsCommentsAndBlankLines) {
  const std::string path = Write("hosts",
                                 "# the cluster\n"
                                 "\n"
                                 "node0 slots=2\n"
                                 "   node1   # one slot\n"
                                 "\t10.0.0.7 slots=3 max_slots=8\r\n"
                                 "fe80::2\n"
                                 "node4");  // no final newline
  StatusOr<std::vector<std::string>> got = ReadHostList(path);
  ASSERT_OK(got.status());
  const std::vector<std::string> want{"node0",    "node0",    "node1",   "10.0.0.7",
                                      "10.0.0.7", "10.0.0.7", "fe80::2", "node4"};
  EXPECT_EQ(*got, want);
}

TEST_F(HostListTest, MissingFileIsNotFound) {
  ExpectError(ReadHostList(dir_ + "/nope"), StatusCode::kNotFound, "nope");
}

TEST_F(HostListTest, ADirectoryIsAnError) {
  ExpectError(ReadHostList(dir_), StatusCode::kInvalidArgument, "a directory");
}

// A host list replaced by a FIFO (before: a hang), a symlink to /dev/zero
// (before: 16.6 GB read over 79 s), a directory or a huge file: an error
// naming it, at once.
TEST_F(HostListTest, FilesThatAreNotAHostListAreRefusedWithoutReadingThem) {
  const std::string path = dir_ + "/hosts";
  const auto kinds = testing::HostileKinds();
  for (size_t k = 0; k < kinds.size(); ++k) {
    ASSERT_TRUE(testing::MakeHostileFile(path, k, uint64_t{1} << 30)) << kinds[k].kind;
    StatusOr<std::vector<std::string>> got = ReadHostList(path);
    ASSERT_FALSE(got.ok()) << kinds[k].kind;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument) << kinds[k].kind;
    EXPECT_NE(got.status().message().find(path), std::string::npos) << got.status();
    EXPECT_NE(got.status().message().find(kinds[k].expected), std::string::npos) << got.status();
  }
  ::rmdir(path.c_str());
  ::unlink(path.c_str());
}

TEST_F(HostListTest, NoHostIsAnError) {
  ExpectError(ReadHostList(Write("empty", "# nothing\n\n")), StatusCode::kInvalidArgument,
              "names no host");
}

TEST_F(HostListTest, MalformedLinesNameTheirNumber) {
  struct Case {
    const char* text;
    const char* why;
  };
  for (const Case& c :
       {Case{"a\nb\nnode0 slots=0\n", ":3: 'slots=0'"}, Case{"a\nnode0 slots=x\n", ":2: 'slots=x'"},
        Case{"node0 slots=\n", ":1: 'slots='"}, Case{"node0 slots=4097\n", ":1: 'slots=4097'"},
        Case{"# c\nnode0 slots\n", ":2: 'slots'"}, Case{"node0 cpus=4\n", ":1: unknown 'cpus=4'"},
        Case{"node0 node1\n", ":1: unknown 'node1'"},
        Case{"\n\nnode0:29500\n", ":3: 'node0:29500' is not a host name"},
        Case{"no/de\n", ":1: 'no/de'"}}) {
    ExpectError(ReadHostList(Write("bad", c.text)), StatusCode::kInvalidArgument, c.why);
  }
}

TEST_F(CoordinatorAddressTest, FromGeepsCoordinator) {
  const Env env{{"GEEPS_COORDINATOR", "[::1]:4000"},
                {"GEEPS_HOSTFILE", "/does/not/matter"},
                {"GEEPS_COORDINATOR_PORT", "5"}};
  StatusOr<HostPort> got = CoordinatorAddress(Fake(env));
  ASSERT_OK(got.status());
  EXPECT_EQ(got->host, "::1");
  EXPECT_EQ(got->port, 4000);
}

TEST_F(CoordinatorAddressTest, FromHostFileWithDefaultPort) {
  const Env env{{"GEEPS_HOSTFILE", Write("hosts", "# head node first\nhead slots=4\nnode1\n")}};
  StatusOr<HostPort> got = CoordinatorAddress(Fake(env));
  ASSERT_OK(got.status());
  EXPECT_EQ(got->host, "head");
  EXPECT_EQ(got->port, kDefaultCoordinatorPort);
  EXPECT_EQ(kDefaultCoordinatorPort, 29500);
}

TEST_F(CoordinatorAddressTest, FromHostFileWithPort) {
  const Env env{{"GEEPS_HOSTFILE", Write("hosts", "head\n")}, {"GEEPS_COORDINATOR_PORT", "1234"}};
  StatusOr<HostPort> got = CoordinatorAddress(Fake(env));
  ASSERT_OK(got.status());
  EXPECT_EQ(FormatHostPort(*got), "head:1234");
}

TEST_F(CoordinatorAddressTest, Errors) {
  ExpectError(CoordinatorAddress(Fake({})), StatusCode::kNotFound, "GEEPS_COORDINATOR=host:port");
  ExpectError(CoordinatorAddress(Fake({{"HOME", "/"}})), StatusCode::kNotFound, "GEEPS_HOSTFILE");
  ExpectError(CoordinatorAddress(Fake({{"GEEPS_COORDINATOR", "head"}})),
              StatusCode::kInvalidArgument, "GEEPS_COORDINATOR='head': no port");
  ExpectError(CoordinatorAddress(Fake({{"GEEPS_COORDINATOR", ""}})), StatusCode::kInvalidArgument,
              "GEEPS_COORDINATOR");
  ExpectError(CoordinatorAddress(Fake({{"GEEPS_HOSTFILE", dir_ + "/missing"}})),
              StatusCode::kNotFound, "GEEPS_HOSTFILE: host list");
  ExpectError(CoordinatorAddress(Fake({{"GEEPS_HOSTFILE", Write("bad", "a b\n")}})),
              StatusCode::kInvalidArgument, "GEEPS_HOSTFILE: ");
  const std::string hosts = Write("hosts", "head\n");
  for (const char* port : {"0", "65536", "http", ""}) {
    const Env env{{"GEEPS_HOSTFILE", hosts}, {"GEEPS_COORDINATOR_PORT", port}};
    ExpectError(CoordinatorAddress(Fake(env)), StatusCode::kInvalidArgument,
                "GEEPS_COORDINATOR_PORT");
  }
}

}  // namespace
}  // namespace geeps::cluster
