#include "client/op_sequence.h"

#include <algorithm>

namespace geeps::client {
namespace {

const char* KindOf(OpType t) {
  switch (t) {
    case OpType::kRead:
    case OpType::kPostRead:
      return "read";
    case OpType::kPreUpdate:
    case OpType::kUpdate:
      return "update";
    case OpType::kLocalAccess:
    case OpType::kPostLocalAccess:
      return "local";
    case OpType::kClock:
      return "clock";
  }
  return "?";
}

const char* NameOf(OpType t) {
  switch (t) {
    case OpType::kRead:
      return "Read";
    case OpType::kPostRead:
      return "PostRead";
    case OpType::kPreUpdate:
      return "PreUpdate";
    case OpType::kUpdate:
      return "Update";
    case OpType::kLocalAccess:
      return "LocalAccess";
    case OpType::kPostLocalAccess:
      return "PostLocalAccess";
    case OpType::kClock:
      return "Clock";
  }
  return "?";
}

}  // namespace

std::string OpSequence::Describe(const Op& op) {
  if (op.type == OpType::kClock) return "Clock()";
  return std::string(NameOf(op.type)) + "(" + KindOf(op.type) + "#" + std::to_string(op.handle) +
         ")";
}

Status OpSequence::CheckRows(TableId table, const std::vector<RowIndex>& rows, bool want_local,
                             const char* call) const {
  if (table >= config_->tables.size())
    return OutOfRangeError(std::string(call) + ": table " + std::to_string(table) +
                           " does not exist (the config has " +
                           std::to_string(config_->tables.size()) + " tables)");
  const TableSpec& spec = config_->tables[table];
  const std::string name = "table " + std::to_string(table) + " ('" + spec.name + "')";
  if (spec.local != want_local)
    return InvalidArgumentError(std::string(call) + ": " + name + " is " +
                                (spec.local ? "a local table; use VirtualLocalAccess"
                                            : "a shared table; use VirtualRead/VirtualPreUpdate"));
  if (rows.empty()) return InvalidArgumentError(std::string(call) + ": no rows given");
  std::vector<RowIndex> sorted(rows);
  std::sort(sorted.begin(), sorted.end());
  if (sorted.back() >= spec.num_rows)
    return OutOfRangeError(std::string(call) + ": row " + std::to_string(sorted.back()) +
                           " is out of range for " + name + " with " +
                           std::to_string(spec.num_rows) + " rows");
  auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end())
    return InvalidArgumentError(std::string(call) + ": row " + std::to_string(*dup) + " of " +
                                name + " is listed twice");
  return Status::OK();
}

Status OpSequence::Close(std::vector<RecordedAccess>& list, int32_t id, const char* what,
                         const char* call) {
  if (id < 0 || static_cast<size_t>(id) >= list.size())
    return InvalidArgumentError(std::string(call) + ": unknown handle " + what + "#" +
                                std::to_string(id));
  RecordedAccess& a = list[id];
  const Section current = clocked_ ? kPrologue : kRepeated;
  if (!a.open)
    return FailedPreconditionError(std::string(call) + ": " + what + "#" + std::to_string(id) +
                                   " was already closed");
  if (a.section != current)
    return FailedPreconditionError(std::string(call) + ": " + what + "#" + std::to_string(id) +
                                   " was opened before VirtualClock and must be closed before it");
  a.open = false;
  return Status::OK();
}

int32_t OpSequence::Open(std::vector<RecordedAccess>& list, OpType type, RecordedAccess a) {
  a.section = clocked_ ? kPrologue : kRepeated;
  list.push_back(std::move(a));
  const int32_t id = static_cast<int32_t>(list.size() - 1);
  ops_[list.back().section].push_back({type, id});
  return id;
}

Status OpSequence::Post(std::vector<RecordedAccess>& list, OpType type, int32_t id,
                        const char* what, const char* call) {
  GEEPS_RETURN_IF_ERROR(Close(list, id, what, call));
  ops_[list[id].section].push_back({type, id});
  return Status::OK();
}

StatusOr<ReadHandle> OpSequence::AddRead(TableId table, const std::vector<RowIndex>& rows,
                                         int slack) {
  GEEPS_RETURN_IF_ERROR(CheckRows(table, rows, false, "VirtualRead"));
  if (slack < 0)
    return InvalidArgumentError("VirtualRead: slack must be >= 0, got " + std::to_string(slack));
  RecordedAccess a;
  a.table = table;
  a.rows = rows;
  a.slack = slack;
  return ReadHandle{Open(reads_, OpType::kRead, std::move(a))};
}

Status OpSequence::AddPostRead(ReadHandle h) {
  return Post(reads_, OpType::kPostRead, h.id, "read", "VirtualPostRead");
}

StatusOr<UpdateHandle> OpSequence::AddPreUpdate(TableId table, const std::vector<RowIndex>& rows,
                                                bool zeroed) {
  GEEPS_RETURN_IF_ERROR(CheckRows(table, rows, false, "VirtualPreUpdate"));
  RecordedAccess a;
  a.table = table;
  a.rows = rows;
  a.zeroed = zeroed;
  return UpdateHandle{Open(updates_, OpType::kPreUpdate, std::move(a))};
}

Status OpSequence::AddUpdate(UpdateHandle h) {
  return Post(updates_, OpType::kUpdate, h.id, "update", "VirtualUpdate");
}

StatusOr<LocalHandle> OpSequence::AddLocalAccess(TableId table, const std::vector<RowIndex>& rows,
                                                 bool fetch, bool read_only) {
  GEEPS_RETURN_IF_ERROR(
      CheckRows(table, rows, true, read_only ? "VirtualLocalRead" : "VirtualLocalAccess"));
  RecordedAccess a;
  a.table = table;
  a.rows = rows;
  a.fetch = fetch;
  a.read_only = read_only;
  return LocalHandle{Open(locals_, OpType::kLocalAccess, std::move(a))};
}

Status OpSequence::AddPostLocalAccess(LocalHandle h, bool keep) {
  GEEPS_RETURN_IF_ERROR(
      Post(locals_, OpType::kPostLocalAccess, h.id, "local", "VirtualPostLocalAccess"));
  locals_[h.id].keep = keep;
  return Status::OK();
}

Status OpSequence::CheckNothingOpen(const char* when) const {
  const std::vector<RecordedAccess>* lists[] = {&reads_, &updates_, &locals_};
  const char* names[] = {"read", "update", "local"};
  for (int k = 0; k < 3; ++k) {
    for (size_t i = 0; i < lists[k]->size(); ++i) {
      if ((*lists[k])[i].open)
        return FailedPreconditionError(std::string(when) + ": " + names[k] + "#" +
                                       std::to_string(i) + " is still open");
    }
  }
  return Status::OK();
}

Status OpSequence::AddClock() {
  if (clocked_)
    return FailedPreconditionError(
        "VirtualClock: called twice; a virtual iteration has one VirtualClock, and the "
        "operations recorded after it are the prologue (run once)");
  GEEPS_RETURN_IF_ERROR(CheckNothingOpen("VirtualClock"));
  ops_[kRepeated].push_back({OpType::kClock, -1});
  clocked_ = true;
  return Status::OK();
}

Status OpSequence::Finish() const {
  if (!clocked_)
    return FailedPreconditionError(
        "FinishVirtualIteration: VirtualClock was never called (it ends the iteration)");
  return CheckNothingOpen("FinishVirtualIteration");
}

}  // namespace geeps::client
