// Step: one body for both passes of a GeePS worker.
//
// A trainer writes its prologue and its iteration once each, as functions
// taking a Step&, with the accesses in the order they run:
//
//   geeps::Step step(ps, config);
//   Status st = step.Run(prologue, iteration, iterations);
//
// Run() calls each function first with recording() true (the virtual pass:
// each access is recorded on the GeePS as its Virtual* call), then for real
// (each access is made with the recorded handle). The functions are the same
// in both passes, so the recorded and the real sequences cannot drift apart;
// when they do anyway (a call that depends on data, on the iteration
// number...), the Step names the first difference.
//
// What the Step owns: the GeePS handles (looked up by position in the
// recorded sequence; the application keeps none), the order of the virtual
// pass (the prologue is written and run first, but GeePS records it after
// VirtualClock(): the Step keeps the prologue's calls and records them
// there), and the calls FinishVirtualIteration() and StartIterations().
// So the GeePS it is given must have recorded nothing of its own: Start
// (and Run) return kFailedPrecondition naming what it has recorded, or that
// its virtual iteration is finished, before calling either function.
//
// Compute while recording: the views the accessors return while recording()
// have data == nullptr (rows and width are set). Put the work on the buffers
// in Compute(fn), which the Step skips while recording, or under
// `if (!step.recording())`.
//
// Invariants: the prologue has no Clock(); the iteration ends with exactly
// one Clock() and makes no call after it; every Read / PreUpdate /
// LocalAccess is closed (PostRead / Update / PostLocalAccess) in the same
// function. Each real pass must make exactly the recorded calls: the same
// call, table, rows (same order), slack, fetch and keep, and close the same
// access. A call that differs does nothing and returns kFailedPrecondition
// naming the pass, the position, what was recorded and what was called; the
// pass then fails with that first difference (Run returns it even when the
// function ignored it), and the Step refuses further passes. The GeePS's own
// calls stay available (CopyToHost, Sync, CopyRows, GetStats...) through
// ps().
//
// Threading: like the GeePS, one application thread at a time.
#ifndef GEEPS_STEP_H_
#define GEEPS_STEP_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "geeps/config.h"
#include "geeps/export.h"
#include "geeps/geeps.h"
#include "geeps/status.h"

namespace geeps {

// Rows returned by Step::Read (or Step::LocalRead): `rows` rows of `width`
// floats, contiguous in request order, in device memory (see GeePS::Read),
// valid until PostRead (PostLocalRead).
// data is nullptr while the Step is recording.
struct ConstRows {
  const float* data = nullptr;
  size_t rows = 0;
  uint32_t width = 0;
  // Set by the Step: the position of the Read (LocalRead) in its recorded
  // sequence. Pass the view back to PostRead (PostLocalRead) to close it.
  int32_t position = -1;
  // rows * width.
  size_t floats() const { return rows * width; }
};

// Rows returned by Step::PreUpdate (a zeroed delta buffer, valid until
// Update) or Step::LocalAccess (the local rows, valid until
// PostLocalAccess); otherwise as ConstRows.
struct MutableRows {
  float* data = nullptr;
  size_t rows = 0;
  uint32_t width = 0;
  // Set by the Step: the position of the PreUpdate or LocalAccess in its
  // recorded sequence. Pass the view back to Update / PostLocalAccess.
  int32_t position = -1;
  // rows * width.
  size_t floats() const { return rows * width; }
};

class GEEPS_EXPORT Step {
 public:
  // A prologue or an iteration: makes its accesses on the Step, in order.
  using Body = std::function<Status(Step&)>;

  // A Step for worker `ps`, which must not have recorded anything yet; the
  // tables (their widths) are the worker's own (GeePS::config()). `ps` must
  // outlive the Step.
  explicit Step(GeePS& ps);
  // The same, checking `config` against the worker's job: a config whose
  // tables differ from the job's (count, name, rows, row_width, local) makes
  // the Step refuse to run: Start() and Run() return kInvalidArgument naming
  // the table, the field and both values. Read here only.
  Step(GeePS& ps, const Config& config);
  ~Step();
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;

  // ---- Drivers --------------------------------------------------------------
  // Start(prologue, iteration), then RunIteration() `iterations` times.
  // `prologue` may be empty (no prologue). Returns the first error.
  Status Run(const Body& prologue, const Body& iteration, int64_t iterations);
  // Records the prologue, then the iteration (VirtualClock is its Clock()),
  // then records the prologue's calls after it; FinishVirtualIteration(),
  // StartIterations(); then runs the prologue for real. Once per Step.
  // kFailedPrecondition for a broken invariant (a Clock() in the prologue,
  // none ending the iteration, a call after it, an access left open), with
  // its position; a GeePS error as it came, prefixed by the call's position.
  Status Start(const Body& prologue, const Body& iteration);
  // Runs the recorded iteration once for real (after Start()). Between two
  // calls the application may use ps() (Sync, CopyRows, checkpoints...).
  // kFailedPrecondition naming the first difference from the recording.
  Status RunIteration();

  // ---- State ----------------------------------------------------------------
  // True while the functions run for the virtual pass: buffers are null.
  bool recording() const;
  // True while the prologue runs (recorded or real).
  bool in_prologue() const;
  // Real iterations completed (the index of the running one); 0 while
  // recording and during the prologue.
  int64_t iteration() const;
  // The worker, for the calls the Step does not wrap.
  GeePS& ps() { return ps_; }
  // The worker's rank (GeePS::rank()).
  int rank() const { return ps_.rank(); }
  // The worker count (GeePS::num_workers()).
  int num_workers() const { return ps_.num_workers(); }

  // Runs `fn()` unless recording(); returns what it returns (a Status, or OK
  // for a function returning void). Put the work on the buffers here.
  template <typename Fn>
  Status Compute(Fn&& fn) {
    if (recording()) return Status::OK();
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&>>) {
      fn();
      return Status::OK();
    } else {
      return fn();
    }
  }

  // ---- Accesses (GeePS's calls; recorded while recording) -----------------
  // A read of `rows` of shared table `table` with slack `slack`.
  StatusOr<ConstRows> Read(TableId table, const std::vector<RowIndex>& rows, int slack);
  // A read with Config::default_slack.
  StatusOr<ConstRows> Read(TableId table, const std::vector<RowIndex>& rows);
  // Ends the read `view` came from.
  Status PostRead(const ConstRows& view);
  // A zeroed buffer for deltas to `rows` of shared table `table`.
  StatusOr<MutableRows> PreUpdate(TableId table, const std::vector<RowIndex>& rows);
  // Adds the deltas of `view` (from PreUpdate) into the parameters.
  Status Update(const MutableRows& view);
  // An access to `rows` of local table `table`; fetch=false: the old
  // contents are not needed.
  StatusOr<MutableRows> LocalAccess(TableId table, const std::vector<RowIndex>& rows,
                                    bool fetch = true);
  // Ends the local access `view` came from; keep=false: the contents may be
  // dropped.
  Status PostLocalAccess(const MutableRows& view, bool keep = true);
  // A read-only access to `rows` of local table `table` (GeePS::LocalRead):
  // const rows, nothing written back at its end.
  StatusOr<ConstRows> LocalRead(TableId table, const std::vector<RowIndex>& rows);
  // Ends the read-only local access `view` came from (the rows stay).
  Status PostLocalRead(const ConstRows& view);
  // Ends the iteration (its last call; not in the prologue).
  Status Clock();

 private:
  enum class Phase {
    kIdle,
    kRecordPrologue,
    kRecordIteration,
    kRealPrologue,
    kRealIteration,
    kReady,
    kFailed
  };
  enum class Op {
    kRead,
    kPostRead,
    kPreUpdate,
    kUpdate,
    kLocalAccess,
    kPostLocalAccess,
    kClock,
    kLocalRead,
    kPostLocalRead
  };
  struct Call;
  struct Sig;

  std::vector<Call>& section();
  const std::vector<Call>& section() const;
  std::string PassName() const;
  std::string Describe(const Sig& sig) const;
  Status Enter(const Sig& sig, int32_t* position);
  Status Record(std::vector<Call>* calls, int32_t position);
  Status CheckClosed(const std::vector<Call>& calls, const char* what) const;
  Status RunBody(const Body& body, Phase phase);
  static bool IsOpener(Op op);
  static Op OpenerOf(Op closer);
  StatusOr<ConstRows> DoRead(Op op, TableId table, const std::vector<RowIndex>& rows,
                             bool has_slack, int slack);
  StatusOr<MutableRows> DoOpen(Op op, TableId table, const std::vector<RowIndex>& rows, bool fetch);
  Status DoClose(Op op, int32_t opener, bool keep);

  GeePS& ps_;
  std::vector<uint32_t> widths_;
  Phase phase_ = Phase::kIdle;
  std::vector<Call> prologue_;
  std::vector<Call> iteration_;
  size_t cursor_ = 0;  // real passes: the next recorded position
  bool clocked_ = false;
  Status mismatch_;  // the pass's first difference
  Status failure_;   // why the Step refuses further passes
  Body iteration_body_;
  int64_t iterations_done_ = 0;
};

}  // namespace geeps

#endif  // GEEPS_STEP_H_
