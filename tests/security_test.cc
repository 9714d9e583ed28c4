// CURVE authentication and encryption of multi-process jobs
// (src/transport/security.h, docs/security.md): key files and geeps_keygen,
// the ZAP handler and the rejection counter on bare sockets, Join with bad
// key files, CURVE jobs of multiproc_worker processes that stay exact, and
// processes and sockets without the job's key that can neither join nor
// read nor update.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "hostile_files.h"
#include "process_util.h"
#include "test_paths.h"

#include "exact_sum.h"
#include "geeps/process.h"
#include "test_util.h"
#include "transport/security.h"
#include "transport/socket_util.h"
#include "transport/sockets.h"
#include "transport/wire.h"

namespace {

using namespace geeps::testing;  // NOLINT: process helpers
using geeps::StatusCode;
using geeps::transport::CurveKeys;
using geeps::transport::Plane;
using geeps::transport::SecurityConfig;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

void WriteText(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

mode_t FileMode(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

// A scratch folder, removed with its files at the end of the test.
class TempDir {
 public:
  TempDir() {
    char path[] = "/tmp/geeps-sec-XXXXXX";
    path_ = mkdtemp(path);
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

CurveKeys NewKeys() {
  auto keys = geeps::transport::NewCurveKeys();
  EXPECT_TRUE(keys.ok()) << keys.status().ToString();
  return keys.ok() ? *keys : CurveKeys{};
}

// A key file with fresh keys.
std::string NewKeyFile(const TempDir& dir, const std::string& name) {
  const std::string path = dir.File(name);
  EXPECT_OK(geeps::transport::WriteCurveKeyFile(path, NewKeys(), false));
  return path;
}

// The rejected_connections a multiproc_worker printed, or -1.
long long RejectedIn(const std::string& log) {
  const std::string key = "rejected_connections: ";
  const size_t at = log.find(key);
  return at == std::string::npos ? -1 : std::atoll(log.c_str() + at + key.size());
}

int Occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Starts a job of multiproc_worker ranks; `key_files[r]` is rank r's
// GEEPS_CURVE_KEYS ("" = none).
std::vector<Child> StartJob(const TempDir& dir, const std::vector<std::string>& key_files,
                            const Env& extra, const std::vector<std::string>& args = {},
                            int coordinator_port = 0) {
  const int port = coordinator_port > 0 ? coordinator_port : FreePort();
  const int n = static_cast<int>(key_files.size());
  std::vector<Child> children;
  for (int r = 0; r < n; ++r) {
    Env env = {{"GEEPS_COORDINATOR", "127.0.0.1:" + std::to_string(port)},
               {"GEEPS_TIMEOUT_MS", "20000"},
               {"GEEPS_HEARTBEAT_TIMEOUT_MS", "3000"},
               {"GEEPS_RANK", std::to_string(r)},
               {"GEEPS_WORLD_SIZE", std::to_string(n)},
               {"GEEPS_IPC_DIR", dir.File("")}};
    if (!key_files[r].empty()) env["GEEPS_CURVE_KEYS"] = key_files[r];
    for (const auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> argv = {::geeps::testing::Program(GEEPS_MULTIPROC_WORKER)};
    argv.insert(argv.end(), args.begin(), args.end());
    children.push_back(Spawn(argv, env, dir.File("rank" + std::to_string(r) + ".log")));
  }
  return children;
}

void ExpectExact(const std::vector<Child>& children) {
  const std::string logs = Logs(children);
  const int n = static_cast<int>(children.size());
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(children[r].status, 0) << logs;
    EXPECT_NE(logs.find("worker " + std::to_string(r) + " of " + std::to_string(n) + ": "),
              std::string::npos)
        << logs;
  }
}

int RunTool(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv = {::geeps::testing::Program(GEEPS_KEYGEN)};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<Child> c = {Spawn(argv, {}, log)};
  EXPECT_TRUE(WaitAll(c, milliseconds(20000)));
  return c[0].status;
}

// Receives one message within `limit` (false: none).
bool ReceiveWithin(zmq::socket_t& s, milliseconds limit, std::vector<zmq::message_t>* frames) {
  zmq::pollitem_t item = {s.handle(), 0, ZMQ_POLLIN, 0};
  frames->clear();
  if (zmq::poll(&item, 1, limit) <= 0) return false;
  for (bool more = true; more;) {
    zmq::message_t m;
    if (!s.recv(m, zmq::recv_flags::dontwait)) break;
    more = m.more();
    frames->push_back(std::move(m));
  }
  return !frames->empty();
}

// Waits until `counter()` exceeds `above` (false after `limit`).
template <typename F>
bool WaitAbove(F counter, int64_t above, milliseconds limit) {
  const auto deadline = steady_clock::now() + limit;
  while (counter() <= above) {
    if (steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

void SetCurveClient(zmq::socket_t& s, const CurveKeys& own, const std::string& server_public) {
  s.set(zmq::sockopt::curve_serverkey, server_public);
  s.set(zmq::sockopt::curve_publickey, own.public_key);
  s.set(zmq::sockopt::curve_secretkey, own.secret_key);
}

// ---- key files ----------------------------------------------------------------

TEST(KeyFileTest, WriteThenReadRoundTrips) {
  TempDir dir;
  const std::string path = dir.File("job.key");
  const CurveKeys keys = NewKeys();
  ASSERT_OK(geeps::transport::WriteCurveKeyFile(path, keys, false));
  EXPECT_EQ(FileMode(path), 0600u);
  auto read = geeps::transport::ReadCurveKeyFile(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->public_key, keys.public_key);
  EXPECT_EQ(read->secret_key, keys.secret_key);
}

// A key file replaced by a FIFO (before: open() blocked for good), a
// symlink to /dev/zero, a directory or a huge file: an error naming it.
// The public call geeps_keygen makes: a fresh pair each time, readable back
// with the public key it returned; an existing file is kept unless
// `overwrite`.
TEST(KeyFileTest, WriteNewCurveKeyFileIsThePublicKeygen) {
  TempDir dir;
  const std::string path = dir.File("job.key");
  geeps::StatusOr<std::string> first = geeps::WriteNewCurveKeyFile(path, false);
  ASSERT_OK(first.status());
  geeps::StatusOr<CurveKeys> read = geeps::transport::ReadCurveKeyFile(path);
  ASSERT_OK(read.status());
  EXPECT_EQ(read->public_key, *first);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  geeps::StatusOr<std::string> again = geeps::WriteNewCurveKeyFile(path, false);
  EXPECT_EQ(again.status().code(), geeps::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find(path), std::string::npos) << again.status();
  geeps::StatusOr<std::string> replaced = geeps::WriteNewCurveKeyFile(path, true);
  ASSERT_OK(replaced.status());
  EXPECT_NE(*replaced, *first);
  read = geeps::transport::ReadCurveKeyFile(path);
  ASSERT_OK(read.status());
  EXPECT_EQ(read->public_key, *replaced);
}

TEST(KeyFileTest, FilesThatAreNotAKeyFileAreRefusedWithoutReadingThem) {
  TempDir dir;
  const std::string path = dir.File("job.key");
  const auto kinds = geeps::testing::HostileKinds();
  for (size_t k = 0; k < kinds.size(); ++k) {
    ASSERT_TRUE(geeps::testing::MakeHostileFile(path, k, uint64_t{1} << 30)) << kinds[k].kind;
    auto read = geeps::transport::ReadCurveKeyFile(path);
    ASSERT_FALSE(read.ok()) << kinds[k].kind;
    EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument) << kinds[k].kind;
    EXPECT_NE(read.status().message().find(path), std::string::npos) << read.status().ToString();
    EXPECT_NE(read.status().message().find(kinds[k].expected), std::string::npos)
        << read.status().ToString();
  }
  ::rmdir(path.c_str());
  ::unlink(path.c_str());
}

TEST(KeyFileTest, ExistingFileIsKeptUnlessOverwrite) {
  TempDir dir;
  const std::string path = dir.File("job.key");
  const CurveKeys first = NewKeys(), second = NewKeys();
  ASSERT_OK(geeps::transport::WriteCurveKeyFile(path, first, false));
  const geeps::Status again = geeps::transport::WriteCurveKeyFile(path, second, false);
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition) << again.ToString();
  EXPECT_NE(again.message().find(path), std::string::npos) << again.ToString();
  EXPECT_EQ(geeps::transport::ReadCurveKeyFile(path)->public_key, first.public_key);
  chmod(path.c_str(), 0644);
  ASSERT_OK(geeps::transport::WriteCurveKeyFile(path, second, true));
  EXPECT_EQ(FileMode(path), 0600u);
  EXPECT_EQ(geeps::transport::ReadCurveKeyFile(path)->public_key, second.public_key);
}

TEST(KeyFileTest, MissingFileIsNotFoundNamingIt) {
  TempDir dir;
  const std::string path = dir.File("nope.key");
  auto read = geeps::transport::ReadCurveKeyFile(path);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kNotFound);
  EXPECT_NE(read.status().message().find(path), std::string::npos) << read.status().ToString();
}

TEST(KeyFileTest, FileOthersCanAccessIsRefused) {
  TempDir dir;
  const std::string path = NewKeyFile(dir, "job.key");
  for (mode_t mode : {0644, 0640, 0604, 0620, 0602}) {
    chmod(path.c_str(), mode);
    auto read = geeps::transport::ReadCurveKeyFile(path);
    ASSERT_FALSE(read.ok()) << std::oct << mode;
    EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(read.status().message().find(path), std::string::npos) << read.status().ToString();
    EXPECT_NE(read.status().message().find("chmod 600"), std::string::npos)
        << read.status().ToString();
  }
  chmod(path.c_str(), 0400);
  EXPECT_TRUE(geeps::transport::ReadCurveKeyFile(path).ok());
}

TEST(KeyFileTest, BadFilesAreInvalidArgumentNamingThem) {
  TempDir dir;
  const CurveKeys keys = NewKeys(), other = NewKeys();
  const std::string pub = "public-key " + keys.public_key + "\n";
  const std::string sec = "secret-key " + keys.secret_key + "\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"public only", pub},
      {"secret only", sec},
      {"keys of two pairs", pub + "secret-key " + other.secret_key + "\n"},
      {"short key", "public-key " + keys.public_key.substr(1) + "\n" + sec},
      {"not z85", "public-key " + std::string(40, '~') + "\n" + sec},
      {"unknown entry", pub + sec + "server-key " + keys.public_key + "\n"},
      {"duplicate", pub + pub + sec},
      {"extra field", "public-key " + keys.public_key + " x\n" + sec},
      {"binary", std::string("\x01\x02\xff\n", 4)},
  };
  for (const auto& [name, text] : cases) {
    const std::string path = dir.File("bad.key");
    WriteText(path, text);
    auto read = geeps::transport::ReadCurveKeyFile(path);
    ASSERT_FALSE(read.ok()) << name;
    EXPECT_EQ(read.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_NE(read.status().message().find(path), std::string::npos)
        << name << ": " << read.status().ToString();
  }
  // Comments, blank lines, spaces and CRLF are fine.
  const std::string ok = dir.File("ok.key");
  WriteText(ok, "# a comment\n\n  public-key " + keys.public_key + "\r\n\tsecret-key " +
                    keys.secret_key + "  \n# end\n");
  auto read = geeps::transport::ReadCurveKeyFile(ok);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->secret_key, keys.secret_key);
  // A folder is not a key file.
  mkdir(dir.File("folder").c_str(), 0700);
  EXPECT_EQ(geeps::transport::ReadCurveKeyFile(dir.File("folder")).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(KeygenToolTest, WritesAFileOnlyTheOwnerCanRead) {
  TempDir dir;
  const std::string path = dir.File("job.key");
  const std::string log = dir.File("tool.log");
  ASSERT_EQ(RunTool({path}, log), 0) << ReadFile(log);
  EXPECT_EQ(FileMode(path), 0600u);
  auto first = geeps::transport::ReadCurveKeyFile(path);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_NE(ReadFile(log).find(first->public_key), std::string::npos) << ReadFile(log);
  EXPECT_EQ(ReadFile(log).find(first->secret_key), std::string::npos) << "secret printed";

  EXPECT_EQ(RunTool({path}, log), 1);  // exists: kept
  EXPECT_NE(ReadFile(log).find("--force"), std::string::npos) << ReadFile(log);
  EXPECT_EQ(geeps::transport::ReadCurveKeyFile(path)->secret_key, first->secret_key);

  ASSERT_EQ(RunTool({"--force", path}, log), 0) << ReadFile(log);
  EXPECT_NE(geeps::transport::ReadCurveKeyFile(path)->secret_key, first->secret_key);
  EXPECT_EQ(FileMode(path), 0600u);

  EXPECT_EQ(RunTool({}, log), 2);
  EXPECT_EQ(RunTool({"--bogus", path}, log), 2);
  EXPECT_EQ(RunTool({dir.File("no/such/folder/x.key")}, log), 1);
}

// ---- the ZAP handler on bare sockets --------------------------------------------

// A ROUTER of `context` that `security` makes a data-plane server, bound to
// a free loopback port (its endpoint in `*endpoint`).
std::unique_ptr<zmq::socket_t> SecuredRouter(zmq::context_t& context,
                                             const SecurityConfig& security,
                                             std::string* endpoint) {
  auto server = std::make_unique<zmq::socket_t>(context, zmq::socket_type::router);
  server->set(zmq::sockopt::linger, 0);
  geeps::transport::ConfigureSecureServer(*server, &security, Plane::kData);
  server->bind("tcp://127.0.0.1:*");
  *endpoint = server->get(zmq::sockopt::last_endpoint);
  return server;
}

// A server socket secured by a SecurityConfig of its own context, and
// intruders from another context.
class SecuredServerTest : public ::testing::Test {
 protected:
  void Serve(geeps::StatusOr<std::unique_ptr<SecurityConfig>> security) {
    ASSERT_TRUE(security.ok()) << security.status().ToString();
    security_ = std::move(security).value();
    server_ = SecuredRouter(context_, *security_, &endpoint_);
  }
  void TearDown() override {
    server_.reset();
    security_.reset();
  }

  // Connects `intruder`, sends a frame, and checks that the server gets
  // nothing while the rejection counter rises.
  void ExpectRejected(zmq::socket_t& intruder, const std::string& what) {
    const int64_t before = security_->rejected_connections();
    intruder.set(zmq::sockopt::linger, 0);
    intruder.connect(endpoint_);
    intruder.send(zmq::str_buffer("let me in"), zmq::send_flags::dontwait);
    EXPECT_TRUE(
        WaitAbove([&] { return security_->rejected_connections(); }, before, milliseconds(10000)))
        << what;
    std::vector<zmq::message_t> frames;
    EXPECT_FALSE(ReceiveWithin(*server_, milliseconds(300), &frames)) << what;
    EXPECT_FALSE(ReceiveWithin(intruder, milliseconds(10), &frames)) << what;
  }

  zmq::context_t context_;
  zmq::context_t outside_;  // the intruders' own context
  std::unique_ptr<SecurityConfig> security_;
  std::unique_ptr<zmq::socket_t> server_;
  std::string endpoint_;
};

class ZapHandlerTest : public SecuredServerTest {
 protected:
  void SetUp() override {
    keys_ = NewKeys();
    Serve(SecurityConfig::Start(&context_, keys_));
  }
  CurveKeys keys_;
};

TEST_F(ZapHandlerTest, AdmitsTheJobKeyAndEncrypts) {
  zmq::socket_t client(context_, zmq::socket_type::dealer);
  client.set(zmq::sockopt::linger, 0);
  geeps::transport::ConfigureSecureClient(client, security_.get(), Plane::kData);
  client.connect(endpoint_);
  client.send(zmq::str_buffer("hello"), zmq::send_flags::none);
  std::vector<zmq::message_t> frames;
  ASSERT_TRUE(ReceiveWithin(*server_, milliseconds(10000), &frames));
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[1].to_string(), "hello");
  EXPECT_EQ(frames[1].gets("User-Id"), std::string("geeps-job"));  // the ZAP handler said so
  server_->send(frames[0], zmq::send_flags::sndmore);
  server_->send(zmq::str_buffer("welcome"), zmq::send_flags::none);
  ASSERT_TRUE(ReceiveWithin(client, milliseconds(10000), &frames));
  EXPECT_EQ(frames[0].to_string(), "welcome");
  EXPECT_EQ(security_->rejected_connections(), 0);
}

// Every libgeeps socket sets ZMQ_MAXMSGSIZE (docs/reliability.md, "Frames
// larger than any legal message"). With CURVE on, a stranger without a key
// gets as far as the handshake; its command frames are held to the same
// limit: a CURVE greeting followed by a command frame that announces
// 256 MiB is cut off when its size arrives, and the process does not grow
// by the bytes sent after it.
TEST_F(ZapHandlerTest, AnOversizedHandshakeCommandIsCutOff) {
  // The fixture's server, as libgeeps configures its sockets: a limit.
  server_.reset();
  server_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::router);
  server_->set(zmq::sockopt::linger, 0);
  server_->set(zmq::sockopt::maxmsgsize, int64_t{1} << 20);
  geeps::transport::ConfigureSecureServer(*server_, security_.get(), Plane::kData);
  server_->bind("tcp://127.0.0.1:*");
  endpoint_ = server_->get(zmq::sockopt::last_endpoint);
  const int port = std::stoi(endpoint_.substr(endpoint_.rfind(':') + 1));
  auto resident = [] {
    std::ifstream statm("/proc/self/statm");
    long pages = 0, rss = 0;
    statm >> pages >> rss;
    return rss * sysconf(_SC_PAGESIZE);
  };
  const long rss_before = resident();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  // ZMTP 3.0 greeting: signature, version 3.0, mechanism "CURVE", client.
  unsigned char greeting[64] = {0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 0};
  std::memcpy(greeting + 12, "CURVE", 5);
  ASSERT_EQ(send(fd, greeting, sizeof(greeting), MSG_NOSIGNAL), 64);
  unsigned char theirs[64];
  size_t got = 0;
  while (got < sizeof(theirs)) {
    const ssize_t n = recv(fd, theirs + got, sizeof(theirs) - got, 0);
    ASSERT_GT(n, 0) << "the server did not greet";
    got += static_cast<size_t>(n);
  }
  EXPECT_EQ(std::string(reinterpret_cast<char*>(theirs) + 12, 5), "CURVE");
  // A long command frame of 256 MiB (flags: command | long, 8-byte size).
  unsigned char frame[9] = {0x06, 0, 0, 0, 0, 0x10, 0, 0, 0};
  ASSERT_EQ(send(fd, frame, sizeof(frame), MSG_NOSIGNAL), 9);
  // Stream its body: the server must drop the connection long before 64 MiB.
  std::vector<char> chunk(1 << 20, 'x');
  int64_t sent = 0;
  bool cut = false;
  while (sent < (int64_t{64} << 20)) {
    const ssize_t n = send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n <= 0) {
      cut = true;  // EPIPE / ECONNRESET: the server closed the connection
      break;
    }
    sent += n;
  }
  if (!cut) {  // everything went into buffers: the peer must have closed
    char b;
    cut = recv(fd, &b, 1, 0) <= 0;
  }
  close(fd);
  EXPECT_TRUE(cut) << "the connection took " << sent << " bytes of an oversized command";
  EXPECT_LT(sent, int64_t{64} << 20);
  EXPECT_LT(resident() - rss_before, long{32} << 20) << "the process grew by the frame";
  std::vector<zmq::message_t> frames;
  EXPECT_FALSE(ReceiveWithin(*server_, milliseconds(100), &frames));
}

TEST_F(ZapHandlerTest, RefusesAPlainSocket) {
  zmq::socket_t plain(outside_, zmq::socket_type::dealer);
  ExpectRejected(plain, "plain DEALER");
}

TEST_F(ZapHandlerTest, RefusesAKeyThatKnowsOnlyTheJobsPublicKey) {
  zmq::socket_t foreign(outside_, zmq::socket_type::dealer);
  SetCurveClient(foreign, NewKeys(), keys_.public_key);  // passes CURVE, fails ZAP
  ExpectRejected(foreign, "foreign client key");
}

TEST_F(ZapHandlerTest, RefusesAnotherJobsKey) {
  const CurveKeys other = NewKeys();
  zmq::socket_t wrong(outside_, zmq::socket_type::dealer);
  SetCurveClient(wrong, other, other.public_key);
  ExpectRejected(wrong, "another job's key");
}

TEST_F(ZapHandlerTest, RefusesAClaimedPublicKeyWithoutItsSecret) {
  // The job's public key as the client key, with some other secret key.
  CurveKeys forged = NewKeys();
  forged.public_key = keys_.public_key;
  zmq::socket_t s(outside_, zmq::socket_type::dealer);
  SetCurveClient(s, forged, keys_.public_key);
  ExpectRejected(s, "forged client key");
}

TEST_F(ZapHandlerTest, ServersFailClosedWithoutTheHandler) {
  security_.reset();  // stops the ZAP handler; the server socket stays
  zmq::socket_t client(outside_, zmq::socket_type::dealer);
  client.set(zmq::sockopt::linger, 0);
  SetCurveClient(client, keys_, keys_.public_key);  // even the job's own key
  client.connect(endpoint_);
  client.send(zmq::str_buffer("hello"), zmq::send_flags::dontwait);
  std::vector<zmq::message_t> frames;
  EXPECT_FALSE(ReceiveWithin(*server_, milliseconds(1000), &frames));
}

TEST_F(ZapHandlerTest, OneHandlerPerContext) {
  auto second = SecurityConfig::Start(&context_, keys_);
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
}

// ---- Join ------------------------------------------------------------------------

geeps::ProcessOptions SingleRank(const std::string& key_file) {
  geeps::ProcessOptions o;
  o.rank = 0;
  o.world_size = 1;
  o.coordinator = "127.0.0.1:" + std::to_string(FreePort());
  o.curve_key_file = key_file;
  return o;
}

TEST(JoinTest, BadKeyFilesFailAtJoinNamingThem) {
  TempDir dir;
  const geeps::Config config = geeps::testing::MakeConfig({1, 1, 2});
  auto missing = geeps::Process::Join(config, SingleRank(dir.File("missing.key")));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir.File("missing.key")), std::string::npos)
      << missing.status().ToString();

  const std::string open = NewKeyFile(dir, "open.key");
  chmod(open.c_str(), 0644);
  auto readable = geeps::Process::Join(config, SingleRank(open));
  ASSERT_FALSE(readable.ok());
  EXPECT_EQ(readable.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(readable.status().message().find(open), std::string::npos)
      << readable.status().ToString();

  const std::string bad = dir.File("bad.key");
  WriteText(bad, "public-key nonsense\n");
  auto malformed = geeps::Process::Join(config, SingleRank(bad));
  ASSERT_FALSE(malformed.ok());
  EXPECT_EQ(malformed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(malformed.status().message().find(bad), std::string::npos)
      << malformed.status().ToString();
}

TEST(JoinTest, OneProcessCurveJobIsExact) {
  TempDir dir;
  const geeps::Config config = geeps::testing::MakeConfig({1, 1, 2});
  auto process = geeps::Process::Join(config, SingleRank(NewKeyFile(dir, "job.key")));
  ASSERT_TRUE(process.ok()) << process.status().ToString();
  geeps::Process& p = **process;
  ASSERT_NE(p.worker(), nullptr);
  EXPECT_OK(geeps::testing::RunWorker(*p.worker(), p.config(), 0, 5, milliseconds(0)));
  EXPECT_OK(p.Shutdown());
  EXPECT_EQ(p.rejected_connections(), 0);
}

TEST(JoinTest, EnvironmentNamesTheKeyFile) {
  setenv("GEEPS_CURVE_KEYS", "/some/job.key", 1);
  geeps::ProcessOptions o;
  EXPECT_OK(geeps::ApplyEnvironment(&o));
  unsetenv("GEEPS_CURVE_KEYS");
  EXPECT_EQ(o.curve_key_file, "/some/job.key");
}

// ---- multi-process jobs -----------------------------------------------------------

TEST(CurveJobTest, TwoProcessesOverTcpAreExact) {
  TempDir dir;
  const std::string key = NewKeyFile(dir, "job.key");
  std::vector<Child> children = StartJob(dir, {key, key}, {}, {"--channels", "2"});
  ASSERT_TRUE(WaitAll(children, milliseconds(90000))) << Logs(children);
  ExpectExact(children);
  for (const Child& c : children) EXPECT_EQ(RejectedIn(ReadFile(c.log)), 0) << Logs(children);
}

// Machine-level aggregation with keys: 3 ranks on one machine, whose
// members reach the leader's relay over ipc:// and the relay the shards
// over tcp://, every socket with CURVE.
TEST(CurveJobTest, AggregatedMachineIsExactWithKeys) {
  TempDir dir;
  const std::string key = NewKeyFile(dir, "job.key");
  std::vector<Child> children = StartJob(dir, {key, key, key},
                                         {{"GEEPS_AGGREGATE_PER_MACHINE", "1"},
                                          {"GEEPS_MACHINE", "node0"},
                                          {"GEEPS_LOG_LEVEL", "info"}},
                                         {"--channels", "2"});
  ASSERT_TRUE(WaitAll(children, milliseconds(90000))) << Logs(children);
  ExpectExact(children);
  for (const Child& c : children) EXPECT_EQ(RejectedIn(ReadFile(c.log)), 0) << Logs(children);
  // Rank 0 leads: its log names its relay.
  EXPECT_NE(Logs(children).find("rank 0: relay of machine 'node0'"), std::string::npos)
      << Logs(children);
}

TEST(CurveJobTest, TwoProcessesOverIpcAreExact) {
  TempDir dir;
  const std::string key = NewKeyFile(dir, "job.key");
  std::vector<Child> children =
      StartJob(dir, {key, key}, {{"GEEPS_TRANSPORT", "ipc"}}, {"--channels", "2"});
  ASSERT_TRUE(WaitAll(children, milliseconds(90000))) << Logs(children);
  ExpectExact(children);
}

#ifdef GEEPS_LAUNCH
TEST(CurveJobTest, GeepsLaunchPassesTheKeyFile) {
  TempDir dir;
  const Env env = {{"GEEPS_TIMEOUT_MS", "20000"}, {"GEEPS_CURVE_KEYS", NewKeyFile(dir, "job.key")}};
  std::vector<Child> children = {Spawn({::geeps::testing::Program(GEEPS_LAUNCH), "-n", "3",
                                        ::geeps::testing::Program(GEEPS_MULTIPROC_WORKER)},
                                       env, dir.File("launch.log"))};
  ASSERT_TRUE(WaitAll(children, milliseconds(90000))) << Logs(children);
  const std::string log = ReadFile(children[0].log);
  EXPECT_EQ(children[0].status, 0) << log;
  for (int w = 0; w < 3; ++w)
    EXPECT_NE(log.find("worker " + std::to_string(w) + " of 3: "), std::string::npos) << log;
  EXPECT_EQ(Occurrences(log, "rejected_connections: 0"), 3) << log;
}
#endif

TEST(CurveJobTest, MpirunExportsTheKeyFile) {
  if (access("/usr/bin/mpirun", X_OK) != 0)
    GTEST_SKIP() << "mpirun not found (scripts/setup.sh installs openmpi-bin)";
  TempDir dir;
  const Env env = {{"GEEPS_COORDINATOR", "127.0.0.1:" + std::to_string(FreePort())},
                   {"GEEPS_TIMEOUT_MS", "20000"},
                   {"GEEPS_CURVE_KEYS", NewKeyFile(dir, "job.key")}};
  std::vector<Child> children = {
      Spawn({"/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "--mca",
             "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo", "-x",
             "GEEPS_COORDINATOR", "-x", "GEEPS_TIMEOUT_MS", "-x", "GEEPS_CURVE_KEYS",
             ::geeps::testing::Program(GEEPS_MULTIPROC_WORKER)},
            env, dir.File("mpirun.log"))};
  ASSERT_TRUE(WaitAll(children, milliseconds(90000))) << Logs(children);
  const std::string log = ReadFile(children[0].log);
  EXPECT_EQ(children[0].status, 0) << log;
  for (int w = 0; w < 2; ++w)
    EXPECT_NE(log.find("worker " + std::to_string(w) + " of 2: "), std::string::npos) << log;
  EXPECT_EQ(Occurrences(log, "rejected_connections: 0"), 2) << log;
}

// A rank with `rank1_key` ("" = none) next to a rank 0 with the job's key:
// neither joins, and rank 0 says why.
void ExpectCannotJoin(const TempDir& dir, const std::string& job_key,
                      const std::string& rank1_key) {
  const auto start = steady_clock::now();
  std::vector<Child> children = StartJob(dir, {job_key, rank1_key}, {{"GEEPS_TIMEOUT_MS", "1500"}});
  ASSERT_TRUE(WaitAll(children, milliseconds(60000))) << Logs(children);
  const std::string logs = Logs(children);
  EXPECT_NE(children[0].status, 0) << logs;
  EXPECT_NE(children[1].status, 0) << logs;
  const std::string log0 = ReadFile(children[0].log);
  EXPECT_NE(log0.find("rank 1 did not join"), std::string::npos) << logs;
  EXPECT_NE(log0.find("failed CURVE authentication"), std::string::npos) << logs;
  EXPECT_NE(log0.find("CURVE: rejected a connection"), std::string::npos) << logs;
  EXPECT_NE(ReadFile(children[1].log).find("no answer from the coordinator"), std::string::npos)
      << logs;
  EXPECT_EQ(logs.find("iterations exact"), std::string::npos) << logs;
  EXPECT_LT(steady_clock::now() - start, std::chrono::seconds(30)) << logs;
}

TEST(CurveJobTest, RankWithoutTheKeyCannotJoin) {
  TempDir dir;
  ExpectCannotJoin(dir, NewKeyFile(dir, "job.key"), "");
}

TEST(CurveJobTest, RankWithAnotherKeyCannotJoin) {
  TempDir dir;
  ExpectCannotJoin(dir, NewKeyFile(dir, "job.key"), NewKeyFile(dir, "other.key"));
}

// A running CURVE job while sockets without its key (plain, or CURVE with a
// foreign client key that knows the job's public key) connect to its
// coordinator and shard ports and send well-formed frames: the sums stay
// exact, the intruders receive nothing, and both ranks count rejections.
TEST(CurveJobTest, IntrudersCannotReadOrUpdate) {
  TempDir dir;
  const std::string key = NewKeyFile(dir, "job.key");
  const CurveKeys job = *geeps::transport::ReadCurveKeyFile(key);
  const int base = FreePortRange(4);
  const int coordinator = FreePort();
  std::vector<Child> children =
      StartJob(dir, {key, key}, {{"GEEPS_BASE_PORT", std::to_string(base)}},
               {"--iterations", "40", "--delay-ms", "10", "--channels", "2"}, coordinator);

  std::atomic<bool> done{false};
  std::atomic<int> received{0};
  std::thread intruders([&] {
    zmq::context_t ctx;
    // Rank 0: coordinator, shard channels base, base+1; rank 1: base+2, base+3.
    std::vector<int> ports = {coordinator, base, base + 1, base + 2, base + 3};
    std::vector<std::unique_ptr<zmq::socket_t>> sockets;
    for (int port : ports) {
      for (int kind = 0; kind < 4; ++kind) {
        auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
        s->set(zmq::sockopt::linger, 0);
        // Half pretend to be worker 0 / rank 1; the others have ZeroMQ's
        // random ids, whose frames a shard would drop and count if they got
        // through.
        if (kind % 2 == 0) s->set(zmq::sockopt::routing_id, port == coordinator ? "r1" : "w0");
        if (kind >= 2) SetCurveClient(*s, NewKeys(), job.public_key);
        s->connect("tcp://127.0.0.1:" + std::to_string(port));
        sockets.push_back(std::move(s));
      }
    }
    // A subscription to every row of table 0 and a huge update, as worker 0.
    geeps::transport::WireHeader sub;
    sub.type = static_cast<uint16_t>(geeps::transport::MsgType::kSubscribe);
    sub.row_count = 1;
    sub.row_width = 1;
    geeps::transport::WireHeader upd = sub;
    upd.type = static_cast<uint16_t>(geeps::transport::MsgType::kUpdate);
    while (!done.load()) {
      for (size_t i = 0; i < sockets.size(); ++i) {
        zmq::socket_t& s = *sockets[i];
        if (i < 4) {  // the coordinator's
          s.send(zmq::str_buffer("HB"), zmq::send_flags::dontwait);
        } else {
          for (const auto* h : {&sub, &upd}) {
            zmq::message_t header(geeps::transport::kHeaderBytes);
            geeps::transport::EncodeHeader(*h, header.data());
            const uint64_t row = 0;
            const float delta = 1e6f;
            s.send(header, zmq::send_flags::sndmore | zmq::send_flags::dontwait);
            if (h == &sub) {
              s.send(zmq::buffer(&row, sizeof(row)), zmq::send_flags::dontwait);
            } else {
              s.send(zmq::buffer(&row, sizeof(row)),
                     zmq::send_flags::sndmore | zmq::send_flags::dontwait);
              s.send(zmq::buffer(&delta, sizeof(delta)), zmq::send_flags::dontwait);
            }
          }
        }
        std::vector<zmq::message_t> frames;
        if (ReceiveWithin(s, milliseconds(1), &frames)) received.fetch_add(1);
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
  const bool finished = WaitAll(children, milliseconds(90000));
  done.store(true);
  intruders.join();
  ASSERT_TRUE(finished) << Logs(children);
  ExpectExact(children);
  EXPECT_EQ(received.load(), 0);
  const std::string logs = Logs(children);
  for (const Child& c : children) {
    const std::string log = ReadFile(c.log);
    EXPECT_GT(RejectedIn(log), 0) << logs;
    EXPECT_NE(log.find("CURVE: rejected a connection"), std::string::npos) << logs;
    // Nothing got far enough to be a (dropped) frame.
    EXPECT_NE(log.find("\"frames_dropped\":0"), std::string::npos) << logs;
  }
}

}  // namespace

namespace {

// ---- foreign traffic (docs/security.md, "Without CURVE (the default)") ------------

// What a local process outside the job sprays at every port of a running
// job: short-lived DEALER, REQ, PUSH and PUB sockets, a third of them with a
// worker's routing id (w0, w1, w2), others with a rank's or random bytes;
// one to three frames of random bytes, or a well-formed subscription or
// update as worker 0. Runs until `done`; counts what it sent per target.
class Sprayer {
 public:
  Sprayer(std::vector<std::string> targets, std::atomic<bool>* done)
      : targets_(std::move(targets)), done_(done), sent_(targets_.size(), 0) {
    thread_ = std::thread([this] { Run(); });
  }
  ~Sprayer() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  const std::vector<int64_t>& sent() const { return sent_; }  // after Join
  milliseconds elapsed() const { return elapsed_; }           // after Join

 private:
  void Run() {
    const auto start = steady_clock::now();
    zmq::context_t ctx;
    std::mt19937 rng(11);
    const zmq::socket_type kinds[] = {zmq::socket_type::dealer, zmq::socket_type::req,
                                      zmq::socket_type::push, zmq::socket_type::pub};
    for (uint64_t i = 0; !done_->load(); ++i) {
      const size_t target = i % targets_.size();
      zmq::socket_t s(ctx, kinds[rng() % 4]);
      s.set(zmq::sockopt::linger, 50);
      const int id = static_cast<int>(rng() % 6);
      if (id < 3) s.set(zmq::sockopt::routing_id, "w" + std::to_string(id));
      if (id == 3) s.set(zmq::sockopt::routing_id, "r1.0123456789abcdef");
      if (id == 4) s.set(zmq::sockopt::routing_id, std::string(1 + rng() % 20, char(rng())));
      try {
        s.connect(targets_[target]);
        for (int m = 0; m < 5; ++m) Send(s, rng);
        sent_[target] += 5;
      } catch (const zmq::error_t&) {
        // REQ after its one message, a full queue: the next socket goes on.
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    elapsed_ = std::chrono::duration_cast<milliseconds>(steady_clock::now() - start);
  }

  static void Send(zmq::socket_t& s, std::mt19937& rng) {
    using geeps::transport::MsgType;
    if (rng() % 3 == 0) {  // well formed, as worker 0: table 0, row 0
      geeps::transport::WireHeader h;
      h.type = static_cast<uint16_t>(rng() % 2 ? MsgType::kSubscribe : MsgType::kUpdate);
      h.row_count = 1;
      h.row_width = 1;
      zmq::message_t header(geeps::transport::kHeaderBytes);
      geeps::transport::EncodeHeader(h, header.data());
      const uint64_t row = 0;
      const float delta = 1e6f;
      const bool update = h.type == static_cast<uint16_t>(MsgType::kUpdate);
      s.send(header, zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      s.send(zmq::buffer(&row, sizeof(row)),
             update ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                    : zmq::send_flags::dontwait);
      if (update) s.send(zmq::buffer(&delta, sizeof(delta)), zmq::send_flags::dontwait);
      return;
    }
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < n; ++f) {
      zmq::message_t m(rng() % 80);
      for (size_t b = 0; b < m.size(); ++b) static_cast<unsigned char*>(m.data())[b] = rng();
      s.send(m, (f + 1 < n ? zmq::send_flags::sndmore : zmq::send_flags::none) |
                    zmq::send_flags::dontwait);
    }
  }

  const std::vector<std::string> targets_;
  std::atomic<bool>* done_;
  std::vector<int64_t> sent_;
  milliseconds elapsed_{0};
  std::thread thread_;
};

// The shard sockets of a job over ipc: the socket files in its folder.
std::vector<std::string> IpcSockets(const TempDir& dir, size_t expected) {
  std::vector<std::string> found;
  const auto deadline = steady_clock::now() + std::chrono::seconds(20);
  while (found.size() < expected && steady_clock::now() < deadline) {
    found.clear();
    std::unique_ptr<FILE, int (*)(FILE*)> ls(
        popen(("ls " + dir.File("") + " 2>/dev/null").c_str(), "r"), pclose);
    char line[512];
    while (ls && std::fgets(line, sizeof(line), ls.get())) {
      std::string name(line);
      if (!name.empty() && name.back() == '\n') name.pop_back();
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".sock") == 0)
        found.push_back("ipc://" + dir.File(name));
    }
    if (found.size() < expected) std::this_thread::sleep_for(milliseconds(20));
  }
  return found;
}

struct SprayCase {
  const char* name;
  bool ipc;
  bool keys;
};

class ForeignTrafficTest : public ::testing::TestWithParam<SprayCase> {};

// Issue 34: a 3-rank exact-sum job sprayed for at least 20 s, on every
// shard port and the coordinator's, with messages whose routing ids are
// the workers' among others. Before the job token, a sprayer that claimed
// w0 took worker 0's route at a shard (ZMQ_ROUTER_HANDOVER), a push went to
// it, and the job ended DeadlineExceeded. Now nothing gets past the data
// plane's handshake: the sums are exact and every rank counts refusals.
TEST_P(ForeignTrafficTest, SprayedJobStaysExact) {
  const SprayCase& c = GetParam();
  TempDir dir;
  const std::string key = c.keys ? NewKeyFile(dir, "job.key") : "";
  const int base = FreePortRange(6);
  const int coordinator = FreePort();
  // The sprayer opens about 2000 connections a second; under ThreadSanitizer
  // on 2 cores their handshakes have delayed heartbeats past 3 s (a clean
  // run lost ranks 1 and 2 that way), and heartbeats are not what this test
  // is about.
  Env extra = {{"GEEPS_BASE_PORT", std::to_string(base)}, {"GEEPS_HEARTBEAT_TIMEOUT_MS", "15000"}};
  if (c.ipc) extra["GEEPS_TRANSPORT"] = "ipc";
  std::vector<Child> children =
      StartJob(dir, {key, key, key}, extra,
               {"--iterations", "220", "--delay-ms", "100", "--channels", "2"}, coordinator);
  std::vector<std::string> targets = {"tcp://127.0.0.1:" + std::to_string(coordinator)};
  if (c.ipc) {
    for (const std::string& s : IpcSockets(dir, 6)) targets.push_back(s);
  } else {
    for (int p = 0; p < 6; ++p) targets.push_back("tcp://127.0.0.1:" + std::to_string(base + p));
  }
  ASSERT_EQ(targets.size(), 7u) << Logs(children);
  std::atomic<bool> done{false};
  Sprayer sprayer(targets, &done);
  const bool finished = WaitAll(children, milliseconds(100000));
  done.store(true);
  sprayer.Join();
  ASSERT_TRUE(finished) << Logs(children);
  ExpectExact(children);
  EXPECT_GE(sprayer.elapsed().count(), 20000);
  for (size_t t = 0; t < targets.size(); ++t) EXPECT_GT(sprayer.sent()[t], 100) << targets[t];
  std::string logs = Logs(children) + "targets:";
  for (const std::string& t : targets) logs += " " + t;
  for (const Child& child : children) {
    const std::string log = ReadFile(child.log);
    EXPECT_GT(RejectedIn(log), 0) << logs;  // the shards refused the sprayer
    EXPECT_NE(log.find("rejected a connection"), std::string::npos) << logs;
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, ForeignTrafficTest,
                         ::testing::Values(SprayCase{"tcp", false, false},
                                           SprayCase{"ipc", true, false},
                                           SprayCase{"tcp_curve", false, true},
                                           SprayCase{"ipc_curve", true, true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace

namespace {

// The resident set of process `pid` ("VmRSS") or its peak ("VmHWM"), bytes.
long ProcKilobytes(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1) * 1024;
  return -1;
}

// An outsider's socket speaking ZMTP 3.0 by hand: it greets with the
// mechanism the server greets with, gets as far as it is let in (NULL: its
// READY, then a data frame; PLAIN or CURVE: its first command), and there
// announces a frame of `frame_bytes` and streams it. Returns the bytes of
// that frame the server took before it cut the connection (all of them if
// it never did).
int64_t SendOneHugeFrame(int port, int64_t frame_bytes, std::string* mechanism) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return close(fd), -1;
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  // The greeting's first 11 bytes (signature, major version 3) go first:
  // the server answers with its whole greeting, which names its mechanism.
  unsigned char greeting[64] = {0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 0};
  (void)!send(fd, greeting, 11, MSG_NOSIGNAL);
  unsigned char theirs[64];
  size_t got = 0;
  while (got < sizeof(theirs)) {
    const ssize_t n = recv(fd, theirs + got, sizeof(theirs) - got, 0);
    if (n <= 0) return close(fd), -1;
    got += static_cast<size_t>(n);
  }
  *mechanism = std::string(reinterpret_cast<char*>(theirs) + 12, 20).c_str();
  std::memcpy(greeting + 12, mechanism->data(), mechanism->size());
  (void)!send(fd, greeting + 11, 53, MSG_NOSIGNAL);
  unsigned char flags = 0x06;  // a long command (PLAIN's HELLO, CURVE's)
  if (*mechanism == "NULL") {
    // READY with Socket-Type DEALER, then a long data frame.
    const char ready[] =
        "\x05READY\x0bSocket-Type\x00\x00\x00\x06"
        "DEALER";
    const unsigned char head[2] = {0x04, static_cast<unsigned char>(sizeof(ready) - 1)};
    (void)!send(fd, head, 2, MSG_NOSIGNAL);
    (void)!send(fd, ready, sizeof(ready) - 1, MSG_NOSIGNAL);
    flags = 0x02;
  }
  unsigned char frame[9] = {flags};
  for (int b = 0; b < 8; ++b)
    frame[1 + b] = static_cast<unsigned char>(frame_bytes >> (56 - 8 * b));
  (void)!send(fd, frame, sizeof(frame), MSG_NOSIGNAL);
  std::vector<char> chunk(1 << 20, 'x');
  int64_t sent = 0;
  while (sent < frame_bytes) {
    const ssize_t n =
        send(fd, chunk.data(), std::min<int64_t>(chunk.size(), frame_bytes - sent), MSG_NOSIGNAL);
    if (n <= 0) break;  // EPIPE / ECONNRESET: the server cut it
    sent += n;
  }
  close(fd);
  return sent;
}

// Issue 34: three outsiders each send one frame of 256 MiB to a shard port
// of a small job, and one to the coordinator's port. The frame limit follows the job (a few KiB
// here; it was 1 GiB whatever the job, and the shard's RSS peaked 700 MB above its baseline), and
// without keys the outsider does not get past the job token's handshake: the rank grows by less
// than 100 MB and the job ends exact.
TEST(ForeignFrameTest, ThreeFramesOf256MiBStayBoundedByTheJob) {
  TempDir dir;
  const int base = FreePortRange(4);
  const int coordinator = FreePort();
  // The host device: a GPU's driver takes its resident memory (the context,
  // the pinned pools) while the job starts, which may be after the baseline.
  std::vector<Child> children =
      StartJob(dir, {"", ""}, {{"GEEPS_BASE_PORT", std::to_string(base)}, {"GEEPS_DEVICE", "host"}},
               {"--iterations", "80", "--delay-ms", "50", "--channels", "2"}, coordinator);
  // Rank 0 has joined and runs once its shard port answers; its resident set
  // then is the baseline.
  std::string mechanism;
  const auto deadline = steady_clock::now() + std::chrono::seconds(20);
  while (SendOneHugeFrame(base, 0, &mechanism) < 0 && steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(50));
  std::this_thread::sleep_for(milliseconds(500));
  const long baseline = ProcKilobytes(children[0].pid, "VmRSS");
  ASSERT_GT(baseline, 0);
  std::vector<int64_t> taken(3, -1);
  std::vector<std::string> mechanisms(3);
  std::vector<std::thread> senders;
  for (int k = 0; k < 3; ++k)
    senders.emplace_back(
        [&, k] { taken[k] = SendOneHugeFrame(base + k % 2, int64_t{256} << 20, &mechanisms[k]); });
  for (std::thread& t : senders) t.join();
  // The coordinator's port too (rank 0): a PLAIN handshake since the job
  // started, its command frames held to the control limit (16 MiB).
  std::string control_mechanism;
  const int64_t control_taken =
      SendOneHugeFrame(coordinator, int64_t{256} << 20, &control_mechanism);
  const long peak = ProcKilobytes(children[0].pid, "VmHWM");
  ASSERT_TRUE(WaitAll(children, milliseconds(60000))) << Logs(children);
  ExpectExact(children);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(mechanisms[k], "PLAIN") << "the data plane asks for the job token";
    EXPECT_GE(taken[k], 0) << "sender " << k << " could not connect";
    EXPECT_LT(taken[k], int64_t{64} << 20) << "sender " << k << " was not cut off";
  }
  EXPECT_EQ(control_mechanism, "PLAIN");
  EXPECT_GE(control_taken, 0);
  EXPECT_LE(control_taken, (int64_t{16} << 20) + (int64_t{4} << 20)) << "not cut off at 16 MiB";
  EXPECT_LT(peak - baseline, long{100} << 20)
      << "rank 0 grew from " << baseline << " to a peak of " << peak << " bytes";
}

// ---- the job token on bare sockets ------------------------------------------------

class TokenZapTest : public SecuredServerTest {
 protected:
  void SetUp() override { Serve(SecurityConfig::StartWithToken(&context_)); }
  // A DEALER of the outsiders' context with worker 0's routing id that
  // presents `user` and `password` (PLAIN; none when empty), unconnected.
  std::unique_ptr<zmq::socket_t> PlainDealer(const std::string& user, const std::string& password) {
    auto s = std::make_unique<zmq::socket_t>(outside_, zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, 0);
    s->set(zmq::sockopt::routing_id, "w0");
    if (!password.empty()) {
      s->set(zmq::sockopt::plain_username, user);
      s->set(zmq::sockopt::plain_password, password);
    }
    return s;
  }
  // The same, connected, with "hello" sent.
  std::unique_ptr<zmq::socket_t> Client(const std::string& user, const std::string& password) {
    auto s = PlainDealer(user, password);
    s->connect(endpoint_);
    s->send(zmq::str_buffer("hello"), zmq::send_flags::dontwait);
    return s;
  }
  void ExpectRefused(const std::string& user, const std::string& password,
                     const std::string& what) {
    ExpectRejected(*PlainDealer(user, password), what);
  }
};

// A member's connection that comes before this process knows the token (a
// worker faster than this shard's WELCOME) is held, not refused, and
// admitted once the token is set.
TEST_F(TokenZapTest, HandshakesBeforeTheTokenAreHeldThenJudged) {
  const std::string token = geeps::transport::NewJobToken();
  auto member = Client("geeps-job-token", token);
  std::vector<zmq::message_t> frames;
  EXPECT_FALSE(ReceiveWithin(*server_, milliseconds(300), &frames));
  ASSERT_TRUE(security_->SetJobToken(token).ok());
  ASSERT_TRUE(ReceiveWithin(*server_, milliseconds(10000), &frames));
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].to_string(), "w0");
  EXPECT_EQ(frames[1].to_string(), "hello");
  EXPECT_EQ(security_->rejected_connections(), 0);
}

TEST_F(TokenZapTest, RefusesEveryoneWithoutTheToken) {
  ASSERT_TRUE(security_->SetJobToken(geeps::transport::NewJobToken()).ok());
  ExpectRefused("", "", "no mechanism (NULL)");
  ExpectRefused("geeps-job-token", geeps::transport::NewJobToken(), "another token");
  ExpectRefused("geeps-job-token", security_->job_token().substr(1), "a token one short");
  ExpectRefused("someone", security_->job_token(), "the token under another user name");
  zmq::socket_t curve(outside_, zmq::socket_type::dealer);
  const CurveKeys keys = NewKeys();
  SetCurveClient(curve, keys, keys.public_key);
  ExpectRejected(curve, "a CURVE client");
  // And the member still gets in, taking worker 0's routing id.
  auto member = Client("geeps-job-token", security_->job_token());
  std::vector<zmq::message_t> frames;
  ASSERT_TRUE(ReceiveWithin(*server_, milliseconds(10000), &frames));
  EXPECT_EQ(frames[0].to_string(), "w0");
}

// ZeroMQ keeps one monitor per socket: a channel's disconnect monitor
// replaces the handler's, and the failed handshakes it sees are still
// counted (they went uncounted once a channel started, so an outsider
// without any mechanism was refused silently).
TEST_F(TokenZapTest, FailedHandshakesAreCountedAfterADisconnectMonitorTakesOver) {
  ASSERT_TRUE(security_->SetJobToken(geeps::transport::NewJobToken()).ok());
  auto monitor = geeps::transport::MonitorDisconnects(context_, *server_);
  const int64_t before = security_->rejected_connections();
  auto outsider = Client("", "");  // no mechanism
  const auto deadline = steady_clock::now() + std::chrono::seconds(10);
  while (security_->rejected_connections() == before && steady_clock::now() < deadline) {
    geeps::transport::CountDisconnects(*monitor, nullptr, security_.get());
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_GT(security_->rejected_connections(), before);
  geeps::transport::StopMonitor(*server_, monitor);
}

// A flood of handshakes before the token: at most kMaxHeldZapRequests are
// held; the rest are refused at once (an outsider cannot make the handler
// hold without bound).
TEST_F(TokenZapTest, HeldHandshakesAreBounded) {
  std::vector<std::unique_ptr<zmq::socket_t>> clients;
  const size_t n = SecurityConfig::kMaxHeldZapRequests + 20;
  for (size_t i = 0; i < n; ++i) clients.push_back(Client("geeps-job-token", std::string(32, 'a')));
  EXPECT_TRUE(
      WaitAbove([&] { return security_->rejected_connections(); }, 19, milliseconds(20000)));
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_LE(security_->rejected_connections(), 20 + 5);  // a reconnect or two may come back
  ASSERT_TRUE(security_->SetJobToken(std::string(32, 'a')).ok());
  std::vector<zmq::message_t> frames;
  EXPECT_TRUE(ReceiveWithin(*server_, milliseconds(10000), &frames));
}

}  // namespace

namespace {

// ---- the coordinator's port without keys ------------------------------------------

// The coordinator's port in token mode: during the rendezvous it admits
// anyone who names a rank; once sealed, only the ranks that joined (a
// reconnect of theirs included). A refused client learns it (RefusedBy).
TEST(ControlPlaneSealTest, OnlyTheJoinedRanksGetInOnceSealed) {
  zmq::context_t context, outside;
  auto server_security = SecurityConfig::StartWithToken(&context);
  auto client_security = SecurityConfig::StartWithToken(&outside);
  ASSERT_TRUE(server_security.ok() && client_security.ok());
  auto router =
      geeps::transport::BindControlRouter(context, "tcp://127.0.0.1:*", server_security->get());
  ASSERT_TRUE(router.ok()) << router.status();
  const std::string endpoint = (*router)->get(zmq::sockopt::last_endpoint);
  auto rank = [&](int r, uint64_t nonce) {
    auto s = geeps::transport::ConnectControlDealer(
        outside, endpoint, geeps::transport::PeerRoutingId(r, nonce), client_security->get());
    EXPECT_TRUE(s.ok()) << s.status();
    (*s)->set(zmq::sockopt::linger, 0);
    (*s)->send(zmq::str_buffer("HB"), zmq::send_flags::dontwait);
    return std::move(s).value();
  };
  std::vector<zmq::message_t> frames;
  auto first = rank(1, 0x1111);
  ASSERT_TRUE(ReceiveWithin(**router, milliseconds(10000), &frames));
  EXPECT_EQ(frames[0].to_string(), geeps::transport::PeerRoutingId(1, 0x1111));
  // A socket that names no rank is refused even now.
  const int64_t before = (*server_security)->rejected_connections();
  zmq::socket_t stranger(outside, zmq::socket_type::dealer);
  stranger.set(zmq::sockopt::linger, 0);
  stranger.set(zmq::sockopt::plain_username, "geeps-rank");
  stranger.set(zmq::sockopt::plain_password, "w0");
  stranger.connect(endpoint);
  stranger.send(zmq::str_buffer("HB"), zmq::send_flags::dontwait);
  EXPECT_TRUE(WaitAbove([&] { return (*server_security)->rejected_connections(); }, before,
                        milliseconds(10000)));

  (*server_security)->SealControlPlane({geeps::transport::PeerRoutingId(1, 0x1111)});
  EXPECT_FALSE((*client_security)->RefusedBy(endpoint));
  auto late = rank(1, 0x2222);  // a second process as rank 1
  const auto deadline = steady_clock::now() + std::chrono::seconds(10);
  while (!(*client_security)->RefusedBy(endpoint) && steady_clock::now() < deadline)
    std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE((*client_security)->RefusedBy(endpoint));
  EXPECT_FALSE(ReceiveWithin(**router, milliseconds(300), &frames));
  // The joined rank's connection, made again (a reconnect), still gets in.
  first.reset();
  auto again = rank(1, 0x1111);
  ASSERT_TRUE(ReceiveWithin(**router, milliseconds(10000), &frames));
  EXPECT_EQ(frames[0].to_string(), geeps::transport::PeerRoutingId(1, 0x1111));
}

// A process that starts as a rank of a job already running is refused at
// the coordinator's handshake and says so at once; the job stays exact.
TEST(ControlPlaneSealTest, ALateRankIsToldAtOnceAndTheJobGoesOn) {
  TempDir dir;
  const int coordinator = FreePort();
  std::vector<Child> children =
      StartJob(dir, {"", ""}, {}, {"--iterations", "60", "--delay-ms", "50"}, coordinator);
  // The job runs once its ranks have joined: wait for rank 1's first sign.
  std::this_thread::sleep_for(milliseconds(1500));
  Env env = {{"GEEPS_COORDINATOR", "127.0.0.1:" + std::to_string(coordinator)},
             {"GEEPS_TIMEOUT_MS", "20000"},
             {"GEEPS_RANK", "1"},
             {"GEEPS_WORLD_SIZE", "2"},
             {"GEEPS_IPC_DIR", dir.File("")}};
  const auto start = steady_clock::now();
  std::vector<Child> late = {
      Spawn({::geeps::testing::Program(GEEPS_MULTIPROC_WORKER)}, env, dir.File("late.log"))};
  ASSERT_TRUE(WaitAll(late, milliseconds(30000))) << Logs(late);
  const auto took = steady_clock::now() - start;
  const std::string log = ReadFile(late[0].log);
  EXPECT_NE(late[0].status, 0) << log;
  EXPECT_NE(log.find("rank 1 is already running in it"), std::string::npos) << log;
  EXPECT_LT(took, std::chrono::seconds(10)) << log;  // not the 20 s timeout
  ASSERT_TRUE(WaitAll(children, milliseconds(60000))) << Logs(children);
  ExpectExact(children);
  EXPECT_NE(ReadFile(children[0].log).find("claims rank 1, but every rank of this job has joined"),
            std::string::npos)
      << Logs(children);
}

}  // namespace
