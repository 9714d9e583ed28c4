#include "net_stepper.h"

namespace fmnist {

using geeps::Status;
using geeps::StatusCode;
using geeps::StatusOr;

StatusOr<int> Stepper::NextSlot(Kind kind) {
  if (cursor_ >= slots_.size() || slots_[cursor_].kind != kind) {
    return Status(StatusCode::kFailedPrecondition,
                  "the real iteration left the recorded sequence at step " +
                      std::to_string(cursor_));
  }
  return static_cast<int>(cursor_++);
}

StatusOr<Stepper::Open> Stepper::OpenRead(
    geeps::TableId table, const std::vector<geeps::RowIndex>& rows,
    int slack) {
  Open open;
  if (!real_) {
    GEEPS_ASSIGN_OR_RETURN(geeps::ReadHandle h,
                           ps_.VirtualRead(table, rows, slack));
    open.slot = static_cast<int>(slots_.size());
    slots_.push_back(Slot{Kind::kRead, h, {}, {}});
    return open;
  }
  GEEPS_ASSIGN_OR_RETURN(open.slot, NextSlot(Kind::kRead));
  GEEPS_ASSIGN_OR_RETURN(const float* data, ps_.Read(slots_[open.slot].read));
  // A layer's parameters are read-only inputs; the cast only lets Open carry
  // every kind of buffer.
  open.data = const_cast<float*>(data);
  return open;
}

StatusOr<Stepper::Open> Stepper::OpenUpdate(
    geeps::TableId table, const std::vector<geeps::RowIndex>& rows) {
  Open open;
  if (!real_) {
    GEEPS_ASSIGN_OR_RETURN(geeps::UpdateHandle h,
                           ps_.VirtualPreUpdate(table, rows));
    open.slot = static_cast<int>(slots_.size());
    slots_.push_back(Slot{Kind::kUpdate, {}, h, {}});
    return open;
  }
  GEEPS_ASSIGN_OR_RETURN(open.slot, NextSlot(Kind::kUpdate));
  GEEPS_ASSIGN_OR_RETURN(open.data, ps_.PreUpdate(slots_[open.slot].update));
  return open;
}

StatusOr<Stepper::Open> Stepper::OpenLocal(
    geeps::TableId table, const std::vector<geeps::RowIndex>& rows,
    bool fetch) {
  Open open;
  if (!real_) {
    GEEPS_ASSIGN_OR_RETURN(geeps::LocalHandle h,
                           ps_.VirtualLocalAccess(table, rows, fetch));
    open.slot = static_cast<int>(slots_.size());
    slots_.push_back(Slot{Kind::kLocal, {}, {}, h});
    return open;
  }
  GEEPS_ASSIGN_OR_RETURN(open.slot, NextSlot(Kind::kLocal));
  GEEPS_ASSIGN_OR_RETURN(open.data, ps_.LocalAccess(slots_[open.slot].local));
  return open;
}

Status Stepper::Close(const Open& open, bool keep) {
  const Slot& s = slots_.at(open.slot);
  switch (s.kind) {
    case Kind::kRead:
      return real_ ? ps_.PostRead(s.read) : ps_.VirtualPostRead(s.read);
    case Kind::kUpdate:
      return real_ ? ps_.Update(s.update) : ps_.VirtualUpdate(s.update);
    case Kind::kLocal:
      return real_ ? ps_.PostLocalAccess(s.local)
                   : ps_.VirtualPostLocalAccess(s.local, keep);
  }
  return Status(StatusCode::kInternal, "unknown slot kind");
}

}  // namespace fmnist
