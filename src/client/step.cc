// Step: records the application's accesses on the virtual pass and replays
// them, checked against the recording, on the real passes (geeps/step.h).
#include "geeps/step.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "client/geeps_access.h"

namespace geeps {

// A call as made by the application (rows borrowed).
struct Step::Sig {
  Op op = Op::kClock;
  TableId table = 0;
  const std::vector<RowIndex>* rows = nullptr;
  bool has_slack = false;
  int slack = 0;
  bool flag = false;    // LocalAccess: fetch; PostLocalAccess: keep
  int32_t opener = -1;  // closers: the position of the access they close
};

// A recorded call.
struct Step::Call {
  Op op = Op::kClock;
  TableId table = 0;
  std::vector<RowIndex> rows;
  bool has_slack = false;
  int slack = 0;
  bool flag = false;
  int32_t opener = -1;
  int32_t handle = -1;  // openers: the GeePS handle's id, worker, instance
  int32_t handle_worker = -1;
  uint32_t handle_instance = 0;
  bool closed = false;  // openers, while recording

  Sig sig() const {
    Sig s;
    s.op = op;
    s.table = table;
    s.rows = &rows;
    s.has_slack = has_slack;
    s.slack = slack;
    s.flag = flag;
    s.opener = opener;
    return s;
  }
};

namespace {
// The GeePS handle an opening call was given (an invalid one for none).
template <class Handle, class Call>
Handle HandleOf(const Call* opener) {
  Handle h;
  if (opener == nullptr) return h;
  h.id = opener->handle;
  h.worker = opener->handle_worker;
  h.instance = opener->handle_instance;
  return h;
}
}  // namespace

namespace {

const char* OpName(int op) {
  static const char* const kNames[] = {"Read",   "PostRead",    "PreUpdate",
                                       "Update", "LocalAccess", "PostLocalAccess",
                                       "Clock",  "LocalRead",   "PostLocalRead"};
  return kNames[op];
}

}  // namespace

// Accesses, and the access each closing call ends.
bool Step::IsOpener(Op op) {
  return op == Op::kRead || op == Op::kPreUpdate || op == Op::kLocalAccess || op == Op::kLocalRead;
}

Step::Op Step::OpenerOf(Op closer) {
  switch (closer) {
    case Op::kPostRead:
      return Op::kRead;
    case Op::kUpdate:
      return Op::kPreUpdate;
    case Op::kPostLocalRead:
      return Op::kLocalRead;
    default:
      return Op::kLocalAccess;
  }
}

namespace {

std::string RowsText(const std::vector<RowIndex>& rows) {
  std::ostringstream os;
  os << rows.size() << (rows.size() == 1 ? " row [" : " rows [");
  const size_t head = std::min<size_t>(rows.size(), 4);
  for (size_t i = 0; i < head; ++i) os << (i ? ", " : "") << rows[i];
  if (rows.size() > head + 1) os << ", ...";
  if (rows.size() > head) os << ", " << rows.back();
  os << "]";
  return os.str();
}

// Where two row lists first differ, or "" when they are equal.
std::string RowsDifference(const std::vector<RowIndex>& recorded,
                           const std::vector<RowIndex>& called) {
  const size_t n = std::min(recorded.size(), called.size());
  for (size_t i = 0; i < n; ++i) {
    if (recorded[i] != called[i]) {
      return "; first different row at index " + std::to_string(i) + ": recorded " +
             std::to_string(recorded[i]) + ", called " + std::to_string(called[i]);
    }
  }
  if (recorded.size() != called.size()) {
    return "; recorded " + std::to_string(recorded.size()) + " rows, called " +
           std::to_string(called.size());
  }
  return "";
}

// Whether two calls (Step::Sig, a private type) are the same.
template <typename S>
bool Same(const S& a, const S& b) {
  if (a.op != b.op || a.opener != b.opener || a.flag != b.flag) return false;
  if (a.table != b.table || a.has_slack != b.has_slack) return false;
  if (a.has_slack && a.slack != b.slack) return false;
  const size_t a_n = a.rows ? a.rows->size() : 0;
  const size_t b_n = b.rows ? b.rows->size() : 0;
  if (a_n != b_n) return false;
  return a_n == 0 || *a.rows == *b.rows;
}
}  // namespace

namespace {

// The first difference between the tables a Step was given and its job's:
// kInvalidArgument naming the table, the field and both values; OK when none.
Status CompareTables(const std::vector<TableSpec>& given, const std::vector<TableSpec>& job) {
  const std::string fix =
      " (give the Step the job's own config, EmbeddedCluster::config() or Process::config(), or "
      "none: Step(ps))";
  if (given.size() != job.size()) {
    return InvalidArgumentError("Step: the Config given to the Step has " +
                                std::to_string(given.size()) + " tables, the job's has " +
                                std::to_string(job.size()) + fix);
  }
  for (size_t i = 0; i < job.size(); ++i) {
    const TableSpec& a = given[i];
    const TableSpec& b = job[i];
    std::string field, ours, theirs;
    if (a.name != b.name) {
      field = "name", ours = "'" + a.name + "'", theirs = "'" + b.name + "'";
    } else if (a.row_width != b.row_width) {
      field = "row_width", ours = std::to_string(a.row_width), theirs = std::to_string(b.row_width);
    } else if (a.num_rows != b.num_rows) {
      field = "num_rows", ours = std::to_string(a.num_rows), theirs = std::to_string(b.num_rows);
    } else if (a.local != b.local) {
      field = "local", ours = a.local ? "true" : "false", theirs = b.local ? "true" : "false";
    } else {
      continue;
    }
    return InvalidArgumentError("Step: table " + std::to_string(i) + " ('" + b.name + "') has " +
                                field + " " + ours + " in the Config given to the Step, " + theirs +
                                " in the job's" + fix);
  }
  return Status::OK();
}

}  // namespace

Step::Step(GeePS& ps) : ps_(ps) {
  const std::vector<TableSpec>& tables = ps.config().tables;
  widths_.reserve(tables.size());
  for (const TableSpec& t : tables) widths_.push_back(t.row_width);
}

Step::Step(GeePS& ps, const Config& config) : Step(ps) {
  Status differs = CompareTables(config.tables, ps.config().tables);
  if (!differs.ok()) {
    phase_ = Phase::kFailed;
    failure_ = std::move(differs);
  }
}

Step::~Step() = default;

bool Step::recording() const {
  return phase_ == Phase::kRecordPrologue || phase_ == Phase::kRecordIteration;
}

bool Step::in_prologue() const {
  return phase_ == Phase::kRecordPrologue || phase_ == Phase::kRealPrologue;
}

int64_t Step::iteration() const { return iterations_done_; }

std::vector<Step::Call>& Step::section() { return in_prologue() ? prologue_ : iteration_; }

const std::vector<Step::Call>& Step::section() const {
  return in_prologue() ? prologue_ : iteration_;
}

std::string Step::PassName() const {
  switch (phase_) {
    case Phase::kRecordPrologue:
      return "the recorded prologue";
    case Phase::kRecordIteration:
      return "the recorded iteration";
    case Phase::kRealPrologue:
      return "the prologue";
    case Phase::kRealIteration:
      return "iteration " + std::to_string(iterations_done_);
    default:
      return "no pass";
  }
}

std::string Step::Describe(const Sig& sig) const {
  std::ostringstream os;
  os << OpName(static_cast<int>(sig.op)) << "(";
  switch (sig.op) {
    case Op::kRead:
    case Op::kPreUpdate:
    case Op::kLocalAccess:
    case Op::kLocalRead:
      os << "table " << sig.table << ", " << RowsText(*sig.rows);
      if (sig.op == Op::kRead) {
        if (sig.has_slack) {
          os << ", slack " << sig.slack;
        } else {
          os << ", default slack";
        }
      }
      if (sig.op == Op::kLocalAccess) {
        os << ", fetch=" << (sig.flag ? "true" : "false");
      }
      break;
    case Op::kPostRead:
    case Op::kUpdate:
    case Op::kPostLocalAccess:
    case Op::kPostLocalRead: {
      os << "of position " << sig.opener;
      const std::vector<Call>& calls = section();
      if (sig.opener >= 0 && static_cast<size_t>(sig.opener) < calls.size()) {
        const Call& o = calls[sig.opener];
        os << ", a " << OpName(static_cast<int>(o.op)) << " of table " << o.table;
      }
      if (sig.op == Op::kPostLocalAccess) {
        os << ", keep=" << (sig.flag ? "true" : "false");
      }
      break;
    }
    case Op::kClock:
      break;
  }
  os << ")";
  return os.str();
}

Status Step::CheckClosed(const std::vector<Call>& calls, const char* what) const {
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    if (IsOpener(c.op) && !c.closed) {
      return FailedPreconditionError(
          std::string("Step: ") + what + " leaves " + Describe(c.sig()) + " at position " +
          std::to_string(i) +
          " open (close it with PostRead, Update, PostLocalAccess or PostLocalRead)");
    }
  }
  return Status::OK();
}

// Makes the Virtual* call of calls[position] on the GeePS.
Status Step::Record(std::vector<Call>* calls, int32_t position) {
  Call& c = (*calls)[position];
  Status st;
  auto keep_handle = [&](auto so) {
    if (so.ok()) {
      c.handle = so->id;
      c.handle_worker = so->worker;
      c.handle_instance = so->instance;
    } else {
      st = so.status();
    }
  };
  const Call* opener = c.opener >= 0 ? &(*calls)[c.opener] : nullptr;
  switch (c.op) {
    case Op::kRead:
      keep_handle(c.has_slack ? ps_.VirtualRead(c.table, c.rows, c.slack)
                              : ps_.VirtualRead(c.table, c.rows));
      break;
    case Op::kPostRead:
      st = ps_.VirtualPostRead(HandleOf<ReadHandle>(opener));
      break;
    case Op::kPreUpdate:
      keep_handle(ps_.VirtualPreUpdate(c.table, c.rows));
      break;
    case Op::kUpdate:
      st = ps_.VirtualUpdate(HandleOf<UpdateHandle>(opener));
      break;
    case Op::kLocalAccess:
      keep_handle(ps_.VirtualLocalAccess(c.table, c.rows, c.flag));
      break;
    case Op::kPostLocalAccess:
      st = ps_.VirtualPostLocalAccess(HandleOf<LocalHandle>(opener), c.flag);
      break;
    case Op::kLocalRead:
      keep_handle(ps_.VirtualLocalRead(c.table, c.rows));
      break;
    case Op::kPostLocalRead:
      st = ps_.VirtualPostLocalAccess(HandleOf<LocalHandle>(opener), /*keep=*/true);
      break;
    case Op::kClock:
      st = ps_.VirtualClock();
      break;
  }
  if (st.ok()) return st;
  return Status(st.code(), "Step: " + PassName() + ", position " + std::to_string(position) + ", " +
                               Describe(c.sig()) + ": " + st.message());
}

// Recording: checks and appends the call (and makes its Virtual* call in the
// iteration). Real pass: checks it against the recording; the caller makes
// the real call and advances cursor_ when it succeeds.
Status Step::Enter(const Sig& sig, int32_t* position) {
  if (phase_ == Phase::kFailed) {
    return FailedPreconditionError("Step: " + Describe(sig) +
                                   " after a failed pass: " + failure_.ToString());
  }
  if (phase_ == Phase::kIdle || phase_ == Phase::kReady) {
    return FailedPreconditionError(
        "Step: " + Describe(sig) +
        " outside a pass: make the accesses in the prologue or iteration "
        "functions given to Run() / Start()");
  }
  std::vector<Call>& calls = section();
  const bool opener = IsOpener(sig.op);

  if (!recording()) {
    const int32_t at = static_cast<int32_t>(cursor_);
    Status diff;
    if (cursor_ >= calls.size()) {
      diff = FailedPreconditionError(
          "Step: " + PassName() + " differs from the recording at position " + std::to_string(at) +
          ": recorded nothing (" + (in_prologue() ? "the prologue has " : "the iteration has ") +
          std::to_string(calls.size()) + " calls), called " + Describe(sig));
    } else if (!Same(calls[cursor_].sig(), sig)) {
      const Call& rec = calls[cursor_];
      std::string detail;
      if (opener && rec.op == sig.op && rec.table == sig.table) {
        detail = RowsDifference(rec.rows, *sig.rows);
      }
      diff = FailedPreconditionError(
          "Step: " + PassName() + " differs from the recording at position " + std::to_string(at) +
          ": recorded " + Describe(rec.sig()) + ", called " + Describe(sig) + detail);
    }
    if (!diff.ok()) {
      if (mismatch_.ok()) mismatch_ = diff;
      return diff;
    }
    *position = at;
    return Status::OK();
  }

  // Recording.
  const int32_t at = static_cast<int32_t>(calls.size());
  if (phase_ == Phase::kRecordIteration && clocked_) {
    return FailedPreconditionError(
        "Step: " + Describe(sig) + " at position " + std::to_string(at) +
        " of the recorded iteration, after its Clock(): Clock() must be the "
        "iteration's last call");
  }
  if (sig.op == Op::kClock && phase_ == Phase::kRecordPrologue) {
    return FailedPreconditionError(
        "Step: Clock() at position " + std::to_string(at) +
        " of the recorded prologue: the prologue has no Clock() (it ends by "
        "itself)");
  }
  if (opener && sig.table >= widths_.size()) {
    return OutOfRangeError("Step: " + Describe(sig) + ": table " + std::to_string(sig.table) +
                           " of " + std::to_string(widths_.size()));
  }
  if (!opener && sig.op != Op::kClock) {
    const Op want = OpenerOf(sig.op);
    if (sig.opener < 0 || sig.opener >= at || calls[sig.opener].op != want) {
      return InvalidArgumentError("Step: " + Describe(sig) + " at position " + std::to_string(at) +
                                  " of " + PassName() + ": its view is not from a " +
                                  OpName(static_cast<int>(want)) + " of this pass");
    }
    if (calls[sig.opener].closed) {
      return InvalidArgumentError("Step: " + Describe(sig) + " at position " + std::to_string(at) +
                                  " of " + PassName() + ": that access is already closed");
    }
  }
  if (sig.op == Op::kClock) {
    GEEPS_RETURN_IF_ERROR(CheckClosed(calls, "Clock()"));
  }

  Call c;
  c.op = sig.op;
  c.table = sig.table;
  if (sig.rows) c.rows = *sig.rows;
  c.has_slack = sig.has_slack;
  c.slack = sig.slack;
  c.flag = sig.flag;
  c.opener = sig.opener;
  calls.push_back(std::move(c));
  if (phase_ == Phase::kRecordIteration) {
    Status st = Record(&calls, at);
    if (!st.ok()) {
      calls.pop_back();
      return st;
    }
  }
  if (sig.opener >= 0) calls[sig.opener].closed = true;
  if (sig.op == Op::kClock) clocked_ = true;
  *position = at;
  return Status::OK();
}

StatusOr<ConstRows> Step::DoRead(Op op, TableId table, const std::vector<RowIndex>& rows,
                                 bool has_slack, int slack) {
  Sig sig;
  sig.op = op;
  sig.table = table;
  sig.rows = &rows;
  sig.has_slack = has_slack;
  sig.slack = slack;
  int32_t at = -1;
  GEEPS_RETURN_IF_ERROR(Enter(sig, &at));
  ConstRows view;
  view.rows = rows.size();
  view.width = widths_[table];
  view.position = at;
  if (recording()) return view;
  const Call* h = &section()[at];
  if (op == Op::kRead) {
    GEEPS_ASSIGN_OR_RETURN(view.data, ps_.Read(HandleOf<ReadHandle>(h)));
  } else {
    GEEPS_ASSIGN_OR_RETURN(view.data, ps_.LocalRead(HandleOf<LocalHandle>(h)));
  }
  ++cursor_;
  return view;
}

StatusOr<ConstRows> Step::Read(TableId table, const std::vector<RowIndex>& rows, int slack) {
  return DoRead(Op::kRead, table, rows, true, slack);
}

StatusOr<ConstRows> Step::Read(TableId table, const std::vector<RowIndex>& rows) {
  return DoRead(Op::kRead, table, rows, false, 0);
}

StatusOr<MutableRows> Step::DoOpen(Op op, TableId table, const std::vector<RowIndex>& rows,
                                   bool fetch) {
  Sig sig;
  sig.op = op;
  sig.table = table;
  sig.rows = &rows;
  sig.flag = fetch;
  int32_t at = -1;
  GEEPS_RETURN_IF_ERROR(Enter(sig, &at));
  MutableRows view;
  view.rows = rows.size();
  view.width = widths_[table];
  view.position = at;
  if (recording()) return view;
  const Call* h = &section()[at];
  if (op == Op::kPreUpdate) {
    GEEPS_ASSIGN_OR_RETURN(view.data, ps_.PreUpdate(HandleOf<UpdateHandle>(h)));
  } else {
    GEEPS_ASSIGN_OR_RETURN(view.data, ps_.LocalAccess(HandleOf<LocalHandle>(h)));
  }
  ++cursor_;
  return view;
}

StatusOr<MutableRows> Step::PreUpdate(TableId table, const std::vector<RowIndex>& rows) {
  return DoOpen(Op::kPreUpdate, table, rows, false);
}

StatusOr<MutableRows> Step::LocalAccess(TableId table, const std::vector<RowIndex>& rows,
                                        bool fetch) {
  return DoOpen(Op::kLocalAccess, table, rows, fetch);
}

Status Step::DoClose(Op op, int32_t opener, bool keep) {
  Sig sig;
  sig.op = op;
  sig.opener = opener;
  sig.flag = op == Op::kPostLocalAccess && keep;
  int32_t at = -1;
  GEEPS_RETURN_IF_ERROR(Enter(sig, &at));
  if (recording()) return Status::OK();
  std::vector<Call>& calls = section();
  const Call* h = op == Op::kClock ? nullptr : &calls[calls[at].opener];
  Status st;
  switch (op) {
    case Op::kPostRead:
      st = ps_.PostRead(HandleOf<ReadHandle>(h));
      break;
    case Op::kUpdate:
      st = ps_.Update(HandleOf<UpdateHandle>(h));
      break;
    case Op::kPostLocalAccess:
    case Op::kPostLocalRead:
      st = ps_.PostLocalAccess(HandleOf<LocalHandle>(h));
      break;
    case Op::kClock:
      st = ps_.Clock();
      break;
    default:
      st = InternalError("Step: not a closing call");
  }
  if (st.ok()) ++cursor_;
  return st;
}

Status Step::PostRead(const ConstRows& view) {
  return DoClose(Op::kPostRead, view.position, false);
}

Status Step::Update(const MutableRows& view) { return DoClose(Op::kUpdate, view.position, false); }

Status Step::PostLocalAccess(const MutableRows& view, bool keep) {
  return DoClose(Op::kPostLocalAccess, view.position, keep);
}

StatusOr<ConstRows> Step::LocalRead(TableId table, const std::vector<RowIndex>& rows) {
  return DoRead(Op::kLocalRead, table, rows, false, 0);
}

Status Step::PostLocalRead(const ConstRows& view) {
  return DoClose(Op::kPostLocalRead, view.position, false);
}

Status Step::Clock() { return DoClose(Op::kClock, -1, false); }

// Runs `body` as pass `phase` and checks that it made the whole sequence.
Status Step::RunBody(const Body& body, Phase phase) {
  phase_ = phase;
  cursor_ = 0;
  clocked_ = false;
  mismatch_ = Status::OK();
  Status st = body ? body(*this) : Status::OK();
  if (recording()) {
    GEEPS_RETURN_IF_ERROR(st);
    if (phase == Phase::kRecordIteration && !clocked_) {
      return FailedPreconditionError(
          "Step: the iteration function returned without calling Clock() "
          "(after " +
          std::to_string(iteration_.size()) + " calls): an iteration ends with Clock()");
    }
    return CheckClosed(section(),
                       phase == Phase::kRecordPrologue ? "the prologue" : "the iteration");
  }
  if (!mismatch_.ok()) return mismatch_;
  GEEPS_RETURN_IF_ERROR(st);
  const std::vector<Call>& calls = section();
  if (cursor_ != calls.size()) {
    return FailedPreconditionError(
        "Step: " + PassName() + " differs from the recording at position " +
        std::to_string(cursor_) + ": recorded " + Describe(calls[cursor_].sig()) +
        ", called nothing (the function " + "returned after " + std::to_string(cursor_) + " of " +
        std::to_string(calls.size()) + " calls)");
  }
  return Status::OK();
}

Status Step::Start(const Body& prologue, const Body& iteration) {
  // Refused at construction (a config unlike the job's), or a failed pass.
  if (phase_ == Phase::kFailed) return failure_;
  if (phase_ != Phase::kIdle) {
    return FailedPreconditionError(
        "Step: Start() or Run() once per Step, and not from inside a pass");
  }
  if (!iteration) {
    return InvalidArgumentError("Step: the iteration function is empty");
  }
  Status st = internal::GeePSAccess::Impl(ps_).CheckNothingRecorded("Step");
  if (st.ok()) st = RunBody(prologue, Phase::kRecordPrologue);
  if (st.ok()) st = RunBody(iteration, Phase::kRecordIteration);
  if (st.ok()) {
    // GeePS records the prologue after VirtualClock().
    phase_ = Phase::kRecordPrologue;
    for (size_t i = 0; i < prologue_.size() && st.ok(); ++i) {
      st = Record(&prologue_, static_cast<int32_t>(i));
    }
  }
  if (st.ok()) st = ps_.FinishVirtualIteration();
  if (st.ok()) st = ps_.StartIterations();
  if (st.ok()) st = RunBody(prologue, Phase::kRealPrologue);
  if (!st.ok()) {
    phase_ = Phase::kFailed;
    failure_ = st;
    return st;
  }
  iteration_body_ = iteration;
  phase_ = Phase::kReady;
  return Status::OK();
}

Status Step::RunIteration() {
  if (phase_ == Phase::kFailed) {
    return FailedPreconditionError("Step: RunIteration() after a failed pass: " +
                                   failure_.ToString());
  }
  if (phase_ != Phase::kReady) {
    return FailedPreconditionError("Step: RunIteration() before Start(), or from inside a pass");
  }
  Status st = RunBody(iteration_body_, Phase::kRealIteration);
  if (!st.ok()) {
    phase_ = Phase::kFailed;
    failure_ = st;
    return st;
  }
  ++iterations_done_;
  phase_ = Phase::kReady;
  return Status::OK();
}

Status Step::Run(const Body& prologue, const Body& iteration, int64_t iterations) {
  if (iterations < 0) {
    return InvalidArgumentError("Step: negative iteration count " + std::to_string(iterations));
  }
  GEEPS_RETURN_IF_ERROR(Start(prologue, iteration));
  for (int64_t i = 0; i < iterations; ++i) {
    GEEPS_RETURN_IF_ERROR(RunIteration());
  }
  return Status::OK();
}

}  // namespace geeps
