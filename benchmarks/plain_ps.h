// The least a data-parallel parameter server does over ZeroMQ, for
// scale_bench's "plain-zmq" system: the same transfers as libgeeps in the
// same processes and namespaces, with no library in between. Each process
// is a machine: a worker (its main thread) and a shard (one thread, one
// ROUTER) that owns rows [N*s/N..) of every table (common/partition.h's
// split). Per iteration the worker, per table in order, waits for the
// previous iteration's push of that table from every shard (copying each
// into its parameters: the install) and "computes" (a sleep); then per
// table in reverse, computes and sends each shard its part of the table's
// deltas (zero-copy from the delta buffer). A shard adds every update into
// its rows (the shard's own add loop, server/row_ops.h) and, once all N
// workers' updates of a table have arrived, copies its rows into one message
// and sends it to every worker (ZeroMQ shares the buffer). BSP, no resend,
// no checks beyond the final sum; what it costs is what this machine's
// cores and links cost a parameter server of this shape.
#ifndef GEEPS_BENCHMARKS_PLAIN_PS_H_
#define GEEPS_BENCHMARKS_PLAIN_PS_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "common/partition.h"
#include "server/row_ops.h"
#include "timeline.h"

namespace geeps::bench {

struct PlainPsJob {
  int rank = 0;
  std::vector<std::string> endpoints;  // every rank's shard, tcp://host:port
  int tables = 1;
  uint64_t rows = 1;  // per table
  uint32_t width = 1;
  double compute_ms = 0;
  int warm = 3, iterations = 1;
  int world() const { return static_cast<int>(endpoints.size()); }
  size_t PartFloats(int s) const { return common::PartitionRows(rows, s, world()).size() * width; }
  size_t PartOffset(int s) const { return common::PartitionRows(rows, s, world()).begin * width; }
};

struct PlainHeader {
  int32_t table = 0;
  int32_t iteration = 0;
};

// The shard: sums every worker's update of (table, iteration) into its
// rows; pushes the rows to every worker when all N have arrived.
inline void PlainShard(zmq::socket_t& s, const PlainPsJob& job) {
  const int n = job.world(), total = job.warm + job.iterations;
  const size_t floats = job.PartFloats(job.rank);
  std::vector<std::vector<float>> rows(job.tables, std::vector<float>(floats, 0.0f));
  std::vector<std::vector<int>> arrived(job.tables, std::vector<int>(total, 0));
  std::vector<zmq::message_t> ids(n);
  int pushes_left = job.tables * total;
  while (pushes_left > 0) {
    zmq::message_t id, head, body;
    (void)s.recv(id);
    (void)s.recv(head);
    (void)s.recv(body);
    PlainHeader h;
    std::memcpy(&h, head.data(), sizeof(h));
    if (body.size() == floats * sizeof(float) && floats > 0)
      server::AddRow(rows[h.table].data(), static_cast<const unsigned char*>(body.data()),
                     static_cast<uint32_t>(floats));
    // Remember each worker's routing id ("w" and the worker's rank).
    const int from = static_cast<const unsigned char*>(id.data())[1];
    if (ids[from].size() == 0) ids[from].copy(id);
    if (++arrived[h.table][h.iteration] < n) continue;
    zmq::message_t push(rows[h.table].data(), floats * sizeof(float));  // one copy
    for (int k = 0; k < n; ++k) {
      zmq::message_t to, hd(&h, sizeof(h)), data;
      to.copy(ids[k]);
      data.copy(push);  // shares the buffer
      s.send(to, zmq::send_flags::sndmore);
      s.send(hd, zmq::send_flags::sndmore);
      s.send(data, zmq::send_flags::none);
    }
    --pushes_left;
  }
}

// The worker's receive side: installs pushes into `params` until every
// shard's push of (table, iteration) has arrived.
class PlainReceiver {
 public:
  PlainReceiver(std::vector<zmq::socket_t>& dealers, const PlainPsJob& job)
      : dealers_(dealers), job_(job) {
    for (int t = 0; t < job.tables; ++t) params_.emplace_back(job.rows * job.width, 0.0f);
    counts_.assign(static_cast<size_t>(job.tables) * (job.warm + job.iterations), 0);
    for (auto& d : dealers_) items_.push_back({d.handle(), 0, ZMQ_POLLIN, 0});
  }
  void WaitFor(int table, int iteration) {
    while (Count(table, iteration) < job_.world()) {
      zmq::poll(items_.data(), items_.size(), std::chrono::milliseconds(-1));
      for (size_t s = 0; s < items_.size(); ++s)
        if (items_[s].revents & ZMQ_POLLIN) Drain(static_cast<int>(s));
    }
  }
  const std::vector<float>& params(int t) const { return params_[t]; }

 private:
  int& Count(int t, int i) { return counts_[static_cast<size_t>(i) * job_.tables + t]; }
  void Drain(int s) {
    zmq::message_t head, body;
    while (dealers_[s].recv(head, zmq::recv_flags::dontwait)) {
      (void)dealers_[s].recv(body);
      PlainHeader h;
      std::memcpy(&h, head.data(), sizeof(h));
      std::memcpy(params_[h.table].data() + job_.PartOffset(s), body.data(), body.size());
      ++Count(h.table, h.iteration);
    }
  }
  std::vector<zmq::socket_t>& dealers_;
  const PlainPsJob& job_;
  std::vector<std::vector<float>> params_;
  std::vector<int> counts_;
  std::vector<zmq::pollitem_t> items_;
};

using PlainClock = std::chrono::steady_clock;

inline void PlainCompute(double ms, Timeline* tl, Phase phase, int table) {
  const auto a = PlainClock::now();
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(ms * 1e3)));
  tl->Add(phase, table, a, PlainClock::now());
}

// One iteration's backward pass: per table in reverse, compute then send
// each shard its part of the deltas.
inline void PlainBackward(std::vector<zmq::socket_t>& dealers, const PlainPsJob& job, int i,
                          const std::vector<float>& deltas, double per_layer_ms, Timeline* tl) {
  for (int t = job.tables - 1; t >= 0; --t) {
    PlainCompute(per_layer_ms, tl, Phase::kBackward, t);
    const auto a = PlainClock::now();
    const PlainHeader h{t, i};
    for (int s = 0; s < job.world(); ++s) {
      zmq::message_t hd(&h, sizeof(h));
      // Zero-copy: the deltas do not change during the run.
      zmq::message_t body(const_cast<float*>(deltas.data()) + job.PartOffset(s),
                          job.PartFloats(s) * sizeof(float), [](void*, void*) {});
      dealers[s].send(hd, zmq::send_flags::sndmore);
      dealers[s].send(body, zmq::send_flags::none);
    }
    tl->Add(Phase::kUpdate, t, a, PlainClock::now());
  }
}

// The timed loop: prints a TIMELINE line per timed iteration; returns the
// seconds per timed iteration.
inline double PlainIterations(std::vector<zmq::socket_t>& dealers, PlainReceiver& recv,
                              const PlainPsJob& job, const std::vector<float>& deltas) {
  const double per_layer = job.compute_ms / (2.0 * job.tables);
  const int total = job.warm + job.iterations;
  Timeline tl;
  auto start = PlainClock::now();
  CpuTime cpu0;
  MachineCpu machine0;
  for (int i = 0; i < total; ++i) {
    if (i == job.warm) {
      start = PlainClock::now();
      cpu0 = CpuTime::Now();
      machine0 = MachineCpu::Now();
    }
    tl.StartIteration();
    for (int t = 0; t < job.tables; ++t) {
      const auto a = PlainClock::now();
      if (i > 0) recv.WaitFor(t, i - 1);
      tl.Add(Phase::kRead, t, a, PlainClock::now());
      PlainCompute(per_layer, &tl, Phase::kForward, t);
    }
    PlainBackward(dealers, job, i, deltas, per_layer, &tl);
    if (i >= job.warm) std::printf("%s\n", tl.Line(job.rank, i - job.warm).c_str());
  }
  const double secs =
      std::chrono::duration<double>(PlainClock::now() - start).count() / job.iterations;
  PrintCpu(cpu0, machine0, job.rank == 0, job.iterations);
  return secs;
}

// Runs rank job.rank; returns the seconds per timed iteration, < 0 if the
// final parameters are not the exact sum of every update.
inline double RunPlainPs(const PlainPsJob& job) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 5000);
  const std::string& me = job.endpoints[job.rank];
  router.bind("tcp://*" + me.substr(me.rfind(':')));
  std::thread shard([&] { PlainShard(router, job); });
  std::vector<zmq::socket_t> dealers;
  const std::string id = {'w', static_cast<char>(job.rank)};
  for (const std::string& e : job.endpoints) {
    dealers.emplace_back(ctx, zmq::socket_type::dealer);
    dealers.back().set(zmq::sockopt::routing_id, zmq::buffer(id));
    dealers.back().set(zmq::sockopt::linger, 5000);
    dealers.back().connect(e);
  }
  PlainReceiver recv(dealers, job);
  const float delta = 1.0f / static_cast<float>(job.world());
  const std::vector<float> deltas(job.rows * job.width, delta);
  const double secs = PlainIterations(dealers, recv, job, deltas);
  const int total = job.warm + job.iterations;
  for (int t = 0; t < job.tables; ++t) recv.WaitFor(t, total - 1);
  shard.join();
  // Every worker added `delta` to every parameter each iteration.
  const float want = delta * static_cast<float>(job.world()) * static_cast<float>(total);
  for (int t = 0; t < job.tables; ++t)
    for (float v : recv.params(t))
      if (v != want) {
        std::fprintf(stderr, "plain-zmq: a parameter is %g, not %g\n", v, want);
        return -1;
      }
  return secs;
}

}  // namespace geeps::bench

#endif  // GEEPS_BENCHMARKS_PLAIN_PS_H_
