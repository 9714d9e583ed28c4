// Read/update throughput of libgeeps between processes, against the ceiling
// of plain ZeroMQ between the same two kinds of processes, in one run.
//
// For each size V: (a) libgeeps: a worker-only process and a server-only
// process over tcp loopback, BSP; each iteration reads V bytes of rows (which
// waits for the server's push of the previous clock), updates the same V
// bytes and clocks: one V-byte message each way per iteration. (b) the
// ceiling: a DEALER process sends V bytes to a ROUTER process, which sends
// them back, with no library in between. (c) the least a summing server
// must do on top of (b): the ROUTER adds each message into a store of V
// bytes (the shard's own add loop, server/row_ops.h) and sends the store back
// without a copy, as ps-lite's push-pull does; libgeeps' fraction of (c)
// says what its design costs beyond the work of any parameter server. With
// --pairs 2, two workers and two servers (each worker's rows spread over
// both shards) against two independent ZeroMQ pairs running at once.
//
//   rw_bench [--out rw_bench.json] [--csv rw_bench.csv] [--sizes 4K,64K,1M,16M]
//            [--seconds 2] [--pairs 1] [--rounds 3]
// Each size runs `rounds` rounds, each a ZeroMQ run, a summing ZeroMQ run
// and a libgeeps run (so all see the same moments of a shared machine); the
// medians are reported.
// Internal modes (started by the driver):
//   --child zmq-server|zmq-sum-server|zmq-client|geeps
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "bench_util.h"
#include "flags.h"
#include "geeps/process.h"
#include "server/row_ops.h"

namespace {

using geeps::bench::Collect;
using geeps::bench::Self;
using geeps::testing::Child;
using geeps::testing::Env;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kWidth = 1024;  // floats per row: 4 KiB rows

struct Options {
  std::string out = "rw_bench.json", csv = "rw_bench.csv";
  std::vector<uint64_t> sizes = {4 << 10, 64 << 10, 1 << 20, 16 << 20};
  double seconds = 2;
  int pairs = 1;
  int rounds = 3;
  // child mode
  std::string child;
  std::string endpoint;
  uint64_t bytes = 0;
};

// Iterations to time for a size: about `seconds` at a rough 1 GB/s, at
// least 20, and a fifth as many untimed first.
int IterationsFor(uint64_t bytes, double seconds) {
  const double per = 100e-6 + 2.0 * static_cast<double>(bytes) / 1e9;
  return std::max(20, static_cast<int>(seconds / per));
}

// ---- the ceiling: plain ZeroMQ -------------------------------------------------

// (b) sends each message back as it came. (c) with `sum`: adds each
// message into the store, then sends the store back as it is; the next add
// waits until ZeroMQ has released the store (its free callback), so no
// message is sent while it is being written.
int ZmqServer(const Options& o, bool sum) {
  std::vector<float> store;  // outlives the context, which sends from it
  std::atomic<bool> held{false};
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.bind(o.endpoint);
  for (;;) {
    zmq::message_t id, body;
    if (!s.recv(id) || !s.recv(body)) return 1;
    if (body.size() == 0) return 0;  // the client's stop message
    s.send(id, zmq::send_flags::sndmore);
    if (!sum) {
      s.send(body, zmq::send_flags::none);  // V bytes back
      continue;
    }
    const size_t floats = body.size() / sizeof(float);
    while (held.load(std::memory_order_acquire)) std::this_thread::yield();
    if (store.size() != floats) store.assign(floats, 0.0f);
    const auto* in = static_cast<const unsigned char*>(body.data());
    for (size_t done = 0; done < floats;) {  // AddRow takes 32-bit widths
      const uint32_t w = static_cast<uint32_t>(std::min<size_t>(floats - done, 1u << 30));
      geeps::server::AddRow(store.data() + done, in + done * sizeof(float), w);
      done += w;
    }
    held.store(true, std::memory_order_release);
    zmq::message_t back(
        store.data(), floats * sizeof(float),
        [](void*, void* flag) {
          static_cast<std::atomic<bool>*>(flag)->store(false, std::memory_order_release);
        },
        &held);
    s.send(back, zmq::send_flags::none);
  }
}

int ZmqClient(const Options& o) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.connect(o.endpoint);
  std::vector<char> data(o.bytes, 1), back(o.bytes);
  const int iters = IterationsFor(o.bytes, o.seconds), warm = iters / 5 + 2;
  Clock::time_point start;
  for (int i = 0; i < warm + iters; ++i) {
    if (i == warm) start = Clock::now();
    zmq::message_t m(data.data(), data.size());  // the application's bytes
    s.send(m, zmq::send_flags::none);
    zmq::message_t r;
    if (!s.recv(r) || r.size() != o.bytes) return 1;
    std::memcpy(back.data(), r.data(), r.size());  // into the application's memory
  }
  const double t = std::chrono::duration<double>(Clock::now() - start).count() / iters;
  s.send(zmq::message_t(), zmq::send_flags::none);
  std::printf("RESULT %.9f\n", t);
  return 0;
}

// ---- libgeeps ---------------------------------------------------------------------

int GeepsChild(const Options& o) {
  geeps::Config c;
  const uint64_t rows_per_worker = std::max<uint64_t>(1, o.bytes / (kWidth * sizeof(float)));
  c.tables = {{"params", rows_per_worker * o.pairs, kWidth}};
  c.timeout = std::chrono::milliseconds(60000);
  c.num_channels = 1;
  // GEEPS_* settings of the config (e.g. GEEPS_RESEND_AFTER_CONNECTION_LOSS=0
  // to measure without resend), then of the process (GEEPS_ROLE).
  geeps::Status env = geeps::ApplyEnvironment(&c);
  if (!env.ok()) {
    std::fprintf(stderr, "environment: %s\n", env.ToString().c_str());
    return 1;
  }
  geeps::ProcessOptions po;
  env = geeps::ApplyEnvironment(&po);  // GEEPS_ROLE
  if (!env.ok()) {
    std::fprintf(stderr, "environment: %s\n", env.ToString().c_str());
    return 1;
  }
  auto p = geeps::Process::Join(c, po);
  if (!p.ok()) {
    std::fprintf(stderr, "join: %s\n", p.status().ToString().c_str());
    return 1;
  }
  geeps::GeePS* ps = (*p)->worker();
  if (ps != nullptr) {
    auto run = [&]() -> geeps::Status {
      const int w = ps->rank();
      // Worker w's rows, interleaved so that with two shards each worker's
      // rows are split over both.
      std::vector<geeps::RowIndex> rows;
      for (uint64_t r = 0; r < rows_per_worker; ++r) rows.push_back(r * o.pairs + w);
      GEEPS_ASSIGN_OR_RETURN(auto rh, ps->VirtualRead(0, rows, 0));
      GEEPS_RETURN_IF_ERROR(ps->VirtualPostRead(rh));
      // The loop below writes every element of the update: no zeroing.
      GEEPS_ASSIGN_OR_RETURN(auto uh, ps->VirtualPreUpdate(0, rows, /*zeroed=*/false));
      GEEPS_RETURN_IF_ERROR(ps->VirtualUpdate(uh));
      GEEPS_RETURN_IF_ERROR(ps->VirtualClock());
      GEEPS_RETURN_IF_ERROR(ps->FinishVirtualIteration());
      GEEPS_RETURN_IF_ERROR(ps->StartIterations());
      const size_t floats = rows.size() * kWidth;
      const int iters = IterationsFor(o.bytes, o.seconds), warm = iters / 5 + 2;
      std::vector<float> mine(floats), ones(floats, 1.0f);
      Clock::time_point start;
      for (int i = 0; i < warm + iters; ++i) {
        if (i == warm) start = Clock::now();
        // The buffers are device memory: the application's side of the
        // traffic crosses through the worker's copies, as on a GPU.
        GEEPS_ASSIGN_OR_RETURN(const float* v, ps->Read(rh));
        GEEPS_RETURN_IF_ERROR(ps->CopyToHost(mine.data(), v, floats));
        GEEPS_RETURN_IF_ERROR(ps->PostRead(rh));
        GEEPS_ASSIGN_OR_RETURN(float* d, ps->PreUpdate(uh));
        GEEPS_RETURN_IF_ERROR(ps->CopyFromHost(d, ones.data(), floats));
        GEEPS_RETURN_IF_ERROR(ps->Update(uh));
        GEEPS_RETURN_IF_ERROR(ps->Clock());
      }
      const double t = std::chrono::duration<double>(Clock::now() - start).count() / iters;
      // Every update was applied: the last read saw warm+iters-1 clocks of 1s.
      const float expect = static_cast<float>(warm + iters - 1);
      if (mine[0] != expect || mine[floats - 1] != expect)
        return geeps::InternalError("read " + std::to_string(mine[0]) + ", expected " +
                                    std::to_string(expect));
      std::printf("RESULT %.9f\n", t);
      // Bytes per stage over this worker's V bytes per clock: passes.
      const geeps::DataPathBytes& b = ps->GetStats().data_path;
      const double per = static_cast<double>(floats * sizeof(float)) * (warm + iters);
      std::printf(
          "PASSES gather=%.3f zero=%.3f scatter_add=%.3f to_slot=%.3f pack=%.3f "
          "install=%.3f app_copies=%.3f\n",
          b.gather / per, b.zero / per, b.scatter_add / per, b.to_slot / per, b.pack / per,
          b.install / per, b.app_copies / per);
      std::printf("CLOCKBYTES %.0f\n", per);
      // Reads that waited, and how many of those waits spun first and
      // ended before they blocked (Config::spin_wait_us).
      const geeps::WorkerStats ws = ps->GetStats();
      std::printf("WAITS reads_waited=%lld spun=%lld ended_spinning=%lld\n",
                  static_cast<long long>(ws.reads_waited), static_cast<long long>(ws.waits_spun),
                  static_cast<long long>(ws.waits_ended_spinning));
      return geeps::Status::OK();
    };
    geeps::Status st = run();
    if (!st.ok()) {
      std::fprintf(stderr, "worker: %s\n", st.ToString().c_str());
      (*p)->Shutdown().ok();  // already failing: the first error is the one to report
      return 1;
    }
  }
  geeps::Status st = (*p)->Shutdown();
  if (!st.ok()) {
    std::fprintf(stderr, "shutdown: %s\n", st.ToString().c_str());
    return 1;
  }
  if (ps == nullptr) {  // a server: its stages' bytes (the driver divides)
    const geeps::ShardStats s = (*p)->GetShardStats();
    std::printf("SHARDBYTES apply=%lld fold=%lld push_copy=%lld\n",
                static_cast<long long>(s.apply_bytes), static_cast<long long>(s.fold_bytes),
                static_cast<long long>(s.push_copy_bytes));
  }
  return 0;
}

// ---- the driver -----------------------------------------------------------------

double RunZmq(const Options& o, uint64_t bytes, bool sum) {
  std::vector<Child> children;
  for (int k = 0; k < o.pairs; ++k) {
    const std::string ep = "tcp://127.0.0.1:" + std::to_string(geeps::testing::FreePort());
    const std::string b = std::to_string(bytes), sec = std::to_string(o.seconds);
    children.push_back(geeps::testing::Spawn(
        {Self(), "--child", sum ? "zmq-sum-server" : "zmq-server", "--endpoint", ep}, {}));
    children.push_back(geeps::testing::Spawn(
        {Self(), "--child", "zmq-client", "--endpoint", ep, "--bytes", b, "--seconds", sec}, {}));
  }
  return Collect(children, sum ? "summing zeromq pair" : "zeromq pair");
}

// Passes over the bytes per stage (docs/architecture.md, "Passes over the
// bytes"), from the library's counters: the workers' stages averaged, the
// shards' bytes over all workers' bytes per clock.
struct Passes {
  std::vector<std::pair<std::string, double>> worker, shard;
  double total = 0;
  std::string Json() const {
    std::ostringstream o;
    auto obj = [&o](const std::vector<std::pair<std::string, double>>& kv) {
      o << "{";
      for (size_t i = 0; i < kv.size(); ++i)
        o << (i ? "," : "") << "\"" << kv[i].first << "\":" << kv[i].second;
      o << "}";
    };
    o << "{\"worker\":";
    obj(worker);
    o << ",\"shard\":";
    obj(shard);
    o << ",\"total\":" << total << "}";
    return o.str();
  }
};

Passes ParsePasses(const std::vector<std::string>& lines) {
  std::vector<std::pair<std::string, double>> worker, shard_bytes;
  int workers = 0;
  double clock_bytes = 0;
  auto fields = [](const std::string& rest, std::vector<std::pair<std::string, double>>* acc) {
    std::istringstream in(rest);
    size_t i = 0;
    for (std::string kv; in >> kv; ++i) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) continue;
      const std::string k = kv.substr(0, eq);
      const double v = std::stod(kv.substr(eq + 1));
      if (i < acc->size())
        acc->at(i).second += v;
      else
        acc->emplace_back(k, v);
    }
  };
  for (const std::string& line : lines) {
    if (line.rfind("PASSES ", 0) == 0) {
      fields(line.substr(7), &worker);
      ++workers;
    } else if (line.rfind("CLOCKBYTES ", 0) == 0) {
      clock_bytes += std::stod(line.substr(11));
    } else if (line.rfind("SHARDBYTES ", 0) == 0) {
      fields(line.substr(11), &shard_bytes);
    }
  }
  Passes p;
  for (auto& [k, v] : worker) p.worker.emplace_back(k, workers ? v / workers : 0);
  for (auto& [k, v] : shard_bytes) p.shard.emplace_back(k, clock_bytes > 0 ? v / clock_bytes : 0);
  for (auto& kv : p.worker) p.total += kv.second;
  for (auto& kv : p.shard) p.total += kv.second;
  return p;
}

double RunGeeps(const Options& o, uint64_t bytes, Passes* passes) {
  std::vector<Child> children;
  const int world = 2 * o.pairs;
  const std::string coord = "127.0.0.1:" + std::to_string(geeps::testing::FreePort());
  for (int r = 0; r < world; ++r) {
    // The caller's GEEPS_* settings, then the job's.
    Env env = geeps::testing::GeepsVariables();
    env["GEEPS_RANK"] = std::to_string(r);
    env["GEEPS_WORLD_SIZE"] = std::to_string(world);
    env["GEEPS_COORDINATOR"] = coord;
    env["GEEPS_ROLE"] = r < o.pairs ? "worker" : "server";
    children.push_back(geeps::testing::Spawn(
        {Self(), "--child", "geeps", "--bytes", std::to_string(bytes), "--seconds",
         std::to_string(o.seconds), "--pairs", std::to_string(o.pairs)},
        env));
  }
  std::vector<std::string> lines;
  const double t = Collect(children, "libgeeps job", &lines);
  *passes = ParsePasses(lines);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  geeps::bench::Flags flags("rw_bench");
  flags.Add("--out", &o.out, "JSON results")
      .Add("--csv", &o.csv, "CSV results")
      .AddSizes("--sizes", &o.sizes, "bytes read and updated per iteration (4K,64K,1M,16M)")
      .Add("--seconds", &o.seconds, "about this long per size and program")
      .Add("--pairs", &o.pairs, "1: one worker and one server; 2: two of each (1..8)")
      .Add("--rounds", &o.rounds, "rounds per size, the median reported (1..15)")
      .Add("--child", &o.child, "internal: zmq-server, zmq-sum-server, zmq-client or geeps")
      .Add("--endpoint", &o.endpoint, "internal: the child's endpoint")
      .AddSize("--bytes", &o.bytes, "internal: the child's message size");
  if (const int status = flags.Parse(argc, argv); status >= 0) return status;
  if (o.pairs < 1 || o.pairs > 8) return flags.Fail("--pairs must be 1..8");
  if (o.rounds < 1 || o.rounds > 15) return flags.Fail("--rounds must be 1..15");
  if (o.child == "zmq-server") return ZmqServer(o, false);
  if (o.child == "zmq-sum-server") return ZmqServer(o, true);
  if (o.child == "zmq-client") return ZmqClient(o);
  if (o.child == "geeps") return GeepsChild(o);
  if (!o.child.empty()) return flags.Fail("unknown --child " + o.child);

  std::ofstream json(o.out), csv(o.csv);
  json << "{\"benchmark\":\"rw_bench\",\"pairs\":" << o.pairs << ",\"rounds\":" << o.rounds
       << ",\"results\":[";
  csv << "bytes,zmq_us,geeps_us,zmq_gbs,geeps_gbs,fraction,zmq_sum_us,fraction_of_sum\n";
  std::printf("%10s %12s %12s %10s %10s %9s %12s %9s\n", "V", "zmq us/it", "geeps us/it",
              "zmq GB/s", "geeps GB/s", "fraction", "zsum us/it", "of zsum");
  bool failed = false;
  for (size_t k = 0; k < o.sizes.size(); ++k) {
    const uint64_t v = o.sizes[k];
    Passes passes;
    std::vector<double> zs, ss, gs;
    for (int r = 0; r < o.rounds; ++r) {
      zs.push_back(RunZmq(o, v, false));
      ss.push_back(RunZmq(o, v, true));
      gs.push_back(RunGeeps(o, v, &passes));
    }
    auto median = [](std::vector<double> x) {
      std::sort(x.begin(), x.end());
      return x[x.size() / 2];
    };
    const double z = median(zs), zsum = median(ss), g = median(gs);
    if (*std::min_element(zs.begin(), zs.end()) <= 0 ||
        *std::min_element(ss.begin(), ss.end()) <= 0 ||
        *std::min_element(gs.begin(), gs.end()) <= 0) {
      failed = true;
      continue;
    }
    // Per pair: V each way per iteration.
    const double zg = 2.0 * v / z / 1e9, gg = 2.0 * v / g / 1e9;
    std::printf("%10llu %12.1f %12.1f %10.3f %10.3f %9.3f %12.1f %9.3f\n",
                static_cast<unsigned long long>(v), z * 1e6, g * 1e6, zg, gg, z / g, zsum * 1e6,
                zsum / g);
    std::fflush(stdout);
    json << (k ? "," : "") << "{\"bytes\":" << v << ",\"zmq_seconds_per_iteration\":" << z
         << ",\"geeps_seconds_per_iteration\":" << g << ",\"zmq_gbs\":" << zg
         << ",\"geeps_gbs\":" << gg << ",\"fraction_of_zmq\":" << z / g
         << ",\"zmq_sum_seconds_per_iteration\":" << zsum
         << ",\"fraction_of_summing_zmq\":" << zsum / g << ",\"passes\":" << passes.Json()
         << ",\"round_fractions\":[";
    for (int r = 0; r < o.rounds; ++r) json << (r ? "," : "") << zs[r] / gs[r];
    json << "],\"round_fractions_of_summing_zmq\":[";
    for (int r = 0; r < o.rounds; ++r) json << (r ? "," : "") << ss[r] / gs[r];
    json << "]}";
    std::printf("%10s passes over V per clock: %s\n", "", passes.Json().c_str());
    csv << v << "," << z * 1e6 << "," << g * 1e6 << "," << zg << "," << gg << "," << z / g << ","
        << zsum * 1e6 << "," << zsum / g << "\n";
  }
  json << "]}\n";
  return failed ? 1 : 0;
}
