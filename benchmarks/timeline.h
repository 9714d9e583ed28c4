// Per-iteration timelines of scale_bench's ranks: what each rank's
// application thread did when (compute, each table's Read wait, each
// Update, the Clock), the CPU each process used, and a summary of where an
// iteration's time went. A child records spans relative to its iteration's
// start and prints one "TIMELINE" line per timed iteration and one
// "CPUTIME" line; the driver parses them (Collect's report lines).
#ifndef GEEPS_BENCHMARKS_TIMELINE_H_
#define GEEPS_BENCHMARKS_TIMELINE_H_

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace geeps::bench {

// What a span of the application thread was.
enum class Phase : char {
  kForward = 'F',   // emulated compute, forward pass
  kBackward = 'B',  // emulated compute, backward pass
  kRead = 'R',      // waiting in Read for a table's fresh rows
  kUpdate = 'U',    // PreUpdate, the deltas' copy, Update (the send)
  kClock = 'C',     // Clock
};

struct Span {
  char phase = 'F';
  int table = -1;
  double start_ms = 0, end_ms = 0;  // from the iteration's start
};

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  void StartIteration() {
    t0_ = Clock::now();
    spans_.clear();
  }
  void Add(Phase phase, int table, Clock::time_point a, Clock::time_point b) {
    spans_.push_back({static_cast<char>(phase), table, Ms(a), Ms(b)});
  }
  // "TIMELINE rank iteration P:table:start:end ..."
  std::string Line(int rank, int iteration) const {
    std::ostringstream s;
    s << "TIMELINE " << rank << " " << iteration;
    char buf[64];
    for (const Span& x : spans_) {
      std::snprintf(buf, sizeof(buf), " %c:%d:%.3f:%.3f", x.phase, x.table, x.start_ms, x.end_ms);
      s << buf;
    }
    return s.str();
  }

 private:
  double Ms(Clock::time_point t) const {
    return std::chrono::duration<double, std::milli>(t - t0_).count();
  }
  Clock::time_point t0_;
  std::vector<Span> spans_;
};

// This process's CPU seconds (all threads), user and system.
struct CpuTime {
  double user = 0, sys = 0;
  static CpuTime Now() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return {u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6,
            u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6};
  }
};

// The whole machine's busy and total jiffies (/proc/stat's first line).
struct MachineCpu {
  long long busy = 0, total = 0;
  static MachineCpu Now() {
    std::ifstream in("/proc/stat");
    std::string cpu;
    long long v[10] = {};
    in >> cpu;
    for (long long& x : v) in >> x;
    MachineCpu m;
    for (int k = 0; k < 8; ++k) m.total += v[k];  // guest time is inside user
    m.busy = m.total - v[3] - v[4];               // less idle and iowait
    return m;
  }
};

// "CPUTIME user sys" (this process's CPU seconds per timed iteration) and,
// from the first rank, "MACHINECPU busy" (the whole machine's busy share of
// its cores over the same time: every "machine" of the run shares them).
inline void PrintCpu(const CpuTime& cpu0, const MachineCpu& machine0, bool first_rank,
                     int iterations) {
  const CpuTime cpu = CpuTime::Now();
  std::printf("CPUTIME %.6f %.6f\n", (cpu.user - cpu0.user) / iterations,
              (cpu.sys - cpu0.sys) / iterations);
  const MachineCpu m = MachineCpu::Now();
  if (first_rank && m.total > machine0.total)
    std::printf("MACHINECPU %.4f\n", static_cast<double>(m.busy - machine0.busy) /
                                         static_cast<double>(m.total - machine0.total));
}

// The machine's busy share of its cores in each of K parts of an
// iteration: Mark(k) ends the part before k and starts part k (parts
// cycle); only marks with `count` set add to the sums.
class MachinePhases {
 public:
  explicit MachinePhases(int k) : busy_(k, 0), total_(k, 0) {}
  void Mark(int k, bool count) {
    const MachineCpu now = MachineCpu::Now();
    if (count && started_) {
      busy_[current_] += now.busy - last_.busy;
      total_[current_] += now.total - last_.total;
    }
    started_ = true;
    current_ = k;
    last_ = now;
  }
  // "MACHINEPHASES busy0 busy1 ..." (-1 where a part had no time).
  std::string Line() const {
    std::ostringstream s;
    s << "MACHINEPHASES";
    for (size_t k = 0; k < busy_.size(); ++k)
      s << " " << (total_[k] > 0 ? static_cast<double>(busy_[k]) / total_[k] : -1.0);
    return s.str();
  }

 private:
  std::vector<long long> busy_, total_;
  MachineCpu last_;
  int current_ = 0;
  bool started_ = false;
};

struct RankTimeline {
  int rank = 0, iteration = 0;
  std::vector<Span> spans;
};

inline bool ParseTimeline(const std::string& line, RankTimeline* out) {
  std::istringstream in(line);
  std::string tag;
  if (!(in >> tag >> out->rank >> out->iteration) || tag != "TIMELINE") return false;
  for (std::string tok; in >> tok;) {
    Span s;
    if (std::sscanf(tok.c_str(), "%c:%d:%lf:%lf", &s.phase, &s.table, &s.start_ms, &s.end_ms) != 4)
      return false;
    out->spans.push_back(s);
  }
  return true;
}

// Where an iteration went, averaged over ranks and timed iterations (ms).
struct TimelineSummary {
  int samples = 0;
  double iteration = 0, compute = 0, read_wait = 0, update = 0, clock = 0;
  std::vector<double> read_wait_by_table;
  std::string Text() const {
    std::ostringstream s;
    char buf[96];
    std::snprintf(buf, sizeof(buf),
                  "%.1f ms = compute %.1f + read wait %.1f + update %.1f + clock %.1f", iteration,
                  compute, read_wait, update, clock);
    s << buf << " (read wait by table:";
    for (double w : read_wait_by_table) {
      std::snprintf(buf, sizeof(buf), " %.1f", w);
      s << buf;
    }
    s << ")";
    return s.str();
  }
};

inline TimelineSummary Summarize(const std::vector<RankTimeline>& all, int tables) {
  TimelineSummary m;
  m.read_wait_by_table.assign(tables, 0);
  for (const RankTimeline& r : all) {
    ++m.samples;
    for (const Span& s : r.spans) {
      const double d = s.end_ms - s.start_ms;
      switch (static_cast<Phase>(s.phase)) {
        case Phase::kForward:
        case Phase::kBackward:
          m.compute += d;
          break;
        case Phase::kRead:
          m.read_wait += d;
          if (s.table >= 0 && s.table < tables) m.read_wait_by_table[s.table] += d;
          break;
        case Phase::kUpdate:
          m.update += d;
          break;
        case Phase::kClock:
          m.clock += d;
          break;
      }
    }
    if (!r.spans.empty()) m.iteration += r.spans.back().end_ms;
  }
  if (m.samples == 0) return m;
  for (double* v : {&m.iteration, &m.compute, &m.read_wait, &m.update, &m.clock}) *v /= m.samples;
  for (double& w : m.read_wait_by_table) w /= m.samples;
  return m;
}

}  // namespace geeps::bench

#endif  // GEEPS_BENCHMARKS_TIMELINE_H_
